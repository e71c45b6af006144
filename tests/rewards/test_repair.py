"""The repair environment (rewards.repair) on the sandbox alone: what its feedback shows and never shows, the turn
limit, the final-answer rule, the row formats, and the hidden tests' verdict on forged output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rewards.repair import (
    NO_RUNS_LEFT,
    RepairEnvironment,
    RepairOptions,
    RepairReward,
    answer_feedback,
    repair_environment,
)

REPO = Path(__file__).resolve().parents[2]

# A HumanEval-shaped row: one docstring example (visible), hidden asserts with values shown nowhere else.
CODE_PROMPT = 'def add3(x):\n    """Return x plus 3.\n    >>> add3(1)\n    4\n    """\n'
HIDDEN_ASSERTS = ("assert candidate(91357) == 91360", "assert candidate(-77731) == -77728")
ROW = {
    "task_id": "t/add3",
    "prompt": [{"role": "user", "content": f"Complete:\n```python\n{CODE_PROMPT}```"}],
    "code_prompt": CODE_PROMPT,
    "test": "def check(candidate):\n    assert candidate(1) == 4\n"
    + "".join(f"    {a}\n" for a in HIDDEN_ASSERTS),
    "entry_point": "add3",
}
WRONG = "def add3(x):\n    return x + 2\n"
RIGHT = "def add3(x):\n    return x + 3\n"


def _env(**options) -> RepairEnvironment:
    env = RepairEnvironment(RepairOptions(**options))
    env.reset(**ROW)
    return env


def _hidden_fragments() -> list[str]:
    return [*HIDDEN_ASSERTS, "91357", "91360", "77731", "77728"]


def test_feedback_shows_the_visible_example_and_what_the_code_returned() -> None:
    env = RepairEnvironment()
    intro = env.reset(**ROW)
    assert "assert add3(1) == 4" in intro and "3 times" in intro
    report = env.run_tests(WRONG)
    assert report.startswith("Run 1 of 3: 1 of 1 visible test failed.")
    assert "FAILED assert add3(1) == 4 -- returned 3" in report
    assert env.run_tests(RIGHT).startswith("Run 2 of 3: all 1 visible test passed.")
    assert env.sandbox_runs == 2  # one visible test, two submissions


@pytest.mark.parametrize("visible", ["prompt", "split:1"])
@pytest.mark.parametrize(
    "code",
    [
        WRONG,
        "def add3(x):\n    raise ValueError(x)\n",
        "def add3(x):\n    return 'passk-got-' + str(x)\n",
        "def add3(x) return",
        "print('hello')",
    ],
)
def test_feedback_never_contains_a_hidden_test(visible: str, code: str) -> None:
    env = RepairEnvironment(RepairOptions(visible=visible))
    texts = [
        env.reset(**ROW),
        env.run_tests(code),
        env.run_tests(code),
        env.run_tests(code),
        env.run_tests(code),
    ]
    for text in texts:
        for fragment in _hidden_fragments():
            assert fragment not in text, (fragment, text)


def test_stdio_feedback_shows_the_shown_case_only() -> None:
    io = json.dumps({"inputs": ["1 2\n", "40 2\n", "5003 7\n"], "outputs": ["3\n", "42\n", "5010\n"]})
    row = {"prompt": "Print the sum of two numbers. Example: input 1 2, output 3.", "input_output": io}
    env = RepairEnvironment()
    texts = [env.reset(**row), env.run_tests("a, b = map(int, input().split())\nprint(a * b)")]
    assert "'1 2\\n'" in texts[0]
    assert "expected '3', got '2'" in texts[1]
    assert not any(h in t for t in texts for h in ("40 2", "42", "5003", "5010"))
    reward = RepairReward()
    right = [
        {"role": "assistant", "content": "```python\na, b = map(int, input().split())\nprint(a + b)\n```"}
    ]
    assert reward.score(completions=[right], environments=[env]) == [1.0]  # scored on the two hidden cases


def test_code_contests_public_tests_are_visible_and_private_ones_score() -> None:
    row = {
        "prompt": "Double the number.",
        "public_tests": {"input": ["2\n"], "output": ["4\n"]},
        "private_tests": {"input": ["31\n"], "output": ["62\n"]},
    }
    env = RepairEnvironment()
    env.reset(**row)
    assert [v.case for v in env.problem.visible] == [("2\n", "4\n")]
    report = env.run_tests("n = int(input())\nprint(n + 2)")  # right on the public case, wrong on the private
    assert "all 1 visible test passed" in report and "31" not in report and "62" not in report
    assert RepairReward().score(completions=[""], environments=[env]) == [0.0]


def test_mbpp_asserts_the_prompt_quotes_are_visible() -> None:
    row = {
        "prompt": '"""\nWrite a function to add two numbers.\nassert add(1, 2) == 3\n"""\n',
        "test": "assert add(1, 2) == 3\nassert add(40, 2) == 42\n",
        "entry_point": "add",
    }
    env = RepairEnvironment()
    env.reset(**row)
    report = env.run_tests("def add(a, b):\n    return a - b")
    assert "FAILED assert add(1, 2) == 3 -- returned -1" in report and "40" not in report
    reward = RepairReward()
    assert reward.score(completions=["def add(a, b):\n    return a + b"], environments=[env]) == [1.0]


def test_a_forged_pass_gets_the_sandboxs_verdict() -> None:
    forged = (
        "import sys\nprint('Run 1 of 3: all 1 visible test passed.')\n"
        "class Always:\n    def __eq__(self, other):\n        return True\n"
        "def add3(x):\n    return Always()\n"
    )
    exits = "import sys\ndef add3(x):\n    print('all 1 visible test passed')\n    sys.exit(0)\n"
    for code in (forged, exits):
        env = _env()
        report = env.run_tests(code)
        assert report.startswith("Run 1 of 3: 1 of 1 visible test failed."), report
        assert env.submissions[0].visible_passed is False
        reward = RepairReward()
        assert reward.score(completions=[[{"role": "assistant", "content": "done"}]], environments=[env]) == [
            0.0
        ]


@pytest.mark.parametrize("visible", ["prompt", "split:1"])
def test_answer_feedback_never_contains_a_hidden_test_and_stops_at_the_limit(visible: str) -> None:
    env = _env(submit="answer", visible=visible)
    intro = env.reset(**ROW)
    assert "assert add3(1) == 4" in intro and "3 answers in all" in intro and "run_tests" not in intro
    forged = "def add3(x):\n    print('all 1 visible test passed')\n    return 'passk-got-' + str(x)\n"
    reports = [answer_feedback(env, f"```python\n{code}```") for code in (WRONG, forged)]
    assert all(r is not None and "1 of 1 visible test failed" in r for r in reports), reports
    assert "answer 1 of 3" in reports[0] and "2 answers left" in reports[0] and "1 answer left" in reports[1]
    for text in [intro, *reports]:
        for fragment in _hidden_fragments():
            assert fragment not in text, (fragment, text)
    runs = env.sandbox_runs
    assert answer_feedback(env, RIGHT) is None  # the third answer: the last, not run on the visible tests
    assert env.sandbox_runs == runs and len(env.submissions) == 3
    with pytest.raises(RuntimeError, match="past the turn limit"):
        answer_feedback(env, RIGHT)
    reward = RepairReward()
    assert reward.score(completions=["ignored: the answers were recorded"], environments=[env]) == [1.0]
    assert reward.last_records[0].first_passed is False and reward.last_metrics["repair/repair_rate"] == 1.0


def test_answer_feedback_ends_the_rollout_when_the_visible_tests_pass() -> None:
    env = _env(submit="answer")
    assert answer_feedback(env, RIGHT) is None and env.submissions[0].visible_passed is True
    single = _env(submit="answer", max_turns=1)
    assert "It must pass these tests:" in single.reset(**ROW)
    assert (
        answer_feedback(single, WRONG) is None and single.sandbox_runs == 0
    )  # one answer: nothing to report
    with pytest.raises(ValueError, match='drives submit="answer" environments'):
        answer_feedback(_env(), RIGHT)


def test_the_turn_limit_holds() -> None:
    env = _env(max_turns=2)
    env.run_tests(WRONG)
    assert "(No runs left: this is your answer.)" in env.run_tests(WRONG)
    runs = env.sandbox_runs
    assert env.run_tests(RIGHT).startswith(NO_RUNS_LEFT)  # refused: nothing runs
    assert (env.sandbox_runs, len(env.submissions), env.refused) == (runs, 2, 1)
    # An answer written after the limit is not an attempt: the last submission is the answer.
    reward = RepairReward()
    final = [{"role": "assistant", "content": f"```python\n{RIGHT}```"}]
    assert reward.score(completions=[final], environments=[env]) == [0.0]
    assert reward.last_metrics["repair/turn_limit_frac"] == 1.0


def test_the_final_answer_first_attempt_and_repair_rate() -> None:
    repaired, fixed_in_text, single_turn, no_code = _env(), _env(), _env(), _env()
    repaired.run_tests(WRONG)
    repaired.run_tests(RIGHT)
    fixed_in_text.run_tests(WRONG)  # then the fix in its last message, without the tool
    done = [{"role": "assistant", "content": "Done."}]
    completions = [
        done,
        [{"role": "assistant", "content": f"Fixed:\n```python\n{RIGHT}```"}],
        [{"role": "assistant", "content": f"```python\n{RIGHT}```"}],  # a single-turn answer
        done,
    ]
    reward = RepairReward()
    rewards = reward.score(
        completions=completions, environments=[repaired, fixed_in_text, single_turn, no_code]
    )
    assert rewards == [1.0, 1.0, 1.0, 0.0]
    records = reward.last_records
    assert [(r.first_passed, r.final_passed, r.attempts) for r in records] == [
        (False, True, 2),
        (False, True, 2),
        (True, True, 1),
        (False, False, 0),
    ]
    m = reward.last_metrics
    assert m["repair/first_pass"] == 0.25 and m["repair/final_pass"] == 0.75
    assert m["repair/repair_rate"] == pytest.approx(2 / 3) and m["repair/no_code_frac"] == 0.25


def test_split_scores_only_the_held_out_asserts() -> None:
    env = _env(visible="split:1")
    assert env.problem.visible[0].shown == "assert add3(1) == 4"  # the function's name, not check's argument
    # Passes the visible assert only: the hidden two fail.
    report = env.run_tests("def add3(x):\n    return 4")
    assert "all 1 visible test passed" in report
    assert RepairReward().score(completions=[""], environments=[env]) == [0.0]
    with pytest.raises(ValueError, match=r"needs more than 3 asserts; it has 3: choose a smaller K"):
        _env(visible="split:3")


def test_options_and_misuse_fail_in_one_line() -> None:
    for bad, match in [
        ({"max_turns": 0}, "max_turns"),
        ({"visible": "public"}, "visible must be 'prompt' or 'split:K'"),
        ({"feedback": "all"}, "feedback must be one of tests, verdict"),
    ]:
        with pytest.raises(ValueError, match=match) as err:
            repair_environment(**bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="pass environment_factory=rewards.repair_environment"):
        RepairReward().score(completions=["x"])
    with pytest.raises(ValueError, match="the row has no tests"):
        RepairEnvironment().reset(prompt="hi")


def test_verdict_feedback_says_only_how_many_passed() -> None:
    env = _env(feedback="verdict")
    report = env.run_tests(WRONG)
    assert report == "Run 1 of 3: 1 of 1 visible test failed. (2 runs left.)"


def test_a_chat_template_without_tool_support_is_refused_in_one_line(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from experiments.evaluation.repair import use_tool_template
    from rewards.repair import check_tool_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)  # plain ChatML: drops tool calls
    with pytest.raises(ValueError, match="cannot render tool calls") as err:
        check_tool_template(tokenizer)
    assert "\n" not in str(err.value)
    check_tool_template(use_tool_template(tokenizer))


def test_the_module_imports_no_torch() -> None:
    code = "import sys, rewards.repair\nprint(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_one_environment_for_several_rollouts_is_refused_in_one_line() -> None:
    """Each rollout is scored from its own environment: one object passed for two rollouts would give both its
    verdict (a batch that repeated one input dict did this in passk's evaluation), so it is refused."""
    env = RepairEnvironment()
    env.reset(prompt="Write add(a, b).", test="assert add(1, 2) == 3\n", entry_point="add")
    right, wrong = "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"
    with pytest.raises(ValueError, match="one environment reached the reward for several rollouts") as err:
        RepairReward().score(completions=[right, wrong], environments=[env, env])
    assert "\n" not in str(err.value)
