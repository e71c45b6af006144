"""Reading run directories: `load_run(run_dir)` turns one run's files (run.json, eval_before/after.json,
trainer_state.json, sampled_prompts.jsonl) into a `Run`, the one record the rest of the report reads.

`fresh_prompts_at` is a curve's x (fresh prompts sampled by a logged step); `zero_std_after_kl` names the runs whose
`frac_reward_zero_std` is measured after a KL penalty.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Run:
    """Everything the report needs from one run directory; absent files are None."""

    dir: Path
    method: str  # run.json's method, else the directory name
    seed: Any
    model: str | None
    config: dict[str, Any]
    has_run_json: bool
    model_parameters: int | None
    wall_time_s: float | None
    tokens_per_s: float | None
    budget: dict[str, Any]
    method_hparams: dict[str, Any] | None
    before: dict[str, Any] | None  # eval_before.json
    after: dict[str, Any] | None  # eval_after.json
    log_history: list[dict[str, Any]] | None  # trainer_state.json's
    samples: list[tuple[int, int]] | None  # (step, fresh prompts) per generation batch
    # scorer.json: what scored a run whose eval files predate the stamp (experiments.evaluation.scorer), or None
    declared_scorer: dict[str, Any] | None = None
    label: str = ""  # the method, with the seed when the method has several runs (`run_label`)

    def phase(self, name: str) -> dict[str, Any] | None:
        """eval_before.json ("before") or eval_after.json ("after")."""
        return {"before": self.before, "after": self.after}[name]

    def scorer(self, name: str) -> dict[str, Any] | None:
        """What scored eval_<name>.json: its own `scorer` stamp, else the run's declared scorer.json, else None."""
        ev = self.phase(name) or {}
        if ev.get("scorer"):
            return dict(ev["scorer"])
        return None if self.declared_scorer is None else {"declared": True, **self.declared_scorer}


def _read_json(path: Path) -> Any | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _first(mapping: Mapping[str, Any], *keys: str) -> Any | None:
    for key in keys:
        if mapping.get(key) is not None:
            return mapping[key]
    return None


def _trainer_state(run_dir: Path) -> dict[str, Any] | None:
    state = _read_json(run_dir / "trainer_state.json")
    if state is not None:
        return state
    checkpoints = sorted(
        (p for p in run_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
    )
    return _read_json(checkpoints[-1] / "trainer_state.json") if checkpoints else None


def _safetensors_parameters(run_dir: Path) -> int | None:
    """Parameters in the run's saved `model.safetensors` (its JSON header lists every tensor's shape), for runs
    whose run.json predates `model_parameters`. None without a saved full model (e.g. a LoRA adapter)."""
    path = run_dir / "model.safetensors"
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
    except (OSError, ValueError):
        return None
    return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")


def _sample_log(run_dir: Path) -> list[tuple[int, int]] | None:
    """(the step each generation batch was sampled at, its fresh prompts) from `sampled_prompts.jsonl`
    (experiments.run.budget), or None without it."""
    path = run_dir / "sampled_prompts.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(int(r["step"]), len(r.get("prompts") or [])) for r in rows]


def fresh_prompts_at(run: Run, step: float) -> float | None:
    """The fresh prompts a run had sampled when it logged `step` (the metrics of optimizer step s, whose
    generation batches were sampled at global_step < s): the x of its training curves, which every method of a
    budget shares, where optimizer steps are not (PPO takes two per generation batch). From the run's sample log,
    else from run.json's budget shape (a generation batch every steps_per_generation x num_iterations /
    gradient_accumulation_steps steps); None for a run that records neither."""
    if step <= 0:
        return 0.0
    if run.samples is not None:
        return float(sum(n for at, n in run.samples if at < step))
    b = run.budget or {}
    keys = ("prompts_per_generation", "steps_per_generation", "num_iterations", "gradient_accumulation_steps")
    if any(not isinstance(b.get(k), int | float) or b.get(k) <= 0 for k in keys):
        return None
    per_step = b["gradient_accumulation_steps"] / (b["steps_per_generation"] * b["num_iterations"])
    return float(math.ceil(step * per_step - 1e-9) * b["prompts_per_generation"])


def load_run(run_dir: str | os.PathLike) -> Run:
    """Everything the report needs from one run directory; absent files come back as None."""
    run_dir = Path(run_dir)
    meta = _read_json(run_dir / "run.json") or {}
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    state = _trainer_state(run_dir)
    log_history = list(state.get("log_history", [])) if state else None
    wall = _first(meta, "wall_time_s", "wall_time", "train_runtime")
    if wall is None and log_history:
        wall = next((e["train_runtime"] for e in reversed(log_history) if "train_runtime" in e), None)
    budget = dict(meta["budget"]) if isinstance(meta.get("budget"), Mapping) else {}
    if budget.get("optimizer_steps") is None:
        budget["optimizer_steps"] = _first(meta, "global_step") or (state or {}).get("global_step")
    hparams = meta.get("method_hparams")
    return Run(
        samples=_sample_log(run_dir),
        dir=run_dir,
        config=dict(config),
        model_parameters=meta.get("model_parameters") or _safetensors_parameters(run_dir),
        has_run_json=bool(meta),
        method=str(meta.get("method") or run_dir.name),
        seed=meta["seed"] if meta.get("seed") is not None else config.get("seed"),
        model=_first(meta, "model", "model_name_or_path"),
        wall_time_s=wall,
        tokens_per_s=_first(meta, "tokens_per_s", "train_tokens_per_s"),
        budget=budget,
        method_hparams=dict(hparams) if isinstance(hparams, Mapping) else None,
        before=_read_json(run_dir / "eval_before.json"),
        after=_read_json(run_dir / "eval_after.json"),
        log_history=log_history,
        declared_scorer=_read_json(run_dir / "scorer.json"),
    )


def run_label(run: Run, n_runs_of_method: int) -> str:
    """The run's name in tables and legends: its method, and its seed when the method has several runs."""
    if n_runs_of_method == 1:
        return run.method
    return f"{run.method} (seed {'?' if run.seed is None else run.seed})"


def zero_std_after_kl(run: Run) -> bool:
    """True for TRL's RLOOTrainer with a KL coefficient: it subtracts beta x KL from the rewards before it measures
    their spread per group, so its `frac_reward_zero_std` does not count the groups whose unit-test rewards were
    all equal, as every other method's does (beta is METHODS' 0.05 when run.json does not record it)."""
    beta = (run.method_hparams or {}).get("beta", 0.05)
    return run.method == "rloo" and beta != 0
