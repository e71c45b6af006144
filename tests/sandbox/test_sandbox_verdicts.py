"""Forged verdicts, in both sandbox modes: every way a program can claim a pass that it did not earn fails, with
the status and the flag that say why.

The candidate's end of the reply pipe is fd 4 (sandbox/_zygote/wire.py: each frame a 4-byte big-endian length and
JSON). In exec mode the verdict is `["nonce", <this task's nonce>]`, written after the tests return; in rpc
mode the judge asks and the candidate answers `["ok"]` once loaded, then `["ret", value]` per call. Every
program here runs through the sandbox's public `run`, with its uid drop and every layer on.
"""

from __future__ import annotations

import os
import re

import pytest

from sandbox import Sandbox, Status

UID_BASE = 64000 + 16 * (os.getpid() % 100)  # away from the default 61000 and the other sandbox test modules
TIMEOUT = 2.0
# A late reply lands after the deadline but before the judge's own backstop (an alarm ALARM_SLACK = 1 s later),
# so it is the deadline check that turns it away.
LATE = TIMEOUT + 0.4
ADD = "def add(x, y):\n    return x + y\n"
WRONG_ADD = "def add(x, y):\n    return 0\n"
ADD_TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
# Writes one reply frame exactly as the candidate side of the sandbox does.
SEND = (
    "import json, os, struct, sys, time\n"
    "def send(obj):\n"
    "    data = json.dumps(obj, separators=(',', ':')).encode()\n"
    "    os.write(4, struct.pack('>I', len(data)) + data)\n"
)
# Finds this task's nonce on the stack (the documented weakness of exec mode): used to show that a nonce is
# good for its own task only, and that writing it is not enough.
FIND_NONCE = (
    "def own_nonce():\n"
    "    f = sys._getframe()\n"
    "    while f is not None:\n"
    "        if isinstance(f.f_locals.get('nonce'), str):\n"
    "            return f.f_locals['nonce']\n"
    "        f = f.f_back\n"
    "    raise LookupError('no nonce on the stack')\n"
)


@pytest.fixture(scope="module")
def sb():
    # One worker, so that consecutive tasks run in the same zygote (the replay case needs it).
    with Sandbox(n_workers=1, timeout=TIMEOUT, memory_mb=512, uid_base=UID_BASE) as s:
        yield s


def _not_passed(r, status: Status, flag: str | None) -> None:
    assert not r.passed and r.status is status, r
    if flag is not None:
        assert flag in r.flags, r


# ---- exec mode: the nonce -----------------------------------------------------------------------------------
def test_exec_control_the_honest_program_passes_and_the_wrong_one_fails(sb):
    assert sb.run(SEND + ADD, ADD_TESTS, "add", mode="exec").passed
    r = sb.run(SEND + WRONG_ADD, ADD_TESTS, "add", mode="exec")
    _not_passed(r, Status.FAILED, None)


@pytest.mark.parametrize("nonce", ["0" * 32, "", "f" * 31, 12345])
def test_exec_wrong_nonce_then_exit_zero_is_a_forged_verdict(sb, nonce):
    program = SEND + WRONG_ADD + f"send(['nonce', {nonce!r}])\nos._exit(0)\n"
    _not_passed(sb.run(program, ADD_TESTS, "add", mode="exec"), Status.FAILED, "forged_verdict")


def test_exec_wrong_nonce_from_a_correct_program_is_still_forged(sb):
    """The first verdict frame decides: a wrong nonce is not overwritten by the real one that follows."""
    program = SEND + ADD + "send(['nonce', 'a' * 32])\n"
    _not_passed(sb.run(program, ADD_TESTS, "add", mode="exec"), Status.FAILED, "forged_verdict")


def test_exec_replayed_nonce_is_rejected(sb):
    """A nonce seen in an earlier task (here: found on the stack and printed) does not pass a later one."""
    spy = SEND + FIND_NONCE + ADD + "print(own_nonce())\n"
    first = sb.run(spy, ADD_TESTS, "add", mode="exec")
    assert first.passed, first
    seen = first.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", seen), first.stdout
    second = sb.run(spy, ADD_TESTS, "add", mode="exec")
    assert second.passed and second.stdout.strip() != seen, "every task needs a fresh nonce"
    replay = SEND + WRONG_ADD + f"send(['nonce', {seen!r}])\nos._exit(0)\n"
    _not_passed(sb.run(replay, ADD_TESTS, "add", mode="exec"), Status.FAILED, "forged_verdict")


def test_exec_own_nonce_then_a_failing_exit_is_not_a_pass(sb):
    """Even the task's own nonce (found on the stack) is not a pass when the process then exits non-zero."""
    program = SEND + FIND_NONCE + WRONG_ADD + "send(['nonce', own_nonce()])\nos._exit(3)\n"
    r = sb.run(program, ADD_TESTS, "add", mode="exec")
    _not_passed(r, Status.RUNTIME_ERROR, None)
    assert "exit status 3" in r.message, r


def test_exec_nonce_after_the_deadline_is_a_timeout(sb):
    late_forger = SEND + FIND_NONCE + WRONG_ADD + f"n = own_nonce()\ntime.sleep({LATE})\nsend(['nonce', n])\n"
    _not_passed(sb.run(late_forger, ADD_TESTS, "add", mode="exec"), Status.TIMEOUT, None)
    # Honest but late: the tests return after the deadline, so the real nonce arrives too late.
    slow_tests = ADD_TESTS + f"    import time\n    time.sleep({LATE})\n"
    _not_passed(sb.run(ADD, slow_tests, "add", mode="exec"), Status.TIMEOUT, None)


@pytest.mark.parametrize(
    "frame",
    [
        "send({'nonce': 'x', 'passed': True})",  # a JSON object: never written by the candidate side
        "send(['nonce', {'x': 1}])",
        "send('nonce')",  # not a list
        "send([])",
        "send([1, 2])",  # no kind
        "os.write(4, struct.pack('>I', 5) + b'[\"no!')",  # not JSON
        "os.write(4, struct.pack('>I', 1 << 30))",  # a length far past the reply limit
        "send(['passed'])",  # a kind the judge does not know
        "send(['nonce'])",  # a verdict without a nonce
    ],
)
def test_exec_forged_frames_are_protocol_violations(sb, frame):
    program = SEND + WRONG_ADD + frame + "\nos._exit(0)\n"
    r = sb.run(program, ADD_TESTS, "add", mode="exec")
    assert not r.passed, r
    assert "protocol_violation" in r.flags or "forged_verdict" in r.flags, r
    assert r.status in (Status.RUNTIME_ERROR, Status.FAILED), r


def test_exec_truncated_frame_then_exit_is_an_early_exit(sb):
    program = SEND + WRONG_ADD + "os.write(4, struct.pack('>I', 40) + b'[\"nonce\",')\nos._exit(0)\n"
    _not_passed(sb.run(program, ADD_TESTS, "add", mode="exec"), Status.RUNTIME_ERROR, "early_exit")


# ---- rpc mode: the judge asks, the candidate answers -------------------------------------------------------
def test_rpc_control(sb):
    assert sb.run(SEND + ADD, ADD_TESTS, "add", mode="rpc").passed
    _not_passed(sb.run(SEND + WRONG_ADD, ADD_TESTS, "add", mode="rpc"), Status.FAILED, None)


def test_rpc_forged_ok_then_the_real_ok_where_an_answer_is_due(sb):
    """A wrong function that writes "loaded" and one right answer before the judge asks: the real "loaded"
    frame then arrives where the second answer is due, which the judge sees."""
    program = SEND + WRONG_ADD + "send(['ok'])\nsend(['ret', 3])\n"
    _not_passed(sb.run(program, ADD_TESTS, "add", mode="rpc"), Status.RUNTIME_ERROR, "protocol_violation")


def test_rpc_forged_answers_for_every_call_are_a_protocol_violation(sb):
    """Frames written ahead that carry every right answer: the harness's own "ok" and answers are then the
    next frames, which the judge's end-of-task nonce check finds."""
    program = SEND + WRONG_ADD + "send(['ok'])\nsend(['ret', 3])\nsend(['ret', 0])\n"
    _not_passed(sb.run(program, ADD_TESTS, "add", mode="rpc"), Status.RUNTIME_ERROR, "protocol_violation")


def test_rpc_forged_answers_then_silence_do_not_pass(sb):
    """The same forged frames, after which the candidate exits or hangs before the harness writes its own:
    nothing answers the end-of-task nonce."""
    forged = SEND + WRONG_ADD + "send(['ok'])\nsend(['ret', 3])\nsend(['ret', 0])\n"
    _not_passed(sb.run(forged + "os._exit(0)\n", ADD_TESTS, "add", mode="rpc"), Status.RUNTIME_ERROR, None)
    _not_passed(sb.run(forged + "time.sleep(60)\n", ADD_TESTS, "add", mode="rpc"), Status.TIMEOUT, None)


@pytest.mark.parametrize(
    "frame",
    [
        "send({'ret': 3})",  # a JSON object
        "send(['ret', {'a': 1}])",
        "send('ok')",  # not a list
        "send([])",
        "send(['ret'])",  # a return without a value
        "send(['exc', 1, 2])",  # an exception whose name and message are not strings
        "send(['nonce', 'x'])",  # exec mode's verdict, in rpc mode
        "send(['passed'])",
        "os.write(4, struct.pack('>I', 1 << 30))",  # a length far past the reply limit
        "os.write(4, struct.pack('>I', 4) + b'\\xff\\xfe[[')",  # not UTF-8 / JSON
    ],
)
def test_rpc_forged_frames_are_protocol_violations(sb, frame):
    """The frame stands where the judge expects "loaded" (written at import) or an answer (written by the
    function when called)."""
    at_load = SEND + ADD + frame + "\n"
    _not_passed(sb.run(at_load, ADD_TESTS, "add", mode="rpc"), Status.RUNTIME_ERROR, "protocol_violation")
    in_call = SEND + "def add(x, y):\n    " + frame + "\n    return x + y\n"
    _not_passed(sb.run(in_call, ADD_TESTS, "add", mode="rpc"), Status.RUNTIME_ERROR, "protocol_violation")


def test_rpc_answer_after_the_deadline_is_a_timeout(sb):
    late = SEND + f"def add(x, y):\n    time.sleep({LATE})\n    return x + y\n"
    _not_passed(sb.run(late, ADD_TESTS, "add", mode="rpc"), Status.TIMEOUT, None)
    # "Loaded" written after the deadline.
    late_load = SEND + ADD + f"time.sleep({LATE})\n"
    _not_passed(sb.run(late_load, ADD_TESTS, "add", mode="rpc"), Status.TIMEOUT, None)


def test_next_task_still_passes(sb):
    """After all of the above, the worker's next honest task passes in both modes."""
    assert sb.run(ADD, ADD_TESTS, "add", mode="rpc").passed
    assert sb.run(ADD, ADD_TESTS, "add", mode="exec").passed
