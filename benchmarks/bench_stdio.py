"""Stdin/stdout cases per second: the sandbox against the obvious harness, in the same run.

    python benchmarks/bench_stdio.py [--n-workers 2] [--repeats 3] [--copies 5] [--timeout 10] [--out FILE.json]

The programs are the correct solutions of the offline test set (tests/data/stdio_*.jsonl, the 21 problems with
stdin/stdout cases; our own code, so the baseline may run them unsandboxed), each problem's cases repeated
``--copies`` times (20-25 cases per problem, the size of an APPS or CodeContests problem). Every repeat runs
both, alternately:

* the baseline: ``subprocess.run([python, file], input=case)`` per case in a thread pool of ``--n-workers``
  threads, the output compared by ``sandbox.compare_output`` (an interpreter start per case), with ``python``
  this interpreter (its site-packages make a start dear where many packages are installed);
* the same with ``python -I -S`` (no site-packages, no environment: the cheapest start the harness can have);
* the sandbox: ``Sandbox.run_batch`` of one stdin/stdout task per problem with every isolation layer on (the
  program compiled once, each case forked from it), pool started before timing.

Prints cases/s of each run, the medians and the sandbox's ratio to each baseline's median (target: >= 5x on 2
cores against the plain one), and how busy the CPUs were (other tenants slow every side).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import Sandbox, compare_output  # noqa: E402
from sandbox.formats import StdioTests, read_tests  # noqa: E402

DATA = ROOT / "tests" / "data"


def busy_share(fn) -> tuple[float, float]:
    """(seconds fn took, share of all CPUs busy meanwhile, other processes included)."""

    def jiffies() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)

    (b0, t0), start = jiffies(), time.perf_counter()
    fn()
    b1, t1 = jiffies()
    return time.perf_counter() - start, (b1 - b0) / max(t1 - t0, 1)


def load_problems(copies: int) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """(correct program, cases) of every stdin/stdout problem of the test set."""
    correct = {}
    for line in (DATA / "stdio_solutions.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["kind"] == "correct":
            correct[row["task_id"]] = row["completion"]
    problems = []
    for fmt in ("apps", "code_contests", "verification_info"):
        for line in (DATA / f"stdio_{fmt}.jsonl").read_text().splitlines():
            row = json.loads(line)
            tests = read_tests(row)
            if isinstance(tests, StdioTests):
                problems.append((correct[row.get("problem_id") or row["name"]], tests.cases * copies))
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-workers", type=int, default=2, help="sandbox workers and baseline threads")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=5, help="times each problem's cases are repeated")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case (both sides)")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    problems = load_problems(args.copies)
    n_cases = sum(len(cases) for _, cases in problems)
    tmp = tempfile.TemporaryDirectory(prefix="bench_stdio_")
    files = []
    for i, (program, _) in enumerate(problems):
        path = Path(tmp.name) / f"p{i}.py"
        path.write_text(program)
        files.append(str(path))
    jobs = [(file, case) for file, (_, cases) in zip(files, problems) for case in cases]

    def one_case(job: tuple[str, tuple[str, str]], flags: tuple[str, ...] = ()) -> bool:
        file, (given, want) = job
        proc = subprocess.run(
            [sys.executable, *flags, file],
            input=given.encode(),
            capture_output=True,
            timeout=args.timeout,
            cwd=tmp.name,
        )
        return proc.returncode == 0 and compare_output(proc.stdout, want.encode()) is None

    def baseline() -> None:
        with ThreadPoolExecutor(max_workers=args.n_workers) as pool:
            assert all(pool.map(one_case, jobs))

    def lean_baseline() -> None:
        with ThreadPoolExecutor(max_workers=args.n_workers) as pool:
            assert all(pool.map(lambda job: one_case(job, ("-I", "-S")), jobs))

    tasks = [{"program": program, "cases": cases, "timeout": args.timeout} for program, cases in problems]

    def ours() -> None:
        results = sandbox.run_batch(tasks)
        assert all(r.passed for r in results), [r for r in results if not r.passed][:2]

    sandbox = Sandbox(n_workers=args.n_workers, timeout=args.timeout).start()
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {len(problems)} problems, {n_cases} "
        f"cases per run; sandbox layers off: "
        + (", ".join(k for k, v in sandbox.layers.items() if not v) or "none")
    )
    ours()  # warm-up: the workers' first fork of each kind
    rates: dict[str, list[float]] = {"subprocess": [], "subprocess -I -S": [], "sandbox": []}
    busy: list[float] = []
    for rep in range(args.repeats):
        for name, fn in (("subprocess", baseline), ("subprocess -I -S", lean_baseline), ("sandbox", ours)):
            seconds, share = busy_share(fn)
            rates[name].append(n_cases / seconds)
            busy.append(share)
            print(
                f"repeat {rep + 1}  {name:16s} {n_cases / seconds:8.1f} cases/s  ({seconds:.2f} s; CPUs busy "
                f"{share:.0%})"
            )
    sandbox.close()
    tmp.cleanup()

    med = {name: statistics.median(r) for name, r in rates.items()}
    ratio = med["sandbox"] / med["subprocess"]
    lean_ratio = med["sandbox"] / med["subprocess -I -S"]
    print(
        f"median: subprocess.run {med['subprocess']:.1f} cases/s, with -I -S {med['subprocess -I -S']:.1f}, "
        f"sandbox {med['sandbox']:.1f}: {ratio:.2f}x the plain harness (target >= 5x), {lean_ratio:.2f}x the lean one"
    )
    if args.out:
        record = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "cpus": os.cpu_count(),
            "n_workers": args.n_workers,
            "problems": len(problems),
            "cases_per_run": n_cases,
            "repeats": args.repeats,
            "cpus_busy_median": round(statistics.median(busy), 2),
            "rates": {k: [round(x, 1) for x in v] for k, v in rates.items()},
            "median": {k: round(v, 1) for k, v in med.items()},
            "ratio": round(ratio, 2),
            "ratio_to_lean": round(lean_ratio, 2),
        }
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
