"""Multi-turn repair as a TRL environment: the model runs its code on the visible tests, reads what failed, tries
again, and is scored on the hidden tests.

RLEF (Gehring et al. 2024, "RLEF: Grounding Code LLMs in Execution Feedback with Reinforcement Learning",
arXiv:2410.02089) trains this loop: each attempt runs on the problem's public tests, the failures go back to the
model, and the reward is the final attempt's verdict on the private tests. Here it is TRL 1.16's seam,
``GRPOTrainer(environment_factory=..., reward_funcs=[repair_reward])``:

* ``RepairEnvironment``: one per rollout. ``reset(**row)`` (TRL passes the dataset row) reads the row's tests,
  splits them into visible and hidden, and returns the instructions TRL appends to the user message (the visible
  tests, the number of runs). Its one tool, ``run_tests(code)``, runs a submission in passk's sandbox against the
  visible tests only and returns a short, bounded report: how many passed and, for the first failures, the test's
  text, what the function returned or the exception's last line, or the first differing output line. Hidden tests
  never reach the model: the report is built from the visible tests and the sandbox's verdicts on them. After
  ``max_turns`` submissions the tool refuses, without running anything.
* ``repair_reward`` (``RepairReward``): TRL hands reward functions the rollouts' ``environments``; this one scores
  each rollout's final answer on the hidden tests with the single-turn rewards (``unit_test_reward``,
  ``stdio_test_reward``), so that the two settings share one definition of "passed". It is a reward function, not
  the environment's ``get_reward``: it scores the batch in one sandbox batch (``get_reward`` is called one rollout
  at a time) and logs ``repair/*`` (pass of the first and the final attempt, the repair rate, submissions and
  sandbox runs).

The final answer is the last code the model wrote within the turn limit: its last message when that holds code
and fewer than ``max_turns`` submissions ran (an answer written without the tool, as a single-turn model writes
it, is an attempt too), else its last submission. The first attempt is the first of these. A rollout without code
scores 0.

Options (``RepairOptions``), with their defaults and sources:

* ``max_turns=3``: attempts per rollout; RLEF's turn limit (three attempts, its "1@3" solve rate).
* ``visible="prompt"``: the tests the prompt shows: a function row's ``>>>`` examples in its code prompt (doctest
  syntax, as HumanEval's docstrings write them), a plain-assert row's asserts that the prompt quotes (MBPP's
  prompts list three), a stdin/stdout row's cases the prompt shows (``sandbox.formats.shown_cases``) and
  CodeContests' ``public_tests``: RLEF's public tests. The hidden tests are then those the single-turn reward
  scores (a function row's whole ``test``, a stdin/stdout row's cases the prompt does not show). ``"split:K"``
  declares the row's first K asserts (or cases) visible and scores the rest, for rows whose prompt shows no
  example (the learnable task).
* ``submit="tool"``: the model runs its code by calling ``run_tests`` (TRL's tool loop, ``environment_factory``);
  ``"answer"``: every answer the model writes is run, as RLEF runs it, and the report comes back as the next user
  turn without waiting for a tool call (``answer_feedback``, driven by
  ``experiments.trainers.answer_feedback.AnswerFeedbackRollout`` on GRPOTrainer's ``rollout_func``): for models
  that do not call the tool (docs/repair.md's signal checks).
* ``feedback="tests"``: RLEF's feedback, the failing tests with what went wrong; ``"verdict"`` says only how many
  visible tests passed (an ablation: does the content of the feedback matter).
* ``max_failures_shown=3``, ``max_line_chars=200``: the report's bounds (a few hundred tokens at most), so that a
  turn's cost stays predictable in the token budget.

A chat template must render tool calls for TRL to run tools; ``check_tool_template`` refuses one that cannot, in
one line. This module imports neither torch nor TRL at import time.
"""

from __future__ import annotations

import ast
import doctest
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandbox.formats import (
    CODE_CONTESTS_SPLITS,
    FORMATS,
    CallTests,
    StdioTests,
    prompt_text,
    read_tests,
    shown_cases,
    task_for,
)

from .code_rewards import STDIO_COLUMNS, make_reward
from .extraction import completion_text, extract_code
from .metrics import status_name

__all__ = [
    "FEEDBACK_FORMATS",
    "RepairEnvironment",
    "RepairOptions",
    "RepairReward",
    "SUBMIT_MODES",
    "answer_feedback",
    "check_tool_template",
    "repair_environment",
    "repair_reward",
]

FEEDBACK_FORMATS = ("tests", "verdict")
SUBMIT_MODES = ("tool", "answer")  # the model calls run_tests | every answer is run (RLEF)
NO_RUNS_LEFT = "No runs left"  # the start of the tool's answer once the turn limit is reached
_SPLIT = re.compile(r"^split:(\d+)$")


@dataclass(frozen=True)
class RepairOptions:
    """How a repair rollout runs (the module docstring gives each default's source)."""

    max_turns: int = 3
    visible: str = "prompt"
    feedback: str = "tests"
    submit: str = "tool"
    max_failures_shown: int = 3
    max_line_chars: int = 200
    timeout: float = 3.0
    memory_mb: int = 1024

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.visible != "prompt" and not _SPLIT.match(self.visible):
            raise ValueError(
                f"visible must be 'prompt' or 'split:K' (K >= 0 tests shown), got {self.visible!r}"
            )
        if self.feedback not in FEEDBACK_FORMATS:
            raise ValueError(f"feedback must be one of {', '.join(FEEDBACK_FORMATS)}, got {self.feedback!r}")
        if self.submit not in SUBMIT_MODES:
            raise ValueError(f"submit must be one of {', '.join(SUBMIT_MODES)}, got {self.submit!r}")
        if self.max_failures_shown < 1 or self.max_line_chars < 20:
            raise ValueError("max_failures_shown must be >= 1 and max_line_chars >= 20")


@dataclass(frozen=True)
class _Visible:
    """One visible test: what the model is shown, and the sandbox task that runs it on a program."""

    shown: str
    tests: str | None = None  # function path: the judge's source
    case: tuple[str, str] | None = None  # stdin/stdout path: (input, expected output)
    call: CallTests | None = None  # call-based rows: one call


@dataclass
class Attempt:
    """One attempt of a rollout: the model's text and whether it ran on the visible tests."""

    text: Any  # a submission's code (str) or the final message (chat messages)
    submitted: bool
    visible_passed: bool | None = None


@dataclass
class _Problem:
    kind: str  # "function" | "stdio"
    prompt: Any
    code_prompt: str | None
    entry_point: str | None
    visible: list[_Visible]
    hidden: dict[str, Any]  # the columns the single-turn reward reads for the hidden tests
    task_id: str = ""


def _clip(text: str, n: int) -> str:
    text = (
        " ".join(str(text).split())
        if "\n" not in str(text).strip()
        else str(text).strip().replace("\n", "\\n")
    )
    return text if len(text) <= n else text[: n - 3] + "..."


# ---- visible and hidden tests of a function row ---------------------------------------------------------------
def _asserts(test: str) -> tuple[str, list[str], bool]:
    """(setup, asserts, in_check) of a function row's tests: the assert statements at the top level, or at the top
    of ``check(candidate)``'s body, each as source; the other statements before the first assert as setup."""
    tree = ast.parse(test)
    body, in_check = tree.body, False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            body, in_check = node.body, True
    setup = [ast.unparse(n) for n in body if not isinstance(n, ast.Assert)]
    return "\n".join(setup), [ast.unparse(n) for n in body if isinstance(n, ast.Assert)], in_check


def _wrap(lines: Sequence[str], setup: str, in_check: bool, helpers: str = "") -> str:
    code = "\n".join([*([setup] if setup else []), *lines]) or "pass"
    if not in_check:
        return helpers + code + "\n"
    return helpers + "def check(candidate):\n" + "".join(f"    {ln}\n" for ln in code.splitlines())


def _probe(assertion: str, nonce: str) -> str:
    """An ``assert A == B`` as a test that, when it fails, raises with the value A had (the judge computes it from
    plain data it rebuilt, so a candidate cannot word it); any other assert unchanged."""
    node = ast.parse(assertion).body[0]
    test = node.test if isinstance(node, ast.Assert) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        got, want = ast.unparse(test.left), ast.unparse(test.comparators[0])
        return (
            f"_passk_got = {got}\nif not (_passk_got == {want}):\n"
            f"    raise ValueError({nonce!r} + repr(_passk_got)[:400])"
        )
    return assertion


def _doctest_asserts(code_prompt: str, entry_point: str) -> list[str]:
    """The prompt's ``>>> call`` examples with a literal expected value, as asserts (what a reader would check)."""
    out = []
    try:
        examples = doctest.DocTestParser().get_examples(code_prompt)
    except ValueError:  # a malformed docstring example
        return []
    for ex in examples:
        source = ex.source.strip()
        if entry_point not in source or "\n" in source:
            continue
        # The docstring's closing quotes follow the expected output without a blank line in HumanEval.
        want_lines = []
        for line in ex.want.splitlines():
            if line.strip().startswith(('"""', "'''")):
                break
            want_lines.append(line)
        try:
            ast.parse(source, mode="eval")
            want = ast.literal_eval("\n".join(want_lines).strip())
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            continue
        out.append(f"assert {source} == {want!r}")
    return out


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def _normalized(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _function_problem(row: dict[str, Any], options: RepairOptions, nonce: str) -> _Problem:
    test, entry_point = row.get("test"), row.get("entry_point")
    prompt = row.get("prompt")
    code_prompt = row.get("code_prompt")
    if code_prompt is None and isinstance(prompt, str) and _parses(prompt):  # a completion-style code prompt
        code_prompt = prompt
    try:
        setup, asserts, in_check = _asserts(test)
    except SyntaxError as e:
        raise ValueError(f"row {row.get('task_id', '')!r}: its tests do not parse ({e.msg})") from None
    hidden = {"test": test, "entry_point": entry_point, "code_prompt": code_prompt}
    split = _SPLIT.match(options.visible)
    if split:
        k = int(split.group(1))
        if len(asserts) <= k:
            raise ValueError(
                f"row {row.get('task_id', '')!r}: visible='split:{k}' needs more than {k} asserts; it has "
                f"{len(asserts)}: choose a smaller K"
            )
        shown, rest = asserts[:k], asserts[k:]
        hidden["test"] = _wrap(rest, setup, in_check)
        # The model is shown the call by the function's name, as the prompt names it.
        named = [
            re.sub(r"\bcandidate\(", f"{entry_point}(", s) if in_check and entry_point else s for s in shown
        ]
        visible = [_Visible(n, _wrap([_probe(s, nonce)], setup, in_check)) for n, s in zip(named, shown)]
    else:
        text = _normalized(prompt_text(prompt) + "\n" + (code_prompt or ""))
        quoted = [a for a in asserts if _normalized(a) in text]
        examples = _doctest_asserts(code_prompt or "", entry_point) if entry_point else []
        shown = quoted or examples
        # A doctest's call names the function; in check(candidate) rows the judge binds it as the candidate.
        visible = [_Visible(s, _wrap([_probe(s, nonce)], setup if quoted else "", False)) for s in shown]
    return _Problem(
        "function", prompt, code_prompt, entry_point, visible, hidden, str(row.get("task_id", ""))
    )


# ---- visible and hidden tests of a stdin/stdout row --------------------------------------------------------------
def _stdio_problem(row: dict[str, Any], options: RepairOptions) -> _Problem:
    prompt = row.get("prompt")
    columns = {c: row[c] for c in STDIO_COLUMNS if row.get(c) is not None}
    tests = read_tests(columns, splits=CODE_CONTESTS_SPLITS)
    if tests is None:
        raise ValueError(f"row {row.get('task_id', '')!r} has no test case")
    items: list = list(tests.cases) if isinstance(tests, StdioTests) else list(tests.calls)
    split = _SPLIT.match(options.visible)
    if split:
        k = int(split.group(1))
        if len(items) <= k:
            raise ValueError(
                f"row {row.get('task_id', '')!r}: visible='split:{k}' needs more than {k} cases; it has "
                f"{len(items)}: choose a smaller K"
            )
        shown, rest = items[:k], items[k:]
        if isinstance(tests, StdioTests):
            io = {"inputs": [i for i, _ in rest], "outputs": [o for _, o in rest]}
        else:
            io = {
                "inputs": [list(a) for a, _ in rest],
                "outputs": [w for _, w in rest],
                "fn_name": tests.fn_name,
            }
        hidden: dict[str, Any] = {"input_output": json.dumps(io), "tests": "all"}
    else:
        flags = shown_cases(tests, prompt)
        shown = [item for item, f in zip(items, flags) if f]
        if "public_tests" in columns:  # CodeContests' public tests are the statement's examples
            public = read_tests(
                {"public_tests": columns["public_tests"]}, "code_contests", splits=("public_tests",)
            )
            shown += [c for c in (public.cases if public else ()) if c not in shown]
        hidden = {**columns, "tests": "hidden"}
    if isinstance(tests, StdioTests):
        visible = [_Visible(f"input {i!r} -> output {o!r}", case=(i, o)) for i, o in shown]
    else:
        visible = [
            _Visible(f"{tests.fn_name}{tuple(a)!r} == {w!r}", call=CallTests(tests.fn_name, ((a, w),)))
            for a, w in shown
        ]
    return _Problem(
        "stdio", prompt, row.get("code_prompt"), None, visible, hidden, str(row.get("task_id", ""))
    )


# ---- the environment -----------------------------------------------------------------------------------------------
class RepairEnvironment:
    """One rollout of multi-turn repair (see the module docstring). TRL creates one per rollout through
    ``environment_factory`` and calls ``reset(**row)`` before generation; the model calls ``run_tests``, its one
    public method besides ``reset`` (TRL makes every public method a tool).

    Attributes read by ``repair_reward`` and by the evaluation: ``options``, ``problem`` (after ``reset``),
    ``submissions`` (``Attempt``s that ran; ``_attempts(completion)`` adds an answer written without the tool),
    ``sandbox_runs`` (sandbox tasks this rollout ran: one per visible test
    and submission for function rows, one per submission for stdin/stdout rows) and ``refused`` (calls past the
    limit).
    """

    def __init__(self, options: RepairOptions | None = None, sandbox: Any | None = None) -> None:
        self.options = options or RepairOptions()
        self._sandbox = sandbox
        # Marks the judge's report of a failed `assert A == B` (the value of A), apart from any ValueError the
        # program raises itself; drawn per environment, never shown to the program.
        self._nonce = "passk-got-" + os.urandom(8).hex() + ":"
        self.problem: _Problem | None = None
        self.submissions: list[Attempt] = []
        self.sandbox_runs = 0
        self.refused = 0
        self.answer_loop = False  # set by answer_feedback: this rollout's answers were run, not tool calls

    # TRL calls reset with every column of the row as a keyword.
    def reset(self, **row: Any) -> str:
        """Read the row's tests; return the instructions TRL appends to the last user message."""
        stdio = any(row.get(c) is not None for cols in FORMATS.values() for c in cols) and not row.get("test")
        if not stdio and not row.get("test"):
            have = ", ".join(k for k, v in row.items() if v is not None)
            raise ValueError(
                f"RepairEnvironment: the row has no tests (it has: {have}); it reads test and entry_point, or the "
                "stdin/stdout columns (input_output, public_tests/private_tests/generated_tests, verification_info)"
            )
        self.problem = (
            _stdio_problem(row, self.options) if stdio else _function_problem(row, self.options, self._nonce)
        )
        self.submissions, self.sandbox_runs, self.refused, self.answer_loop = [], 0, 0, False
        n = self.options.max_turns
        if self.options.submit == "answer":
            again = f"you will see what went wrong and may answer again, {n} answers in all; your last answer counts"
            if n == 1:
                head = "It must pass these tests:" if self.problem.visible else ""
            elif self.problem.visible:
                head = f"Your answer's code will be run on these tests; if one fails {again}. Tests:"
            else:
                head = f"This problem shows no tests: your code will be run, and if it does not run {again}."
        else:
            head = (
                f"You can run your code with the run_tests tool, at most {n} time{'s' if n > 1 else ''}; your "
                "last code is your answer. "
                + (
                    "It runs these tests:"
                    if self.problem.visible
                    else "This problem shows no tests: run_tests says whether your code loads."
                )
            )
        if not head:  # one answer and no test to show: nothing to add to the prompt
            return ""
        lines = ["", head]
        lines += [_clip(v.shown, self.options.max_line_chars) for v in self.problem.visible[:5]]
        if len(self.problem.visible) > 5:
            lines.append(f"(and {len(self.problem.visible) - 5} more)")
        return "\n".join(lines)

    def run_tests(self, code: str) -> str:
        """Run your Python solution on the problem's visible tests and report which fail.

        Args:
            code: The complete solution: the function with its imports (for an input/output problem, the whole program).

        Returns:
            How many visible tests passed and, for the first failures, what went wrong.
        """
        if self.problem is None:
            raise RuntimeError("RepairEnvironment.run_tests before reset")
        n = self.options.max_turns
        if len(self.submissions) >= n:
            self.refused += 1
            return f"{NO_RUNS_LEFT} (the limit is {n}): your last submission is your answer."
        attempt = Attempt(code if isinstance(code, str) else str(code), submitted=True)
        self.submissions.append(attempt)
        passed, report = self._run_visible(attempt.text)
        attempt.visible_passed = passed
        left = n - len(self.submissions)
        return f"Run {len(self.submissions)} of {n}: {report}" + (
            f" ({left} run{'s' if left > 1 else ''} left.)"
            if left
            else " (No runs left: this is your answer.)"
        )

    # ---- running the visible tests ------------------------------------------------------------------------------
    def _get_sandbox(self) -> Any:
        if self._sandbox is not None:
            return self._sandbox
        from sandbox import get_sandbox

        return get_sandbox(timeout=self.options.timeout, memory_mb=self.options.memory_mb)

    def _program(self, text: str) -> tuple[str | None, str]:
        p = self.problem
        ex = extract_code(p.code_prompt if p.kind == "function" else p.code_prompt, text, p.entry_point)
        return (ex.code, "") if ex.ok else (None, f"no runnable code in the submission ({ex.reason}).")

    def _tasks(self, program: str) -> list[dict[str, Any]]:
        p = self.problem
        if p.kind == "function":
            tests = [v.tests for v in p.visible] or [f"assert {p.entry_point} is not None"]
            trusted = {"trusted_code": p.code_prompt} if p.code_prompt else {}
            return [{"program": program, "tests": t, "entry_point": p.entry_point, **trusted} for t in tests]
        cases = [v.case for v in p.visible if v.case is not None]
        calls = [v.call for v in p.visible if v.call is not None]
        if calls:
            return [task_for(program, c, timeout=self.options.timeout) for c in calls]
        # A program with no visible case still runs once, on empty input, so that a crash is reported.
        return [task_for(program, StdioTests(tuple(cases) or (("", ""),)), timeout=self.options.timeout)]

    def _run_visible(self, text: str) -> tuple[bool, str]:
        program, why = self._program(text)
        if program is None:
            return False, why[0].upper() + why[1:]
        tasks = self._tasks(program)
        results = self._get_sandbox().run_batch(tasks)
        self.sandbox_runs += len(tasks)
        p, o = self.problem, self.options
        if not p.visible:
            r = results[0]
            ok = status_name(r) in ("passed", "failed") or (
                p.kind == "stdio" and r.cases == ("wrong_answer",)
            )
            return ok, "your code loads." if ok else f"your code does not run: {self._line(r.message)}"
        if p.kind == "stdio" and not any(v.call for v in p.visible):
            r = results[0]
            verdicts = list(r.cases) or [status_name(r)] * len(p.visible)
            failed = [(v, c) for v, c in zip(p.visible, verdicts) if c != "passed"]
            # The sandbox's message details the first failing case in the order it ran them (random).
            first = re.sub(r"^case \d+ of \d+: ", "", str(r.message or "")).split("; ")[0]
            details = [self._line(first) if len(failed) == 1 else c for _, c in failed]
        else:
            failed_pairs = [(v, r) for v, r in zip(p.visible, results) if status_name(r) != "passed"]
            failed = failed_pairs
            details = [self._why(r) for _, r in failed_pairs]
        total = len(p.visible)
        if not failed:
            return True, f"all {total} visible test{'s' if total > 1 else ''} passed."
        head = f"{len(failed)} of {total} visible test{'s' if total > 1 else ''} failed."
        if o.feedback == "verdict":
            return False, head
        shown = [
            f"FAILED {self._line(v.shown)} -- {d}"
            for (v, _), d in list(zip(failed, details))[: o.max_failures_shown]
        ]
        return False, "\n".join([head, *shown])

    def _line(self, text: str) -> str:
        return _clip(text, self.options.max_line_chars)

    def _why(self, result: Any) -> str:
        message = str(result.message or status_name(result))
        if self._nonce in message:  # our probe: the value the program's function returned
            got = message.split(self._nonce, 1)[1]
            got = re.sub(r"['\"]? \(tests line \d+\).*$", "", got)
            return f"returned {self._line(got)}"
        last = message.split("; ")[0]
        return self._line(re.sub(r" \(tests line \d+\)", "", last))

    # ---- the attempts of a finished rollout (every public method is a tool for TRL) --------------------------
    def _attempts(self, completion: Any = None) -> list[Attempt]:
        """The rollout's attempts in order: the submissions, then the final message when it holds code and the
        limit allows one more attempt (see the module docstring)."""
        out = list(self.submissions)
        if self.options.submit == "answer" or len(out) >= self.options.max_turns or completion is None:
            return out
        last = completion
        if isinstance(completion, list):
            if not completion or not isinstance(completion[-1], dict):
                return out
            message = completion[-1]
            if message.get("role") != "assistant" or message.get("tool_calls"):
                return out
            last = [message]
        text = completion_text(last)
        if not isinstance(text, str) or not text.strip() or self.problem is None:
            return out
        p = self.problem
        # Prose parses as Python often enough ("ok" is a name): without an entry point to define, only a fenced
        # block counts as an answer.
        if extract_code(p.code_prompt, last, p.entry_point).ok and (p.entry_point or "```" in text):
            out.append(Attempt(last, submitted=False))
        return out


def answer_feedback(environment: RepairEnvironment, answer: str, *, last: bool = False) -> str | None:
    """RLEF's loop (``submit="answer"``): record the model's answer as the rollout's next attempt and return the
    report to show it as the next user turn, or None when the rollout ends there: its code passed the visible
    tests, it is the last attempt the limit allows, or ``last`` (the caller cannot continue, e.g. the answer was cut
    by the token cap). A last attempt is not run on the visible tests: no one would read the report."""
    env = environment
    if env.options.submit != "answer":
        raise ValueError(
            'answer_feedback drives submit="answer" environments; this one takes run_tests calls'
        )
    if env.problem is None:
        raise RuntimeError("answer_feedback before reset")
    n = env.options.max_turns
    if len(env.submissions) >= n:
        raise RuntimeError(f"answer_feedback past the turn limit ({n})")
    env.answer_loop = True
    attempt = Attempt(answer if isinstance(answer, str) else str(answer), submitted=True)
    env.submissions.append(attempt)
    if last or len(env.submissions) >= n:
        return None
    attempt.visible_passed, report = env._run_visible(attempt.text)
    if attempt.visible_passed:
        return None
    left = n - len(env.submissions)
    return (
        f"Your code ran on the tests (answer {len(env.submissions)} of {n}): {report}\n"
        f"Fix it and answer again with the whole solution ({left} answer{'s' if left > 1 else ''} left)."
    )


def repair_environment(sandbox: Any | None = None, **options: Any) -> Callable[[], RepairEnvironment]:
    """An ``environment_factory`` for TRL: ``GRPOTrainer(..., environment_factory=repair_environment(max_turns=3))``.
    ``options`` are ``RepairOptions``' fields; they are checked here, once."""
    opts = RepairOptions(**options)

    def factory() -> RepairEnvironment:
        return RepairEnvironment(opts, sandbox)

    factory.options = opts  # type: ignore[attr-defined]
    return factory


# ---- the reward ----------------------------------------------------------------------------------------------------
@dataclass
class RolloutRecord:
    """What ``repair_reward`` found in one rollout (kept in ``RepairReward.last_records``)."""

    task_id: str
    first_passed: bool
    final_passed: bool
    attempts: int
    submissions: int
    sandbox_runs: int
    refused: int
    reward: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class RepairReward:
    """The hidden tests' verdict on each rollout's final answer (1.0 / 0.0), in TRL's reward convention; reads the
    ``environments`` TRL passes. With ``score_first`` the first attempt is scored too (for ``repair/first_pass``
    and the repair rate; those sandbox runs are measurement, not part of the rollout).

    Args:
        name: the ``__name__`` TRL logs it under.
        score_first: also score each rollout's first attempt on the hidden tests.
        timeout, memory_mb: the sandbox limits of the hidden tests (the single-turn rewards' defaults).
    """

    def __init__(
        self,
        name: str = "repair_reward",
        *,
        score_first: bool = True,
        timeout: float = 3.0,
        memory_mb: int = 1024,
    ) -> None:
        self.__name__ = name
        self.score_first = score_first
        self.timeout, self.memory_mb = float(timeout), int(memory_mb)
        self.last_metrics: dict[str, float] = {}
        self.last_records: list[RolloutRecord] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RepairReward(name={self.__name__!r}, score_first={self.score_first})"

    def _jobs(self, completions: Sequence[Any], environments: Sequence[Any]) -> tuple[list, list]:
        if environments is None:
            raise ValueError(
                f"{self.__name__} reads the rollouts' environments: pass "
                "environment_factory=rewards.repair_environment(...) to GRPOTrainer"
            )
        if len(environments) != len(completions):
            raise ValueError(f"{len(environments)} environments for {len(completions)} completions")
        if len({id(env) for env in environments}) != len(environments):
            raise ValueError(
                f"{self.__name__}: one environment reached the reward for several rollouts, so they would all get "
                "its verdict: give each rollout its own input dict (TRL writes a rollout_func's environments into "
                "them; a dict repeated for a prompt's samples keeps only the last)"
            )
        attempts = []
        for env, completion in zip(environments, completions):
            if not isinstance(env, RepairEnvironment) or env.problem is None:
                raise ValueError(
                    f"{self.__name__} needs RepairEnvironment rollouts that were reset, got {env!r}"
                )
            if env.options.submit == "answer" and not env.answer_loop:
                raise ValueError(
                    f'{self.__name__}: a submit="answer" rollout was not run by answer_feedback: pass '
                    "rollout_func=experiments.trainers.answer_feedback.AnswerFeedbackRollout(rows, ...) to "
                    "GRPOTrainer, not environment_factory"
                )
            attempts.append(env._attempts(completion))
        # The final answer of each rollout, then (score_first) the first: (rollout, attempt or None)
        jobs = [(i, a[-1] if a else None) for i, a in enumerate(attempts)]
        if self.score_first:
            jobs += [(i, a[0] if a else None) for i, a in enumerate(attempts)]
        return attempts, jobs

    def _reward_for(self, problem: _Problem) -> Any:
        if problem.kind == "function":
            return make_reward("unit_test", self.__name__, timeout=self.timeout, memory_mb=self.memory_mb)
        tests = problem.hidden.get("tests", "hidden")
        return make_reward(
            "stdio_test", self.__name__, timeout=self.timeout, memory_mb=self.memory_mb, tests=tests
        )

    def _calls(
        self, environments: Sequence[RepairEnvironment], jobs: list
    ) -> list[tuple[Any, dict, list[int]]]:
        """One reward call per kind of row (function, stdin/stdout with hidden or all cases): (reward, kwargs,
        the jobs it scores)."""
        groups: dict[tuple, list[int]] = {}
        for j, (i, _) in enumerate(jobs):
            p = environments[i].problem
            groups.setdefault((p.kind, p.hidden.get("tests")), []).append(j)
        calls = []
        for members in groups.values():
            problems = [environments[jobs[j][0]].problem for j in members]
            completions = [jobs[j][1].text if jobs[j][1] is not None else "" for j in members]
            kwargs: dict[str, Any] = {
                "prompts": [p.prompt for p in problems],
                "completions": completions,
                # "" rather than None: the reward would take a prose prompt for the code prompt.
                "code_prompt": [p.code_prompt or "" for p in problems],
            }
            names = sorted({k for p in problems for k in p.hidden if k != "tests"} - {"code_prompt"})
            for name in names:
                kwargs[name] = [p.hidden.get(name) for p in problems]
            calls.append((self._reward_for(problems[0]), kwargs, members))
        return calls

    def _finish(
        self, environments: Sequence[RepairEnvironment], attempts: list, jobs: list, scores: list
    ) -> list:
        n = len(environments)
        final = [float(s or 0.0) for s in scores[:n]]
        first = [float(s or 0.0) for s in scores[n:]] if self.score_first else [None] * n
        records = []
        for i, env in enumerate(environments):
            records.append(
                RolloutRecord(
                    task_id=env.problem.task_id,
                    first_passed=bool(first[i] is not None and first[i] >= 1.0),
                    final_passed=final[i] >= 1.0,
                    attempts=len(attempts[i]),
                    submissions=len(env.submissions),
                    sandbox_runs=env.sandbox_runs,
                    refused=env.refused,
                    reward=final[i],
                )
            )
        metrics = {
            "repair/final_pass": sum(r.final_passed for r in records) / n,
            "repair/submissions_mean": sum(r.submissions for r in records) / n,
            "repair/sandbox_runs": float(sum(r.sandbox_runs for r in records)),
            "repair/no_code_frac": sum(r.attempts == 0 for r in records) / n,
            "repair/turn_limit_frac": sum(
                r.submissions >= env.options.max_turns for r, env in zip(records, environments)
            )
            / n,
        }
        if self.score_first:
            metrics["repair/first_pass"] = sum(r.first_passed for r in records) / n
            failed_first = [r for r in records if not r.first_passed]
            if failed_first:
                metrics["repair/repair_rate"] = sum(r.final_passed for r in failed_first) / len(failed_first)
        with self._lock:
            self.last_records, self.last_metrics = records, metrics
        return final

    async def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Any = None,
        *,
        environments: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Score a batch of rollouts (TRL's async reward path)."""
        completions = list(completions or [])
        attempts, jobs = self._jobs(completions, environments)
        calls = self._calls(environments, jobs)
        scores: list[Any] = [None] * len(jobs)
        for reward, kw, members in calls:
            for j, s in zip(members, await reward(**kw)):
                scores[j] = s
        rewards = self._finish(environments, attempts, jobs, scores)
        _emit(self.last_metrics, log_metric)
        return rewards

    def score(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Any = None,
        *,
        environments: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """The synchronous twin of ``__call__``."""
        completions = list(completions or [])
        attempts, jobs = self._jobs(completions, environments)
        scores: list[Any] = [None] * len(jobs)
        for reward, kw, members in self._calls(environments, jobs):
            for j, s in zip(members, reward.score(**kw)):
                scores[j] = s
        rewards = self._finish(environments, attempts, jobs, scores)
        _emit(self.last_metrics, log_metric)
        return rewards


def _emit(metrics: dict[str, float], log_metric: Callable[[str, float], Any] | None) -> None:
    if log_metric is not None:
        for name, value in metrics.items():
            log_metric(name, value)


repair_reward = RepairReward()


def check_tool_template(processing_class: Any) -> None:
    """ValueError, in one line, when the chat template cannot render a tool call and its result (TRL's
    ``supports_tool_calling``, the check GRPOTrainer makes): a repair rollout needs one. Imports TRL when called."""
    from trl.chat_template_utils import supports_tool_calling

    if not supports_tool_calling(processing_class):
        name = getattr(processing_class, "name_or_path", "") or type(processing_class).__name__
        raise ValueError(
            f"the chat template of {name} cannot render tool calls, which multi-turn repair needs: give the "
            "tokenizer a tool-capable chat_template (for a ChatML model: "
            "experiments.evaluation.repair.use_tool_template(tokenizer))"
        )
