"""Reward settings that come from the environment or from configuration: how many sandbox workers a reward asks
for under `accelerate launch` (each local process takes its share of the CPUs; a launcher environment it cannot
read leaves the sandbox's own default), and an extraction style that is equal to, not identical with, a
literal."""

from __future__ import annotations

import os

import pytest

import rewards


@pytest.mark.parametrize("local_world", [None, "1", "", "two", "-3"])
def test_single_or_unreadable_local_world_keeps_the_sandbox_default(monkeypatch, local_world) -> None:
    if local_world is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world)
    kwargs = rewards.make_unit_test_reward(timeout=2.0, memory_mb=256).sandbox_kwargs()
    assert kwargs == {"timeout": 2.0, "memory_mb": 256}


def test_local_processes_share_the_cpus(monkeypatch) -> None:
    cpus = len(os.sched_getaffinity(0))
    for local_world, expected in (("2", max(1, cpus // 2)), (str(4 * cpus), 1)):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world)
        assert rewards.make_unit_test_reward().sandbox_kwargs()["n_workers"] == expected
    # An explicit n_workers wins over the share.
    assert rewards.make_unit_test_reward(n_workers=3).sandbox_kwargs()["n_workers"] == 3


def test_extraction_style_is_compared_by_value() -> None:
    """A style read from a config file or built at run time is a different str object from the literal: a
    column-0 rewrite of the function is still read as bare code."""
    from rewards import extract_code

    prompt = 'def f(x):\n    """Return x."""\n'
    built = "".join(["au", "to"])  # equal to "auto", not the same object
    ex = extract_code(prompt, "def f(x):\n    return x\n", "f", style=built)
    assert (ex.style, ex.reason, ex.snippet) == ("bare", "ok", "def f(x):\n    return x\n")
