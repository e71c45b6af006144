"""The sampling budget: the fresh prompts and completions a run samples, planned before it and counted during it.

Methods are compared on what the model sees. A budget file gives `budget_prompts`, the fresh prompts to sample
(each with `num_generations` completions); this module turns it into each method's optimizer steps, so that a
method that reuses every generation batch for `num_iterations` epochs (PPO) gets as many fresh samples as the
others, and more optimizer steps:

    prompts per generation = generation_batch_size / num_generations          (TRL: completions, all processes)
    generations            = budget_prompts / prompts per generation
    optimizer steps        = generations x steps_per_generation x num_iterations / gradient_accumulation_steps

`prompt_schedule` lays the training rows out as the seed experiment drew them (each epoch a fresh random draw of
`prompts_per_epoch` of the training prompts), for a trainer that walks its rows in order; `scheduled_rows` applies
it to a config's training rows.

`SampleLog` counts what a trainer really sampled: every trainer (GRPOTrainer, RLOOTrainer and ours on them) calls
`_calculate_rewards(inputs, prompts, completions, completion_ids)` once per generation batch on every process,
with that process's rows and its completions cut after EOS. The log records, per generation batch, the prompts
(by `task_id`), the completions and the tokens generated, gathered across processes; the runner writes it to
`sampled_prompts.jsonl` and its totals to run.json's `budget`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

__all__ = [
    "CHECKPOINT_SAMPLES_FILE",
    "SAMPLES_FILE",
    "BudgetError",
    "SampleLog",
    "budget_record",
    "derive_max_steps",
    "generation_period",
    "generation_shape",
    "prompt_schedule",
]

SAMPLES_FILE = "sampled_prompts.jsonl"  # in output_dir; and in each checkpoint, for resuming the count
CHECKPOINT_SAMPLES_FILE = "passk_sampled_prompts.jsonl"


class BudgetError(ConfigError):
    """A budget that cannot be met exactly. The message is one line and starts with the key to change."""


def generation_shape(cfg: Any) -> dict[str, int]:
    """What one generation batch holds and how often it comes, as TRL's config resolved it (`__post_init__`
    derives `generation_batch_size` / `steps_per_generation` from each other and the world size)."""
    group = int(cfg.num_generations)
    gen_batch = int(cfg.generation_batch_size)
    return {
        "num_generations": group,
        "generation_batch_size": gen_batch,
        "prompts_per_generation": gen_batch // max(group, 1),
        "steps_per_generation": int(cfg.steps_per_generation),
        "num_iterations": int(getattr(cfg, "num_iterations", 1) or 1),
        "gradient_accumulation_steps": int(cfg.gradient_accumulation_steps),
    }


def generation_period(cfg: Any) -> int:
    """Optimizer steps from one fresh generation batch to the next in step with the optimizer: a run stopped
    (checkpointed) at a multiple of it resumes exactly where an uninterrupted run would be. Stopped in between,
    TRL's trainers would sample that generation batch's prompts again on resume, since the batch they were
    training on is not saved in the checkpoint."""
    import math

    shape = generation_shape(cfg)
    micro = shape["steps_per_generation"] * shape["num_iterations"]  # micro-batches per generation batch
    accumulation = shape["gradient_accumulation_steps"]
    return math.lcm(micro, accumulation) // accumulation


def derive_max_steps(budget_prompts: int, cfg: Any) -> int:
    """The optimizer steps in which `cfg`'s method samples exactly `budget_prompts` fresh prompts."""
    shape = generation_shape(cfg)
    per_generation = shape["prompts_per_generation"]
    if per_generation < 1 or budget_prompts % per_generation:
        raise BudgetError(
            f"budget_prompts: {budget_prompts} is not a multiple of the {per_generation} prompt(s) one generation "
            f"batch holds (generation_batch_size {shape['generation_batch_size']} / num_generations "
            f"{shape['num_generations']}; steps_per_generation {shape['steps_per_generation']} sets how many "
            "optimizer steps' worth it holds)"
        )
    generations = budget_prompts // per_generation
    micro_steps = generations * shape["steps_per_generation"] * shape["num_iterations"]
    if micro_steps % shape["gradient_accumulation_steps"]:
        raise BudgetError(
            f"gradient_accumulation_steps: {generations} generation batches x steps_per_generation "
            f"{shape['steps_per_generation']} x num_iterations {shape['num_iterations']} = {micro_steps} "
            f"micro-batches do not fill whole optimizer steps of {shape['gradient_accumulation_steps']}"
        )
    return micro_steps // shape["gradient_accumulation_steps"]


def prompt_schedule(n_rows: int, prompts_per_epoch: int, total: int, seed: int) -> list[int]:
    """Row indices in the seed experiment's order: each epoch a fresh random draw of `prompts_per_epoch` of the
    `n_rows` prompts without replacement (`np.random.choice(train_prompts, size=20, replace=False)`), epochs
    concatenated until `total` prompts (the last epoch may be cut short). Seeded, so every method of a comparison
    gets the same schedule."""
    import numpy as np

    if not 1 <= prompts_per_epoch <= n_rows:
        raise BudgetError(f"prompts_per_epoch: must be in 1..n_train ({n_rows}), got {prompts_per_epoch}")
    rng = np.random.default_rng(seed)
    order: list[int] = []
    while len(order) < total:
        order.extend(int(i) for i in rng.choice(n_rows, size=prompts_per_epoch, replace=False))
    return order[:total]


def scheduled_rows(exp: Any, train_rows: Any, seed: int) -> Any:
    """The training rows in the order the trainer will walk them: with `prompts_per_epoch`, the seed's schedule of
    `budget_prompts` rows (`prompt_schedule`, seeded with the training seed; the config turned
    the trainer's shuffling off); else the rows unchanged."""
    if not exp.prompts_per_epoch:
        return train_rows
    return train_rows.select(
        prompt_schedule(len(train_rows), exp.prompts_per_epoch, exp.budget_prompts, seed)
    )


def _prompt_key(row: dict[str, Any]) -> str:
    task_id = row.get("task_id")
    if task_id is not None:
        return str(task_id)
    return (
        "sha256:"
        + hashlib.sha256(json.dumps(row.get("prompt"), sort_keys=True, default=str).encode()).hexdigest()[:16]
    )


class SampleLog:
    """Counts the prompts, completions and tokens a trainer samples for training (see the module docstring).

    `SampleLog(trainer)` wraps the trainer's `_calculate_rewards` on the instance; every process must build one
    (the counts are gathered across processes at each generation batch). Only the main process keeps them.
    """

    def __init__(self, trainer: Any, previous: Sequence[dict[str, Any]] = ()):
        from accelerate.utils import gather_object

        self.generations: list[dict[str, Any]] = list(previous)
        self._trainer = trainer
        self._gather = gather_object
        self._group = max(int(trainer.num_generations), 1)
        original = trainer._calculate_rewards

        def counted(inputs, prompts, completions, completion_ids_list):
            if trainer.model.training:
                self._record(inputs, completion_ids_list)
            return original(inputs, prompts, completions, completion_ids_list)

        trainer._calculate_rewards = counted

    def _record(self, inputs: Sequence[dict[str, Any]], completion_ids: Sequence[Sequence[int]]) -> None:
        local = [([_prompt_key(row) for row in inputs], sum(len(ids) for ids in completion_ids))]
        gathered = self._gather(local)  # one (prompt keys, tokens) pair per process, in process order
        if not self._trainer.accelerator.is_main_process:
            return
        keys = [key for part, _ in gathered for key in part]
        self.generations.append(
            {
                "step": int(self._trainer.state.global_step),
                # RepeatSampler lays each prompt's completions side by side, across processes too.
                "prompts": keys[:: self._group],
                "completions": len(keys),
                "tokens": int(sum(tokens for _, tokens in gathered)),
            }
        )

    def totals(self) -> dict[str, Any]:
        """fresh_prompts, fresh_completions, tokens_generated, generation_batches and the prompts' digest."""
        prompts = [key for g in self.generations for key in g["prompts"]]
        return {
            "fresh_prompts": len(prompts),
            "fresh_completions": sum(g["completions"] for g in self.generations),
            "tokens_generated": sum(g["tokens"] for g in self.generations),
            "generation_batches": len(self.generations),
            "prompt_sequence_sha256": hashlib.sha256("\n".join(prompts).encode()).hexdigest(),
        }

    def write(self, path: str | Path) -> None:
        """One JSON line per generation batch: step, prompts, completions, tokens."""
        Path(path).write_text("".join(json.dumps(g) + "\n" for g in self.generations))

    @staticmethod
    def read(path: str | Path) -> list[dict[str, Any]]:
        """The generation batches `write` wrote (an empty list if the file does not exist)."""
        p = Path(path)
        if not p.is_file():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def checkpoint_callback(self) -> Any:
        """A TrainerCallback that saves the log into each checkpoint, so that a resumed run counts from there."""
        from transformers import TrainerCallback
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        log = self

        class _SaveSampleLog(TrainerCallback):
            def on_save(self, args, state, control, **kwargs):
                if state.is_world_process_zero:
                    folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
                    if folder.is_dir():
                        log.write(folder / CHECKPOINT_SAMPLES_FILE)

        return _SaveSampleLog()


def budget_record(
    exp: Any, cfg: Any, log: SampleLog, optimizer_steps: int, num_processes: int, max_steps_from: str
) -> dict[str, Any]:
    """run.json's `budget`: what was counted (fresh prompts, completions, tokens, optimizer steps) and the inputs
    that planned it."""
    return {
        **log.totals(),
        "optimizer_steps": int(optimizer_steps),
        "budget_prompts": int(exp.budget_prompts),
        "prompts_per_epoch": int(exp.prompts_per_epoch),
        "max_steps": int(cfg.max_steps),
        "max_steps_from": max_steps_from,
        "per_device_train_batch_size": int(cfg.per_device_train_batch_size),
        "num_processes": int(num_processes),
        "shuffle_dataset": bool(getattr(cfg, "shuffle_dataset", True)),
        **generation_shape(cfg),
    }
