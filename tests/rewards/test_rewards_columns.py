"""Each column the stdin/stdout rewards read reaches the score through the public reward, in every shape the
formats accept: the score must change when the column's content changes. The sandbox here is a stand-in judge
that runs nothing: a completion's program is ``ANSWERS = {...}`` (a literal, read with ``ast.literal_eval``),
and a case passes when its input (or a call's arguments) maps to its expected output. The real sandbox's
verdicts on such rows are in tests/rewards/test_rewards_stdio.py."""

from __future__ import annotations

import ast
import asyncio
import json
from types import SimpleNamespace

import pytest

from rewards import code_rewards
from rewards.code_rewards import (
    REWARDS,
    STDIO_COLUMNS,
    StdioPartialReward,
    StdioTestReward,
    _column,
    _workers_per_local_process,
    all_passed,
    fraction_passed,
    make_format_reward,
    make_partial_test_reward,
    make_reward,
    make_stdio_partial_reward,
    make_stdio_test_reward,
    make_unit_test_reward,
)


def answers_of(program: str) -> dict:
    for node in ast.parse(program).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ANSWERS":
            return ast.literal_eval(node.value)
    return {}


def _calls_of(tests: str) -> list[tuple]:
    """(args, want) of each generated ``assert _passk_same(candidate(*ARGS), WANT)``."""
    out = []
    for node in ast.walk(ast.parse(tests)):
        if isinstance(node, ast.Assert):
            call = node.test
            args = ast.literal_eval(call.args[0].args[0].value)
            want = ast.literal_eval(call.args[1])
            out.append((args, want))
    return out


class Judge:
    """Records the tasks; passes a case when the program's ANSWERS maps its input to its output."""

    def __init__(self) -> None:
        self.tasks: list[dict] = []

    def _one(self, task: dict):
        answers = answers_of(task["program"])
        if "cases" in task:
            verdicts = ["passed" if answers.get(i) == o else "wrong_answer" for i, o in task["cases"]]
        else:
            verdicts = [
                "passed" if answers.get(repr(a)) == w else "wrong_answer" for a, w in _calls_of(task["tests"])
            ]
        ok = verdicts.count("passed")
        status = "passed" if ok == len(verdicts) else "failed"
        return SimpleNamespace(
            status=status, asserts_passed=ok, asserts_total=len(verdicts), cases=tuple(verdicts)
        )

    def run_batch(self, tasks):
        self.tasks += tasks
        return [self._one(t) for t in tasks]

    async def arun_batch(self, tasks):
        return self.run_batch(tasks)


def program(answers: dict) -> str:
    return f"```python\nANSWERS = {answers!r}\n```"


def score(reward_kind: str = "stdio_test", completions=None, judge: Judge | None = None, **columns):
    reward = make_reward(reward_kind, sandbox=judge or Judge(), **columns.pop("config", {}))
    return reward.score(completions=completions, **columns)


APPS_IO = {"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]}
RIGHT = program({"1\n": "2\n", "2\n": "4\n"})
HALF = program({"1\n": "2\n", "2\n": "5\n"})


# ---- every column, in every shape, reaches the score ---------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [json.dumps(APPS_IO), APPS_IO, json.dumps(APPS_IO).encode()],
    ids=["json", "dict", "bytes"],
)
def test_input_output_in_each_shape_reaches_the_score(value) -> None:
    assert score(completions=[RIGHT, HALF], input_output=[value, value]) == [1.0, 0.0]
    assert score("stdio_partial", completions=[RIGHT, HALF], input_output=[value, value]) == [1.0, 0.5]
    changed = {"inputs": APPS_IO["inputs"], "outputs": ["2\n", "5\n"]}
    assert score(completions=[RIGHT, HALF], input_output=[changed, changed]) == [0.0, 1.0]


def test_input_output_lists_of_lines_reach_the_judge_joined() -> None:
    value = {"inputs": [["3", "1 2 3"]], "outputs": [["6"]]}
    judge = Judge()
    assert score(completions=[program({"3\n1 2 3\n": "6\n"})], judge=judge, input_output=[value]) == [1.0]
    assert judge.tasks[0]["cases"] == (("3\n1 2 3\n", "6\n"),)


def test_the_fn_name_column_makes_a_row_call_based() -> None:
    io = json.dumps({"inputs": [[1, 2], [3, 4]], "outputs": [3, 7]})
    right = program({"(1, 2)": 3, "(3, 4)": 7})
    judge = Judge()
    assert score(completions=[right], judge=judge, input_output=[io], fn_name=["add"]) == [1.0]
    assert judge.tasks[0]["entry_point"] == "add" and "cases" not in judge.tasks[0]
    assert score(completions=[right], input_output=[io], fn_name=["add"], config={"tests": "all"}) == [1.0]
    # the expected values come from the row: change one and the score follows
    io2 = json.dumps({"inputs": [[1, 2], [3, 4]], "outputs": [3, 8]})
    assert score(completions=[right], input_output=[io2], fn_name=["add"]) == [0.0]
    assert score("stdio_partial", completions=[right], input_output=[io2], fn_name=["add"]) == [0.5]
    # without fn_name the same row is read as stdin/stdout, and its numbers are not text
    with pytest.raises(ValueError, match=r"stdio_test_reward, row 0: input_output input 1 is a list"):
        score(completions=[right], input_output=[io])


def test_fn_name_alone_is_not_a_format() -> None:
    with pytest.raises(
        ValueError, match=r"row 0: no stdin/stdout test columns in this row \(it has: fn_name\)"
    ):
        score(completions=[RIGHT], fn_name=["f"])


@pytest.mark.parametrize("split", ["public_tests", "private_tests", "generated_tests"])
def test_each_code_contests_split_reaches_the_score(split: str) -> None:
    tests = {"input": ["1\n"], "output": ["2\n"]}
    other = {"input": ["1\n"], "output": ["3\n"]}
    right = program({"1\n": "2\n"})
    all_splits = {"config": {"tests": "all"}}
    assert score(completions=[right], **{split: [tests]}, **all_splits) == [1.0]
    assert score(completions=[right], **{split: [other]}, **all_splits) == [0.0]
    assert score(completions=[right], **{split: [json.dumps(other)]}, **all_splits) == [0.0]
    hidden = score(completions=[right], **{split: [other]})
    assert hidden == ([None] if split == "public_tests" else [0.0])  # the default skips the public split


def test_the_splits_argument_chooses_the_code_contests_columns() -> None:
    row = {
        "public_tests": [{"input": ["p\n"], "output": ["P\n"]}],
        "private_tests": [{"input": ["r\n"], "output": ["R\n"]}],
        "generated_tests": [{"input": ["g\n"], "output": ["G\n"]}],
    }
    only_private = program({"r\n": "R\n"})
    assert score(completions=[only_private], **row) == [0.0]  # private and generated
    assert score(completions=[only_private], **row, config={"splits": ["private_tests"]}) == [1.0]
    assert score(completions=[only_private], **row, config={"tests": "all", "splits": ["private_tests"]}) == [
        1.0
    ]
    assert score(completions=[only_private], **row, config={"tests": "all"}) == [0.0]
    assert score("stdio_partial", completions=[only_private], **row, config={"tests": "all"}) == [
        pytest.approx(1 / 3)
    ]
    assert score("stdio_partial", completions=[only_private], **row) == [0.5]


def test_verification_info_stdio_and_function_calls_reach_the_score() -> None:
    info = {"language": "python", "test_cases": [{"input": "1\n", "output": "2\n", "type": "stdin_stdout"}]}
    right = program({"1\n": "2\n"})
    assert score(completions=[right], verification_info=[json.dumps(info)]) == [1.0]
    info["test_cases"][0]["output"] = "3\n"
    assert score(completions=[right], verification_info=[info]) == [0.0]
    calls = {
        "test_cases": [
            {"type": "function_call", "fn_name": "f", "input": "[1, 2]", "output": "[3]"},
            {"type": "function_call", "fn_name": "f", "input": "[2, 2]", "output": "4"},
        ]
    }
    judge = Judge()
    assert score(
        completions=[program({"(1, 2)": [3], "(2, 2)": 4})], judge=judge, verification_info=[calls]
    ) == [1.0]
    assert judge.tasks[0]["entry_point"] == "f"
    assert score("stdio_partial", completions=[program({"(1, 2)": [3]})], verification_info=[calls]) == [0.5]


# ---- which cases count: the prompt's examples -------------------------------------------------------------------------
def test_cases_the_prompt_shows_are_not_scored_by_default() -> None:
    io = {"inputs": ["1 1\n", "2 2\n"], "outputs": ["2\n", "4\n"]}
    table_of_examples = program({"1 1\n": "2\n"})
    prompt = "Example: input 1 1, output 2."
    logged: dict[str, float] = {}
    reward = make_stdio_test_reward(sandbox=Judge())
    assert reward.score(prompts=[prompt], completions=[table_of_examples], input_output=[io]) == [0.0]
    full = program({"1 1\n": "2\n", "2 2\n": "4\n"})
    assert reward.score(prompts=[prompt], completions=[full], input_output=[io]) == [1.0]
    judge = Judge()
    make_stdio_test_reward(sandbox=judge).score(prompts=[prompt], completions=[full], input_output=[io])
    assert judge.tasks[0]["cases"] == (("2 2\n", "4\n"),)  # only the hidden case runs
    # every case shown: unscorable by default, scored with tests="all"; the metric says so either way
    shown = "1 1 gives 2 and 2 2 gives 4"
    assert reward.score(
        prompts=[shown], completions=[full], input_output=[io], log_metric=logged.__setitem__
    ) == [None]
    assert logged["stdio_test/tests_in_prompt_frac"] == 1.0
    every = make_stdio_test_reward(sandbox=Judge(), tests="all")
    assert every.score(
        prompts=[shown, prompt], completions=[table_of_examples] * 2, input_output=[io, io]
    ) == [
        0.0,
        0.0,
    ]
    assert every.last_metrics["stdio_test/tests_in_prompt_frac"] == 0.5
    # a chat prompt is read too
    chat_prompt = [[{"role": "user", "content": shown}]]
    assert reward.score(prompts=chat_prompt, completions=[full], input_output=[io]) == [None]
    with pytest.raises(ValueError, match="tests must be one of hidden, all"):
        make_stdio_test_reward(tests="public")


def test_no_rows_with_cases_log_a_zero_share() -> None:
    reward = make_stdio_test_reward(sandbox=Judge())
    assert reward.score(completions=[RIGHT], input_output=[None]) == [None]
    assert reward.last_metrics["stdio_test/tests_in_prompt_frac"] == 0.0
    assert reward.last_metrics["stdio_test/no_test_frac"] == 1.0


# ---- the code prompt, the program and the task options ------------------------------------------------------------------
def test_a_code_prompt_column_is_prepended_and_a_text_prompt_never_is() -> None:
    judge = Judge()
    reward = make_stdio_test_reward(sandbox=judge, tests="all")
    header = "import sys\n"
    reward.score(prompts=["Solve it."], completions=[RIGHT], input_output=[APPS_IO], code_prompt=[header])
    assert judge.tasks[-1]["program"].startswith(header) and "ANSWERS" in judge.tasks[-1]["program"]
    reward.score(prompts=["Solve it.\n"], completions=[RIGHT], input_output=[APPS_IO])
    assert judge.tasks[-1]["program"].startswith("ANSWERS")
    reward.score(completions=[RIGHT], input_output=[APPS_IO], code_prompt=[None])
    assert judge.tasks[-1]["program"].startswith("ANSWERS")


def test_the_options_reach_each_task() -> None:
    judge = Judge()
    config = {"timeout": 2.0, "total_timeout": 9.0, "compare": "tokens", "float_tol": 1e-4}
    make_stdio_test_reward(sandbox=judge, **config).score(completions=[RIGHT], input_output=[APPS_IO])
    make_stdio_partial_reward(sandbox=judge, **config).score(completions=[RIGHT], input_output=[APPS_IO])
    first, second = judge.tasks
    for task in (first, second):
        assert (task["timeout"], task["total_timeout"], task["compare"], task["float_tol"]) == (
            2.0,
            9.0,
            "tokens",
            1e-4,
        )
    assert first["stop_on_failure"] is True and second["stop_on_failure"] is False
    assert StdioTestReward(sandbox=judge).total_timeout == 20.0
    # a call-based row: one overall limit
    io = {"inputs": [[1], [2]], "outputs": [1, 2], "fn_name": "f"}
    make_stdio_test_reward(sandbox=judge, timeout=2.0, total_timeout=None).score(
        completions=[RIGHT], input_output=[io]
    )
    assert judge.tasks[-1]["timeout"] == 4.0


def test_garbage_completions_score_zero_and_are_counted() -> None:
    judge = Judge()
    reward = make_stdio_test_reward(sandbox=judge)
    labels: dict[str, list] = {}
    out = reward.score(
        completions=["", "```bash\necho 1\n", RIGHT],
        input_output=[APPS_IO] * 3,
        log_extra=labels.__setitem__,
    )
    assert out == [0.0, 0.0, 1.0]
    assert len(judge.tasks) == 1  # garbage never reaches the sandbox
    assert labels["stdio_test/status"] == ["extract_empty", "extract_unbalanced_fence", "passed"]
    assert reward.last_metrics["stdio_test/extract_empty_frac"] == pytest.approx(1 / 3)


def test_a_block_that_defines_a_function_keeps_its_top_level() -> None:
    # a whole program: the stdio rewards look for no entry point, so its own calls stay
    judge = Judge()
    code = "```python\ndef solve():\n    pass\nANSWERS = {'1\\n': '2\\n', '2\\n': '4\\n'}\nsolve()\n```"
    assert make_stdio_test_reward(sandbox=judge).score(completions=[code], input_output=[APPS_IO]) == [1.0]
    assert judge.tasks[0]["program"].rstrip().endswith("solve()")


# ---- columns as TRL passes them -------------------------------------------------------------------------------------------
def test_column_values_one_per_completion_or_one_for_all() -> None:
    assert _column(None, 2, "x") == [None, None]
    assert _column("abc", 3, "x") == ["abc"] * 3
    assert _column(b"ab", 2, "x") == [b"ab"] * 2
    assert _column(("a", "b"), 2, "x") == ["a", "b"]
    with pytest.raises(ValueError, match=r"column 'input_output' has 1 values for 2 completions"):
        _column(["a"], 2, "input_output")
    # one JSON string for the whole batch
    assert score(completions=[RIGHT, HALF], input_output=json.dumps(APPS_IO)) == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"column 'prompts' has 1 values for 2 completions"):
        score(completions=[RIGHT, HALF], prompts=["p"], input_output=[APPS_IO] * 2)


def test_stdio_columns_and_what_is_not_a_column() -> None:
    assert STDIO_COLUMNS == (
        "input_output",
        "public_tests",
        "private_tests",
        "generated_tests",
        "verification_info",
        "fn_name",
    )
    reward = make_stdio_test_reward(sandbox=Judge())
    with pytest.raises(ValueError) as err:
        reward.score(
            completions=[RIGHT], question=["q"], trainer_state=[1], log_metric=None, completion_ids=[[1]]
        )
    assert "(it has: question)" in str(err.value) and "in this dataset" in str(err.value)
    named = make_stdio_test_reward(sandbox=Judge(), format="code_contests")
    with pytest.raises(
        ValueError, match=r"format 'code_contests' reads public_tests / private_tests / generated_tests"
    ):
        named.score(completions=[RIGHT], input_output=[APPS_IO])
    with pytest.raises(ValueError, match=r"\(it has: input_output, question\)"):
        named.score(completions=[RIGHT], input_output=[APPS_IO], question=["q"])
    # a named format beside another format's columns reads its own
    row = {"input_output": [APPS_IO], "private_tests": [{"input": ["1\n"], "output": ["9\n"]}]}
    assert make_stdio_test_reward(sandbox=Judge(), format="taco").score(completions=[RIGHT], **row) == [1.0]
    assert make_stdio_test_reward(sandbox=Judge(), format="codecontests").score(
        completions=[RIGHT], **row
    ) == [0.0]
    with pytest.raises(ValueError, match="unknown test format"):
        make_stdio_test_reward(format="leetcode")


def test_a_malformed_row_names_the_reward_and_the_row() -> None:
    with pytest.raises(ValueError, match=r"^stdio_test_reward, row 1: input_output is not valid JSON"):
        score(completions=[RIGHT, RIGHT], input_output=[APPS_IO, "{bad"])


def test_async_and_sync_give_the_same_rewards() -> None:
    reward = make_stdio_partial_reward(sandbox=Judge())
    sync = reward.score(completions=[RIGHT, HALF], input_output=[APPS_IO] * 2)
    asynchronous = asyncio.run(reward(completions=[RIGHT, HALF], input_output=[APPS_IO] * 2))
    assert sync == asynchronous == [1.0, 0.5]


def test_a_sandbox_that_returns_the_wrong_number_of_results_is_an_error() -> None:
    class Short(Judge):
        def run_batch(self, tasks):
            return super().run_batch(tasks)[:-1]

    with pytest.raises(RuntimeError, match=r"sandbox returned 1 results for 2 tasks"):
        make_stdio_test_reward(sandbox=Short()).score(completions=[RIGHT, RIGHT], input_output=[APPS_IO] * 2)


# ---- scoring a result ---------------------------------------------------------------------------------------------------------
def result(status="failed", passed=0, total=0, flags=()):
    return SimpleNamespace(status=status, asserts_passed=passed, asserts_total=total, flags=flags)


def test_all_passed_and_fraction_passed_edges() -> None:
    assert (
        all_passed(None) == 0.0
        and all_passed(result("passed")) == 1.0
        and all_passed(result("failed")) == 0.0
    )
    assert all_passed(SimpleNamespace(status=SimpleNamespace(value="passed"))) == 1.0  # an enum status
    assert fraction_passed(None) == 0.0
    assert fraction_passed(result("passed")) == 1.0
    assert fraction_passed(result("failed", 1, 4)) == 0.25
    assert fraction_passed(result("failed", 0, 0)) == 0.0
    assert fraction_passed(result("failed", 5, 4)) == 1.0 and fraction_passed(result("failed", -1, 4)) == 0.0
    assert fraction_passed(result("failed", 3, 4, flags=("crash_after_output",))) == 0.0
    assert fraction_passed(result("passed", 4, 4, flags=("early_exit",))) == 0.0
    assert fraction_passed(result("failed", 3, 4, flags=("unrelated",))) == 0.75
    assert fraction_passed(SimpleNamespace(status="failed", asserts_passed=None, asserts_total=None)) == 0.0


def test_workers_per_local_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert _workers_per_local_process() is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert _workers_per_local_process() is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "x")
    assert _workers_per_local_process() is None
    monkeypatch.setattr(code_rewards.os, "sched_getaffinity", lambda _: set(range(8)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert _workers_per_local_process() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert _workers_per_local_process() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert _workers_per_local_process() == 1
    reward = make_stdio_test_reward(timeout=2, memory_mb=256.0)
    assert reward.sandbox_kwargs() == {"timeout": 2.0, "memory_mb": 256, "n_workers": 1}
    assert make_stdio_test_reward(n_workers=3).sandbox_kwargs()["n_workers"] == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert "n_workers" not in make_stdio_test_reward().sandbox_kwargs()


# ---- the reward objects ---------------------------------------------------------------------------------------------------------
def test_names_prefixes_and_factories() -> None:
    assert set(REWARDS) == {"unit_test", "partial_test", "stdio_test", "stdio_partial", "format"}
    for make, name in (
        (make_unit_test_reward, "unit_test_reward"),
        (make_partial_test_reward, "partial_test_reward"),
        (make_stdio_test_reward, "stdio_test_reward"),
        (make_stdio_partial_reward, "stdio_partial_reward"),
        (make_format_reward, "format_reward"),
    ):
        reward = make()
        assert reward.__name__ == name and reward.metric_prefix == name.removesuffix("_reward")
    assert make_stdio_test_reward(name="mine").metric_prefix == "mine"
    assert make_stdio_test_reward(name="x_reward", metric_prefix="p").metric_prefix == "p"
    assert make_unit_test_reward(timeout=1.5, memory_mb=64, n_workers=2).sandbox_kwargs() == {
        "timeout": 1.5,
        "memory_mb": 64,
        "n_workers": 2,
    }
    assert isinstance(make_reward("stdio_partial"), StdioPartialReward)
    assert repr(make_stdio_test_reward(timeout=2)) == (
        "StdioTestReward(name='stdio_test_reward', timeout=2.0, memory_mb=1024, n_workers=None, style='auto')"
    )
    with pytest.raises(ValueError, match=r"unknown reward kind 'x'; use one of unit_test, partial_test"):
        make_reward("x")
    with pytest.raises(ValueError, match="style must be"):
        make_stdio_test_reward(style="markdown")
    assert make_format_reward(style="chat").style == "chat"


def test_an_explicit_sandbox_is_used_and_none_is_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    judge = Judge()
    assert make_stdio_test_reward(sandbox=judge).get_sandbox() is judge
    import sandbox

    seen = {}
    monkeypatch.setattr(sandbox, "get_sandbox", lambda **kw: seen.update(kw) or judge)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert make_stdio_test_reward(timeout=1.0, memory_mb=128).get_sandbox() is judge
    assert seen == {"timeout": 1.0, "memory_mb": 128}


def test_function_test_rewards_read_their_columns() -> None:
    judge = Judge()
    unit = make_unit_test_reward(sandbox=judge)
    prompt = "def f():\n"
    # a blank or missing test: unscorable; the text prompt is the code prompt when no column is given
    assert unit.score(prompts=[prompt], completions=["    return 1\n"], test=["  "], entry_point=["f"]) == [
        None
    ]
    assert unit.score(prompts=[prompt], completions=["    return 1\n"], test=[None], entry_point=["f"]) == [
        None
    ]
    unit.score(
        prompts=[prompt], completions=["    return 1\n"], test=["def check(c): pass"], entry_point=["f"]
    )
    task = judge.tasks[-1]
    assert task["program"] == prompt + "    return 1\n" and task["entry_point"] == "f"
    assert task["trusted_code"] == prompt and task["tests"] == "def check(c): pass"
    unit.score(
        prompts=[[{"role": "user", "content": "x"}]], completions=["x = 1\n"], test=["t"], entry_point=[None]
    )
    assert "trusted_code" not in judge.tasks[-1]
    fmt = make_format_reward()
    good = "```python\ndef f():\n    return 1\n```"
    assert fmt.score(completions=[good, good, "no"], entry_point=["f", "", "f"]) == [1.0, None, 0.0]


def test_the_format_reward_never_touches_a_sandbox() -> None:
    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"format_reward used the sandbox's {name}")

    fmt = code_rewards.FormatReward(sandbox=Untouchable())
    good = "```python\ndef f():\n    return 1\n```"
    assert fmt.score(completions=[good, "no"], entry_point=["f", "f"]) == [1.0, 0.0]
    assert not any("pass" in key or "status" in key for key in fmt.last_metrics), fmt.last_metrics


def test_per_case_shares_are_logged_for_stdio_rows_only() -> None:
    class EveryCasePasses:
        def run_batch(self, tasks):
            return [
                SimpleNamespace(status="passed", asserts_passed=1, asserts_total=1, cases=("passed",))
            ] * len(tasks)

    unit = code_rewards.UnitTestReward(sandbox=EveryCasePasses())
    assert unit.score(
        completions=["    return 1\n"], prompts=["def f():\n"], test=["t"], entry_point=["f"]
    ) == [1.0]
    assert unit.last_metrics and not any("/case_" in key for key in unit.last_metrics), unit.last_metrics
    stdio = make_reward("stdio_test", sandbox=Judge())
    assert stdio.score(completions=[RIGHT, HALF], input_output=[APPS_IO, APPS_IO]) == [1.0, 0.0]
    assert stdio.last_metrics["stdio_test/case_passed_frac"] == 0.75  # 3 of the 4 cases


def test_a_passed_status_built_at_run_time_passes() -> None:
    assert all_passed(result("".join(["pass", "ed"]), 1, 1)) == 1.0


def test_workers_per_local_process_counts_this_process_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # pid 0 is the calling process: its own affinity (taskset, a cgroup's cpuset), not another process's.
    monkeypatch.setattr(code_rewards.os, "sched_getaffinity", lambda pid: set(range(8 if pid == 0 else 2)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert _workers_per_local_process() == 4


def test_workers_per_local_process_without_an_affinity_call_shares_cpu_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(code_rewards.os, "sched_getaffinity", raising=False)  # macOS, Windows
    monkeypatch.setattr(code_rewards.os, "cpu_count", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert _workers_per_local_process() == 4
    monkeypatch.setattr(code_rewards.os, "cpu_count", lambda: None)  # unknown: one CPU
    assert _workers_per_local_process() == 1


def test_the_stdio_options_after_the_name_are_keywords_only() -> None:
    with pytest.raises(TypeError):
        StdioTestReward("mine", 5.0)
    assert StdioTestReward("mine", total_timeout=5.0).total_timeout == 5.0


def test_a_failed_status_of_any_name_earns_only_its_share() -> None:
    for status in ("failed", "runtime_error", "timeout", "syntax_error", "sandbox_error", "output_limit"):
        assert fraction_passed(result(status, 1, 2)) == 0.5, status
        assert all_passed(result(status, 2, 2)) == 0.0, status


def test_a_tests_setting_read_from_a_config_file_still_hides_the_shown_cases() -> None:
    io = {"inputs": ["1 1\n", "2 2\n"], "outputs": ["2\n", "4\n"]}
    judge = Judge()
    hidden = "".join(["hid", "den"])  # built at run time, as a YAML-read value is
    full = program({"1 1\n": "2\n", "2 2\n": "4\n"})
    make_stdio_test_reward(sandbox=judge, tests=hidden).score(
        prompts=["input 1 1, output 2"], completions=[full], input_output=[io]
    )
    assert judge.tasks[0]["cases"] == (("2 2\n", "4\n"),)


def test_batches_past_256_rows() -> None:
    n = 300  # past the small integers CPython caches
    assert _column(list(range(n)), n, "x") == list(range(n))
    reward = make_stdio_partial_reward(sandbox=Judge())
    scores = reward.score(completions=[RIGHT, HALF] * (n // 2), input_output=[APPS_IO] * n)
    assert scores == [1.0, 0.5] * (n // 2)


def test_the_batch_metrics_count_characters_and_case_verdicts() -> None:
    reward = make_stdio_partial_reward(sandbox=Judge())
    reward.score(completions=[RIGHT, HALF], input_output=[APPS_IO] * 2)
    metrics = reward.last_metrics
    assert metrics["stdio_partial/completion_chars"] == (len(RIGHT) + len(HALF)) / 2
    assert metrics["stdio_partial/case_passed_frac"] == 0.75
    assert metrics["stdio_partial/case_wrong_answer_frac"] == 0.25
    chat_turns = [[{"role": "assistant", "content": RIGHT}], None]
    reward.score(completions=chat_turns, input_output=[APPS_IO] * 2)
    assert reward.last_metrics["stdio_partial/completion_chars"] == len(RIGHT) / 2


def test_workers_per_local_process_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert _workers_per_local_process() == max(1, len(os.sched_getaffinity(0)) // 2)


def test_partial_credit_needs_both_counts() -> None:
    assert fraction_passed(SimpleNamespace(status="failed", asserts_passed=1)) == 0.0  # no total
    assert fraction_passed(result("failed", 1, 0)) == 0.0
    assert fraction_passed(result("failed", 1, 1)) == 1.0  # one assert, passed
    assert fraction_passed(SimpleNamespace(status="failed", asserts_total=2)) == 0.0


def test_the_default_sandbox_settings() -> None:
    for reward in (StdioTestReward(), StdioPartialReward(), REWARDS["unit_test"]()):
        assert (reward.timeout, reward.memory_mb, reward.n_workers, reward.style) == (3.0, 1024, None, "auto")


def test_every_factory_defaults_to_three_seconds_and_a_gigabyte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for make in (
        make_unit_test_reward,
        make_partial_test_reward,
        make_stdio_test_reward,
        make_stdio_partial_reward,
    ):
        assert make().sandbox_kwargs() == {"timeout": 3.0, "memory_mb": 1024}, make.__name__


def test_the_function_rewards_take_their_name_by_keyword_and_trls_keywords() -> None:
    from rewards.code_rewards import UnitTestReward

    assert UnitTestReward(name="mine").__name__ == "mine"
    with pytest.raises(TypeError):
        UnitTestReward("mine", 5.0)
    judge = Judge()
    reward = make_unit_test_reward(sandbox=judge)
    out = asyncio.run(
        reward(
            prompts=["def f():\n"],
            completions=["    return 1\n"],
            test=["def check(c): pass"],
            entry_point=["f"],
        )
    )
    assert out == [1.0] and judge.tasks[0]["program"] == "def f():\n    return 1\n"


def test_a_local_world_of_zero_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "-2"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        assert _workers_per_local_process() is None


def test_settings_and_statuses_built_at_run_time_compare_by_value() -> None:
    from rewards.code_rewards import HIDDEN_SPLITS

    assert make_stdio_test_reward(tests="".join(["hid", "den"])).splits == HIDDEN_SPLITS
    assert fraction_passed(result("".join(["pass", "ed"]), 0, 0)) == 1.0
    assert make_format_reward(name="mine").__name__ == "mine"


def test_too_many_values_or_results_are_errors_too() -> None:
    with pytest.raises(ValueError, match=r"column 'x' has 3 values for 2 completions"):
        _column(["a", "b", "c"], 2, "x")

    class Long(Judge):
        def run_batch(self, tasks):
            out = super().run_batch(tasks)
            return out + out[:1]

    with pytest.raises(RuntimeError, match=r"sandbox returned 2 results for 1 tasks"):
        make_stdio_test_reward(sandbox=Long()).score(completions=[RIGHT], input_output=[APPS_IO])
    assert fraction_passed(result("failed", -1, -2)) == 0.0  # a negative total earns nothing


def test_the_format_reward_scores_a_stub_zero() -> None:
    stub = "```python\ndef f():\n    pass\n```"
    assert make_format_reward().score(completions=[stub], entry_point=["f"]) == [0.0]
