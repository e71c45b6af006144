"""Test cases of the common code-RL dataset formats, read into the two shapes the sandbox runs.

A row of one of these datasets holds its tests in format-specific columns; ``read_tests(row)`` returns them as
``StdioTests`` (input, expected output pairs for a whole program) or ``CallTests`` (a function called with
arguments, APPS/TACO's call-based problems), or None when the row has no case at all. ``task_for(program,
tests)`` turns either into a ``Sandbox.run_batch`` task: a stdin/stdout task, or an rpc task (the function path
of HumanEval problems) whose generated asserts call the function, one assert per case, so that partial credit
counts cases; the call-based task's time limit is the overall one (``total_timeout``, else ``timeout`` per
call).

The adapter is chosen by the columns present, or named (``format=``):

* ``apps`` (APPS, TACO): ``input_output`` = ``{"inputs": [...], "outputs": [...]}`` (a JSON string or a
  dict), with ``fn_name`` inside it or in a column of its own for call-based rows: each input is then the
  list of arguments, and a returned value equals the expected one as APPS compares them (tuples read as
  lists, and an expected ``[x]`` also accepts ``x``). An input or output that is a list of lines is joined.
* ``code_contests`` (DeepMind CodeContests): ``public_tests``, ``private_tests``, ``generated_tests``, each
  ``{"input": [...], "output": [...]}``; all three by default (``splits=`` chooses).
* ``verification_info`` (open-r1, PrimeIntellect SYNTHETIC-1): ``{"language": "python", "test_cases":
  [{"input": ..., "output": ..., "type": "stdin_stdout"}, ...]}`` (a JSON string or a dict); cases of type
  ``function_call`` with an ``fn_name`` are call-based.

In every format the model's program is the whole program: nothing of the prompt is prepended. Stdlib only.

Tests the prompt shows. A statement's examples are often tests too (CodeContests' ``public_tests``; many
APPS/TACO rows hold only the statement's examples), and a program that prints a lookup table of them passes
those. ``shown_cases(tests, prompt)`` tells which cases appear in the prompt the model saw: a stdin/stdout case
when its input and its output both appear in it (runs of whitespace read as one space), a call when each of
its arguments and then its expected value appear in it, written as JSON or as a Python literal; each as
whole words, the output after the input, whitespace normalized. ``hide_shown`` keeps the others. It errs towards keeping a case: an example the statement rewords is
kept; a very short case ("1" -> "1") that happens to appear is dropped. The rewards score on the hidden cases by
default (``HIDDEN_SPLITS`` of CodeContests, and no shown case of any format).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FORMATS",
    "HIDDEN_SPLITS",
    "TEST_SELECTIONS",
    "CallTests",
    "StdioTests",
    "detect_format",
    "format_name",
    "hide_shown",
    "problem_id",
    "prompt_text",
    "read_tests",
    "shown_cases",
    "task_for",
]

# format -> the columns that hold its tests (any one of them selects it)
FORMATS: dict[str, tuple[str, ...]] = {
    "apps": ("input_output",),
    "code_contests": ("public_tests", "private_tests", "generated_tests"),
    "verification_info": ("verification_info",),
}
ALIASES = {
    "taco": "apps",
    "codecontests": "code_contests",
    "open_r1": "verification_info",
    "open-r1": "verification_info",
    "primeintellect": "verification_info",
}
CODE_CONTESTS_SPLITS = FORMATS["code_contests"]
HIDDEN_SPLITS = ("private_tests", "generated_tests")  # CodeContests tests the statement does not show
TEST_SELECTIONS = ("hidden", "all")  # the rewards' ``tests``: cases the prompt does not show, or every case
ID_COLUMNS = ("task_id", "problem_id", "name", "id")  # the first one present names a problem


@dataclass(frozen=True)
class StdioTests:
    """A whole program, run once per case with ``input`` on stdin; its stdout must match ``output``."""

    cases: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CallTests:
    """A function ``fn_name`` (top level, or a method of a ``Solution`` class), called once per case with the
    arguments ``args``; its return value must equal ``expected``."""

    fn_name: str
    calls: tuple[tuple[tuple[Any, ...], Any], ...]


def detect_format(columns: Iterable[str]) -> str:
    """The format whose test columns are among ``columns``; ValueError (one line naming them) if none is."""
    columns = list(columns)
    for name, needs in FORMATS.items():
        if any(c in columns for c in needs):
            return name
    wanted = "; ".join(f"{name}: {' / '.join(needs)}" for name, needs in FORMATS.items())
    raise ValueError(
        f"no stdin/stdout test columns in this row (it has: {', '.join(columns) or 'nothing'}); "
        f"expected one of {wanted}"
    )


def format_name(format: str) -> str:
    """The format a name (or alias: ``taco``, ``open-r1``...) stands for; ValueError if it names none."""
    name = ALIASES.get(format.lower(), format.lower())
    if name not in FORMATS:
        raise ValueError(f"unknown test format {format!r}; use one of {', '.join([*FORMATS, *ALIASES])}")
    return name


def _format_name(format: str | None, row: Mapping[str, Any]) -> str:
    if format is None:  # a column with a value decides; a column that is present but null means "no cases"
        try:
            return detect_format(k for k, v in row.items() if v is not None)
        except ValueError:
            return detect_format(row)
    return format_name(format)


def _json(value: Any, what: str) -> Any:
    if isinstance(value, str | bytes):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except ValueError as e:
            raise ValueError(f"{what} is not valid JSON: {e}") from None
    return value


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):  # a list of lines
        return "\n".join(value) + "\n"
    raise ValueError(f"{what} is a {type(value).__name__}, not text")


def _stdio(inputs: Sequence[Any], outputs: Sequence[Any], what: str) -> StdioTests | None:
    if len(inputs) != len(outputs):
        raise ValueError(f"{what} has {len(inputs)} inputs but {len(outputs)} outputs")
    cases = tuple(
        (_text(i, f"{what} input {n}"), _text(o, f"{what} output {n}"))
        for n, (i, o) in enumerate(zip(inputs, outputs), 1)
    )
    return StdioTests(cases) if cases else None


def _calls(fn_name: Any, inputs: Sequence[Any], outputs: Sequence[Any], what: str) -> CallTests | None:
    if not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise ValueError(f"{what}: fn_name {fn_name!r} is not a Python identifier")
    if len(inputs) != len(outputs):
        raise ValueError(f"{what} has {len(inputs)} inputs but {len(outputs)} outputs")
    calls = tuple(
        (tuple(args) if isinstance(args, list) else (args,), want) for args, want in zip(inputs, outputs)
    )
    return CallTests(fn_name, calls) if calls else None


def _apps(row: Mapping[str, Any]) -> StdioTests | CallTests | None:
    io = _json(row.get("input_output"), "input_output")
    if io is None:
        return None
    if (
        not isinstance(io, dict)
        or not isinstance(io.get("inputs"), list)
        or not isinstance(io.get("outputs"), list)
    ):
        raise ValueError('input_output must hold {"inputs": [...], "outputs": [...]}')
    fn_name = io.get("fn_name") or row.get("fn_name")
    if fn_name:
        return _calls(fn_name, io["inputs"], io["outputs"], "input_output")
    return _stdio(io["inputs"], io["outputs"], "input_output")


def _code_contests(row: Mapping[str, Any], splits: Sequence[str]) -> StdioTests | None:
    cases: list[tuple[str, str]] = []
    for split in splits:
        tests = _json(row.get(split), split)
        if tests is None:
            continue
        if (
            not isinstance(tests, dict)
            or not isinstance(tests.get("input"), list)
            or not isinstance(tests.get("output"), list)
        ):
            raise ValueError(f'{split} must hold {{"input": [...], "output": [...]}}')
        found = _stdio(tests["input"], tests["output"], split)
        cases += found.cases if found else ()
    return StdioTests(tuple(cases)) if cases else None


def _verification_info(row: Mapping[str, Any]) -> StdioTests | CallTests | None:
    info = _json(row.get("verification_info"), "verification_info")
    if info is None:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("test_cases") or [], list):
        raise ValueError('verification_info must hold {"test_cases": [...]}')
    language = str(info.get("language") or "python").lower()
    if not language.startswith("python"):
        raise ValueError(f"verification_info is for {language}; only Python rows can be scored")
    cases = info.get("test_cases") or []
    if not cases:
        return None
    if not all(isinstance(c, dict) for c in cases):
        raise ValueError("verification_info test_cases must be objects with input and output")
    kinds = {c.get("type", "stdin_stdout") for c in cases}
    if kinds == {"stdin_stdout"}:
        return _stdio([c.get("input") for c in cases], [c.get("output") for c in cases], "verification_info")
    if kinds == {"function_call"} and len({c.get("fn_name") for c in cases}) == 1:
        inputs = [_json(c.get("input"), "verification_info input") for c in cases]
        outputs = [_json(c.get("output"), "verification_info output") for c in cases]
        return _calls(cases[0].get("fn_name"), inputs, outputs, "verification_info")
    raise ValueError(
        f"verification_info test_cases of types {sorted(map(str, kinds))}; supported: all "
        "stdin_stdout, or all function_call with one fn_name"
    )


def read_tests(
    row: Mapping[str, Any], format: str | None = None, *, splits: Sequence[str] = CODE_CONTESTS_SPLITS
) -> StdioTests | CallTests | None:
    """The tests of one dataset row, in the format its columns show (or ``format``); None when the row has
    no case. Raises ValueError, in one line, for a row in none of the formats or with malformed tests."""
    name = _format_name(format, row)
    if name == "apps":
        return _apps(row)
    if name == "code_contests":
        unknown = [s for s in splits if s not in CODE_CONTESTS_SPLITS]
        if unknown:
            raise ValueError(f"unknown CodeContests splits {unknown}; use {', '.join(CODE_CONTESTS_SPLITS)}")
        return _code_contests(row, splits)
    return _verification_info(row)


def prompt_text(prompt: Any) -> str:
    """The text of a prompt: a string, or a chat (messages whose ``content`` is a string or a list of parts with
    ``text``), its contents joined."""
    if isinstance(prompt, str):
        return prompt
    parts: list[str] = []
    if isinstance(prompt, Sequence):
        for message in prompt:
            content = message.get("content") if isinstance(message, Mapping) else message
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, Sequence):
                parts += [
                    p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
                ]
    return "\n".join(parts)


_PUNCT_SPACE = re.compile(r" ?([^\w ]) ?")  # after whitespace is collapsed: one space at most, so linear


def _norm(text: str) -> str:
    """Whitespace as a statement varies it: none around punctuation, one space elsewhere."""
    return _PUNCT_SPACE.sub(r"\1", " ".join(text.split()))


def _find(text: str, needle: str, start: int = 0) -> int:
    """Where ``needle`` occurs in ``text`` from ``start`` as whole words (no letter, digit or _ glued to either
    end: the "0" of "n >= 0" is a word, that of "10" is not); -1 if nowhere."""
    if not needle:
        return -1
    at = text.find(needle, start)
    while at >= 0:
        before = text[at - 1] if at else " "
        after = text[at + len(needle)] if at + len(needle) < len(text) else " "
        glued = (needle[0].isalnum() or needle[0] == "_") and (before.isalnum() or before == "_")
        glued |= (needle[-1].isalnum() or needle[-1] == "_") and (after.isalnum() or after == "_")
        if not glued:
            return at
        at = text.find(needle, at + 1)
    return -1


def _spellings(value: Any) -> set[str]:
    """A call's value as a statement may write it: JSON and the Python literal."""
    out = {_norm(repr(value))}
    try:
        out.add(_norm(json.dumps(value)))
    except (TypeError, ValueError):
        pass
    return out


def shown_cases(tests: StdioTests | CallTests, prompt: Any) -> tuple[bool, ...]:
    """For each case of ``tests``, whether the prompt (a string or chat messages) shows it: its input, then its
    output after it (a call: each argument, then the expected value after the first), as whole words, with
    whitespace normalized (``_norm``) on both sides."""
    text = _norm(prompt_text(prompt))
    if isinstance(tests, StdioTests):
        out = []
        for i, o in tests.cases:
            at = _find(text, _norm(i))
            out.append(at >= 0 and _find(text, _norm(o), at + 1) >= 0)
        return tuple(out)

    def first(value: Any, start: int = 0) -> int:
        found = [at for at in (_find(text, s, start) for s in _spellings(value)) if at >= 0]
        return min(found) if found else -1

    def shown(args: tuple[Any, ...], want: Any) -> bool:
        where = [first(a) for a in args]
        if any(at < 0 for at in where):
            return False
        start = min(where) + 1 if where else 0
        return first(want, start) >= 0 or (
            isinstance(want, list) and len(want) == 1 and first(want[0], start) >= 0
        )

    return tuple(shown(args, want) for args, want in tests.calls)


def hide_shown(tests: StdioTests | CallTests, prompt: Any) -> tuple[StdioTests | CallTests | None, bool]:
    """(the cases the prompt does not show, or None when it shows them all; whether it shows them all)."""
    shown = shown_cases(tests, prompt)
    if isinstance(tests, StdioTests):
        kept = tuple(c for c, s in zip(tests.cases, shown) if not s)
        return (StdioTests(kept) if kept else None), all(shown)
    calls = tuple(c for c, s in zip(tests.calls, shown) if not s)
    return (CallTests(tests.fn_name, calls) if calls else None), all(shown)


def problem_id(row: Mapping[str, Any], default: str = "") -> str:
    """A problem's id: its first column of ``ID_COLUMNS`` that is set, else ``default``."""
    for column in ID_COLUMNS:
        if row.get(column) not in (None, ""):
            return str(row[column])
    return default


# ---- sandbox tasks ----------------------------------------------------------------------------------------
# The comparison of a call-based case, run in the judge with plain data (APPS's testing_util compares so).
CALL_HELPERS = """
def _passk_plain(x):
    if isinstance(x, (list, tuple)):
        return [_passk_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _passk_plain(v) for k, v in x.items()}
    return x


def _passk_same(got, want):
    got, want = _passk_plain(got), _passk_plain(want)
    return got == want or (isinstance(want, list) and len(want) == 1 and got == want[0])

"""


def _literal(value: Any) -> str:
    """Python source for a JSON value (repr, except for the floats repr cannot spell)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(_literal(v) + ", " for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def call_tests_source(tests: CallTests) -> str:
    """The tests of a call-based problem: ``check(candidate)`` with one assert per case."""
    lines = [CALL_HELPERS, "def check(candidate):"]
    for args, want in tests.calls:
        lines.append(f"    assert _passk_same(candidate(*{_literal(tuple(args))}), {_literal(want)})")
    return "\n".join(lines) + "\n"


def task_for(program: str, tests: StdioTests | CallTests, **options: Any) -> dict[str, Any]:
    """A ``Sandbox.run_batch`` task. Stdin/stdout options (``timeout``, ``total_timeout``,
    ``stop_on_failure``, ``compare``, ``float_tol``) apply to ``StdioTests``; ``timeout`` to both."""
    if isinstance(tests, StdioTests):
        return {"program": program, "cases": tests.cases, **options}
    # LeetCode-style rows define the function as a method of class Solution: expose it at the top level.
    fn = tests.fn_name
    shim = f"\n\nif {fn!r} not in globals() and 'Solution' in globals():\n    {fn} = Solution().{fn}\n"
    task = {"program": program + shim, "tests": call_tests_source(tests), "entry_point": fn}
    if options.get("total_timeout") is not None:  # one program runs every call: the overall limit is its own
        task["timeout"] = options["total_timeout"]
    elif options.get("timeout") is not None:
        task["timeout"] = options["timeout"] * len(tests.calls)
    return task
