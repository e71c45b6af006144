"""counts.json: the per-problem counts behind a report, compact, written beside report.md so that a committed report
can be recomputed without its run directories (which hold checkpoints and logs and are rarely committed).

Per run: the run.json keys the report reads, and per evaluation (before, after) its settings, scorer, its metrics and one row per problem, [task_id, n, correct, greedy_passed, first_sample_passed, mean_reward, entropy]; no
completions, no checkpoints. `runs_from_counts(path, into)` writes those back as run directories that
`build_report` reads: every table but the training curves (trainer_state.json is not kept) comes back the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.report.runs import Run

__all__ = ["COLUMNS", "counts_record", "runs_from_counts"]

COLUMNS = ("task_id", "n", "correct", "greedy_passed", "first_sample_passed", "mean_reward", "entropy")
EVAL_KEYS = ("n", "num_problems", "ks", "settings", "scorer", "n_bootstrap", "confidence")


def _phase(ev: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if ev is None:
        return None
    rows = []
    for p in ev.get("problems") or []:
        first = p.get("first_sample_passed")
        if first is None and p.get("rewards"):
            first = p["rewards"][0] >= 1.0
        rows.append(
            [
                p["task_id"],
                p["n"],
                p["correct"],
                p.get("greedy_passed"),
                first,
                p.get("mean_reward"),
                p.get("entropy"),
            ]
        )
    return {
        **{key: ev[key] for key in EVAL_KEYS if key in ev},
        "metrics": dict(ev.get("metrics") or {}),
        "eval_tokens_per_s": (ev.get("timing") or {}).get("tokens_per_s"),
        "problems": rows,
    }


def counts_record(runs: Sequence[Run], out_dir: str | os.PathLike) -> dict[str, Any]:
    """The content of counts.json for these runs (paths relative to `out_dir`)."""
    out = []
    for run in runs:
        meta: dict[str, Any] = {
            "method": run.method,
            "seed": run.seed,
            "model": run.model,
            "wall_time_s": run.wall_time_s,
            "tokens_per_s": run.tokens_per_s,
            "budget": run.budget,
            "method_hparams": run.method_hparams,
            "config": run.config,
            "model_parameters": run.model_parameters,
        }
        out.append(
            {
                "run": os.path.relpath(run.dir, out_dir),
                "run_json": meta,
                "declared_scorer": run.declared_scorer,
                "before": _phase(run.before),
                "after": _phase(run.after),
            }
        )
    return {"columns": list(COLUMNS), "runs": out}


def _eval_back(phase: Mapping[str, Any]) -> dict[str, Any]:
    problems = [dict(zip(COLUMNS, row)) for row in phase["problems"]]
    ev = {key: phase[key] for key in EVAL_KEYS if key in phase}
    ev["metrics"] = dict(phase.get("metrics") or {})
    ev["timing"] = {"tokens_per_s": phase.get("eval_tokens_per_s")}
    ev["problems"] = problems
    return ev


def runs_from_counts(path: str | os.PathLike, into: str | os.PathLike) -> list[Path]:
    """Write counts.json's runs back as run directories under `into` (named as the runs were, relative to the
    report), and return them in the report's order."""
    data = json.loads(Path(path).read_text())
    dirs = []
    for item in data["runs"]:
        run_dir = Path(into) / item["run"].replace("..", "_up")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text(json.dumps(item["run_json"]))
        if item.get("declared_scorer"):
            (run_dir / "scorer.json").write_text(json.dumps(item["declared_scorer"]))
        for phase in ("before", "after"):
            if item.get(phase) is not None:
                (run_dir / f"eval_{phase}.json").write_text(json.dumps(_eval_back(item[phase])))
        dirs.append(run_dir)
    return dirs
