"""Stdin/stdout tasks: output comparison, each case's verdict, one fresh process per case in a random order, the
time limits, streaming inputs, and the dataset formats (APPS/TACO, CodeContests, verification_info)."""

from __future__ import annotations

import json
import os

import pytest

from sandbox import Sandbox, Status, compare_output
from sandbox._zygote import candidate as zygote
from sandbox.formats import CallTests, StdioTests, detect_format, read_tests, task_for

UID_BASE = 62500 + 16 * (os.getpid() % 100)  # away from the default 61000 and from test_sandbox.py's range
SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_CASES = [(f"{i} {2 * i}\n", f"{3 * i}\n") for i in range(6)]


@pytest.fixture(scope="module")
def sb():
    with Sandbox(n_workers=2, timeout=2.0, memory_mb=512, uid_base=UID_BASE) as s:
        yield s


# ---- comparison -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "got", [b"1 2\n3\n", b"1 2\r\n3\r\n", b"1 2   \n3", b"1 2\n3\n\n\n", b"1 2\t\n3 \n \n"]
)
def test_lines_forgive_only_trailing_whitespace_and_blank_lines(got):
    assert compare_output(got, b"1 2\n3\n") is None


@pytest.mark.parametrize(
    "got,why",
    [
        (b"1 2\n", "expected 2 lines, got 1"),  # a prefix of the answer (open-r1's zip() would pass it)
        (b"1 2\n3\n4\n", "expected 2 lines, got 3"),
        (b"1  2\n3\n", "line 1"),  # spacing inside a line
        (b" 1 2\n3\n", "line 1"),
        (b"1 2 3\n", "line 1"),  # another line structure
        (b"\n1 2\n3\n", "line 1"),
    ],
)
def test_lines_refuse_everything_else(got, why):
    reason = compare_output(got, b"1 2\n3\n")
    assert reason is not None and why in reason


def test_tokens_ignore_layout_and_floats_use_the_tolerance():
    assert compare_output(b"1  2\n\n3", b"1 2 3\n", "tokens") is None
    assert "token 3" in compare_output(b"1 2 4", b"1 2 3", "tokens")
    assert compare_output(b"0.3333333\n", b"0.333333333\n") is not None  # exact by default
    assert compare_output(b"0.3333333\n", b"0.333333333\n", float_tol=1e-6) is None
    assert compare_output(b"1000001.0\n", b"1000000.0\n", float_tol=1e-6) is None  # relative error
    assert compare_output(b"0.34\n", b"0.333333333\n", float_tol=1e-6) is not None
    assert compare_output(b"nan\n", b"nan\n", float_tol=1e-6) is None  # equal tokens are equal
    assert compare_output(b"inf 1\n", b"nan 1\n", float_tol=1e-6) is not None  # words are not numbers
    assert compare_output(b"1 2\n", b"1 2 3\n", float_tol=1e-6) is not None  # the same tokens per line


# ---- verdicts ---------------------------------------------------------------------------------------------
def test_a_correct_program_passes_every_case_each_in_its_own_process(sb):
    r = sb.run_stdio(SUM, SUM_CASES)
    assert r.passed and r.cases == ("passed",) * 6 and (r.asserts_passed, r.asserts_total) == (6, 6)
    assert r.fraction == 1.0
    # Each case is PID 1 of its own namespace, in a fresh /tmp: a file left by one case is not there for the next.
    probe = (
        "import os\nfresh = not os.path.exists('/tmp/seen')\nopen('/tmp/seen', 'w').close()\n"
        "print(os.getpid(), os.getcwd(), fresh, input())\n"
    )
    r = sb.run_stdio(probe, [(f"{i}\n", f"1 /tmp True {i}\n") for i in range(5)])
    assert r.passed, r


def test_each_case_gets_its_verdict(sb):
    program = (
        "import os, signal, sys\n"
        "x = input().strip()\n"
        "if x == 'wrong': print('nope')\n"
        "elif x == 'raise': raise ValueError('bad input')\n"
        "elif x == 'exit3': print('right'); sys.exit(3)\n"  # the right answer, then a non-zero exit
        "elif x == 'signal': print('right', flush=True); os.kill(os.getpid(), signal.SIGSEGV)\n"
        "elif x == 'loop':\n    while True: pass\n"
        "elif x == 'memory': b = bytearray(1 << 40)\n"
        "elif x == 'flood':\n    while True: print('y' * 1000)\n"
        "else: print('right')\n"
    )
    names = ["ok", "wrong", "raise", "exit3", "signal", "loop", "memory", "flood"]
    r = sb.run_stdio(program, [(name + "\n", "right\n") for name in names], timeout=1.0)
    assert dict(zip(names, r.cases)) == {
        "ok": "passed",
        "wrong": "wrong_answer",
        "raise": "runtime_error",
        "exit3": "runtime_error",
        "signal": "runtime_error",
        "loop": "timeout",
        "memory": "memory_exceeded",
        "flood": "output_limit",
    }, r
    assert r.status is Status.FAILED and r.asserts_passed == 1 and r.fraction == 1 / 8
    assert r.message.startswith("case 2 of 8: wrong_answer: line 1: expected 'right', got 'nope'"), r.message
    assert r.stdout == "nope\n"  # the output of the case the message names
    assert "crash_after_output" in r.flags  # exit3 and signal printed the answer, then crashed


def test_a_non_zero_exit_is_a_runtime_error_whatever_it_printed(sb):
    r = sb.run_stdio("print(input())\nraise SystemExit('done')\n", [("x\n", "x\n")])
    assert r.status is Status.RUNTIME_ERROR and r.cases == ("runtime_error",)
    assert "exit status 1: done" in r.message and r.flags == ("crash_after_output",)
    assert sb.run_stdio("import sys\nprint(input())\nsys.exit(0)\n", [("x\n", "x\n")]).passed
    r = sb.run_stdio("print(input())\n", [("x\n", "y\n")])
    assert r.status is Status.FAILED and r.flags == ()


def test_a_program_gets_what_python_program_py_gives_it(sb):
    """exit() and quit() (site's builtins, which the workers' -S start leaves out), a one-entry sys.argv and
    an absolute __file__ named after it."""
    assert sb.run_stdio("print(input())\nexit()\nprint('never')\n", [("x\n", "x\n")]).passed
    r = sb.run_stdio("print(input())\nquit(3)\n", [("x\n", "x\n")])
    assert r.status is Status.RUNTIME_ERROR and "exit status 3" in r.message, r
    assert sb.run_stdio("import sys\nprint(len(sys.argv))\n", [("", "1\n")]).passed
    program = "import os, sys\nprint(os.path.isabs(__file__), os.path.basename(__file__) == sys.argv[0])\n"
    assert sb.run_stdio(program, [("", "True True\n")]).passed


THREAD_IDIOM = """import sys, threading
sys.setrecursionlimit(1 << 20)
threading.stack_size(1 << 27)
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
def main():
    print(depth(int(input())))
thread = threading.Thread(target=main)
thread.start()
thread.join()
"""
THREAD_BOMB = """import threading, time
n = 0
try:
    while n < 100:
        threading.Thread(target=time.sleep, args=(1,), daemon=True).start()
        n += 1
except RuntimeError:
    pass
print(n)
"""
SPAWNS = (
    "import os\nos.fork()\n",
    "import subprocess\nsubprocess.run(['true'])\n",
    "import multiprocessing\nmultiprocessing.Process(target=print).start()\n",
)


@pytest.mark.skipif(os.geteuid() != 0, reason="threads need the cases' own uid, which needs root")
def test_a_case_may_start_threads_but_no_process(sb):
    """The competitive-programming idiom of a big-stack thread for deep recursion works, joined or not; a new
    process does not (fork, subprocess, multiprocessing), and threads stop at CASE_TASKS tasks of the uid."""
    assert sb.layers["seccomp"] and sb.layers["separate_uid"]
    r = sb.run_stdio(THREAD_IDIOM, [("100000\n", "100000\n")])
    assert r.passed, r
    # Not joined: the program ends when its last non-daemon thread does, as under the interpreter.
    r = sb.run_stdio(THREAD_IDIOM.replace("thread.join()\n", ""), [("100000\n", "100000\n")])
    assert r.passed, r
    for spawn in SPAWNS:
        r = sb.run_stdio(spawn + "print('spawned')\n", [("", "spawned\n")])
        assert r.status is Status.RUNTIME_ERROR and "PermissionError" in r.message, (spawn, r)
    # Tasks of the uid not yet reaped (an earlier task's) count too: at most CASE_TASKS - 1 threads.
    r = sb.run_stdio(THREAD_BOMB, [("", "")])
    assert r.status is Status.FAILED and 0 < int(r.stdout) < zygote.CASE_TASKS, r


def test_syntax_errors_and_refused_input(sb):
    r = sb.run_stdio("def f(:\n", SUM_CASES)
    assert r.status is Status.SYNTAX_ERROR and r.cases == ("skipped",) * 6
    assert sb.run_stdio(SUM, [("1 2", 3)]).status is Status.INVALID_INPUT
    assert sb.run_stdio(SUM, [("1 2", "\udc80")]).status is Status.INVALID_INPUT
    with pytest.raises(ValueError, match="compare"):
        sb.run_stdio(SUM, SUM_CASES, compare="exact")
    with pytest.raises(ValueError, match="at least one case"):
        sb.run_stdio(SUM, [])


def test_stop_on_failure_and_the_overall_limit(sb):
    all_wrong = [("1 1\n", "3\n")] * 6
    r = sb.run_stdio(SUM, all_wrong, stop_on_failure=True)
    assert r.status is Status.FAILED and sorted(r.cases) == ["skipped"] * 5 + ["wrong_answer"]
    assert sb.run_stdio(SUM, all_wrong).cases == ("wrong_answer",) * 6
    slow = "import time\ntime.sleep(float(input()))\nprint('ok')\n"
    r = sb.run_stdio(slow, [("0.4\n", "ok\n")] * 6, timeout=1.0, total_timeout=1.0)
    assert r.status is Status.TIMEOUT and "time limit (1 s)" in r.message
    assert r.cases.count("passed") in (1, 2) and "skipped" in r.cases


def test_the_order_is_random(sb):
    """With stop_on_failure, which of two failing cases is judged first shows the order: both orders occur."""
    program = "x = input()\nif x == 'raise': raise ValueError\nprint(x)\n"
    cases = [("raise\n", "raise\n"), ("a\n", "b\n")]
    firsts = {sb.run_stdio(program, cases, stop_on_failure=True).cases for _ in range(16)}
    assert firsts == {("runtime_error", "skipped"), ("skipped", "wrong_answer")}


def test_inputs_are_streamed_and_need_not_be_read(sb):
    big = "".join(f"{i}\n" for i in range(300_000))  # ~2 MB, many pipe buffers
    echo = "import sys\nsys.stdout.write(str(sum(map(int, sys.stdin.read().split()))))\n"
    assert sb.run_stdio(echo, [(big, str(sum(range(300_000))))]).passed
    assert sb.run_stdio("print(42)\n", [(big, "42\n")]).passed  # exits without reading: no hang, no error
    assert sb.run_stdio("print(input() or 'empty')\n", [("\n", "empty\n")]).passed


def test_a_batch_mixes_function_and_stdio_tasks(sb):
    tasks = [
        {"program": SUM, "cases": SUM_CASES},
        {"program": "def f(x):\n    return x + 1\n", "tests": "assert f(1) == 2\n", "entry_point": "f"},
        {"program": SUM.replace("+", "-"), "cases": SUM_CASES[1:3], "compare": "tokens"},
    ]
    assert [r.status for r in sb.run_batch(tasks)] == [Status.PASSED, Status.PASSED, Status.FAILED]


# ---- dataset formats --------------------------------------------------------------------------------------
APPS = {"input_output": json.dumps({"inputs": ["1 2\n", ["3 4"]], "outputs": ["3\n", ["7"]]})}
APPS_CALL = {
    "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [[1], [2]]], "outputs": [[3], [[1, 2]]]})
}
CODE_CONTESTS = {
    "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
    "private_tests": {"input": ["3 4\n"], "output": ["7\n"]},
    "generated_tests": None,
}
VERIFICATION = {
    "verification_info": json.dumps(
        {
            "language": "python",
            "test_cases": [
                {"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"},
                {"input": "3 4\n", "output": "7\n", "type": "stdin_stdout"},
            ],
        }
    )
}


def test_each_format_reads_into_cases():
    expected = StdioTests((("1 2\n", "3\n"), ("3 4\n", "7\n")))
    assert read_tests(APPS) == read_tests(CODE_CONTESTS) == read_tests(VERIFICATION) == expected
    assert read_tests(CODE_CONTESTS, splits=["private_tests"]) == StdioTests((("3 4\n", "7\n"),))
    assert read_tests(APPS_CALL) == CallTests("add", (((1, 2), [3]), (([1], [2]), [[1, 2]])))
    assert (
        read_tests({"input_output": json.dumps({"inputs": [[5]], "outputs": [5]}), "fn_name": "f"}).fn_name
        == "f"
    )
    assert read_tests({"input_output": ""}) is None and read_tests({"public_tests": None}) is None
    assert detect_format(["question", "input_output"]) == "apps" and read_tests(APPS, "taco") is not None


@pytest.mark.parametrize(
    "row,message",
    [
        ({"question": "q", "solutions": "[]"}, "(it has: question, solutions)"),
        ({"input_output": "{not json"}, "input_output is not valid JSON"),
        ({"input_output": json.dumps({"inputs": ["1"], "outputs": []})}, "1 inputs but 0 outputs"),
        ({"verification_info": {"language": "cpp", "test_cases": []}}, "only Python rows"),
        (
            {"input_output": json.dumps({"fn_name": "no such", "inputs": [], "outputs": []})},
            "not a Python identifier",
        ),
    ],
)
def test_a_row_in_no_format_or_malformed_gets_one_line(row, message):
    with pytest.raises(ValueError, match=None) as e:
        read_tests(row)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_call_based_rows_go_through_the_function_path(sb):
    tests = read_tests(APPS_CALL)
    good = task_for("def add(a, b):\n    return a + b\n", tests, timeout=1.0)
    assert good["entry_point"] == "add" and good["timeout"] == 2.0  # timeout per call
    method = task_for("class Solution:\n    def add(self, a, b):\n        return a + b\n", tests)
    half = task_for("def add(a, b):\n    return a + b if isinstance(a, int) else None\n", tests)
    results = sb.run_batch([good, method, half])
    assert [r.status for r in results] == [Status.PASSED, Status.PASSED, Status.FAILED]
    assert (results[2].asserts_passed, results[2].asserts_total) == (1, 2)
