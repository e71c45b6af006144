"""The per-batch health metrics of rewards.metrics, computed by hand on small batches (no sandbox runs), and the
package's lazy re-exports of TRL's rewards."""

from __future__ import annotations

import pytest

import rewards
from rewards.extraction import EXTRACT_FAILURE_REASONS, Extraction
from rewards.metrics import batch_metrics, emit, status_name
from sandbox import CASE_VERDICTS, STATUSES
from sandbox.executor import Result


def _ex(reason: str = "ok", cut: bool = False) -> Extraction:
    return Extraction(code="x" if reason == "ok" else "", reason=reason, style="completion", cut=cut)


def test_a_mixed_batch_gives_each_fraction_over_every_completion() -> None:
    texts = [
        "a",
        "bbb",
        "cc",
        "ddddddd",
    ]  # 13 characters over 4 completions: a mean that is not a whole number
    results = [
        Result.of("passed"),
        Result.of("runtime_error", flags=("early_exit",)),  # a forged exit, caught
        None,  # not executed (its extraction failed)
        Result.of("timeout", flags=("resource_note",)),  # flagged, but not a forged exit
    ]
    extractions = [_ex(), _ex(cut=True), _ex("no_code"), None]
    out = batch_metrics("unit_test", texts, extractions, results, [False, False, False, True])
    want = {f"unit_test/{s}_frac": 0.0 for s in STATUSES}
    want.update(
        {"unit_test/passed_frac": 0.25, "unit_test/runtime_error_frac": 0.25, "unit_test/timeout_frac": 0.25}
    )
    want.update({f"unit_test/extract_{r}_frac": 0.0 for r in EXTRACT_FAILURE_REASONS})
    want.update(
        {
            "unit_test/extract_no_code_frac": 0.25,
            "unit_test/extract_cut_frac": 0.25,
            "unit_test/forged_exit_frac": 0.25,
            "unit_test/flagged_frac": 0.5,
            "unit_test/no_test_frac": 0.25,
            "unit_test/completion_chars": 3.25,
        }
    )
    assert out == want


def test_case_fractions_are_over_the_cases_of_the_rows_that_ran() -> None:
    results = [
        Result.of("passed", cases=("passed", "passed")),
        Result.of("failed", cases=("passed", "wrong_answer", "skipped")),
        None,
    ]
    out = batch_metrics(
        "stdio", ["x", "y", "z"], [_ex(), _ex(), _ex()], results, [False] * 3, with_cases=True
    )
    cases = {k: v for k, v in out.items() if "/case_" in k}
    assert cases == {
        **{f"stdio/case_{v}_frac": 0.0 for v in CASE_VERDICTS},
        "stdio/case_passed_frac": 0.6,
        "stdio/case_wrong_answer_frac": 0.2,
        "stdio/case_skipped_frac": 0.2,
    }
    one = batch_metrics(
        "stdio", ["x"], [_ex()], [Result.of("passed", cases=("passed",))], [False], with_cases=True
    )
    assert one["stdio/case_passed_frac"] == 1.0
    # No case ran at all: zeros, not a division by zero.
    none_ran = batch_metrics("stdio", ["x"], [_ex("empty")], [None], [False], with_cases=True)
    assert all(none_ran[f"stdio/case_{v}_frac"] == 0.0 for v in CASE_VERDICTS)


def test_without_execution_no_status_or_flag_is_logged() -> None:
    out = batch_metrics("format", ["ab"], [_ex()], [None], [False], with_execution=False)
    assert not [k for k in out if k.endswith(("flagged_frac", "forged_exit_frac")) or "passed" in k]
    assert out["format/completion_chars"] == 2.0 and not [k for k in out if "/case_" in k]


def test_the_options_are_keywords() -> None:
    with pytest.raises(TypeError):
        batch_metrics("unit_test", ["x"], [_ex()], [None], [False], False)  # a bare bool says nothing


def test_an_empty_batch_logs_every_name_as_zero() -> None:
    out = batch_metrics("unit_test", [], [], [], [], with_cases=True)
    assert out and set(out.values()) == {0.0}
    assert len(out) == len(STATUSES) + 2 + len(CASE_VERDICTS) + len(EXTRACT_FAILURE_REASONS) + 3


def test_a_status_is_read_from_an_enum_a_string_or_is_missing() -> None:
    class Plain:
        status = "timeout"

    assert status_name(Result.of("failed")) == "failed"
    assert status_name(Plain()) == "timeout"
    assert status_name(object()) == "sandbox_error"


def test_emit_logs_every_metric_as_a_float_in_name_order() -> None:
    logged: list[tuple[str, object]] = []
    emit({"b/x": 1, "a/y": 0.5}, lambda name, value: logged.append((name, value)))
    assert logged == [("a/y", 0.5), ("b/x", 1.0)] and all(type(v) is float for _, v in logged)
    emit({"a": 1.0}, None)  # TRL passes no log_metric: nothing to do, no error


def test_trls_rewards_are_reexported_on_first_use() -> None:
    trl_rewards = pytest.importorskip("trl.rewards")
    assert rewards.get_soft_overlong_punishment is trl_rewards.get_soft_overlong_punishment
    assert rewards.get_repetition_penalty_reward is trl_rewards.get_repetition_penalty_reward
    assert {"get_soft_overlong_punishment", "get_repetition_penalty_reward"} <= set(rewards.__all__)
    with pytest.raises(AttributeError, match="^module 'rewards' has no attribute 'no_such_reward'$"):
        rewards.no_such_reward  # noqa: B018 - the attribute access is the test


def test_no_body_frac_counts_the_prompts_stub_given_back_and_only_with_entry_points() -> None:
    """A program whose entry point is only a docstring, `pass` or `...` is a stub; a real body, a helper's stub
    or a failed extraction is not."""
    from rewards.extraction import extract_code

    prompt = 'def f(x):\n    """Return x plus 1."""\n'
    completions = [
        '```python\ndef f(x):\n    """Return x plus 1."""\n```',
        "```python\ndef f(x):\n    return x + 1\n```",
        "    pass\n",
        "```python\ndef g(x):\n    ...\ndef f(x):\n    return g(x)\n```",
        "",
    ]
    extractions = [extract_code(prompt, c, "f") for c in completions]
    args = ("unit_test", completions, extractions, [None] * 5, [False] * 5)
    out = batch_metrics(*args, with_execution=False, entry_points=["f"] * 5)
    assert out["unit_test/no_body_frac"] == 2 / 5
    assert "unit_test/no_body_frac" not in batch_metrics(*args, with_execution=False)
