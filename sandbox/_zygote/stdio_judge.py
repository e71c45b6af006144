"""The judge's side of a stdin/stdout task: each case runs in a fresh case process of the case server, its
input streamed and its output read here, and every verdict decided here (``verdicts.py`` compares outputs)."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import _socket
import math
import os
import select
import signal
import struct
import time

from .base import OWNER_IN
from .judge import Abort, OwnerGone, Run, Verdict, load_failure, owner_alive

try:  # started as the zygote: the sandbox directory is on sys.path and the package is never imported
    import verdicts
except ImportError:  # imported as sandbox._zygote (tests)
    from .. import verdicts

CASE_CHUNK = 1 << 16  # bytes of a stdin/stdout case's input written per wake-up (one pipe buffer)
CASE_SHOWN = 4096  # bytes of a failing case's stdout and stderr kept in the result
PENDING_OUTPUT = 64 << 20  # bytes of stdin/stdout case outputs the judge holds before comparing them
CAP_FACTOR = 2  # a case's output cap is at least this many times its expected output's size (``case_cap``)


# ---- stdin/stdout tasks ----------------------------------------------------------------------------------
def judge_stdio(run: Run, task: dict, verdict: Verdict) -> tuple[str, str]:
    """Compile in the case server, then run every case in a fresh case process, in an order drawn from
    os.urandom (so that knowing which case runs is worth nothing), each with its own input on stdin and
    within ``timeout``, all within ``total_timeout``. Every verdict is decided here, from the exit status
    and by comparing the output with the expected one, which never leaves this process."""
    run.send(
        {
            "program": task["program"],
            "timeout": task["timeout"],
            "total_timeout": task["total_timeout"],
            "memory_mb": task["memory_mb"],
        }
    )
    reply = run.receive()
    if reply != ["ok"]:
        return load_failure(reply, verdict)
    import random

    cases = task["cases"]
    n = len(cases)
    verdicts = verdict.cases = ["skipped"] * n
    verdict.asserts_total = n
    reasons: dict[int, str] = {}
    shown: dict[int, tuple[bytes, bytes]] = {}  # a failing case's stdout (head) and stderr (tail)
    order = list(range(n))
    random.SystemRandom().shuffle(order)
    out_of_time = False
    # Outputs are compared after the last case has ended, so that no case of the task runs after a comparison
    # and can time it (a comparison's time depends on the expected output); only stop_on_failure, which must
    # know at once, compares each case as it ends (the next case then learns one bit: the last one passed).
    # Bounded: past PENDING_OUTPUT bytes held, the held outputs are compared before the next case.
    pending: list[tuple[int, str, int, bytearray, bytearray]] = []
    held = 0

    def judge_pending() -> None:
        nonlocal held
        for j, ended, status, out, err in pending:
            verdicts[j], reasons[j] = case_verdict(
                ended, status, out, err, cases[j][1].encode(), task, verdict
            )
            if verdicts[j] != "passed":
                shown[j] = bytes(out[:CASE_SHOWN]), bytes(err[-CASE_SHOWN:])
        pending.clear()
        held = 0

    for i in order:
        now = time.monotonic()
        if now >= run.deadline:
            out_of_time = True
            break
        deadline = min(now + task["timeout"], run.deadline)
        cap = case_cap(run.cap, cases[i][1])
        ended, status, out, err = run_case(run, cases[i][0].encode(), deadline, cap=cap)
        pending.append((i, ended, status, out, err))
        held += len(out) + len(err)
        if ended == "timeout" and deadline == run.deadline:
            out_of_time = True
        if task["stop_on_failure"] or held > PENDING_OUTPUT:
            judge_pending()
            if task["stop_on_failure"] and verdicts[i] != "passed":
                break
        if out_of_time:
            break
    judge_pending()  # within the task's budget: the judge's alarm (total_timeout + ALARM_SLACK) covers it
    passed = verdicts.count("passed")
    if passed == n:
        return "passed", f"{n}/{n} cases passed"
    failing = [j for j in range(n) if verdicts[j] not in ("passed", "skipped")]
    if failing:  # the first in the task's order, not the run's: the same verdicts give the same message
        verdict.stdout, verdict.stderr = shown[failing[0]]
    if out_of_time:
        return "timeout", (
            f"the task's time limit ({task['total_timeout']:g} s) ran out after {len(reasons)} of "
            f"{n} cases; {passed} passed"
        )
    i = failing[0]
    status = "failed" if verdicts[i] == "wrong_answer" else verdicts[i]
    return status, f"case {i + 1} of {n}: {verdicts[i]}: {reasons[i]}; {passed}/{n} passed"


def case_cap(cap: int, want: str) -> int:
    """A case's output cap: the task's, or more when the expected output needs it, so that a correct answer
    is never cut: twice its size (room for the spacing a comparison forgives), at most what one comparison
    reads (``verdicts.MAX_COMPARE_BYTES``)."""
    return max(cap, min(CAP_FACTOR * len(want.encode()), verdicts.MAX_COMPARE_BYTES))


def run_case(
    run: Run, data: bytes, deadline: float, cap: int | None = None
) -> tuple[str, int, bytearray, bytearray]:
    """One case: the case server forks a fresh case process; its input is written here, its stdout and
    stderr read here (at most ``cap`` bytes together, by default the task's), and it is SIGKILLed at
    ``deadline``. Returns (how it ended: "exited", "timeout" or "output_limit"; its wait status; stdout;
    stderr)."""
    cap = run.cap if cap is None else cap
    control = run.control
    try:
        control.send(b"c")
    except OSError:
        raise Abort("sandbox_error", "the stdin/stdout case server is gone") from None
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    poller.register(OWNER_IN, select.POLLIN)
    fds = None
    while fds is None:  # the case process: its pid, then its stdin, stdout, stderr and pidfd
        remaining = run.deadline - time.monotonic()
        if remaining <= 0:
            raise Abort("timeout", "the task's time limit ran out")
        for fd, _ in poller.poll(max(1, math.ceil(remaining * 1000))):
            if fd == OWNER_IN:
                if not owner_alive():
                    raise OwnerGone("owner_gone", "the owner went away")
                continue
            msg, anc, _, _ = control.recvmsg(64, _socket.CMSG_SPACE(16))
            if not msg or not anc or len(anc[0][2]) != 16:
                raise Abort("sandbox_error", "the stdin/stdout case server is gone")
            fds = struct.unpack("4i", anc[0][2])
    in_w, out_r, err_r, pidfd = fds
    out, err = bytearray(), bytearray()
    view = memoryview(data)
    reading = {out_r, err_r}
    for fd in reading:
        poller.register(fd, select.POLLIN)
    if view:
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)
        in_w = -1
    ended, status = "exited", None
    try:
        while status is None or reading:
            if ended == "exited" and status is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ended = "timeout"
                    kill_case(pidfd)
                wait_ms = max(1, math.ceil(remaining * 1000))
            else:
                wait_ms = 1000  # killed or exited: the status and EOF follow at once
            for fd, _ in poller.poll(wait_ms):
                if fd == in_w:
                    try:
                        view = view[os.write(in_w, view[:CASE_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # it exited or closed its stdin: the rest of the input is not wanted
                        view = view[:0]
                    if not view:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                elif fd in reading:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        reading.discard(fd)
                        poller.unregister(fd)
                    elif ended == "exited":
                        (out if fd == out_r else err).extend(chunk)
                        if len(out) + len(err) > cap:
                            ended = "output_limit"
                            kill_case(pidfd)
                elif fd == OWNER_IN:
                    if not owner_alive():
                        raise OwnerGone("owner_gone", "the owner went away")
                else:  # the case server reaped it: its wait status
                    data = control.recv(64)
                    if not data:
                        raise Abort("sandbox_error", "the stdin/stdout case server is gone")
                    status = int(data)
                    poller.unregister(fd)
    finally:
        for fd in (in_w, out_r, err_r, pidfd):
            if fd >= 0:
                os.close(fd)
    return ended, status, out, err


def kill_case(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # PID 1 of its namespace: all of it dies
    except OSError:
        pass  # it exited already


def case_verdict(
    ended: str, status: int, out: bytearray, err: bytearray, want: bytes, task: dict, verdict: Verdict
) -> tuple[str, str]:
    """(verdict, reason) of one case. A non-zero exit or a signal is a runtime error whatever was printed."""
    if ended != "exited":
        return ended, (
            "wall-clock time limit exceeded"
            if ended == "timeout"
            else f"output exceeded {case_cap(task['max_output'], want.decode())} bytes"
        )
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return "timeout", "CPU time limit exceeded"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        reason = verdicts.compare_output(bytes(out), want, task["compare"], task["float_tol"])
        return ("passed", "") if reason is None else ("wrong_answer", reason)
    if verdicts.compare_output(bytes(out), want, task["compare"], task["float_tol"]) is None:
        verdict.flags.add("crash_after_output")
    last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    how = describe_exit(status) + (f": {last[0][:200]}" if last[0] else "")
    if b"MemoryError" in err[-CASE_SHOWN:]:
        return "memory_exceeded", how
    return "runtime_error", how


def describe_exit(status: int | None) -> str:
    if status is None:
        return "not reaped"
    if os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"
