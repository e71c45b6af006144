"""Unit-test and stdin/stdout reward functions in TRL 1.16's calling convention, scored on the ``sandbox`` pool.

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns)`` where
``columns`` holds every dataset column except ``prompt``/``completion``/``completion_ids`` as a list aligned
with the completions, plus ``trainer_state``, ``log_extra`` and ``log_metric``. It expects
``list[float | None]`` (None becomes NaN and drops out of the means).

Each reward here is an object with an ``async def __call__`` (TRL's ``is_async_callable`` detects it and runs it
concurrently with other async rewards on its event-loop thread) and a stable ``__name__`` (TRL logs
``rewards/<__name__>/mean``). ``.score(...)`` is the synchronous twin with the same arguments and results.
The objects hold only plain configuration, so they pickle; the sandbox pool is looked up per call through
``sandbox.get_sandbox(**kwargs)``, which keeps one warm pool per configuration in each process.

Two kinds of tests:

* **Function tests** (HumanEval-style): ``unit_test_reward`` / ``partial_test_reward`` read the columns
  ``test``, ``entry_point`` and ``code_prompt`` (the code prompt, prepended to a completion that continues it).
* **Stdin/stdout tests** (APPS/TACO, CodeContests, open-r1/PrimeIntellect): ``stdio_test_reward`` /
  ``stdio_partial_reward`` read the format's own columns (``sandbox.formats``: ``input_output`` and
  ``fn_name``; ``public_tests``, ``private_tests``, ``generated_tests``; ``verification_info``), chosen by the
  columns present or by ``format=``. The completion's code is the whole program (``code_prompt``, if the
  dataset has that column, is prepended). Call-based rows (``fn_name``) go through the function path: one
  generated assert per case.

Scoring rules:

* ``None`` only for a row with no tests (``test`` missing or blank; a stdin/stdout row without cases); every
  failing completion gets a number. A row in no known format raises ValueError naming the columns it has.
* Garbage that extraction rejects scores 0.0 and is counted in ``<prefix>/extract_<reason>_frac``.
* A sandbox error scores 0.0 (counted in ``<prefix>/sandbox_error_frac``), never None: a broken executor
  shows up in the metrics instead of silently shrinking the batch.
* The code prompt is the sandbox's trusted code: the tests call the prompt's own helpers (HumanEval/32's
  ``poly``), so a completion that redefines or rebinds them changes only its own copy.
"""

from __future__ import annotations

import ast
import builtins
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sandbox.formats import (
    CODE_CONTESTS_SPLITS,
    FORMATS,
    HIDDEN_SPLITS,
    TEST_SELECTIONS,
    detect_format,
    format_name,
    hide_shown,
    read_tests,
    task_for,
)

from .extraction import Extraction, code_in_prompt, completion_text, extract_code, has_implemented_function
from .metrics import FORGED_EXIT_FLAGS, batch_metrics, emit, status_name

__all__ = [
    "REWARDS",
    "CodeReward",
    "FormatReward",
    "PartialTestReward",
    "StdioPartialReward",
    "StdioTestReward",
    "UnitTestReward",
    "make_format_reward",
    "make_partial_test_reward",
    "make_reward",
    "make_stdio_partial_reward",
    "make_stdio_test_reward",
    "make_unit_test_reward",
]

RewardList = list[float | None]
# Columns of the stdin/stdout formats (and fn_name, APPS's column for call-based rows), read from TRL's kwargs.
STDIO_COLUMNS = tuple(dict.fromkeys(c for cols in FORMATS.values() for c in cols)) + ("fn_name",)
TRL_KEYWORDS = frozenset({"trainer_state", "log_metric", "log_extra", "completion_ids"})  # not columns


@dataclass
class _Batch:
    texts: list[str]
    extractions: list[Extraction | None]
    unscorable: list[bool]
    task_rows: list[int]
    tasks: list[dict[str, Any]]
    row_tests: list[Any]


def _column(values: Sequence[Any] | None, n: int, name: str) -> list[Any]:
    if values is None:
        return [None] * n
    if isinstance(values, str | bytes):  # one value for the whole batch
        return [values] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
    return values


def _workers_per_local_process() -> int | None:
    """Under ``accelerate launch`` every local process scores its own slice with its own pool: share the CPUs
    instead of starting ``cpu_count`` workers in each. None (the sandbox's default) for a single process."""
    try:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return None
    if local_world <= 1:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // local_world)


@functools.lru_cache(maxsize=1024)  # RL batches repeat each row's tests many times
def prompt_helpers(test: Any, entry_point: Any) -> tuple[str, ...]:
    """The names the tests call or read without defining, importing or receiving them, other than builtins and
    the entry point: helpers the prompt's code defines (HumanEval/32's ``poly``, /38's ``encode_cyclic``,
    /50's ``encode_shift``). Empty for tests that do not parse (the sandbox reports those)."""
    if not isinstance(test, str):
        return ()
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    read, bound = set(), set(dir(builtins)) | {entry_point, "__name__", "__file__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return tuple(sorted(read - bound))


def _has_test(test: Any) -> bool:
    return isinstance(test, str) and bool(test.strip())


def all_passed(result: Any | None) -> float:
    """1.0 when the sandbox says ``passed``, else 0.0."""
    return 1.0 if result is not None and status_name(result) == "passed" else 0.0


def fraction_passed(result: Any | None) -> float:
    """The share of assert units (or stdin/stdout cases) that passed; 0.0 outright when the sandbox caught a
    forged verdict."""
    if result is None:
        return 0.0
    if set(getattr(result, "flags", ()) or ()) & FORGED_EXIT_FLAGS:
        return 0.0
    if status_name(result) == "passed":
        return 1.0
    total = int(getattr(result, "asserts_total", 0) or 0)
    passed = int(getattr(result, "asserts_passed", 0) or 0)
    if total <= 0:
        return 0.0
    return min(max(passed / total, 0.0), 1.0)


class CodeReward:
    """Base class: extraction, batching onto the sandbox, metrics. A subclass says what a row's tests are
    (``_row_tests``), how they run (``_task``) and what a result is worth (``_row_reward``).

    Args:
        name: the ``__name__`` TRL logs the reward under (default: the class's ``default_name``).
        timeout: wall-clock seconds per program (sandbox ``timeout``; per case for stdin/stdout tests).
        memory_mb: address-space cap per program (sandbox ``memory_mb``).
        n_workers: sandbox worker processes; None lets the sandbox choose (one per CPU), or, when
            ``LOCAL_WORLD_SIZE`` > 1 (``accelerate launch`` / ``torchrun``), this process's share of the CPUs.
        style: extraction style, ``"auto"``, ``"completion"`` or ``"chat"`` (see ``rewards.extraction``).
        metric_prefix: prefix of the logged metrics; defaults to ``name`` without a trailing ``_reward``.
        sandbox: an explicit sandbox object (anything with ``run_batch``/``arun_batch``); by default the shared
            ``sandbox.get_sandbox(timeout=..., memory_mb=..., n_workers=...)``.
    """

    default_name: ClassVar[str] = "code_reward"
    needs_sandbox: ClassVar[bool] = True
    counts_cases: ClassVar[bool] = False  # stdin/stdout: per-case verdict shares in the metrics
    # The function rewards' column without which no row can be scored (format_reward: entry_point).
    needs_column: ClassVar[str] = "test"

    def __init__(
        self,
        name: str | None = None,
        *,
        timeout: float = 3.0,
        memory_mb: int = 1024,
        n_workers: int | None = None,
        style: str = "auto",
        metric_prefix: str | None = None,
        sandbox: Any | None = None,
    ) -> None:
        if style not in ("auto", "completion", "chat"):
            raise ValueError(f"style must be 'auto', 'completion' or 'chat', got {style!r}")
        name = name or self.default_name
        self.__name__ = name
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.n_workers = n_workers
        self.style = style
        self.metric_prefix = metric_prefix or name.removesuffix("_reward")
        self.sandbox = sandbox
        self.last_metrics: dict[str, float] = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.__name__!r}, timeout={self.timeout}, memory_mb={self.memory_mb}, "
            f"n_workers={self.n_workers}, style={self.style!r})"
        )

    # ---- the sandbox -------------------------------------------------------------------------------------
    def sandbox_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"timeout": self.timeout, "memory_mb": self.memory_mb}
        n_workers = self.n_workers if self.n_workers is not None else _workers_per_local_process()
        if n_workers is not None:
            kwargs["n_workers"] = n_workers
        return kwargs

    def get_sandbox(self) -> Any:
        if self.sandbox is not None:
            return self.sandbox
        from sandbox import get_sandbox  # lazy: format_reward and extraction work without starting a pool

        return get_sandbox(**self.sandbox_kwargs())

    # ---- what a row is (overridden by the stdin/stdout rewards) --------------------------------------------
    def _row_tests(self, row: dict[str, Any], i: int) -> Any | None:
        """The tests of ``row`` (the columns this reward reads), the ``i``-th; None: it cannot be scored."""
        return (row["test"], row["entry_point"]) if _has_test(row["test"]) else None

    def _code_prompt(self, row: dict[str, Any], prompt: Any) -> str | None:
        """The code prompt: the ``code_prompt`` column; without one, a text prompt (completion style), or the
        code a chat prompt shows (``code_in_prompt``). Where there is none and the tests call a helper that
        only the prompt's code could define (HumanEval/32's ``poly``), ValueError: the tests would call the
        completion's own version (a false pass), and an honest completion could not pass at all."""
        cp = row["code_prompt"] if row["code_prompt"] is not None else prompt
        if isinstance(cp, str):
            return cp
        entry_point = row.get("entry_point")
        cp = code_in_prompt(cp, entry_point)
        if cp is None and entry_point and self.needs_sandbox:  # plain asserts call the program's functions
            helpers = prompt_helpers(row.get("test"), entry_point)
            if helpers:
                raise ValueError(
                    f"the tests call {', '.join(helpers)}, which the prompt's code defines, but the dataset has "
                    f"no code_prompt column and the prompt shows no code defining {entry_point}: add a "
                    "code_prompt column holding the prompt's code"
                )
        return cp

    def _entry_point(self, tests: Any) -> str | None:
        """The function extraction looks for (None: any code block is the whole program)."""
        return tests[1]

    def _task(self, program: str, tests: Any, code_prompt: str | None) -> dict[str, Any]:
        test, entry_point = tests
        task = {"program": program, "tests": test, "entry_point": entry_point}
        if code_prompt:  # the tests see the prompt's own helpers (HumanEval's poly), never the completion's
            task["trusted_code"] = code_prompt
        return task

    def _row_reward(self, ex: Extraction, result: Any | None, tests: Any) -> float:
        raise NotImplementedError

    # ---- one batch ---------------------------------------------------------------------------------------
    def _prepare(
        self, prompts: Sequence[Any] | None, completions: Sequence[Any], columns: dict[str, Any]
    ) -> _Batch:
        """Extract each completion's program and build the sandbox tasks; ``columns`` are the dataset columns
        this reward reads (a name whose value is None is not in the dataset)."""
        if completions is None:
            raise ValueError("completions is required")
        completions = list(completions)
        n = len(completions)
        prompts_l = _column(prompts, n, "prompts")
        cols = {name: _column(values, n, name) for name, values in columns.items()}

        batch = _Batch([], [], [], [], [], [])
        for i, completion in enumerate(completions):
            text = completion_text(completion)
            batch.texts.append(text if isinstance(text, str) else "")
            row = {name: values[i] for name, values in cols.items()}
            tests = self._row_tests(row, i)
            batch.row_tests.append(tests)
            batch.unscorable.append(tests is None)
            if tests is None:
                batch.extractions.append(None)
                continue
            try:
                cp = self._code_prompt(row, prompts_l[i])
            except ValueError as e:
                raise ValueError(f"{self.__name__}, row {i}: {e}") from None
            ex = extract_code(cp, completion, self._entry_point(tests), style=self.style)
            batch.extractions.append(ex)
            if ex.ok and self.needs_sandbox:
                batch.task_rows.append(i)
                batch.tasks.append(self._task(ex.code, tests, cp))
        return batch

    def _finish(
        self,
        batch: _Batch,
        results: Sequence[Any],
        log_metric: Callable[[str, float], Any] | None,
        log_extra: Callable[[str, list], Any] | None,
    ) -> RewardList:
        if len(results) != len(batch.tasks):
            raise RuntimeError(f"sandbox returned {len(results)} results for {len(batch.tasks)} tasks")
        n = len(batch.texts)
        by_row: list[Any | None] = [None] * n
        for row, result in zip(batch.task_rows, results):
            by_row[row] = result

        rewards: RewardList = []
        labels: list[str] = []
        for i in range(n):
            ex = batch.extractions[i]
            if batch.unscorable[i] or ex is None:
                rewards.append(None)
                labels.append("no_test")
            elif not ex.ok:
                rewards.append(0.0)
                labels.append(f"extract_{ex.reason}")
            else:
                rewards.append(self._row_reward(ex, by_row[i], batch.row_tests[i]))
                labels.append(status_name(by_row[i]) if by_row[i] is not None else "ok")

        self.last_metrics = batch_metrics(
            self.metric_prefix,
            batch.texts,
            batch.extractions,
            by_row,
            batch.unscorable,
            with_execution=self.needs_sandbox,
            with_cases=self.counts_cases,
            entry_points=[None if t is None else self._entry_point(t) for t in batch.row_tests],
        )
        emit(self.last_metrics, log_metric)
        if log_extra is not None:
            log_extra(f"{self.metric_prefix}/status", labels)
        return rewards

    async def _ascore(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any] | None,
        columns: dict[str, Any],
        log_metric: Callable[[str, float], Any] | None,
        log_extra: Callable[[str, list], Any] | None,
    ) -> RewardList:
        batch = self._prepare(prompts, completions, columns)
        results: list[Any] = []
        if batch.tasks:
            results = list(await self.get_sandbox().arun_batch(batch.tasks))
        return self._finish(batch, results, log_metric, log_extra)

    def _score(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any] | None,
        columns: dict[str, Any],
        log_metric: Callable[[str, float], Any] | None,
        log_extra: Callable[[str, list], Any] | None,
    ) -> RewardList:
        batch = self._prepare(prompts, completions, columns)
        results: list[Any] = []
        if batch.tasks:
            results = list(self.get_sandbox().run_batch(batch.tasks))
        return self._finish(batch, results, log_metric, log_extra)

    # ---- the two entry points ------------------------------------------------------------------------------
    async def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        test: Sequence[str | None] | None = None,
        entry_point: Sequence[str | None] | None = None,
        code_prompt: Sequence[str | None] | None = None,
        log_metric: Callable[[str, float], Any] | None = None,
        log_extra: Callable[[str, list], Any] | None = None,
        **kwargs: Any,
    ) -> RewardList:
        """Score a batch without blocking the event loop on execution (TRL's async reward path)."""
        columns = {"test": test, "entry_point": entry_point, "code_prompt": code_prompt}
        self._check_columns(columns, kwargs)
        return await self._ascore(prompts, completions, columns, log_metric, log_extra)

    def score(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        test: Sequence[str | None] | None = None,
        entry_point: Sequence[str | None] | None = None,
        code_prompt: Sequence[str | None] | None = None,
        log_metric: Callable[[str, float], Any] | None = None,
        log_extra: Callable[[str, list], Any] | None = None,
        **kwargs: Any,
    ) -> RewardList:
        """The synchronous twin of ``__call__``: same arguments, same rewards (usable inside a running loop)."""
        columns = {"test": test, "entry_point": entry_point, "code_prompt": code_prompt}
        self._check_columns(columns, kwargs)
        return self._score(prompts, completions, columns, log_metric, log_extra)

    def _check_columns(self, columns: dict[str, Any], kwargs: dict[str, Any]) -> None:
        """In a trainer (TRL passes ``trainer_state``), a ValueError on the first batch when the dataset has no
        ``needs_column`` (a misnamed ``tests``): every row would score None and it would learn from nothing. A
        direct call without the column still scores None per row."""
        if columns[self.needs_column] is not None or "trainer_state" not in kwargs:
            return
        has = [k for k, v in {**columns, **kwargs}.items() if v is not None and k not in TRL_KEYWORDS]
        raise ValueError(
            f"{self.__name__}: reads the columns test (HumanEval's check(candidate) or plain asserts), entry_point "
            f"and code_prompt; this dataset has no {self.needs_column!r} column (it has: "
            f"{', '.join(has) or 'nothing'}): rename yours, or use the stdin/stdout rewards for input/output tests"
        )


class UnitTestReward(CodeReward):
    """1.0 if and only if every test passes (the seed's ``HumanEvalReward``), else 0.0."""

    default_name = "unit_test_reward"

    def _row_reward(self, ex: Extraction, result: Any | None, tests: Any) -> float:
        return all_passed(result)


class PartialTestReward(CodeReward):
    """The fraction of the test's assert statements that pass, each assert run on its own by the sandbox.

    Asserts compare whole values, so a prefix of the expected output earns nothing for that assert (unlike
    open-r1's ``zip()`` line compare). A row on which the sandbox caught a forged verdict earns 0.0 outright.
    """

    default_name = "partial_test_reward"

    def _row_reward(self, ex: Extraction, result: Any | None, tests: Any) -> float:
        return fraction_passed(result)


class FormatReward(CodeReward):
    """1.0 when the completion holds one parseable Python function with the expected name (and a real body).

    Runs nothing, so it needs no sandbox; rows without an ``entry_point`` are unscorable (None).
    """

    default_name = "format_reward"
    needs_sandbox = False
    needs_column = "entry_point"

    def _row_tests(self, row: dict[str, Any], i: int) -> Any | None:
        entry_point = row["entry_point"]
        return (None, entry_point) if isinstance(entry_point, str) and entry_point else None

    def _row_reward(self, ex: Extraction, result: Any | None, tests: Any) -> float:
        return 1.0 if has_implemented_function(ex, tests[1]) else 0.0


class StdioTestReward(CodeReward):
    """1.0 if and only if the program passes every stdin/stdout case (or every call, for call-based rows).

    Reads the tests from the dataset's own columns (``sandbox.formats``). Extra args, besides the base
    class's: ``total_timeout`` (seconds for all cases of one completion; ``timeout`` is per case),
    ``format`` (``"apps"``, ``"code_contests"``, ``"verification_info"``; default: from the columns
    present), ``tests`` (``"hidden"``, the default: only the cases the prompt does not show, so that a lookup
    table of the statement's examples earns nothing; a row whose every case is shown is then unscorable,
    None; ``"all"``: every case), ``splits`` (CodeContests test columns to use; default ``private_tests`` and
    ``generated_tests`` for ``"hidden"``, all three for ``"all"``), ``compare`` (``"lines"`` or ``"tokens"``)
    and ``float_tol`` (see ``sandbox.verdicts``). Logs ``<prefix>/tests_in_prompt_frac``: the share of the
    batch's rows with cases whose every case the prompt shows (``sandbox.formats.shown_cases``), in either
    setting. The cases run in a random order and stop at the first failure (the verdict is the same, the time
    is less).
    """

    default_name = "stdio_test_reward"
    counts_cases = True
    stop_on_failure: ClassVar[bool] = True

    def __init__(
        self,
        name: str | None = None,
        *,
        total_timeout: float | None = 20.0,
        format: str | None = None,
        tests: str = "hidden",
        splits: Sequence[str] | None = None,
        compare: str = "lines",
        float_tol: float | None = None,
        **config: Any,
    ) -> None:
        super().__init__(name, **config)
        if format is not None:
            format_name(format)  # an unknown name fails here, not at the first batch
        if tests not in TEST_SELECTIONS:
            raise ValueError(f"tests must be one of {', '.join(TEST_SELECTIONS)}, got {tests!r}")
        self.total_timeout = total_timeout
        self.format = format
        self.tests = tests
        if splits is None:
            splits = HIDDEN_SPLITS if tests == "hidden" else CODE_CONTESTS_SPLITS
        self.splits = tuple(splits)
        self._prompts: list[Any] = []  # of the batch being prepared (_prepare is synchronous)
        self._all_shown: list[bool] = []
        self.compare = compare
        self.float_tol = float_tol

    def _row_tests(self, row: dict[str, Any], i: int) -> Any | None:
        tests = {name: value for name, value in row.items() if name != "code_prompt"}
        try:
            found = read_tests(tests, self.format, splits=self.splits)
        except ValueError as e:
            raise ValueError(f"{self.__name__}, row {i}: {e}") from None
        if found is None:
            return None
        hidden, all_shown = hide_shown(found, self._prompts[i] if i < len(self._prompts) else None)
        self._all_shown.append(all_shown)
        return hidden if self.tests == "hidden" else found

    def _prepare(
        self, prompts: Sequence[Any] | None, completions: Sequence[Any], columns: dict[str, Any]
    ) -> _Batch:
        self._prompts = _column(prompts, len(completions), "prompts") if completions is not None else []
        self._all_shown = []
        try:
            batch = super()._prepare(prompts, completions, columns)
        finally:
            self._prompts = []
        batch.all_shown = self._all_shown  # type: ignore[attr-defined]
        return batch

    def _finish(
        self,
        batch: _Batch,
        results: Sequence[Any],
        log_metric: Callable[[str, float], Any] | None,
        log_extra: Callable[[str, list], Any] | None,
    ) -> RewardList:
        rewards = super()._finish(batch, results, log_metric, log_extra)
        shown = getattr(batch, "all_shown", [])
        # Rows whose tests the prompt shows in full: a researcher sees the lookup-table hack before it pays.
        extra = {f"{self.metric_prefix}/tests_in_prompt_frac": sum(shown) / len(shown) if shown else 0.0}
        self.last_metrics.update(extra)
        emit(extra, log_metric)
        return rewards

    def _code_prompt(self, row: dict[str, Any], prompt: Any) -> str | None:
        cp = row["code_prompt"]  # never the text prompt: a problem statement is not code
        return cp if isinstance(cp, str) else None

    def _columns(self, code_prompt: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The format columns the dataset has (TRL passes every column as a keyword), and code_prompt."""
        present = {name: kwargs[name] for name in STDIO_COLUMNS if kwargs.get(name) is not None}
        columns = [k for k, v in kwargs.items() if v is not None and k not in TRL_KEYWORDS]
        if self.format is not None:  # named: its own columns must be there (else every row would be None)
            needs = FORMATS[format_name(self.format)]
            if not any(c in present for c in needs):
                raise ValueError(
                    f"{self.__name__}: format {self.format!r} reads {' / '.join(needs)}, which this "
                    f"dataset lacks (it has: {', '.join(columns) or 'nothing'})"
                )
        elif not present:
            try:
                detect_format(columns)
            except ValueError as e:
                raise ValueError(f"{self.__name__}: {e}".replace("in this row", "in this dataset")) from None
        return present | {"code_prompt": code_prompt}

    async def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        code_prompt: Sequence[str | None] | None = None,
        log_metric: Callable[[str, float], Any] | None = None,
        log_extra: Callable[[str, list], Any] | None = None,
        **kwargs: Any,
    ) -> RewardList:
        """Score a batch without blocking the event loop on execution (TRL's async reward path); the test
        columns come in ``kwargs``, as TRL passes every dataset column."""
        return await self._ascore(
            prompts, completions, self._columns(code_prompt, kwargs), log_metric, log_extra
        )

    def score(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        code_prompt: Sequence[str | None] | None = None,
        log_metric: Callable[[str, float], Any] | None = None,
        log_extra: Callable[[str, list], Any] | None = None,
        **kwargs: Any,
    ) -> RewardList:
        """The synchronous twin of ``__call__``."""
        return self._score(prompts, completions, self._columns(code_prompt, kwargs), log_metric, log_extra)

    def _entry_point(self, tests: Any) -> str | None:
        return None  # whole programs (a call-based row's function may be a method of class Solution)

    def _task(self, program: str, tests: Any, code_prompt: str | None) -> dict[str, Any]:
        return task_for(
            program,
            tests,
            timeout=self.timeout,
            total_timeout=self.total_timeout,
            stop_on_failure=self.stop_on_failure,
            compare=self.compare,
            float_tol=self.float_tol,
        )

    def _row_reward(self, ex: Extraction, result: Any | None, tests: Any) -> float:
        return all_passed(result)


class StdioPartialReward(StdioTestReward):
    """The fraction of stdin/stdout cases (or calls) that pass; 0.0 outright when the sandbox caught a forged
    verdict. Every case runs (no stop at the first failure)."""

    default_name = "stdio_partial_reward"
    stop_on_failure = False

    def _row_reward(self, ex: Extraction, result: Any | None, tests: Any) -> float:
        return fraction_passed(result)


REWARDS: dict[str, type[CodeReward]] = {
    "unit_test": UnitTestReward,
    "partial_test": PartialTestReward,
    "stdio_test": StdioTestReward,
    "stdio_partial": StdioPartialReward,
    "format": FormatReward,
}


def make_reward(kind: str, name: str | None = None, **config: Any) -> CodeReward:
    """A configured reward of ``kind`` (a key of ``REWARDS``), whose ``__name__`` is ``name`` (default
    ``<kind>_reward``); ``config`` are the class's keyword arguments (``timeout``, ``memory_mb``,
    ``n_workers``, ``style``, ``sandbox``; the stdin/stdout rewards also take ``total_timeout``, ``format``,
    ``tests``, ``splits``, ``compare``, ``float_tol``)."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward kind {kind!r}; use one of {', '.join(REWARDS)}")
    return REWARDS[kind](name, **config)


# The named factories are make_reward with the kind filled in (and the sandbox settings positional, as before).
def make_unit_test_reward(
    timeout: float = 3.0,
    memory_mb: int = 1024,
    n_workers: int | None = None,
    name: str | None = None,
    **config: Any,
) -> CodeReward:
    """``make_reward("unit_test", ...)``: 1.0 iff all tests pass."""
    return make_reward("unit_test", name, timeout=timeout, memory_mb=memory_mb, n_workers=n_workers, **config)


def make_partial_test_reward(
    timeout: float = 3.0,
    memory_mb: int = 1024,
    n_workers: int | None = None,
    name: str | None = None,
    **config: Any,
) -> CodeReward:
    """``make_reward("partial_test", ...)``: the fraction of asserts that pass."""
    return make_reward(
        "partial_test", name, timeout=timeout, memory_mb=memory_mb, n_workers=n_workers, **config
    )


def make_stdio_test_reward(
    timeout: float = 3.0,
    memory_mb: int = 1024,
    n_workers: int | None = None,
    name: str | None = None,
    **config: Any,
) -> CodeReward:
    """``make_reward("stdio_test", ...)``: 1.0 iff every stdin/stdout case passes (``timeout`` per case)."""
    return make_reward(
        "stdio_test", name, timeout=timeout, memory_mb=memory_mb, n_workers=n_workers, **config
    )


def make_stdio_partial_reward(
    timeout: float = 3.0,
    memory_mb: int = 1024,
    n_workers: int | None = None,
    name: str | None = None,
    **config: Any,
) -> CodeReward:
    """``make_reward("stdio_partial", ...)``: the fraction of stdin/stdout cases that pass."""
    return make_reward(
        "stdio_partial", name, timeout=timeout, memory_mb=memory_mb, n_workers=n_workers, **config
    )


def make_format_reward(name: str | None = None, *, style: str = "auto") -> CodeReward:
    """``make_reward("format", ...)``: 1.0 when the completion holds the expected function."""
    return make_reward("format", name, style=style)
