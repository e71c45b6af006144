"""run.json: what a run was (config, seed, method, model, versions, device) and what it cost (wall time, tokens,
the budget counted), written by `experiments.run.train.run` and read by `experiments.report`.

- `run_record(...)`: the run's identity and timing;
- `run_budget_record(...)`: the keys about fairness: the method's own hyperparameters (`method_hparams`), the
  samples counted (`budget`), the sampling settings applied (`sampling`) and the shared keys this method's config
  does not have (`not_applicable`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.evaluation.scorer import scorer_stamp
from experiments.inputs.models import model_source
from experiments.run.config import to_dict

if TYPE_CHECKING:
    from experiments.run.config import ExperimentArgs

__all__ = ["run_budget_record", "run_record"]


def _last_logged(history: Sequence[dict[str, Any]], key: str) -> Any:
    return next((h[key] for h in reversed(history) if key in h), None)


def _tokens_at(checkpoint: str) -> float:
    """The tokens a checkpoint's run had trained (the last `num_tokens` in its trainer_state.json), else 0."""
    path = Path(checkpoint) / "trainer_state.json"
    try:
        history = json.loads(path.read_text()).get("log_history", [])
    except (OSError, ValueError):
        return 0
    return _last_logged(history, "num_tokens") or 0


def run_record(
    exp: ExperimentArgs,
    cfg: Any,
    trainer: Any,
    train_output: Any,
    model_path: str,
    resume_from: str | None,
    t_start: float,
    train_seconds: float,
    before: dict | None,
    after: dict | None,
    num_processes: int,
) -> dict[str, Any]:
    """The content of run.json."""
    import torch
    import transformers
    import trl

    history = trainer.state.log_history
    num_tokens = _last_logged(history, "num_tokens") or trainer.state.num_input_tokens_seen or 0
    # Tokens are counted from the start of training; a resumed run trained here only those after its checkpoint.
    tokens_here = num_tokens - (_tokens_at(resume_from) if resume_from else 0)
    record: dict[str, Any] = {
        "method": exp.method,
        "seed": cfg.seed,
        "model": exp.model,
        "model_path": model_path,
        # what a passk-built folder was made from (packages, GGUF sha256, quantization); None for a hub id
        "model_source": model_source(model_path),
        # parameters() yields a tied weight once; with LoRA, the base's and the adapter's
        "model_parameters": sum(
            p.numel() for p in trainer.accelerator.unwrap_model(trainer.model).parameters()
        ),
        "output_dir": str(cfg.output_dir),
        "config": to_dict(exp, cfg),
        "global_step": trainer.state.global_step,
        "num_processes": num_processes,
        "resumed_from": resume_from,
        "wall_time_s": time.time() - t_start,
        "train_time_s": train_seconds,
        "train_runtime_s": (train_output.metrics or {}).get("train_runtime"),
        "num_tokens": num_tokens,
        "tokens_per_s": (tokens_here / train_seconds) if train_seconds > 0 else None,
        "eval_tokens_per_s": {
            name: (d.get("timing") or {}).get("tokens_per_s") if d else None
            for name, d in (("before", before), ("after", after))
        },
        "scorer": scorer_stamp(),  # the extraction rules' and the sandbox's versions, the commit
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "device": "cpu" if getattr(cfg, "use_cpu", False) or not torch.cuda.is_available() else "cuda",
        "torch_threads": torch.get_num_threads(),
    }
    return record


def run_budget_record(
    exp: ExperimentArgs, cfg: Any, trainer: Any, samples: Any, num_processes: int, sampling: dict[str, Any]
) -> dict[str, Any]:
    """The run.json keys about fairness: `method_hparams` (the method's own values, flat), `budget` (fresh prompts,
    completions and tokens counted, optimizer steps, and the inputs), `sampling` (what generation applied) and
    `not_applicable` (keys of the shared file this method's config does not have)."""
    from experiments.run.budget import budget_record
    from experiments.trainers import method_hparams

    source = "budget_prompts" if exp.budget_prompts else "max_steps"
    return {
        "method_hparams": method_hparams(exp.method or "", cfg),
        "budget": budget_record(exp, cfg, samples, trainer.state.global_step, num_processes, source),
        "sampling": sampling,
        "not_applicable": dict(exp.not_applicable),
    }
