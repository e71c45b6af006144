"""The stdin/stdout rewards on the real sandbox and the offline test set (tests/data/stdio_*.jsonl): every
format, correct / wrong / slow / crashing programs, partial credit, None only without cases, one-line errors,
the hacking signals in the metrics, and the async path."""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from rewards import make_stdio_partial_reward, make_stdio_test_reward, stdio_partial_reward, stdio_test_reward
from sandbox import Sandbox

DATA = Path(__file__).resolve().parents[1] / "data"
FORMATS = ("apps", "code_contests", "verification_info")
UID_BASE = 63000 + 16 * (os.getpid() % 100)  # away from the other sandbox tests' ranges


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def problem_id(row: dict) -> str:
    return row.get("problem_id") or row["name"]


def chat(code: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"Here is my program.\n\n```python\n{code}```\n"}]


def columns(rows: list[dict]) -> dict[str, list]:
    """The rows as TRL passes them: every column but prompt as a list aligned with the completions."""
    names = dict.fromkeys(k for row in rows for k in row)
    return {k: [row.get(k) for row in rows] for k in names}


@pytest.fixture(scope="module")
def sb():
    with Sandbox(n_workers=2, timeout=1.0, memory_mb=512, uid_base=UID_BASE) as s:
        yield s


@pytest.fixture(scope="module")
def solutions() -> dict[str, dict[str, str]]:
    by_task: dict[str, dict[str, str]] = defaultdict(dict)
    for row in load("stdio_solutions.jsonl"):
        by_task[row["task_id"]][row["kind"]] = row["completion"]
    return by_task


def test_the_test_set_has_twenty_problems_in_three_formats(solutions):
    problems = {fmt: load(f"stdio_{fmt}.jsonl") for fmt in FORMATS}
    assert sum(map(len, problems.values())) >= 20 and all(len(rows) >= 6 for rows in problems.values())
    for rows in problems.values():
        for row in rows:
            assert set(solutions[problem_id(row)]) == {"correct", "wrong", "slow", "crash"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_scores_correct_wrong_and_crashing_programs(fmt, sb, solutions):
    rows = load(f"stdio_{fmt}.jsonl")
    kinds = ("correct", "wrong", "crash")
    batch = [row for row in rows for _ in kinds]
    completions = [chat(solutions[problem_id(row)][kind]) for row in rows for kind in kinds]
    full = make_stdio_test_reward(sandbox=sb).score(completions=completions, **columns(batch))
    partial = make_stdio_partial_reward(sandbox=sb).score(completions=completions, **columns(batch))
    assert full == [1.0, 0.0, 0.0] * len(rows)
    assert partial[0::3] == [1.0] * len(rows) and partial[2::3] == [0.0] * len(rows)
    # Every wrong program passes some cases and fails others: partial credit strictly between 0 and 1.
    assert all(0.0 < p < 1.0 for p in partial[1::3]), partial


def test_a_slow_program_times_out_per_case(sb, solutions):
    row = load("stdio_code_contests.jsonl")[0]
    reward = make_stdio_partial_reward(sandbox=sb, timeout=0.5, name="slow_check")
    scores = reward.score(completions=[chat(solutions[problem_id(row)]["slow"])], **columns([row]))
    assert scores == [0.0]
    assert reward.last_metrics["slow_check/timeout_frac"] == 1.0
    assert reward.last_metrics["slow_check/case_timeout_frac"] > 0


def test_completion_style_and_async_give_the_same_rewards(sb, solutions):
    rows = load("stdio_apps.jsonl")[:3]
    completions = [solutions[problem_id(row)]["correct"] for row in rows]  # no markdown: the text is the code
    reward = make_stdio_test_reward(sandbox=sb)
    assert reward.score(completions=completions, **columns(rows)) == [1.0] * 3
    got = asyncio.run(reward(prompts=[r["question"] for r in rows], completions=completions, **columns(rows)))
    assert got == [1.0] * 3


def test_call_based_rows_take_the_function_path(sb, solutions):
    rows = [row for row in load("stdio_apps.jsonl") if "fn_name" in json.loads(row["input_output"])]
    rows += [
        row for row in load("stdio_verification_info.jsonl") if "function_call" in row["verification_info"]
    ]
    assert len(rows) == 3
    completions = [chat(solutions[problem_id(row)][kind]) for row in rows for kind in ("correct", "wrong")]
    batch = [row for row in rows for _ in range(2)]
    reward = make_stdio_partial_reward(sandbox=sb)
    scores = reward.score(completions=completions, **columns(batch))
    assert scores[0::2] == [1.0] * 3 and all(0.0 < s < 1.0 for s in scores[1::2]), scores


def test_none_only_for_rows_without_cases(sb):
    rows = [
        {"input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})},
        {"input_output": None},
        {"input_output": ""},
    ]
    code = "print(sum(map(int, input().split())))\n"
    assert make_stdio_test_reward(sandbox=sb).score(completions=[chat(code)] * 3, **columns(rows)) == [
        1.0,
        None,
        None,
    ]
    # Garbage is a number, not None.
    assert make_stdio_test_reward(sandbox=sb).score(completions=["no code here"], **columns(rows[:1])) == [
        0.0
    ]


def test_a_dataset_in_no_format_is_one_line_naming_its_columns():
    with pytest.raises(ValueError) as e:
        stdio_test_reward.score(completions=["print(1)"], question=["q"], solutions=["[]"], test=[None])
    message = str(e.value)
    assert "\n" not in message and "question, solutions" in message and "input_output" in message
    with pytest.raises(ValueError, match="row 0: input_output is not valid JSON"):
        stdio_test_reward.score(completions=["print(1)"], input_output=["{oops"])
    with pytest.raises(
        ValueError,
        match=r"format 'code_contests' reads public_tests / private_tests / generated_tests, "
        r"which this dataset lacks \(it has: input_output\)",
    ):
        make_stdio_test_reward(format="code_contests").score(completions=["print(1)"], input_output=["{}"])
    with pytest.raises(ValueError, match="unknown test format"):
        make_stdio_test_reward(format="leetcode").score(completions=["print(1)"], input_output=["{}"])


def test_the_format_and_splits_can_be_named(sb):
    row = {
        "public_tests": {"input": ["1\n"], "output": ["1\n"]},
        "private_tests": {"input": ["2\n"], "output": ["4\n"]},
    }
    echo = chat("print(input())\n")
    assert make_stdio_test_reward(sandbox=sb).score(completions=[echo], **columns([row])) == [0.0]
    public_only = make_stdio_test_reward(sandbox=sb, format="code_contests", splits=["public_tests"])
    assert public_only.score(completions=[echo], **columns([row])) == [1.0]


def test_comparison_options_reach_the_sandbox(sb):
    row = {"input_output": json.dumps({"inputs": ["3\n"], "outputs": ["0.333333\n"]})}
    third = chat("print(1 / int(input()))\n")  # 0.3333333333333333
    assert make_stdio_test_reward(sandbox=sb).score(completions=[third], **columns([row])) == [0.0]
    tolerant = make_stdio_test_reward(sandbox=sb, float_tol=1e-5)
    assert tolerant.score(completions=[third], **columns([row])) == [1.0]
    spaced = chat("print(*input().split(), sep='\\n')\n")
    row = {"input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["1 2\n"]})}
    assert make_stdio_test_reward(sandbox=sb).score(completions=[spaced], **columns([row])) == [0.0]
    assert make_stdio_test_reward(sandbox=sb, compare="tokens").score(
        completions=[spaced], **columns([row])
    ) == [1.0]


def test_hacking_signals_and_case_verdicts_reach_log_metric(sb):
    """The right answer then a crash: a runtime error flagged crash_after_output, worth nothing even as
    partial credit, and counted in forged_exit_frac."""
    rows = [{"input_output": json.dumps({"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]})}] * 2
    crash = chat("print(int(input()) * 2, flush=True)\nraise SystemExit(3)\n")
    honest = chat("n = int(input())\nprint(n * 2 if n == 1 else 0)\n")
    logged: dict[str, float] = {}
    reward = make_stdio_partial_reward(sandbox=sb, name="stdio_partial_check")
    scores = reward.score(completions=[crash, honest], log_metric=logged.__setitem__, **columns(rows))
    assert scores == [0.0, 0.5]
    assert logged["stdio_partial_check/forged_exit_frac"] == 0.5
    assert logged["stdio_partial_check/runtime_error_frac"] == 0.5
    assert logged["stdio_partial_check/case_runtime_error_frac"] == 0.5
    assert logged["stdio_partial_check/case_passed_frac"] == 0.25
    assert logged["stdio_partial_check/case_wrong_answer_frac"] == 0.25


def test_the_shared_rewards_have_stable_names():
    assert stdio_test_reward.__name__ == "stdio_test_reward"
    assert stdio_partial_reward.__name__ == "stdio_partial_reward"


def test_call_based_values_of_another_equal_type_pass_on_the_real_sandbox(sb):
    """APPS compares returned values as plain data: a float equal to the int expected, a tuple for a list, the
    bare value for an expected one-element list, a Solution method for the function; a wrong value fails."""
    io = json.dumps(
        {
            "fn_name": "pair",
            "inputs": [[1, 2], [3, 4], [5, 5]],
            "outputs": [[1, 2], [[3, 4]], 10],  # a list, a one-element list, an int
        }
    )
    right = chat(
        "class Solution:\n    def pair(self, a, b):\n        if a == b:\n            return float(a + b)\n"
        "        return (a, b)\n"
    )
    wrong = chat("def pair(a, b):\n    return (b, a) if a != b else a + b + 1\n")
    partial = make_stdio_partial_reward(sandbox=sb, tests="all")
    assert partial.score(completions=[right, wrong], input_output=[io, io]) == [1.0, 0.0]
    # the same row as verification_info function calls, its values JSON-encoded
    cases = [
        {"type": "function_call", "fn_name": "pair", "input": json.dumps(args), "output": json.dumps(want)}
        for args, want in zip([[1, 2], [3, 4], [5, 5]], [[1, 2], [[3, 4]], 10])
    ]
    info = json.dumps({"language": "python", "test_cases": cases})
    assert partial.score(completions=[right, wrong], verification_info=[info, info]) == [1.0, 0.0]
    # change one expected value and the score follows
    io_changed = json.dumps(
        {"fn_name": "pair", "inputs": [[1, 2], [3, 4], [5, 5]], "outputs": [[1, 2], [[3, 4]], 11]}
    )
    assert partial.score(completions=[right], input_output=[io_changed]) == [pytest.approx(2 / 3)]
