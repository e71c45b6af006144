"""Isolated, fast execution of untrusted completions, with a verdict the executed code cannot forge.

    from sandbox import Sandbox
    with Sandbox(timeout=3.0) as sb:
        result = sb.run(prompt + completion, tests, entry_point, trusted_code=prompt)   # Result(status=...)
        result = sb.run_stdio(program, [(input_text, expected_output), ...])          # stdin/stdout cases

The pool is `executor`, the worker processes (judge, spawner, candidates) `_zygote`, the verdicts and the output
comparison `verdicts`. The design, the threat model (what is and is not defended, without root) and what a
candidate sees of the filesystem: docs/sandbox.md.
"""

from .executor import Result, Sandbox, Status, arun_batch, get_sandbox, run, run_batch
from .verdicts import CASE_VERDICTS, FLAGS, FORGED_FLAGS, SANDBOX_VERSION, STATUSES, compare_output

__all__ = [
    "CASE_VERDICTS",
    "FLAGS",
    "FORGED_FLAGS",
    "SANDBOX_VERSION",
    "STATUSES",
    "Result",
    "Sandbox",
    "Status",
    "arun_batch",
    "compare_output",
    "get_sandbox",
    "run",
    "run_batch",
]
