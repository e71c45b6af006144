"""Unit-test reward functions in TRL 1.16's calling convention, scored on the ``sandbox`` pool.

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns)`` where
``columns`` holds every dataset column except ``prompt``/``completion``/``completion_ids`` as a list aligned
with the completions, plus ``trainer_state``, ``log_extra`` and ``log_metric``. It expects
``list[float | None]`` (None becomes NaN and drops out of the means).

Each reward here is an object with an ``async def __call__`` (TRL's ``is_async_callable`` detects it and runs it
concurrently with other async rewards on its event-loop thread) and a stable ``__name__`` (TRL logs
``rewards/<__name__>/mean``). ``.score(...)`` is the synchronous twin with the same arguments and results.
The objects hold only plain configuration, so they pickle; the sandbox pool is looked up per call through
``sandbox.get_sandbox(**kwargs)``, which keeps one warm pool per configuration in each process.

Scoring rules:

* ``None`` only for a row with no tests (``test`` missing or blank); every failing completion gets a number.
* Garbage that extraction rejects scores 0.0 and is counted in ``<prefix>/extract_<reason>_frac``.
* A sandbox error scores 0.0 (counted in ``<prefix>/sandbox_error_frac``), never None: a broken executor
  shows up in the metrics instead of silently shrinking the batch.
* The code prompt is the sandbox's trusted code: the tests call the prompt's own helpers (HumanEval/32's
  ``poly``), so a completion that redefines or rebinds them changes only its own copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .extraction import Extraction, completion_text, extract_code, has_implemented_function
from .metrics import FORGED_EXIT_FLAGS, batch_metrics, emit, status_name

__all__ = [
    "CodeReward",
    "FormatReward",
    "PartialTestReward",
    "UnitTestReward",
    "make_format_reward",
    "make_partial_test_reward",
    "make_unit_test_reward",
]

RewardList = list[float | None]


@dataclass
class _Batch:
    texts: list[str]
    extractions: list[Extraction | None]
    unscorable: list[bool]
    task_rows: list[int]
    tasks: list[dict[str, Any]]
    entry_points: list[str | None]


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


def _has_test(test: Any) -> bool:
    return isinstance(test, str) and bool(test.strip())


class CodeReward:
    """Base class: extraction, batching onto the sandbox, metrics. Subclasses set ``kind`` and ``_row_reward``.

    Args:
        name: the ``__name__`` TRL logs the reward under.
        timeout: wall-clock seconds per program (sandbox ``timeout``).
        memory_mb: address-space cap per program (sandbox ``memory_mb``).
        n_workers: sandbox worker processes; None lets the sandbox choose (one per CPU), or, when
            ``LOCAL_WORLD_SIZE`` > 1 (``accelerate launch`` / ``torchrun``), this process's share of the CPUs.
        style: extraction style, ``"auto"``, ``"completion"`` or ``"chat"`` (see ``rewards.extraction``).
        metric_prefix: prefix of the logged metrics; defaults to ``name`` without a trailing ``_reward``.
        sandbox: an explicit sandbox object (anything with ``run_batch``/``arun_batch``); by default the shared
            ``sandbox.get_sandbox(timeout=..., memory_mb=..., n_workers=...)``.
    """

    kind: ClassVar[str] = "code"
    needs_sandbox: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
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
        from sandbox import get_sandbox  # lazy: format_reward and extraction work without the executor

        return get_sandbox(**self.sandbox_kwargs())

    def _task(self, program: str, test: str, entry_point: str | None, code_prompt: str | None) -> dict[str, Any]:
        task = {"program": program, "tests": test, "entry_point": entry_point}
        if code_prompt:  # the tests see the prompt's own helpers (HumanEval's poly), never the completion's
            task["trusted_code"] = code_prompt
        return task

    # ---- one batch ---------------------------------------------------------------------------------------
    def _prepare(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        test: Sequence[Any] | None,
        entry_point: Sequence[Any] | None,
        code_prompt: Sequence[Any] | None,
    ) -> _Batch:
        if completions is None:
            raise ValueError("completions is required")
        completions = list(completions)
        n = len(completions)
        prompts_l = _column(prompts, n, "prompts")
        tests = _column(test, n, "test")
        entries = _column(entry_point, n, "entry_point")
        code_prompts = _column(code_prompt, n, "code_prompt")

        batch = _Batch([], [], [], [], [], entries)
        for i, completion in enumerate(completions):
            text = completion_text(completion)
            batch.texts.append(text if isinstance(text, str) else "")
            # A text prompt (completion style) is the code prompt when no code_prompt column is given.
            cp = code_prompts[i] if code_prompts[i] is not None else prompts_l[i]
            cp = cp if isinstance(cp, str) else None
            scorable = self._scorable(tests[i], entries[i])
            batch.unscorable.append(not scorable)
            if not scorable:
                batch.extractions.append(None)
                continue
            ex = extract_code(cp, completion, entries[i], style=self.style)
            batch.extractions.append(ex)
            if ex.ok and self.needs_sandbox:
                batch.task_rows.append(i)
                batch.tasks.append(self._task(ex.code, tests[i], entries[i], cp))
        return batch

    def _scorable(self, test: Any, entry_point: Any) -> bool:
        return _has_test(test)

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
                rewards.append(self._row_reward(ex, by_row[i], batch.entry_points[i]))
                labels.append(status_name(by_row[i]) if by_row[i] is not None else "ok")

        self.last_metrics = batch_metrics(
            self.metric_prefix,
            batch.texts,
            batch.extractions,
            by_row,
            batch.unscorable,
            with_execution=self.needs_sandbox,
        )
        emit(self.last_metrics, log_metric)
        if log_extra is not None:
            log_extra(f"{self.metric_prefix}/status", labels)
        return rewards

    def _row_reward(self, ex: Extraction, result: Any | None, entry_point: str | None) -> float:
        raise NotImplementedError

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
        batch = self._prepare(prompts, completions, test, entry_point, code_prompt)
        results: list[Any] = []
        if batch.tasks:
            results = list(await self.get_sandbox().arun_batch(batch.tasks))
        return self._finish(batch, results, log_metric, log_extra)

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
        batch = self._prepare(prompts, completions, test, entry_point, code_prompt)
        results: list[Any] = []
        if batch.tasks:
            results = list(self.get_sandbox().run_batch(batch.tasks))
        return self._finish(batch, results, log_metric, log_extra)


class UnitTestReward(CodeReward):
    """1.0 if and only if every test passes (the seed's ``HumanEvalReward``), else 0.0."""

    kind = "unit_test"

    def _row_reward(self, ex: Extraction, result: Any | None, entry_point: str | None) -> float:
        return 1.0 if result is not None and status_name(result) == "passed" else 0.0


class PartialTestReward(CodeReward):
    """The fraction of the test's assert statements that pass, each assert run on its own by the sandbox.

    Asserts compare whole values, so a prefix of the expected output earns nothing for that assert (unlike
    open-r1's ``zip()`` line compare). A row on which the sandbox caught a forged verdict earns 0.0 outright.
    """

    kind = "partial_test"

    def _row_reward(self, ex: Extraction, result: Any | None, entry_point: str | None) -> float:
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


class FormatReward(CodeReward):
    """1.0 when the completion holds one parseable Python function with the expected name (and a real body).

    Runs nothing, so it needs no sandbox; rows without an ``entry_point`` are unscorable (None).
    """

    kind = "format"
    needs_sandbox = False

    def _scorable(self, test: Any, entry_point: Any) -> bool:
        return isinstance(entry_point, str) and bool(entry_point)

    def _row_reward(self, ex: Extraction, result: Any | None, entry_point: str | None) -> float:
        return 1.0 if has_implemented_function(ex, entry_point) else 0.0


def make_unit_test_reward(
    timeout: float = 3.0,
    memory_mb: int = 1024,
    n_workers: int | None = None,
    name: str | None = None,
    *,
    style: str = "auto",
    sandbox: Any | None = None,
) -> UnitTestReward:
    """A configured all-tests-pass reward; ``name`` (default ``"unit_test_reward"``) is its ``__name__``."""
    return UnitTestReward(
        name or "unit_test_reward",
        timeout=timeout,
        memory_mb=memory_mb,
        n_workers=n_workers,
        style=style,
        sandbox=sandbox,
    )


def make_partial_test_reward(
    timeout: float = 3.0,
    memory_mb: int = 1024,
    n_workers: int | None = None,
    name: str | None = None,
    *,
    style: str = "auto",
    sandbox: Any | None = None,
) -> PartialTestReward:
    """A configured fraction-of-asserts reward; ``name`` defaults to ``"partial_test_reward"``."""
    return PartialTestReward(
        name or "partial_test_reward",
        timeout=timeout,
        memory_mb=memory_mb,
        n_workers=n_workers,
        style=style,
        sandbox=sandbox,
    )


def make_format_reward(name: str | None = None, *, style: str = "auto") -> FormatReward:
    """A configured format reward; ``name`` defaults to ``"format_reward"``."""
    return FormatReward(name or "format_reward", style=style)
