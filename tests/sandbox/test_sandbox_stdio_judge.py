"""Sandbox v3, the stdin/stdout judge itself: a tolerance that applies to real-valued answers only, a comparison
whose cost is linear, bounded and the same whichever tokens are right, and a case that cannot reach the host's
page cache. (The corpus in tests/sandbox_adversarial/ holds the channel, memory and dumpable programs: 48-51.)"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import Sandbox, Status, compare_output, verdicts

UID_BASE = 65000 + 16 * (os.getpid() % 100)  # away from the other sandbox test modules' ranges


@pytest.fixture(scope="module")
def sb():
    with Sandbox(n_workers=1, timeout=2.0, memory_mb=512, uid_base=UID_BASE) as s:
        yield s


# ---- 1. float_tol is for real-valued answers --------------------------------------------------------------
@pytest.mark.parametrize(
    "got,want",
    [
        (b"1000001\n", b"1000000\n"),  # an off-by-one count, within 1e-6 relative
        (b"1000001.0\n", b"1000000\n"),  # the same, printed as a float
        (b"2432902008176640000\n", b"2432902008176640001\n"),  # a float-computed product, last digit off
        (b"1e6\n", b"1000000\n"),  # an integer answer in another spelling
        (b"3 7\n", b"3 6\n"),  # small integers: no tolerance either
    ],
)
def test_float_tol_never_accepts_a_wrong_integer(got, want):
    assert compare_output(got, want, float_tol=1e-6) is not None
    assert compare_output(got, want, "tokens", float_tol=1e-3) is not None


def test_real_valued_tokens_keep_their_tolerance():
    assert compare_output(b"1000001.0\n", b"1000000.0\n", float_tol=1e-6) is None
    assert compare_output(b"3\n", b"3.000\n", float_tol=1e-9) is None  # an integer form of a real answer
    assert compare_output(b"0.5000001 7\n", b"0.5 7\n", float_tol=1e-6) is None  # mixed: 7 exactly
    assert compare_output(b"0.5000001 8\n", b"0.5 7\n", float_tol=1e-6) is not None
    assert compare_output(b"1.0000001e-7\n", b"1e-7\n", float_tol=1e-6) is None  # an exponent is real
    assert [verdicts.is_real_token(t) for t in (b"1.5", b".5", b"2.", b"1e9", b"-3", b"+12", b"x1.5")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert not verdicts.is_real_token(b"1." + b"5" * verdicts.MAX_NUMBER_CHARS)  # too long: exact


def test_a_float_computed_integer_fails_in_the_sandbox(sb):
    """The README's own example set float_tol on an integer problem: a factorial through floats passed."""
    exact = "import math\nprint(math.factorial(int(input())))\n"
    floated = "import math\nprint(int(math.gamma(int(input()) + 1)))\n"  # exact to ~16 digits only
    cases = [("23\n", f"{math.factorial(23)}\n"), ("25\n", f"{math.factorial(25)}\n")]
    assert sb.run_stdio(exact, cases, float_tol=1e-6).passed
    r = sb.run_stdio(floated, cases, float_tol=1e-6)
    assert r.status is Status.FAILED and r.cases == ("wrong_answer", "wrong_answer"), r


# ---- 2 and 6. the comparison's cost -----------------------------------------------------------------------
def test_a_long_run_of_digits_is_judged_at_once(sb):
    """64 KiB of digits against a real-valued answer: the number pattern used to backtrack quadratically on it
    (the judge held for minutes, past the case's limit); now it is a wrong answer like any other."""
    program = "import sys\nsys.stdout.write('7' * 65536 + 'x')\n"
    r = sb.run_stdio(program, [("\n", "0.5\n")], timeout=1.0, float_tol=1e-6)
    assert r.status is Status.FAILED and r.cases == ("wrong_answer",), r
    r = sb.run_stdio(program, [("\n", "0.5\n")] * 3, timeout=1.0, compare="tokens", float_tol=1e-6)
    assert r.status is Status.FAILED and r.cases == ("wrong_answer",) * 3, r


def test_public_compare_output_is_linear_and_bounded():
    """In a child process, so that the backtracking pattern (hours on 1 MiB) fails the test instead of holding
    it: the child must answer; the timeout is a guard against a hang, not a measurement."""
    code = (
        "from sandbox import compare_output\n"
        "digits = b'1' * (1 << 20)\n"
        "assert compare_output(digits + b'x', b'1.5', float_tol=1e-6) is not None\n"
        "assert compare_output(digits + b'.5', digits + b'.5', 'tokens', float_tol=1e-6) is None\n"
        "print('done')\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr[-2000:]
    huge = b"1\n" * ((verdicts.MAX_COMPARE_BYTES >> 1) + 1)
    reason = compare_output(huge, huge)
    assert reason is not None and "limit" in reason


@pytest.mark.parametrize("mode", ["lines", "tokens"])
def test_the_comparison_looks_at_every_token_after_a_difference(monkeypatch, mode):
    """Its work must not depend on how much of the answer a guess got right (the judge's time told a program
    which prefix was right): a wrong first token costs what a wrong last one does."""
    seen = []
    real = verdicts._same_token

    def counting(got, want, float_tol):
        seen.append(want)
        return real(got, want, float_tol)

    monkeypatch.setattr(verdicts, "_same_token", counting)
    want = b"0.5 1.5 2.5 3.5\n4.5 5.5\n"
    for got in (b"9.5 1.5 2.5 3.5\n4.5 5.5\n", b"0.5 1.5 2.5 3.5\n4.5 9.5\n", want):
        seen.clear()
        assert (compare_output(got, want, mode, float_tol=1e-9) is None) == (got == want)
        assert len(seen) == 6, (got, seen)


# ---- 7. the host's page cache -----------------------------------------------------------------------------
def largest_stdlib_file() -> Path:
    top = Path(os.__file__).parent
    return max(
        (p for p in top.rglob("*.py") if "site-packages" not in p.parts), key=lambda p: p.stat().st_size
    )


def is_cached(path: Path, offset: int) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(1)], offset, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_case_cannot_evict_the_hosts_page_cache(sb):
    """fadvise(DONTNEED) or madvise(PAGEOUT) on the stdlib's files (the host's, bound read-only) used to evict
    them from the host's page cache: the host slowed, and the residency bit was a channel to later tasks."""
    path = largest_stdlib_file()
    page = os.sysconf("SC_PAGE_SIZE")
    offset = (path.stat().st_size // page - 1) * page
    path.read_bytes()  # cached, whatever ran before
    assert is_cached(path, offset)
    program = (
        "import mmap, os\n"
        f"fd = os.open({str(path)!r}, os.O_RDONLY)\n"
        "for advise in (lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED),\n"
        f"               lambda: mmap.mmap(fd, {page}, prot=mmap.PROT_READ, offset={offset}).madvise(21)):\n"
        "    try:\n"
        "        advise()\n"
        "    except OSError as e:\n"
        "        print(e.errno)\n"
    )
    r = sb.run_stdio(program, [("\n", "1\n1\n")])
    assert is_cached(path, offset)
    assert r.passed, r  # both refused with EPERM


# ---- 4. tests that are the statement's examples -----------------------------------------------------------
STATEMENT = "Print the sum of two integers.\n\nExample\nInput\n1 2\nOutput\n3\n"


def chat(code: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"```python\n{code}```"}]


LOOKUP = chat("print({'1 2': 3}.get(input().strip(), 0))\n")  # the statement's example, and nothing else


def test_a_lookup_table_of_the_statements_examples_earns_nothing(sb):
    import json

    from rewards import make_stdio_partial_reward

    def io(inputs, outputs):
        return json.dumps({"inputs": inputs, "outputs": outputs})

    rows = {
        "input_output": [io(["1 2\n", "5 5\n"], ["3\n", "10\n"]), io(["1 2\n"], ["3\n"])],
    }
    prompts = [[{"role": "user", "content": STATEMENT}]] * 2
    logged: dict[str, float] = {}
    hidden = make_stdio_partial_reward(sandbox=sb, name="stdio_hidden")
    scores = hidden.score(prompts=prompts, completions=[LOOKUP] * 2, log_metric=logged.__setitem__, **rows)
    assert scores == [0.0, None]  # the second row has no case the prompt does not show
    assert logged["stdio_hidden/tests_in_prompt_frac"] == 0.5
    every = make_stdio_partial_reward(sandbox=sb, tests="all")
    assert every.score(prompts=prompts, completions=[LOOKUP] * 2, **rows) == [0.5, 1.0]
    # CodeContests: the public tests are the statement's examples, and are not scored by default.
    contest = {
        "public_tests": [{"input": ["1 2\n"], "output": ["3\n"]}],
        "private_tests": [{"input": ["5 5\n"], "output": ["10\n"]}],
    }
    assert hidden.score(completions=[LOOKUP], **contest) == [0.0]
    assert make_stdio_partial_reward(sandbox=sb, tests="all").score(completions=[LOOKUP], **contest) == [0.5]
    # Call-based rows: the calls the statement shows are left out the same way.
    calls = {"input_output": [json.dumps({"fn_name": "add", "inputs": [[1, 2], [5, 5]], "outputs": [3, 10]})]}
    table = chat("def add(a, b):\n    return {(1, 2): 3}.get((a, b), 0)\n")
    shown = ["Write add(a, b). Example: add(1, 2) returns 3."]
    assert hidden.score(prompts=shown, completions=[table], **calls) == [0.0]
    assert every.score(prompts=shown, completions=[table], **calls) == [0.5]


def test_which_cases_a_prompt_shows():
    from sandbox.formats import CallTests, StdioTests, hide_shown, shown_cases

    tests = StdioTests((("3\n1 2 3\n", "6\n"), ("2\n7 8\n", "15\n")))
    prompt = "Input\n3\n1   2 3\n\nOutput\n6"
    assert shown_cases(tests, prompt) == (True, False)
    assert hide_shown(tests, prompt) == (StdioTests((("2\n7 8\n", "15\n"),)), False)
    assert hide_shown(tests, "nothing") == (tests, False)
    assert hide_shown(tests, prompt + "\n2\n7 8\n15") == (None, True)
    calls = CallTests("f", ((([1, 2],), True), (([3],), False)))
    assert shown_cases(calls, "f([1, 2]) -> True") == (True, False)
    assert shown_cases(calls, "f([1,2]) == true") == (True, False)


# ---- 5. threads share the process's file table, fs and memory ----------------------------------------------
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="clone's syscall number is x86_64's")
def test_a_thread_without_its_processs_file_table_is_refused(sb):
    """A clone that makes a thread (CLONE_THREAD) but not one sharing the file table or fs struct would give it
    RLIMIT_NOFILE fds of its own, each one more memfd or pipe outside the address space: refused with EPERM
    before it exists (the raw syscall, stack 0: had it been allowed, the case would have crashed)."""
    program = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "VM, FS, FILES, SIGHAND, THREAD = 0x100, 0x200, 0x400, 0x800, 0x10000\n"
        "for flags in (VM | FS | SIGHAND | THREAD, VM | FILES | SIGHAND | THREAD):\n"
        "    libc.syscall.restype = ctypes.c_long\n"
        "    r = libc.syscall(ctypes.c_long(56), ctypes.c_ulong(flags), 0, 0, 0, 0)\n"
        "    print(r, ctypes.get_errno())\n"
    )
    r = sb.run_stdio(program, [("\n", "-1 1\n-1 1\n")])
    assert r.passed, r
    assert sb.layers["shared_file_table"]


# ---- 2. no case runs after a comparison it could time ------------------------------------------------------
class FakeRun:
    """The judge's side of a stdin/stdout task, without processes: the case server says the program compiled."""

    def __init__(self) -> None:
        import time

        self.deadline = time.monotonic() + 60
        self.cap = 1 << 20

    def send(self, *objs: object) -> None:
        pass

    def receive(self) -> list:
        return ["ok"]


@pytest.mark.parametrize("stop_on_failure", [False, True])
def test_outputs_are_compared_after_the_last_case(monkeypatch, stop_on_failure):
    """A comparison's time depends on the expected output (its length, and once on how much of it was right);
    a case that starts after it can read that from the clock. So the judge runs every case first and compares
    after, except with stop_on_failure, which must know at once (and tells the next case only that the last one
    passed)."""
    from sandbox._zygote import stdio_judge as zygote

    events: list[str] = []

    def run_case(run, data, deadline, cap=None):
        events.append("run")
        return "exited", 0, bytearray(data), bytearray()

    def case_verdict(ended, status, out, err, want, task, verdict):
        events.append("compare")
        return ("passed", "") if bytes(out) == want else ("wrong_answer", "differs")

    monkeypatch.setattr(zygote, "run_case", run_case)
    monkeypatch.setattr(zygote, "case_verdict", case_verdict)
    cases = [(f"{i}\n", f"{i}\n") for i in range(5)]
    task = {"program": "", "timeout": 1.0, "total_timeout": 10.0, "memory_mb": 64, "cases": cases}
    task |= {"stop_on_failure": stop_on_failure, "compare": "lines", "float_tol": None, "max_output": 1 << 20}
    verdict = zygote.Verdict()
    status, _ = zygote.judge_stdio(FakeRun(), task, verdict)
    assert status == "passed" and verdict.cases == ["passed"] * 5
    assert events == (["run", "compare"] * 5 if stop_on_failure else ["run"] * 5 + ["compare"] * 5)


def test_outputs_held_past_the_bound_are_compared_before_the_next_case(monkeypatch):
    """Past PENDING_OUTPUT bytes held, stdout and stderr alike, the held outputs are compared before the next case
    runs: the judge's memory stays bounded whatever the cases print."""
    from sandbox._zygote import stdio_judge as zygote

    events: list[str] = []

    def run_case(run, data, deadline, cap=None):
        events.append("run")
        return "exited", 0, bytearray(data), bytearray()  # stdout only: the bound counts it alone

    def case_verdict(ended, status, out, err, want, task, verdict):
        events.append("compare")
        return "passed", ""

    monkeypatch.setattr(zygote, "case_verdict", case_verdict)
    monkeypatch.setattr(zygote, "PENDING_OUTPUT", 3)
    cases = [("1234\n", "1234\n"), ("1\n", "1\n"), ("1\n", "1\n"), ("1\n", "1\n")]
    assert _judge_with(monkeypatch, run_case, cases)[0] == "passed"
    # 5 bytes after the long case (whichever runs first) or 2 + 2 after two short ones: never 3 cases held.
    assert events.count("run") == 4 and events[-1] == "compare"
    assert "run,run,run" not in ",".join(events)


# ---- 6. each way a case ends, and the task's limit against a case's -------------------------------------------
def _case(ended: str, status: int, out: bytes = b"", err: bytes = b"", want: bytes = b"ok\n"):
    from sandbox._zygote import stdio_judge as zygote

    task = {"compare": "lines", "float_tol": None, "max_output": 1000}
    verdict = zygote.Verdict()
    return zygote.case_verdict(ended, status, bytearray(out), bytearray(err), want, task, verdict), verdict


def test_a_case_killed_by_a_signal_is_a_runtime_error_except_sigxcpu():
    """Only SIGXCPU (RLIMIT_CPU) is a time limit; every other signal that kills a case is a runtime error that
    names it, whatever its number is below or above SIGXCPU's."""
    import signal

    for sig in sorted(set(signal.Signals) - {signal.SIGXCPU, signal.SIGSTOP, signal.SIGCONT}):
        (kind, why), _ = _case("exited", int(sig))  # a wait status of a process killed by sig
        assert (kind, why) == ("runtime_error", f"killed by {sig.name}"), sig
    assert _case("exited", int(signal.SIGXCPU))[0] == ("timeout", "CPU time limit exceeded")
    assert _case("exited", 0, b"ok\n")[0] == ("passed", "")
    assert _case("exited", 1 << 8, b"ok\n", b"Traceback\nValueError: no\n")[0] == (
        "runtime_error",
        "exit status 1: ValueError: no",
    )
    (kind, _), verdict = _case("exited", 1 << 8, b"ok\n")
    assert kind == "runtime_error" and "crash_after_output" in verdict.flags


def test_a_case_that_ran_out_of_time_or_output_says_which():
    assert _case("timeout", 9)[0] == ("timeout", "wall-clock time limit exceeded")
    assert _case("output_limit", 9)[0] == ("output_limit", "output exceeded 1000 bytes")


def test_a_case_that_outruns_its_limit_says_so_and_the_next_cases_run(sb):
    """Each case is killed at its own limit, which leaves the task's for the others: all six are judged."""
    r = sb.run_stdio("while True:\n    pass\n", [("", "x\n")] * 6, timeout=0.2, total_timeout=4.0)
    assert r.status is Status.TIMEOUT and r.cases == ("timeout",) * 6, r
    assert r.message == "case 1 of 6: timeout: wall-clock time limit exceeded; 0/6 passed", r


def test_the_tasks_limit_below_a_cases_is_the_tasks_timeout(sb):
    """A case cut short by the task's limit, not its own, ends the task: the message names the task's limit,
    even when that case is the last; quick cases under such a limit pass."""
    r = sb.run_stdio("import time\ntime.sleep(9)\n", [("", "x\n")], timeout=2.0, total_timeout=0.5)
    assert r.status is Status.TIMEOUT and r.cases == ("timeout",), r
    assert r.message == "the task's time limit (0.5 s) ran out after 1 of 1 cases; 0 passed", r
    r = sb.run_stdio("print(input())\n", [("1\n", "1\n")] * 3, timeout=2.0, total_timeout=1.0)
    assert r.passed and r.cases == ("passed",) * 3, r


def test_a_task_of_many_cases_passes_when_every_case_does(sb):
    """Past 256 cases (where CPython's small ints end) the count of passed cases still makes the pass."""
    r = sb.run_stdio("print(input())\n", [(f"{i}\n", f"{i}\n") for i in range(300)], total_timeout=60.0)
    assert r.passed and r.message == "300/300 cases passed", r


def _judge_with(monkeypatch, run_case, cases, run=None, **task_keys):
    """judge_stdio over a stand-in run_case (and the real case_verdict); returns (status, message, verdict)."""
    from sandbox._zygote import stdio_judge as zygote

    monkeypatch.setattr(zygote, "run_case", run_case)
    task = {"program": "", "timeout": 1.0, "total_timeout": 10.0, "memory_mb": 64, "cases": cases}
    task |= {"stop_on_failure": False, "compare": "lines", "float_tol": None, "max_output": 1 << 20}
    verdict = zygote.Verdict()
    status, message = zygote.judge_stdio(run or FakeRun(), task | task_keys, verdict)
    return status, message, verdict


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_outputs_are_held_up_to_the_bound_and_counted_afresh_after_each_comparison(monkeypatch, stream):
    from sandbox._zygote import stdio_judge as zygote

    events: list[str] = []

    def run_case(run, data, deadline, cap=None):
        events.append("run")
        out = bytearray(data)
        return ("exited", 0, out, bytearray()) if stream == "stdout" else ("exited", 0, bytearray(), out)

    monkeypatch.setattr(zygote, "case_verdict", lambda *a: (events.append("compare"), ("passed", ""))[1])
    monkeypatch.setattr(zygote, "PENDING_OUTPUT", 4)
    status, _, _ = _judge_with(
        monkeypatch, run_case, [("1\n", "1\n")] * 6
    )  # 2 bytes each: 4 held is not past
    assert status == "passed"
    assert events == (["run"] * 3 + ["compare"] * 3) * 2


def test_no_case_starts_once_the_tasks_time_has_run_out(monkeypatch):
    import time

    def run_case(run, data, deadline, cap=None):
        raise AssertionError("a case ran after the task's limit")

    late = FakeRun()
    late.deadline = time.monotonic() - 1.0
    status, message, verdict = _judge_with(monkeypatch, run_case, [("1\n", "1\n")] * 3, run=late)
    assert (status, verdict.cases) == ("timeout", ["skipped"] * 3)
    assert message == "the task's time limit (10 s) ran out after 0 of 3 cases; 0 passed"


def test_a_failing_case_shows_the_head_of_its_stdout_and_the_tail_of_its_stderr(monkeypatch):
    from sandbox._zygote import stdio_judge as zygote

    out = bytes(range(256)) * 20
    err = b"a" * 5000 + b"\nMemoryError\n"

    def run_case(run, data, deadline, cap=None):
        return "exited", 1 << 8, bytearray(out), bytearray(err)  # exit status 1

    status, message, verdict = _judge_with(monkeypatch, run_case, [("1\n", "1\n")])
    assert status == "memory_exceeded" and verdict.cases == ["memory_exceeded"], message
    assert verdict.stdout == out[: zygote.CASE_SHOWN] and verdict.stderr == err[-zygote.CASE_SHOWN :]


def test_memory_errors_are_read_in_stderr_s_tail_and_a_reason_keeps_200_characters():
    from sandbox._zygote import stdio_judge as zygote

    tail = zygote.CASE_SHOWN
    inside = b"MemoryError" + b"x" * (tail - len(b"MemoryError"))  # the tail's first bytes
    assert _case("exited", 1 << 8, err=inside)[0][0] == "memory_exceeded"
    assert (
        _case("exited", 1 << 8, err=b"M" + inside[1:] + b"x")[0][0] == "runtime_error"
    )  # one byte before it
    (kind, why), _ = _case("exited", 1 << 8, err=b"E" * 300)
    assert kind == "runtime_error" and why == "exit status 1: " + "E" * 200


def test_an_output_of_exactly_the_limit_is_judged():
    """max_output_bytes is what a case may print (when its expected output is not larger: see
    test_sandbox_v4.py): that many bytes pass, one more is output_limit."""
    with Sandbox(
        n_workers=1, timeout=2.0, memory_mb=512, uid_base=UID_BASE + 8, max_output_bytes=1000
    ) as box:
        r = box.run_stdio("print('x' * 999)\n", [("", "x" * 999 + "\n")])
        assert r.passed, r
        r = box.run_stdio("print('x' * 1000)\n", [("", "x\n")])
        assert r.status is Status.OUTPUT_LIMIT and r.cases == ("output_limit",), r
        r = box.run_stdio("import sys\nsys.stderr.write('z' * 1001)\n", [("", "")])  # stderr counts too
        assert r.status is Status.OUTPUT_LIMIT and r.cases == ("output_limit",), r


@pytest.mark.parametrize("owner_first", [False, True])
def test_a_case_is_run_while_the_owner_sends_more(monkeypatch, owner_first):
    """run_case in this process, its case server a socket we hold: the owner's pipe is readable all along (its
    next tasks), which is no reason to stop; the case's hand-over and its exit status are still read, whichever
    of the two has the lower fd (the zygote's owner pipe is fd 3)."""
    import socket
    import struct
    import subprocess
    import time
    from types import SimpleNamespace

    from sandbox._zygote import stdio_judge as zygote

    if owner_first:
        owner_r, owner_w = os.pipe()
    control, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if not owner_first:
        owner_r, owner_w = os.pipe()
    control.settimeout(5.0)  # a read of the server that nothing answers fails here instead of hanging
    os.write(owner_w, b"the next task")
    monkeypatch.setattr(zygote, "OWNER_IN", owner_r)
    monkeypatch.setattr(zygote, "owner_alive", lambda: True)
    child = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(child.pid)
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    os.write(out_w, b"ok\n")
    fds = struct.pack("4i", in_w, out_r, err_r, pidfd)
    server.sendmsg([b"1"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])  # the case's pid, with its fds
    server.send(b"0")  # then its wait status: exit 0
    for fd in (in_w, out_r, err_r, pidfd, in_r, out_w, err_w):  # run_case holds its own copies now
        os.close(fd)
    run = SimpleNamespace(control=control, deadline=time.monotonic() + 10, cap=1 << 20)
    open_fds = len(os.listdir("/proc/self/fd"))
    try:
        assert zygote.run_case(run, b"", run.deadline) == ("exited", 0, bytearray(b"ok\n"), bytearray())
        assert server.recv(8) == b"c"  # it asked the server for a case
        assert len(os.listdir("/proc/self/fd")) == open_fds  # the case's four fds closed: none leaks per case
    finally:
        child.wait()
        for s in (control, server):
            s.close()
        os.close(owner_r)
        os.close(owner_w)


def test_a_failing_cases_output_is_shown_4_kib_of_each(sb):
    """docs/contracts.md: a stdin/stdout result's stdout and stderr are the first failing case's, 4 KiB at most."""
    program = "import sys\nsys.stdout.write('y' * 10000)\nsys.stderr.write('z' * 10000)\n"
    r = sb.run_stdio(program, [("", "x\n")])
    assert r.status is Status.FAILED and (r.stdout, r.stderr) == ("y" * 4096, "z" * 4096), r


def test_stop_on_failure_stops_at_any_verdict_but_a_pass(monkeypatch):
    """Whichever way a case fails (here MemoryError, which sorts before "passed"), stop_on_failure judges no
    more cases."""

    def run_case(run, data, deadline, cap=None):
        return "exited", 1 << 8, bytearray(), bytearray(b"MemoryError\n")

    status, _, verdict = _judge_with(monkeypatch, run_case, [("1\n", "1\n")] * 4, stop_on_failure=True)
    assert status == "memory_exceeded" and sorted(verdict.cases) == ["memory_exceeded"] + ["skipped"] * 3


def test_killing_a_case_that_already_ended_is_no_error():
    """A case may exit on its own just as its deadline passes: the kill that follows finds it gone, quietly."""
    import subprocess

    from sandbox._zygote import stdio_judge as zygote

    child = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(child.pid)
    try:
        child.wait()
        zygote.kill_case(pidfd)  # the process is gone (reaped): no exception
    finally:
        os.close(pidfd)


def test_a_case_server_gone_is_the_tasks_sandbox_error():
    import socket

    control, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.close()
    try:
        _assert_case_server_gone(control)
    finally:
        control.close()


def _assert_case_server_gone(control) -> None:
    """run_case over the control socket `control` ends the task in sandbox_error: the case server is gone."""
    import time
    from types import SimpleNamespace

    from sandbox._zygote import stdio_judge as zygote

    run = SimpleNamespace(control=control, deadline=time.monotonic() + 10, cap=1 << 20)
    with pytest.raises(zygote.Abort) as gone:
        zygote.run_case(run, b"", run.deadline)
    assert (gone.value.reason, gone.value.message) == (
        "sandbox_error",
        "the stdin/stdout case server is gone",
    )


def test_outputs_reaching_one_byte_past_the_bound_are_compared_at_once(monkeypatch):
    """The count of bytes held starts at 0: two outputs of 2 bytes hold 4, one past a bound of 3, so each pair is
    compared before the next case runs (the order of the cases is random; their sizes are all the same)."""
    from sandbox._zygote import stdio_judge as zygote

    events: list[str] = []

    def run_case(run, data, deadline, cap=None):
        events.append("run")
        return "exited", 0, bytearray(data), bytearray()

    monkeypatch.setattr(zygote, "case_verdict", lambda *a: (events.append("compare"), ("passed", ""))[1])
    monkeypatch.setattr(zygote, "PENDING_OUTPUT", 3)
    assert _judge_with(monkeypatch, run_case, [("1\n", "1\n")] * 4)[0] == "passed"
    assert events == ["run", "run", "compare", "compare"] * 2


def test_a_signal_without_a_name_is_named_by_its_number():
    import signal

    unnamed = next(n for n in range(1, 65) if n not in set(signal.Signals))
    assert _case("exited", unnamed)[0] == ("runtime_error", f"killed by signal {unnamed}")


@pytest.mark.parametrize("handed", [0, 3])
def test_a_hand_over_without_the_cases_four_fds_is_the_case_server_gone(monkeypatch, handed):
    """The case server sends each case's pid with its four fds (stdin, stdout, stderr, pidfd); a message with
    fewer is not a case to run: the task's sandbox_error."""
    import socket
    import struct

    from sandbox._zygote import stdio_judge as zygote

    owner_r, owner_w = os.pipe()  # the owner: alive, with nothing to say
    monkeypatch.setattr(zygote, "OWNER_IN", owner_r)
    monkeypatch.setattr(zygote, "owner_alive", lambda: True)
    control, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pipes = [(owner_r, owner_w)] + [os.pipe() for _ in range(handed)]
    fds = [r for r, _ in pipes[1:]]
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{handed}i", *fds))] if handed else []
    server.sendmsg([b"1"], ancillary)
    try:
        _assert_case_server_gone(control)
    finally:
        for s in (control, server):
            s.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)


def test_a_case_that_stops_reading_its_input_is_killed_at_its_limit(sb):
    """Input past a pipe's buffer to a case that reads a little of it and then stops: the pipe has room again, but
    less than the judge's next write. That write must not block, or the judge could not kill the case at its limit
    (it would wait for the task's alarm instead)."""
    program = "import os, time\nos.read(0, 8192)\ntime.sleep(30)\n"
    big = "x" * (256 << 10) + "\n"
    r = sb.run_stdio(program, [(big, "y\n")] * 2, timeout=0.5, total_timeout=6.0)
    assert r.status is Status.TIMEOUT and r.cases == ("timeout", "timeout"), r
    assert r.message == "case 1 of 2: timeout: wall-clock time limit exceeded; 0/2 passed", r
