"""The command line and the YAML file, read into `(ExperimentArgs, <method config>)`: `parse_config`.

Precedence, lowest first: the config class's own defaults, passk's defaults (`PASSK_TRAINER_DEFAULTS`), the
method's `MethodSpec.defaults`, the YAML file, the command line. `method` is read first (command line, then YAML)
because it decides which config class the rest is parsed into.

A shared budget file (one without `method:`) keeps comparisons fair by construction: it may not set a method's
own hyperparameters (`MethodSpec.hparams`: KL coefficients, baselines, PPO's critic and λ, clipping, epochs),
and a key that only some methods' configs have (`logprob_temperature`, `loss_normalization`) applies to those
and is listed in `ExperimentArgs.not_applicable` for the others. `budget_prompts` sets every method's optimizer
steps (experiments.run.budget), `output_dir` may hold `{method}`.

Every problem is a `ConfigError` whose message is one line naming the key, raised before any model is loaded:
an unknown key here, a value of the wrong type, out of range or in a combination TRL would reject after loading
the model in experiments.run.validation. Also here, the argv helpers the CLI shares (`split_config_argv`,
`cli_value`, `bool_flag`, `flag_keys`, `drop_flags`, `join_negative_values`, TRL's flag names, `overrides_for`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from experiments.errors import ConfigError
from experiments.run.config import (
    DEVICE_KEYS,
    PASSK_TRAINER_DEFAULTS,
    ExperimentArgs,
    method_hparam_owners,
    method_spec,
)
from experiments.run.validation import apply_budget, check_types, validate


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


def _value_follows(args: Sequence[str], i: int) -> bool:
    """Whether args[i + 1] is the value of the flag args[i]: there is one and it is no option. argparse reads a
    `--` token as the next option, and TRL's boolean flags take their value optionally (`--bf16` alone is true)."""
    return i + 1 < len(args) and not args[i + 1].startswith("--")


def cli_value(args: Sequence[str], key: str) -> str | None:
    """The value of `--key value` / `--key=value` in args, or None (also for a bare `--key`)."""
    for i, a in enumerate(args):
        if a == f"--{key}" and _value_follows(args, i):
            return args[i + 1]
        if a.startswith(f"--{key}="):
            return a.split("=", 1)[1]
    return None


def bool_flag(args: Sequence[str], key: str) -> bool | None:
    """A boolean flag as TRL's parser reads it: None when absent, True for a bare `--key`."""
    value = cli_value(args, key)
    if value is not None:
        return _as_bool(value)
    return True if f"--{key}" in args else None


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


def list_fields(*classes: type) -> set[str]:
    """The fields of the dataclasses `classes` that hold a list (`eval_ks`, `reward_funcs`, `report_to`, ...)."""
    names = set()
    for cls in classes:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: no list fields known
            continue
        for f in dataclasses.fields(cls):
            tp = hints.get(f.name)
            union = typing.get_origin(tp) in (typing.Union, types.UnionType)
            options = [o for o in (typing.get_args(tp) if union else (tp,)) if o is not type(None)]
            # list alone (or with None): argparse takes several values; `str | list` takes one string
            if options and all(typing.get_origin(o) is list or o is list for o in options):
                names.add(f.name)
    return names


def split_list_values(args: Sequence[str], keys: set[str]) -> list[str]:
    """`--eval_ks 1,10` (and `--eval_ks=1,10`) as `--eval_ks 1 10` for a list field of `keys`, the way `--methods`
    and `--seeds` take commas; argparse would read "1,10" as one value and refuse it."""
    out: list[str] = []
    listing = False
    for a in args:
        name, eq, value = a[2:].partition("=") if a.startswith("--") else ("", "", "")
        if name:
            listing = name in keys and not eq
            if name in keys and eq and "," in value:
                out += [f"--{name}", *(v for v in value.split(",") if v)]
                continue
        elif listing and "," in a:
            out += [v for v in a.split(",") if v]
            continue
        out.append(a)
    return out


def _as_bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "y", "t")


def drop_flags(args: Sequence[str], flags: Mapping[str, bool]) -> list[str]:
    """args without each `--flag` of `flags`: with the value after it when `flags[flag]` (it takes a value) and
    one follows, or `--flag=value`."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        name = a[2:].split("=", 1)[0] if a.startswith("--") else None
        if name in flags:
            skip = flags[name] and "=" not in a and _value_follows(args, i)
            continue
        out.append(a)
    return out


def flag_keys(args: Sequence[str]) -> list[str]:
    """The keys of the `--key value` / `--key=value` flags in args, in order."""
    return [a[2:].split("=", 1)[0] for a in args if a.startswith("--") and len(a) > 2]


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

    cli = split_list_values(join_negative_values(cli), list_fields(ExperimentArgs, config_cls))
    explicit = set(data) | set(flag_keys(cli))
    parser = trl_parser_cls()((ExperimentArgs, config_cls), allow_abbrev=False)
    layered = {**PASSK_TRAINER_DEFAULTS, **dict(spec.defaults), **data}
    if device_free:
        asked = {k: layered.get(k) for k in DEVICE_KEYS}
        asked.update({k: v for k in DEVICE_KEYS if (v := bool_flag(cli, k)) is not None})
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
    apply_budget(exp, cfg, explicit)
    validate(exp, cfg)
    return exp, cfg


def _one_line(e: BaseException, fields: Sequence[str] = ()) -> str:
    """First line of a config class's error, prefixed with the key it is about when the text names one."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    if "bf16/gpu" in first:
        return (
            f"bf16: {first} On CPU set use_cpu: true, bf16: false, activation_checkpointing: false "
            f"(as experiments/configs/cpu.yaml does)."
        )
    batch = re.match(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)", first)
    if batch:  # TRL names the batch it derives; say which flags make it
        return (
            f"num_generations: the generation batch ({batch.group(1)} completions = per_device_train_batch_size x "
            f"processes x steps_per_generation) is not divisible by num_generations ({batch.group(2)}); change "
            "--num_generations or --per_device_train_batch_size"
        )
    if "generations per prompt" in first or "divisible by num_generations" in first:
        return f"num_generations: {first}"
    named = sorted((f for f in fields if re.search(rf"\b{re.escape(f)}\b", first)), key=first.find)
    if named and not first.startswith(f"{named[0]}:"):
        return f"{named[0]}: {first}"
    return first
