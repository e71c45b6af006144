"""How sandbox results become rewards and metrics, pinned with a scripted stand-in sandbox.

These cases (a caught forged verdict, a sandbox error, a result-count mismatch) are hard to provoke on demand
with the real executor, so a fake one returns prescribed ``Result``-like objects; test_rewards.py covers the
real sandbox end to end.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from rewards import PartialTestReward, UnitTestReward

PROMPT = 'def f(x: int) -> int:\n    """Identity."""\n'
TEST = "def check(candidate):\n    assert candidate(1) == 1\n"


def result(status: str, passed: int = 0, total: int = 0, flags: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(
        status=status, passed=status == "passed", asserts_passed=passed, asserts_total=total, flags=flags
    )


class ScriptedSandbox:
    """Returns the given results in order and records the tasks it was sent."""

    def __init__(self, results: list[SimpleNamespace]) -> None:
        self.results = results
        self.tasks: list[dict] = []

    def run_batch(self, tasks: list[dict]) -> list[SimpleNamespace]:
        self.tasks = list(tasks)
        return self.results[: len(tasks)]

    async def arun_batch(self, tasks: list[dict]) -> list[SimpleNamespace]:
        return self.run_batch(tasks)


def score(
    reward_cls: type, results: list[SimpleNamespace], completions: list, **kw
) -> tuple[list, dict, ScriptedSandbox]:
    box = ScriptedSandbox(results)
    reward = reward_cls("r_reward", sandbox=box)
    n = len(completions)
    metrics: dict[str, float] = {}
    extra: dict[str, list] = {}
    cols = {"test": [TEST] * n, "entry_point": ["f"] * n, "code_prompt": [PROMPT] * n} | kw
    out = reward.score(
        prompts=[PROMPT] * n,
        completions=completions,
        log_metric=metrics.__setitem__,
        log_extra=extra.__setitem__,
        **cols,
    )
    return out, metrics | {"_extra": extra}, box


def test_only_extracted_scorable_rows_reach_the_sandbox() -> None:
    completions = ["    return x\n", "prose only", "    return x + 0\n"]
    out, m, box = score(
        UnitTestReward,
        [result("passed", 1, 1), result("failed", 0, 1)],
        completions,
        test=[TEST, TEST, None],
    )
    assert out == [1.0, 0.0, None]
    assert box.tasks == [
        {"program": PROMPT + "    return x\n", "tests": TEST, "entry_point": "f", "trusted_code": PROMPT}
    ]
    assert m["_extra"]["r/status"] == ["passed", "extract_no_code", "no_test"]


def test_sandbox_error_scores_zero_not_none() -> None:
    out, m, _ = score(UnitTestReward, [result("sandbox_error")], ["    return x\n"])
    assert out == [0.0]
    assert m["r/sandbox_error_frac"] == 1.0


def test_forged_verdict_earns_no_partial_credit() -> None:
    results = [
        result("failed", 2, 3, flags=("early_exit",)),
        result("failed", 2, 3, flags=("unencodable_value",)),
        result("failed", 2, 3),
        result("timeout", 1, 4),
    ]
    out, m, _ = score(PartialTestReward, results, ["    return x\n"] * 4)
    assert out == pytest.approx([0.0, 0.0, 2 / 3, 1 / 4])
    assert m["r/forged_exit_frac"] == 0.5
    assert m["r/flagged_frac"] == 0.5
    assert m["r/timeout_frac"] == 0.25


def test_unknown_flags_are_flagged_but_not_forged() -> None:
    out, m, _ = score(UnitTestReward, [result("failed", 0, 1, flags=("something_new",))], ["    return x\n"])
    assert out == [0.0]
    assert m["r/flagged_frac"] == 1.0 and m["r/forged_exit_frac"] == 0.0


def test_result_count_mismatch_is_an_error_not_a_silent_shift() -> None:
    with pytest.raises(RuntimeError, match="results"):
        score(UnitTestReward, [result("passed")], ["    return x\n", "    return x\n"])


def test_async_path_uses_arun_batch() -> None:
    box = ScriptedSandbox([result("passed", 1, 1)])
    reward = UnitTestReward("r_reward", sandbox=box)
    out = asyncio.run(
        reward(prompts=[PROMPT], completions=["    return x\n"], test=[TEST], entry_point=["f"])
    )
    assert out == [1.0] and len(box.tasks) == 1


def test_workers_are_shared_between_local_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    reward = UnitTestReward("r_reward", timeout=2.0, memory_mb=256)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert reward.sandbox_kwargs() == {"timeout": 2.0, "memory_mb": 256}  # the sandbox's own default
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert reward.sandbox_kwargs()["n_workers"] == max(1, cpus // 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * cpus))
    assert reward.sandbox_kwargs()["n_workers"] == 1
    explicit = UnitTestReward("r_reward", n_workers=3)
    assert explicit.sandbox_kwargs()["n_workers"] == 3
