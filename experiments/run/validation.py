"""Every check of a parsed config that can fail before any model is loaded, as a one-line `ConfigError`.

- `check_types(values, classes, source)`: a YAML value of the wrong type for its field;
- `apply_budget(exp, cfg, explicit)`: the budget rules (`budget_prompts` owns `max_steps`, `prompts_per_epoch`
  turns shuffling off, `model_generation_config` owns the sampling keys) and the values they derive;
- `validate(exp, cfg)`: ranges (`NUMERIC_RANGES`, `check_numbers`) and combinations TRL would reject after the
  model loads (generation batch not divisible by `num_generations`, fewer training prompts than one batch needs);
- `check_output_dir(exp, cfg)`: an `output_dir` holding an earlier run's files; `sharded_weights()`: FSDP / ZeRO-3.

The names a config may give come from the modules that define them: the sampling keys from experiments.inputs.models,
the built-in rewards from experiments.inputs.reward_funcs (neither imports the config).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import types
import typing
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from experiments.errors import ConfigError
from experiments.inputs.models import MODEL_SAMPLING_KEYS, low_precision_step_problem
from experiments.inputs.reward_funcs import BUILTIN_REWARDS
from experiments.inputs.screening import check_screen_options

if TYPE_CHECKING:
    from experiments.run.config import ExperimentArgs

# The named datasets; any other `dataset:` is a local file or folder, or a hub id.
DATASETS = ("humaneval", "learnable")


def _type_ok(value: Any, tp: Any) -> bool:
    """Loose check of a YAML value against a field type. Strings pass for scalars (argparse converts them,
    e.g. `1e-6`, which YAML 1.1 reads as a string); types this does not understand pass (the dataclass decides)."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in args)
    if tp is type(None):
        return value is None
    if origin is Literal:
        return value in args
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if isinstance(value, str):
            return True
        if not isinstance(value, list | tuple):
            return False
        return not args or all(_type_ok(v, args[0]) for v in value)
    if origin is dict or tp is dict:
        return isinstance(value, dict | str)
    if tp is bool:
        return isinstance(value, bool | str)
    if tp is int:
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    if tp is float:
        return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return isinstance(value, tp | str)
    return True


def check_types(values: dict[str, Any], classes: Sequence[type], source: str) -> None:
    """A ConfigError naming the first key of `values` (read from `source`) whose value does not fit its field's type
    in `classes`."""
    hints: dict[str, Any] = {}
    for cls in classes:
        try:
            cls_hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: skip the check, argparse still converts
            cls_hints = {}
        for f in dataclasses.fields(cls):
            hints.setdefault(f.name, cls_hints.get(f.name, Any))
    for key, value in values.items():
        if key in hints and not _type_ok(value, hints[key]):
            tp = getattr(hints[key], "__name__", None) or str(hints[key]).replace("typing.", "")
            raise ConfigError(f"{key}: {value!r} (from {source}) is not a valid {tp}")


def apply_budget(exp: ExperimentArgs, cfg: Any, explicit: set[str]) -> None:
    """budget_prompts -> max_steps; the prompt schedule turns shuffling off; model_generation_config owns the
    sampling keys it reads from the model."""
    from experiments.run.budget import derive_max_steps

    for key in ("budget_prompts", "prompts_per_epoch"):
        if getattr(exp, key) < 0:
            raise ConfigError(f"{key}: must be >= 0, got {getattr(exp, key)}")
    if exp.budget_prompts:
        if "max_steps" in explicit:
            raise ConfigError(
                f"max_steps: derived per method from budget_prompts ({exp.budget_prompts} fresh prompts); pass "
                "--budget_prompts N instead, or --budget_prompts 0 to give max_steps yourself"
            )
        cfg.max_steps = derive_max_steps(exp.budget_prompts, cfg)
    if exp.prompts_per_epoch:
        if not exp.budget_prompts:
            raise ConfigError(
                "prompts_per_epoch: the schedule needs budget_prompts (how many prompts it holds)"
            )
        if exp.prompts_per_epoch > exp.n_train:
            raise ConfigError(
                f"prompts_per_epoch: {exp.prompts_per_epoch} is more than n_train ({exp.n_train})"
            )
        if "shuffle_dataset" in explicit and cfg.shuffle_dataset:
            raise ConfigError(
                "shuffle_dataset: must be false with prompts_per_epoch (the schedule sets the order)"
            )
        cfg.shuffle_dataset = False
    if exp.model_generation_config:
        taken = [k for k in MODEL_SAMPLING_KEYS if k in explicit]
        if taken:
            raise ConfigError(
                f"{taken[0]}: model_generation_config takes it from the model's generation_config; set one of them"
            )


def _world_size() -> int:
    return max(int(os.environ.get("WORLD_SIZE", "1") or 1), 1)


# The range of each numeric setting (ExperimentArgs and the methods' trainer configs) that torch, transformers or
# TRL would accept at parse time and then fail on after the model has loaded, or silently misuse. None (unset) is
# always allowed; every float must also be finite.
_AT_LEAST_0 = (
    "learning_rate",
    "critic_learning_rate",
    "vf_lr",
    "weight_decay",
    "max_grad_norm",
    "warmup_steps",
    "beta",
    "epsilon",
    "epsilon_high",
    "delta",
    "kl_coef",
    "cliprange_value",
    "cliprange",
    "entropy_coef",
    "entropy_coef_min",
    "entropy_coef_max",
    "entropy_coef_delta",
    "label_smoothing_factor",
    "num_train_epochs",
    "top_k",
    "seed",
    "data_seed",
    "dataloader_num_workers",
    "save_total_limit",
    "neftune_noise_alpha",
    "eval_delay",
)


_ABOVE_0 = (
    "temperature",
    "logprob_temperature",
    "adam_epsilon",
    "repetition_penalty",
    "logging_steps",
    "save_steps",
    "eval_steps",
    "ddp_timeout",
    "vllm_server_timeout",
    "sapo_temperature_neg",
    "sapo_temperature_pos",
    "reward_memory_mb",
)


_AT_LEAST_1 = (
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "num_iterations",
    "steps_per_generation",
    "generation_batch_size",
    "max_completion_length",
    "max_prompt_length",
    "num_generations_eval",
    "ref_model_sync_steps",
    "vllm_tensor_parallel_size",
)


NUMERIC_RANGES: dict[str, tuple[float | None, float | None, str]] = {
    **{k: (0, None, ">= 0") for k in _AT_LEAST_0},
    **{k: (0, None, "> 0") for k in _ABOVE_0},
    **{k: (1, None, ">= 1") for k in _AT_LEAST_1},
    **{
        k: (0, 1, "in [0, 1]")
        for k in ("min_p", "top_entropy_quantile", "ref_model_mixup_alpha", "lam", "gamma", "warmup_ratio")
    },
    **{k: (0, 1, "in (0, 1]") for k in ("top_p", "vllm_gpu_memory_utilization")},
    **{k: (0, 1, "in [0, 1)") for k in ("adam_beta1", "adam_beta2")},
    "max_steps": (-1, None, ">= -1 (-1: num_train_epochs decides)"),
}


def _in_range(value: float, low: float | None, high: float | None, rule: str) -> bool:
    if low is not None and (value < low or (value == low and rule.startswith(("> ", "in (")))):
        return False
    return high is None or value < high or (value == high and not rule.endswith(")"))


def check_numbers(*configs: Any) -> None:
    """A ConfigError naming the first numeric setting of `configs` that is not finite or is out of its range
    (`NUMERIC_RANGES`)."""
    for config in configs:
        for f in dataclasses.fields(config):
            value = getattr(config, f.name, None)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{f.name}: must be a finite number, got {value}")
            if f.name in NUMERIC_RANGES and not _in_range(value, *NUMERIC_RANGES[f.name]):
                raise ConfigError(f"{f.name}: must be {NUMERIC_RANGES[f.name][2]}, got {value}")


def validate(exp: ExperimentArgs, cfg: Any, *, world_size: int | None = None) -> None:
    """Check values that would otherwise fail late (after the model loads) or silently (0 training steps)."""
    ws = world_size or _world_size()
    check_numbers(exp, cfg)
    from experiments.inputs.data import looks_like_path

    if (
        exp.dataset not in DATASETS
        and not Path(exp.dataset).expanduser().exists()
        and looks_like_path(exp.dataset)
    ):
        raise ConfigError(
            f"dataset: {exp.dataset!r} is neither {' nor '.join(DATASETS)} nor an existing file or folder (nor a "
            "hub id, name or org/name)"
        )
    positive = (
        "n_train",
        "eval_n",
        "eval_max_new_tokens",
        "eval_batch_size",
        "eval_processes",
        "num_threads",
    )
    for key in positive:
        minimum = 0 if key == "num_threads" else 1
        if getattr(exp, key) < minimum:
            raise ConfigError(f"{key}: must be >= {minimum}, got {getattr(exp, key)}")
    for key in ("n_eval", "split_seed", "warm_start_steps", "eval_every_n_steps", "sigterm_grace_s"):
        if getattr(exp, key) < 0:
            raise ConfigError(f"{key}: must be >= 0, got {getattr(exp, key)}")
    if not exp.eval_ks:
        raise ConfigError("eval_ks: needs at least one k")
    bad_k = [k for k in exp.eval_ks if not 1 <= k <= exp.eval_n]
    if bad_k:
        k, fix = bad_k[0], ""
        if k > exp.eval_n:
            fix = f"; raise --eval_n to {max(exp.eval_ks)} or leave k={k} out of --eval_ks"
        raise ConfigError(f"eval_ks: k={k} is outside 1..eval_n ({exp.eval_n}){fix}")
    if not exp.eval_temperature > 0:
        raise ConfigError(f"eval_temperature: must be > 0, got {exp.eval_temperature}")
    if not 0 < exp.eval_top_p <= 1:
        raise ConfigError(f"eval_top_p: must be in (0, 1], got {exp.eval_top_p}")
    if exp.reward_timeout <= 0:
        raise ConfigError(f"reward_timeout: must be > 0, got {exp.reward_timeout}")
    if exp.reward_stdio_tests not in ("hidden", "all"):
        raise ConfigError(f"reward_stdio_tests: must be 'hidden' or 'all', got {exp.reward_stdio_tests!r}")
    if not exp.reward_funcs:
        raise ConfigError("reward_funcs: needs at least one reward")
    for name in exp.reward_funcs:
        if name not in BUILTIN_REWARDS and "." not in name and ":" not in name:
            raise ConfigError(
                f"reward_funcs: unknown reward {name!r}; use {', '.join(BUILTIN_REWARDS)} "
                f"or a dotted path module.attr"
            )
    if exp.use_peft and (exp.lora_r < 1 or exp.lora_alpha < 1):
        raise ConfigError(
            f"lora_r: LoRA needs lora_r >= 1 and lora_alpha >= 1, got {exp.lora_r}/{exp.lora_alpha}"
        )
    if not 0 <= exp.lora_dropout < 1:
        raise ConfigError(f"lora_dropout: must be in [0, 1), got {exp.lora_dropout}")
    if exp.warm_start_steps and exp.dataset != "learnable":
        raise ConfigError(
            "warm_start_steps: only the learnable task has a warm start; set dataset: learnable"
        )
    if exp.resume and getattr(cfg, "resume_from_checkpoint", None):
        raise ConfigError("resume: set either resume (last checkpoint) or resume_from_checkpoint (a path)")

    if exp.eval_every_n_steps and sharded_weights():
        raise ConfigError(
            "eval_every_n_steps: FSDP / DeepSpeed ZeRO-3 shard the weights across ranks and PassAtKCallback "
            "generates on the main process only; set it to 0 (eval_after reloads the saved model)"
        )

    if exp.skip_zero_gradient_steps:
        from experiments.trainers.zero_gradient import unsupported_setup

        problem = unsupported_setup(_launcher_distribution(), getattr(cfg, "fp16", False), cfg.max_grad_norm)
        if problem:
            raise ConfigError(problem)

    # The CPU rule of this project: explicit, so that a GPU config never silently runs (slowly) on CPU.
    if getattr(cfg, "use_cpu", False):
        for key in ("bf16", "fp16", "activation_checkpointing", "gradient_checkpointing"):
            if getattr(cfg, key, False):
                raise ConfigError(f"{key}: must be false when use_cpu is true")
    if exp.eval_processes > 1 and (not getattr(cfg, "use_cpu", False) or ws > 1):
        raise ConfigError(
            f"eval_processes: {exp.eval_processes} forks CPU evaluation processes; it needs use_cpu: true and a "
            f"single training process (this run: use_cpu {getattr(cfg, 'use_cpu', False)}, {ws} processes)"
        )

    # TRL checks these only when the trainer is built, i.e. after the model has loaded. The fewest completions per
    # prompt is the config class's own rule, checked when it was parsed (see experiments.trainers).
    g = int(getattr(cfg, "num_generations", 0) or 0)
    gen_batch = _generation_batch(cfg, ws)
    if g and gen_batch % g:
        raise ConfigError(
            f"num_generations: the generation batch ({gen_batch} = per_device_train_batch_size x {ws} "
            f"process(es) x steps_per_generation) is not divisible by num_generations={g}"
        )
    if g and exp.n_train < gen_batch // g:
        raise ConfigError(
            f"n_train: {exp.n_train} prompts are fewer than the {gen_batch // g} one generation batch needs "
            f"(TRL would train 0 steps)"
        )
    _check_run_length(cfg)
    precision = low_precision_step_problem(
        getattr(cfg, "model_init_kwargs", None), cfg.learning_rate, use_peft=exp.use_peft
    )
    if precision:
        raise ConfigError(precision)
    check_screen_options(exp.screen_n, exp.screen_band)
    if (
        exp.stop_at_code_end
        and getattr(cfg, "use_vllm", False)
        and getattr(cfg, "mask_truncated_completions", False)
    ):
        raise ConfigError(
            "mask_truncated_completions: vLLM returns a completion stopped at the end of its code without EOS, which "
            "TRL would mask as truncated; set stop_at_code_end false, or generate with transformers (use_vllm false)"
        )


def _check_run_length(cfg: Any) -> None:
    """A run's length is max_steps, or, for max_steps -1, num_train_epochs. transformers counts epochs only for a
    negative max_steps (`Trainer.set_initial_training_values`): max_steps 0 would train one step."""
    if cfg.max_steps == 0:
        raise ConfigError(
            "max_steps: 0 is no run length; give max_steps >= 1, or -1 to let num_train_epochs decide"
        )
    if cfg.max_steps < 0 and cfg.num_train_epochs <= 0:
        raise ConfigError("max_steps: set max_steps > 0 or num_train_epochs > 0")


def check_writable_dir(path: str | os.PathLike[str], name: str = "output_dir") -> None:
    """A one-line ConfigError (`name`: the key or flag that gave it) when `path` cannot be a folder this process
    writes in: a file is there, or on the way there, or the nearest folder that exists takes no new file (read-only,
    not ours, /proc). Nothing is left behind; checked before any model loads, instead of a traceback after."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{name}: {target} is a file, not a folder; give another {name}")
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"{name}: cannot make {target}: {existing} is a file, not a folder; give another {name}"
        )
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as e:
        made = "write in" if existing == target else f"make {target} in"
        raise ConfigError(
            f"{name}: cannot {made} {existing} ({e.strerror or e}); give a folder you can write to"
        ) from None


def check_output_dir(exp: ExperimentArgs, cfg: Any) -> None:
    """Refuse an `output_dir` that cannot be made or written (`check_writable_dir`), or that already holds files,
    unless the run continues it (`resume`, `resume_from_checkpoint`) or replaces it (`overwrite`): a run would
    overwrite the model and run.json and leave the earlier run's checkpoints beside its own."""
    if exp.overwrite and (exp.resume or getattr(cfg, "resume_from_checkpoint", None)):
        raise ConfigError(
            "overwrite: set either overwrite (start afresh) or resume (continue the run), not both"
        )
    out = Path(cfg.output_dir)
    check_writable_dir(out)
    if exp.overwrite or exp.resume or getattr(cfg, "resume_from_checkpoint", None) or not out.is_dir():
        return
    held = sorted(p.name for p in out.iterdir())
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        # --resume continues from a whole checkpoint (trainer_state.json written last) or finds the run finished.
        resumable = (out / "run.json").is_file() or any(
            (p / "trainer_state.json").is_file() for p in out.glob("checkpoint-*")
        )
        if not resumable:
            raise ConfigError(
                f"output_dir: {out} already holds files ({shown}) of a run that saved no checkpoint, so --resume "
                "cannot continue it; pass --overwrite to start it again, or another --output_dir"
            )
        raise ConfigError(
            f"output_dir: {out} already holds files ({shown}); pass --overwrite to replace them, "
            "--resume true to continue that run, or another --output_dir"
        )


def _launcher_distribution() -> str:
    """The launcher's distribution under `accelerate launch` (read from its environment): FSDP, DEEPSPEED or NO."""
    for kind in ("FSDP", "DEEPSPEED"):
        if os.environ.get(f"ACCELERATE_USE_{kind}", "").lower() == "true":
            return kind
    return "NO"


def sharded_weights() -> bool:
    """True under `accelerate launch` with FSDP or DeepSpeed ZeRO-3 (read from the launcher's environment)."""
    kind = _launcher_distribution()
    return kind == "FSDP" or (
        kind == "DEEPSPEED" and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3"
    )


def _generation_batch(cfg: Any, world_size: int) -> int:
    # GRPOConfig/RLOOConfig derive generation_batch_size in __post_init__ with the real world size.
    if getattr(cfg, "generation_batch_size", None):
        return int(cfg.generation_batch_size)
    return int(cfg.per_device_train_batch_size) * world_size * int(cfg.gradient_accumulation_steps)
