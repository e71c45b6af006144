"""Screening the training problems by the starting model's pass rate: keep those that can give a gradient.

A group-relative method learns nothing from a prompt whose completions all pass or all fail (every advantage is
0). DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476, section 3.2) drops such groups and samples again;
PRIME's online prompt filtering (Cui et al. 2025, arXiv:2502.01456) keeps the prompts whose accuracy lies in a
band. `screen_problems` does the same once, before training, at a fixed budget: it samples `n` completions of each
training problem from the starting model, with training's sampling (temperature, top-p, the model's top-k and
repetition penalty when in force, `max_completion_length`, the stop at the end of the code), scores them with the
same reward evaluation uses, and keeps the problems whose pass rate c / n lies in `band` (both ends included).

The screen draws its own samples, from a seed of its own (`screen_seed`), and they are never the "before"
measurement: a set chosen on noisy pass rates and then measured again on those same samples would carry regression
to the mean into the result. Evaluation samples its problems afresh. `screen_training_rows` is the runner's call:
the main process screens, writes `screen.json` into the run's folder (a resumed run reads it back instead of
screening again) and every process keeps the same rows; run.json records it under `screen`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

__all__ = [
    "SCREEN_FILE",
    "ScreenResult",
    "keep_in_band",
    "screen_problems",
    "screen_seed",
    "screen_training_rows",
]

SCREEN_FILE = "screen.json"  # in output_dir


def screen_seed(seed: int) -> int:
    """The screen's sampling seed: derived from the run's seed, never equal to it (evaluation samples with it)."""
    return (int(seed) * 1_000_003 + 7_919) % (2**31 - 1) or 1


def keep_in_band(correct: Mapping[str, int], n: int, band: Sequence[float]) -> list[str]:
    """The task ids whose pass rate `correct[task] / n` lies in `band` ([low, high], both included), in the order
    of `correct`."""
    low, high = float(band[0]), float(band[1])
    return [task for task, c in correct.items() if low <= c / n <= high]


@dataclass(frozen=True)
class ScreenResult:
    """The kept rows (a `datasets.Dataset`, in their original order) and the record for run.json."""

    rows: Any
    record: dict[str, Any]


def screen_problems(
    model: Any,
    tokenizer: Any,
    rows: Any,
    *,
    n: int,
    band: Sequence[float],
    seed: int,
    style: str,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    generation_kwargs: Mapping[str, Any] | None = None,
    stop_at_code_end: bool = True,
    sandbox_kwargs: Mapping[str, Any] | None = None,
    batch_size: int = 8,
) -> ScreenResult:
    """Sample `n` completions of every row of `rows` from `model` (seeded with `screen_seed(seed)`), score them, and
    keep the rows whose pass rate lies in `band`. Returns the kept rows and a record: the settings, each problem's
    passes, the kept task ids."""
    from experiments.evaluation.evaluate import evaluate_model

    if n < 1:
        raise ConfigError(f"screen_n: must be >= 1 to screen, got {n}")
    seed_used = screen_seed(seed)
    result = evaluate_model(
        model,
        tokenizer,
        rows,
        n_samples=n,
        ks=(1,),
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        greedy=False,
        seed=seed_used,
        batch_size=batch_size,
        style=style,
        sandbox_kwargs=sandbox_kwargs,
        progress=False,
        n_bootstrap=100,  # the screen reads each problem's passes, not the intervals
        generation_kwargs=generation_kwargs,
        stop_at_code_end=stop_at_code_end,
    )
    correct = {p.task_id: int(p.correct) for p in result.problems}
    kept = keep_in_band(correct, n, band)
    kept_set = set(kept)
    indices = [i for i, task in enumerate(rows["task_id"]) if str(task) in kept_set]
    record = {
        "n": int(n),
        "band": [float(band[0]), float(band[1])],
        "seed": seed_used,
        "sampling": {
            "temperature": temperature,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "stop_at_code_end": stop_at_code_end,
            **dict(generation_kwargs or {}),
        },
        "problems": len(correct),
        "passes": correct,
        "kept": kept,
        "kept_count": len(kept),
        "truncated": sum(p.n_truncated for p in result.problems),
    }
    return ScreenResult(rows.select(indices), record)


def screen_training_rows(
    exp: Any, cfg: Any, model_path: str, rows: Any, out: Path, state: Any, *, resume: bool = False
) -> tuple[Any, dict[str, Any]]:
    """The runner's screen: the main process screens `rows` with the starting model `model_path` (training's
    sampling from `cfg`) and writes `out/screen.json`, or, resuming, reads the one the first attempt wrote; every
    process then keeps the rows it names. Refuses, in one line, a screen that keeps fewer rows than one generation
    batch needs."""
    import torch

    from experiments.inputs.models import load_model_and_tokenizer

    path = Path(out) / SCREEN_FILE
    if state.is_main_process and not (resume and path.is_file()):
        dtype = torch.float32 if getattr(cfg, "use_cpu", False) or not torch.cuda.is_available() else None
        model, tokenizer = load_model_and_tokenizer(model_path, dtype)
        if not getattr(cfg, "use_cpu", False) and torch.cuda.is_available():
            model.to(torch.device("cuda", 0))
        sampling = {"top_k": cfg.top_k or 0, "min_p": cfg.min_p, "repetition_penalty": cfg.repetition_penalty}
        screened = screen_problems(
            model,
            tokenizer,
            rows,
            n=exp.screen_n,
            band=exp.screen_band,
            seed=cfg.seed,
            style=exp.style,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_completion_length,
            generation_kwargs={k: v for k, v in sampling.items() if v is not None},
            stop_at_code_end=exp.stop_at_code_end,
            sandbox_kwargs={"timeout": exp.reward_timeout, "memory_mb": exp.reward_memory_mb},
            batch_size=exp.eval_batch_size,
        )
        del model
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(screened.record, indent=2, sort_keys=True) + "\n")
    state.wait_for_everyone()
    record = json.loads(path.read_text())
    kept = set(record["kept"])
    kept_rows = rows.select([i for i, task in enumerate(rows["task_id"]) if str(task) in kept])
    group = max(int(cfg.num_generations), 1)
    needed = int(cfg.generation_batch_size) // group
    if len(kept_rows) < max(needed, 1):
        raise ConfigError(
            f"screen_band: the screen kept {len(kept_rows)} of {record['problems']} training problems (pass rates in "
            f"{record['band']} of {record['n']} samples), fewer than the {needed} one generation batch needs; widen "
            "screen_band, raise n_train or set screen_n 0"
        )
    if getattr(exp, "prompts_per_epoch", 0) > len(kept_rows):
        raise ConfigError(
            f"prompts_per_epoch: {exp.prompts_per_epoch} is more than the {len(kept_rows)} problems the screen kept"
        )
    return kept_rows, record


def check_screen_options(n: int, band: Sequence[float]) -> None:
    """A one-line ConfigError for a screen that cannot run: `screen_n` below 0, or a `screen_band` that is not
    [low, high] with 0 <= low <= high <= 1."""
    if n < 0:
        raise ConfigError(f"screen_n: must be >= 0 (0: no screen), got {n}")
    if len(band) != 2 or not 0 <= float(band[0]) <= float(band[1]) <= 1:
        raise ConfigError(f"screen_band: must be [low, high] with 0 <= low <= high <= 1, got {list(band)}")
