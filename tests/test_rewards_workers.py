"""How many sandbox workers a reward asks for under `accelerate launch`: each local process takes its share of
the CPUs, and a launcher environment it cannot read leaves the sandbox's own default."""

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
