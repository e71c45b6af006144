"""A run's settings across its resumes: a resume continues the run as it was set, or is refused.

A run writes its settings (`experiments.run.config.to_dict`) to `output_dir/run_config.json` when it starts. A
resume compares its own with them before anything loads: a changed setting that defines the run (the method, the
model, the data, a learning rate, a seed, ...) is refused in one line naming the setting and both values, since
the run would continue as something else while run.json recorded a value the first steps never used. Only the
settings that cannot change what is trained may change (`RESUME_MAY_CHANGE`: logging, the evaluation's cadence,
threads, saving, the signal grace period) and the run's length (`RUN_LENGTH`: resuming with a larger budget
continues the run further); each change is recorded with the step it takes effect at, in run_config.json and in
run.json's `config_changes`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError
from experiments.run.config import ExperimentArgs, to_dict

__all__ = ["RESUME_MAY_CHANGE", "RUN_CONFIG", "RUN_LENGTH", "resume_changes", "write_run_config"]

RUN_CONFIG = "run_config.json"  # in output_dir: the settings the run started with, and their changes since

# The run's length: a resume may set a larger budget (continue further) or a smaller one not below its step
# (experiments.run.train refuses a checkpoint past max_steps).
RUN_LENGTH = ("max_steps", "budget_prompts", "num_train_epochs")

# Settings that cannot change what is trained: where and how often it logs, evaluates and saves, how many threads
# it computes with, and what it is told or resumed from.
RESUME_MAY_CHANGE = frozenset(
    {
        # passk's (ExperimentArgs)
        "resume",
        "overwrite",
        "num_threads",
        "eval_every_n_steps",
        "eval_before",
        "eval_after",
        "save_model",
        "sigterm_grace_s",
        "not_applicable",
        # the trainer's: logging
        "logging_steps",
        "logging_strategy",
        "logging_first_step",
        "logging_nan_inf_filter",
        "report_to",
        "run_name",
        "project",
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "disable_tqdm",
        "log_level",
        "log_level_replica",
        "log_on_each_node",
        "log_completions",
        "log_completions_hub_repo",
        "log_unique_prompts",
        "log_multimodal",
        "num_completions_to_print",
        "skip_memory_metrics",
        # saving, and where the run is
        "output_dir",
        "resume_from_checkpoint",
        "save_steps",
        "save_strategy",
        "save_total_limit",
        "save_on_each_node",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_token",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        # the launcher's
        "local_rank",
        "ddp_timeout",
        *RUN_LENGTH,
    }
)


# Trainer keys that TRL derives from the batch settings when they are not given.
DERIVED = ("generation_batch_size", "steps_per_generation")


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """The values as run_config.json holds them (JSON, unknown types as strings)."""
    return json.loads(json.dumps(values, default=str))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("config"), dict) else None


def resume_changes(exp: Any, cfg: Any, checkpoint: str | os.PathLike[str], step: int) -> list[dict[str, Any]]:
    """The changes of this resume from `checkpoint` (at optimizer step `step`) to the settings its run started
    with, each `{"step", "key", "from", "to"}`, after those recorded at earlier resumes; a ConfigError naming the
    first setting that defines the run and changed. A run without run_config.json (saved before passk wrote it)
    is not checked: no changes."""
    saved = _read(Path(checkpoint).parent / RUN_CONFIG)
    if saved is None:
        return []
    then = dict(saved["config"])
    earlier = [c for c in saved.get("changes", []) if isinstance(c, dict) and "key" in c]
    for change in earlier:  # the settings as the last attempt ran
        then[change["key"]] = change.get("to")
    now = _plain(to_dict(exp, cfg))
    # passk's own keys first (the method, the model, the data), in their order, then the trainer's, then those TRL
    # derives from others (named after what they come from)
    own = [f.name for f in dataclasses.fields(ExperimentArgs)]
    rest = sorted((set(then) | set(now)) - set(own), key=lambda k: (k in DERIVED, k))
    keys = [k for k in own if k in then or k in now] + rest
    changed = [k for k in keys if then.get(k) != now.get(k)]
    refused = [k for k in changed if k not in RESUME_MAY_CHANGE]
    if refused:
        key = refused[0]
        more = f" (and {len(refused) - 1} more: {', '.join(refused[1:4])})" if len(refused) > 1 else ""
        raise ConfigError(
            f"{key}: the run at {Path(checkpoint).parent} was started with {then.get(key)!r}, this resume gives "
            f"{now.get(key)!r}{more}; a resume continues the run as it was set (only logging, evaluation cadence, "
            "threads, saving and the budget may change): drop the change, or pass --overwrite to start a new run"
        )
    new = [
        {"step": step, "key": k, "from": then.get(k), "to": now.get(k)}
        for k in changed
        if k not in ("resume", "overwrite", "resume_from_checkpoint", "not_applicable")
    ]
    return earlier + new


def write_run_config(
    out: Path, exp: Any, cfg: Any, changes: list[dict[str, Any]], checkpoint: str | None
) -> None:
    """output_dir/run_config.json: at a start, the settings; at a resume, those the run started with (from the
    checkpoint's run) and `changes`."""
    saved = _read(Path(checkpoint).parent / RUN_CONFIG) if checkpoint else None
    config = saved["config"] if saved is not None else _plain(to_dict(exp, cfg))
    data = {"config": config, "changes": changes}
    (out / RUN_CONFIG).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
