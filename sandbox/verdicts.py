"""The words of a verdict, in one home: task statuses, per-case verdicts, flags, and how a stdin/stdout case's
output is compared with the expected one.

The owner (``executor.py``), the judge (``_zygote.py``, which imports this file by path, so it stays
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
* ``float_tol``: tokens that both read as decimal numbers are equal when ``|got - want| <= float_tol *
  max(1, |want|)`` (an absolute or relative error, as testlib's ``rcmp``); other tokens compare exactly. In
  ``"lines"`` mode the lines must still match one to one, with the same number of tokens each.
"""

import math
import re

__all__ = ["CASE_VERDICTS", "COMPARE_MODES", "FLAGS", "FORGED_FLAGS", "STATUSES", "compare_output"]

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

# A decimal number as judges read one; float() alone would also take "nan", "inf" and "1_000".
_NUMBER = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SHOWN = 40  # characters of a differing value quoted in a message


def _lines(data: bytes) -> list[bytes]:
    lines = [line.rstrip() for line in data.split(b"\n")]  # bytes.rstrip: ASCII whitespace, \r included
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _show(value: bytes) -> str:
    text = value.decode("utf-8", "replace")
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _same_token(got: bytes, want: bytes, float_tol: float | None) -> bool:
    if got == want:
        return True
    if float_tol is None or not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(want)):
        return False
    a, b = float(got), float(want)
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= float_tol * max(1.0, abs(b))


def _same_tokens(got: list[bytes], want: list[bytes], float_tol: float | None, where: str) -> str | None:
    if len(got) != len(want):
        return f"{where}expected {len(want)} tokens, got {len(got)}"
    for i, (g, w) in enumerate(zip(got, want), 1):
        if not _same_token(g, w, float_tol):
            return f"{where}token {i}: expected {_show(w)}, got {_show(g)}"
    return None


def compare_output(
    got: bytes, want: bytes, mode: str = "lines", float_tol: float | None = None
) -> str | None:
    """None when ``got`` (a program's stdout) matches ``want`` (the expected output) under ``mode`` and
    ``float_tol`` (see the module docstring); otherwise a short reason (the first difference)."""
    if mode == "tokens":
        return _same_tokens(got.split(), want.split(), float_tol, "")
    got_lines, want_lines = _lines(got), _lines(want)
    for n, (g, w) in enumerate(zip(got_lines, want_lines), 1):
        if g == w:
            continue
        if float_tol is None:
            return f"line {n}: expected {_show(w)}, got {_show(g)}"
        reason = _same_tokens(g.split(), w.split(), float_tol, f"line {n}: ")
        if reason is not None:
            return reason
    if len(got_lines) != len(want_lines):
        return f"expected {len(want_lines)} lines, got {len(got_lines)}"
    return None
