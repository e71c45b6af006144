"""Per-batch reward-hacking and health signals, under stable metric names.

Every call logs the same set of names (zeros included), so that TRL's per-step averages and the comparison
report line up across steps and runs. Fractions are over all completions in the batch.

``<prefix>/<status>_frac``          one per sandbox status (passed, failed, timeout, memory_exceeded, syntax_error,
                                    runtime_error, output_limit, sandbox_error, invalid_input)
``<prefix>/forged_exit_frac``       sandbox caught a forged verdict (any of ``sandbox.FLAGS``: ``early_exit``,
                                    ``unencodable_value``, ``protocol_violation``, ``forged_verdict``,
                                    ``crash_after_output``)
``<prefix>/flagged_frac``           any sandbox flag at all
``<prefix>/case_<verdict>_frac``    stdin/stdout rewards only: the share of the batch's cases with each verdict
                                    (passed, wrong_answer, timeout, runtime_error, memory_exceeded,
                                    output_limit, skipped), over the cases of the rows that ran
``<prefix>/extract_<reason>_frac``  one per extraction failure reason, plus ``extract_cut_frac`` (trailing
                                    top-level code dropped)
``<prefix>/no_test_frac``           rows that could not be scored (reward None)
``<prefix>/no_body_frac``           function rows only: the program defines the entry point with no body beyond a
                                    docstring, ``pass`` or ``...`` (the prompt's stub given back)
``<prefix>/completion_chars``       mean completion length in characters
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sandbox import CASE_VERDICTS, FORGED_FLAGS, STATUSES  # the sandbox's one list of each

from .extraction import EXTRACT_FAILURE_REASONS, Extraction, has_empty_body

__all__ = ["FORGED_EXIT_FLAGS", "STATUSES", "batch_metrics", "emit"]

# The sandbox's own lists (one home: sandbox/verdicts.py); FORGED_EXIT_FLAGS: "tried to fake a verdict, caught".
FORGED_EXIT_FLAGS: frozenset[str] = FORGED_FLAGS


def status_name(result: Any) -> str:
    status = getattr(result, "status", "sandbox_error")
    return str(getattr(status, "value", status))


def batch_metrics(
    prefix: str,
    texts: Sequence[str],
    extractions: Sequence[Extraction | None],
    results: Sequence[Any | None],
    unscorable: Sequence[bool],
    *,
    with_execution: bool = True,
    with_cases: bool = False,
    entry_points: Sequence[str | None] | None = None,
) -> dict[str, float]:
    """Compute the metric dict for one batch; ``results[i]`` is None for rows that were not executed.
    ``entry_points`` (function rewards) adds ``no_body_frac``."""
    n = max(len(texts), 1)
    out: dict[str, float] = {}
    if with_execution:
        statuses = [status_name(r) for r in results if r is not None]
        for s in STATUSES:
            out[f"{prefix}/{s}_frac"] = statuses.count(s) / n
        flags = [set(getattr(r, "flags", ()) or ()) for r in results if r is not None]
        out[f"{prefix}/forged_exit_frac"] = sum(bool(f & FORGED_EXIT_FLAGS) for f in flags) / n
        out[f"{prefix}/flagged_frac"] = sum(bool(f) for f in flags) / n
    if with_cases:
        cases = [c for r in results if r is not None for c in (getattr(r, "cases", ()) or ())]
        for verdict in CASE_VERDICTS:
            out[f"{prefix}/case_{verdict}_frac"] = cases.count(verdict) / max(len(cases), 1)
    reasons = [e.reason for e in extractions if e is not None]
    for reason in EXTRACT_FAILURE_REASONS:
        out[f"{prefix}/extract_{reason}_frac"] = reasons.count(reason) / n
    out[f"{prefix}/extract_cut_frac"] = sum(bool(e is not None and e.cut) for e in extractions) / n
    out[f"{prefix}/no_test_frac"] = sum(bool(u) for u in unscorable) / n
    if entry_points is not None:
        stubs = sum(e is not None and has_empty_body(e, ep) for e, ep in zip(extractions, entry_points))
        out[f"{prefix}/no_body_frac"] = stubs / n
    out[f"{prefix}/completion_chars"] = sum(len(t) for t in texts) / n
    return out


def emit(metrics: dict[str, float], log_metric: Callable[[str, float], Any] | None) -> None:
    """Send each metric to TRL's ``log_metric`` (sorted, so every rank logs in the same order)."""
    if log_metric is None:
        return
    for name in sorted(metrics):
        log_metric(name, float(metrics[name]))
