"""docs/contracts.md's sandbox protocol against the code: the task keys the owner sends, the result keys, the
flags and the statuses are the ones written down, so that the document cannot drift from the wire."""

from __future__ import annotations

import dataclasses
import re
import sys
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


# A stand-in zygote (the pool's `python`): says hello, then answers each task with the status its program names.
STAND_IN_ZYGOTE = """\
import json, os, struct
def send(obj):
    data = json.dumps(obj).encode()
    os.write(1, struct.pack(">I", len(data)) + data)
send({"hello": {"layers": {"non_dumpable": True}}})
buf = b""
while chunk := os.read(0, 1 << 16):
    buf += chunk
    while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
        n = struct.unpack(">I", buf[:4])[0]
        for task in json.loads(buf[4 : 4 + n]):
            send({"id": task["id"], "status": task["program"], "flags": []})
        buf = buf[4 + n :]
"""


def test_a_result_off_the_protocol_answers_its_task_and_the_pool_goes_on(tmp_path):
    """A worker's result the host cannot read (here a status it does not know) is that task's sandbox_error and
    a restart of the worker, never a future left unanswered: its caller would wait forever."""
    fake = tmp_path / "zygote"
    fake.write_text(f"#!{sys.executable}\n{STAND_IN_ZYGOTE}")
    fake.chmod(0o755)
    with Sandbox(n_workers=1, python=str(fake), timeout=1.0) as box:
        bad = box.submit("no_such_status", "", mode="exec").result(timeout=30)
        assert bad.status is Status.SANDBOX_ERROR and "no_such_status" in bad.message, bad
        assert "the protocol does not allow" in bad.message, bad
        good = box.submit("passed", "", mode="exec").result(timeout=30)
        assert good.status is Status.PASSED and good.passed, good
