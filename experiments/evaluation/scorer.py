"""Which code scored an evaluation: the extraction rules' version (`rewards.extraction.EXTRACTION_VERSION`), the
sandbox's (`sandbox.SANDBOX_VERSION`) and, in a git checkout, the commit. Every evaluation record (eval_*.json),
run.json and report carries this stamp (`scorer_stamp()`), and a report refuses to compare rows whose stamps
name different versions (`scorer_key`, `check_same_scorer`).

A run directory written before the stamp existed can declare what scored it in `scorer.json` (the same keys, with
`declared`: how it is known), read by `experiments.report.runs.load_run` when its eval files carry no stamp.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.errors import DataError

__all__ = ["check_same_scorer", "git_commit", "scorer_key", "scorer_stamp", "scorer_text"]


@functools.cache
def git_commit() -> str | None:
    """The commit of the checkout this package runs from, with `-dirty` when tracked files differ from it; None
    outside a git checkout (an installed wheel) or without git."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 1 else "")


def scorer_stamp() -> dict[str, Any]:
    """{"extraction": version, "sandbox": version, "commit": sha or None}: what scores an evaluation now."""
    from rewards.extraction import EXTRACTION_VERSION
    from sandbox.verdicts import SANDBOX_VERSION

    return {"extraction": EXTRACTION_VERSION, "sandbox": SANDBOX_VERSION, "commit": git_commit()}


def scorer_key(stamp: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    """What decides a verdict: (extraction version, sandbox version); None for a record without a stamp. The commit
    is left out: two commits with the same versions score alike."""
    if not stamp:
        return None
    return (stamp.get("extraction"), stamp.get("sandbox"))


def scorer_text(stamp: Mapping[str, Any] | None) -> str:
    """`extraction v4, sandbox v3 (commit 1a2b3c4d)`, or `not recorded`."""
    if not stamp:
        return "not recorded"
    text = f"extraction v{stamp.get('extraction')}, sandbox v{stamp.get('sandbox')}"
    commit = stamp.get("commit")
    if commit:
        text += f" (commit {str(commit)[:12]})"
    if stamp.get("declared"):
        text += " (declared: no stamp in its records)"
    return text


def check_same_scorer(stamps: Mapping[str, Mapping[str, Any] | None]) -> None:
    """Raise a one-line DataError (a ValueError that `passk` prints as one line) when the rows {label: stamp}
    were scored by different extraction or sandbox versions, or when some rows say what scored them and others do
    not. Rows that all lack a stamp pass: nothing says they differ (the report says the scorer is not recorded)."""
    keys = {label: scorer_key(stamp) for label, stamp in stamps.items()}
    if len(set(keys.values())) <= 1:
        return
    groups: dict[str, list[str]] = {}
    for label, key in keys.items():
        name = "not recorded" if key is None else f"extraction v{key[0]}, sandbox v{key[1]}"
        groups.setdefault(name, []).append(label)
    listed = "; ".join(f"{name}: {', '.join(labels)}" for name, labels in groups.items())
    raise DataError(
        f"report: these rows were scored by different scorers ({listed}); evaluate them again with one "
        "scorer (passk eval) or report them apart"
    )
