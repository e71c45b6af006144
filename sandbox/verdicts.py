"""The words of a verdict, in one home: task statuses, per-case verdicts, flags, and how a stdin/stdout case's
output is compared with the expected one.

The owner (``executor.py``), the judge (``_zygote/stdio_judge.py``, which imports this file by name, so it stays
stdlib-only and imports nothing of the package) and the rewards (``rewards.metrics``) all read these names
from here. ``docs/contracts.md`` describes the frame format and the task and result keys.

Output comparison (``compare_output``), as the common judges do it:

* ``"lines"`` (the default): exact, after trimming trailing whitespace (spaces, tabs, ``\\r``) from every line
  and dropping trailing blank lines. Why: it forgives exactly what a reader cannot see and programs print by
  accident (a trailing space, CRLF line ends, a missing or extra final newline) and nothing else: a different
  line structure, different spacing inside a line and a prefix of the expected output fail (open-r1's
  ``zip()`` compare passes a prefix). The expected outputs of APPS, TACO and CodeContests are a reference
  program's output, so a correct program prints the same lines.
* ``"tokens"``: the whitespace-separated tokens must be equal (testlib's ``wcmp``): line breaks and runs of
  spaces do not matter.
* ``float_tol``: applies to real-valued expected tokens only, as testlib's ``rcmp`` checkers and the ICPC and
  Codeforces rules do. An expected token is real-valued when it is a decimal number with a fractional part or
  an exponent (``-?d+.d*``, ``.d+``, ``d+e-7``...) of at most 64 characters; the program's token must then be a
  decimal number too (an integer form is fine: ``3`` for ``3.0``), and they are equal when ``|got - want| <=
  float_tol * max(1, |want|)`` (absolute or relative error). Every other expected token, integers of any size
  above all, is compared exactly, byte for byte: a tolerance never turns an off-by-one count, sum or factorial
  into a pass. In ``"lines"`` mode the lines must still match one to one, with the same number of tokens each.

Cost, since the judge runs this on a candidate's output: linear in the two sizes (the number pattern cannot
backtrack, a token is parsed as a number only within 64 characters, inputs over ``MAX_COMPARE_BYTES`` are
refused), and a comparison looks at every token or line even after a difference, so that its time depends on
the sizes and hardly on how much of the answer is right (what is left: byte comparisons stopping inside a
token, nanoseconds).
"""

import math
import re

__all__ = [
    "CASE_VERDICTS",
    "COMPARE_MODES",
    "FLAGS",
    "FORGED_FLAGS",
    "SANDBOX_VERSION",
    "STATUSES",
    "compare_output",
]

# Bumped whenever a change to the sandbox can change a program's verdict; stamped in every evaluation record.
# 2: sandbox v2; 3: sandbox v3 (e0dedbe: float_tol for real-valued tokens only, the new seccomp rules); 4: sandbox
# v4 (issue 51: plain asserts in rpc mode, stdin a regular file, open files flushed at exit, the program is
# __main__, the output cap fits the expected output, numpy scalars cross as numbers, new seccomp rules).
SANDBOX_VERSION = 4

# Status of a whole task (``sandbox.Status`` is the enum of these).
STATUSES = (
    "passed",  # the tests ran to their end and all held (stdin/stdout: every case passed)
    "failed",  # an assert failed (stdin/stdout: a wrong answer)
    "timeout",  # wall-clock or CPU limit (of a case, or of the whole task)
    "memory_exceeded",  # MemoryError under the address-space limit
    "syntax_error",  # the program does not compile
    "runtime_error",  # an exception, a non-zero exit, a signal, a trick that was caught (see the flags)
    "output_limit",  # stdout + stderr over the cap
    "sandbox_error",  # the sandbox could not judge (a dead worker, tests that cannot run): not the program's fault
    "invalid_input",  # refused before it ran (not UTF-8, oversize, an unknown task id)
)

# Verdict of one stdin/stdout case. ``skipped``: not run, after a failure with ``stop_on_failure`` or once the
# task's overall time limit was spent.
CASE_VERDICTS = (
    "passed",
    "wrong_answer",
    "timeout",
    "runtime_error",
    "memory_exceeded",
    "output_limit",
    "skipped",
)

# Flags a result may carry: each says that the candidate tried something that would fake a pass in a naive
# harness, and was caught (the status is then never ``passed``).
FLAGS = {
    "early_exit": "the candidate process ended (sys.exit, os._exit, a signal) before the tests finished",
    "unencodable_value": "a function returned something that is not plain data (an object with a forged __eq__)",
    "protocol_violation": "the candidate wrote to the judge what no honest candidate writes",
    "forged_verdict": "exec mode: the candidate wrote a nonce that is not the task's",
    "crash_after_output": "stdin/stdout: a case printed the expected output, then exited non-zero or was killed",
}
FORGED_FLAGS = frozenset(FLAGS)

COMPARE_MODES = ("lines", "tokens")

# A decimal number as judges read one; float() alone would also take "nan", "inf" and "1_000". The integer
# part and the fraction are unambiguous (no pattern that can split a run of digits two ways), so a match is
# linear in the token's length: ``\d+\.?\d*`` took ~16 s on 32 KB of digits.
_NUMBER = re.compile(rb"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(rb"[-+]?\d+")
MAX_NUMBER_CHARS = 64  # longer tokens are never parsed as numbers: far past a double's 17 digits
MAX_COMPARE_BYTES = 64 << 20  # each side; the judge's expected outputs are <= 48 MiB, its outputs capped
_SHOWN = 40  # characters of a differing value quoted in a message


def _lines(data: bytes) -> list[bytes]:
    lines = [line.rstrip() for line in data.split(b"\n")]  # bytes.rstrip: ASCII whitespace, \r included
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _show(value: bytes) -> str:
    text = value.decode("utf-8", "replace")
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def is_real_token(token: bytes) -> bool:
    """Whether an expected token is real-valued, so that ``float_tol`` applies to it: a decimal number of at most
    ``MAX_NUMBER_CHARS`` characters that is not an integer."""
    return len(token) <= MAX_NUMBER_CHARS and bool(_NUMBER.fullmatch(token)) and not _INTEGER.fullmatch(token)


def _same_token(got: bytes, want: bytes, float_tol: float | None) -> bool:
    if float_tol is None or not is_real_token(want):
        return got == want
    # Parsed whether or not the bytes are equal: the time does not depend on which tokens are right.
    if len(got) > MAX_NUMBER_CHARS or not _NUMBER.fullmatch(got):
        return False
    a, b = float(got), float(want)
    return got == want or (
        math.isfinite(a) and math.isfinite(b) and abs(a - b) <= float_tol * max(1.0, abs(b))
    )


def _first_false(flags: list[bool]) -> int:
    return flags.index(False) if not all(flags) else -1


def _same_tokens(got: list[bytes], want: list[bytes], float_tol: float | None, where: str) -> str | None:
    if len(got) != len(want):
        return f"{where}expected {len(want)} tokens, got {len(got)}"
    if float_tol is None:
        same = list(map(bytes.__eq__, got, want))  # every token, even after a difference
    else:
        same = [_same_token(g, w, float_tol) for g, w in zip(got, want)]
    i = _first_false(same)
    if i < 0:
        return None
    return f"{where}token {i + 1}: expected {_show(want[i])}, got {_show(got[i])}"


def compare_output(
    got: bytes, want: bytes, mode: str = "lines", float_tol: float | None = None
) -> str | None:
    """None when ``got`` (a program's stdout) matches ``want`` (the expected output) under ``mode`` and
    ``float_tol`` (see the module docstring); otherwise a short reason (the first difference). Linear in
    ``len(got) + len(want)``; either over ``MAX_COMPARE_BYTES`` is refused (a reason) without being read."""
    for name, data in (("output", got), ("expected output", want)):
        if len(data) > MAX_COMPARE_BYTES:
            return (
                f"the {name} ({len(data)} bytes) is over the comparison's limit ({MAX_COMPARE_BYTES} bytes)"
            )
    if mode == "tokens":
        return _same_tokens(got.split(), want.split(), float_tol, "")
    got_lines, want_lines = _lines(got), _lines(want)
    first = None
    for n, (g, w) in enumerate(zip(got_lines, want_lines), 1):  # every line, even after a difference
        if float_tol is not None:  # every line's numbers parsed, equal lines too
            reason = _same_tokens(g.split(), w.split(), float_tol, f"line {n}: ")
        elif g != w:
            reason = f"line {n}: expected {_show(w)}, got {_show(g)}"
        else:
            continue
        if first is None:
            first = reason
    if first is not None:
        return first
    if len(got_lines) != len(want_lines):
        return f"expected {len(want_lines)} lines, got {len(got_lines)}"
    return None
