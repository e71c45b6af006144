"""docs/contracts.md's sandbox protocol against the code: the task keys the owner sends, the result keys, the
flags and the statuses are the ones written down, so that the document cannot drift from the wire."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import rewards.metrics
import sandbox
from sandbox import FLAGS, STATUSES, Result, Sandbox, Status

CONTRACTS = (Path(__file__).resolve().parents[2] / "docs" / "contracts.md").read_text()
PROTOCOL = CONTRACTS[CONTRACTS.index("### The sandbox protocol") : CONTRACTS.index("## rewards")]


def documented_task_keys() -> set[str]:
    """The keys in the first column of the protocol's task-key table."""
    rows = [line for line in PROTOCOL.splitlines() if line.startswith("| `")]
    return {key for row in rows for key in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_the_task_keys_the_owner_sends_are_documented():
    box = Sandbox(n_workers=1)  # never started: building a task needs no worker
    tasks = [
        box._task("def f():\n    return 1\n", "assert f() == 1\n", "f", trusted_code="x = 1\n"),
        box._task("print(1)\n", "assert True\n", None, mode="exec"),
        box._stdio_task("print(input())\n", [("a\n", "a\n")], total_timeout=5.0, float_tol=1e-6),
    ]
    sent = {key for task in tasks for key in task} | {"id"}  # the pool numbers each task it sends
    assert sent == documented_task_keys()


def test_the_result_keys_are_results_fields_and_documented():
    fields = {f.name for f in dataclasses.fields(Result)}
    result_keys = {
        "status",
        "asserts_passed",
        "asserts_total",
        "duration",
        "stdout",
        "stderr",
        "message",
        "flags",
        "cases",
    }
    for key in sorted(result_keys):
        assert key in fields and f"`{key}`" in PROTOCOL, key
    assert fields - {"passed"} == result_keys


def test_one_list_of_statuses_and_flags():
    assert tuple(Status) == STATUSES and rewards.metrics.STATUSES is sandbox.STATUSES
    assert rewards.metrics.FORGED_EXIT_FLAGS == frozenset(FLAGS)
    for flag in FLAGS:
        assert f"`{flag}`" in PROTOCOL, flag
