"""`passk`: train one method, evaluate a model, compare methods side by side, or run the CPU demo.

    passk train CONFIG --method M [--key value ...]      one run (same as `python -m experiments.train`)
    passk train CONFIG --method M --accelerate_config cpu|multi_gpu|PATH [--num_processes N] [--key value ...]
                                                         the same run through `accelerate launch`
    passk train CONFIG --method M --check [--all] [--key value ...]
                                                         parse and check the config, print it (passk's keys, then
                                                         what differs from TRL's defaults; --all: every key),
                                                         load nothing
    passk train [CONFIG [--method M]] --help [--all]    the methods, budget files and keys with CONFIG's values
                                                         (--all: TRL's every key too)
    passk eval MODEL [--config CONFIG] [--out FILE] [--key value ...]
                                                         pass@k of a model, run directory or checkpoint
    passk compare CONFIG [--methods all|a,b] [--out DIR] [--seed N | --seeds 0,1,2] [--key value ...]
                                                         every method on the budget in CONFIG, one report
    passk demo [--out DIR] [--methods a,b,...]           the seven original methods on CPU, tiny model, learnable task

CONFIG is a budget file: a YAML path or the name of a file in experiments/configs/ (seed, cpu, demo, smollm2,
smollm2_learnable), shared by every method. `--key value` overrides any key (ExperimentArgs or the method's
trainer config), as in TRL's scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.errors import USER_ERRORS, CliError, ConfigError
from experiments.run.argv import (
    cli_value,
    did_you_mean,
    drop_flags,
    flag_keys,
    join_negative_values,
    load_yaml,
    overrides_for,
    parse_config,
    rename_trl_flags,
    split_config_argv,
    trl_parser_cls,
)
from experiments.run.compare import REPO_ROOT, ComparisonInterrupted, check_run_dirs, child_env, compare
from experiments.run.config import ExperimentArgs, config_path, method_spec
from experiments.run.stopping import exit_status, sigterm_interrupts
from experiments.run.validation import check_types, check_writable_dir

ACCELERATE_CONFIG_DIR = REPO_ROOT / "accelerate_configs"
DEMO_CONFIG = "demo"
DEMO_OUT = "runs/demo"


def _pop_flag(args: list[str], name: str, *, has_value: bool = True) -> str | bool | None:
    """Remove `--name value` / `--name=value` (or a bare `--name`) from args and return its value."""
    for i, a in enumerate(args):
        if a == f"--{name}":
            if not has_value:
                del args[i]
                return True
            if i + 1 >= len(args):
                raise CliError(f"--{name} needs a value")
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if has_value and a.startswith(f"--{name}="):
            del args[i]
            return a.split("=", 1)[1]
    return None


def _resolve_config(args: list[str]) -> list[str]:
    """Replace the CONFIG argument by its path (a bare name is looked up in experiments/configs/)."""
    path, rest = split_config_argv(args)
    if path is None:
        raise CliError("a CONFIG (YAML path or experiments/configs/ name) is required")
    return [str(config_path(path)), *rest]


def accelerate_config_path(name: str) -> Path:
    """A file in accelerate_configs/ by name (`cpu`, `multi_gpu`, ...) or any path."""
    p = Path(name)
    if p.is_file():
        return p
    for candidate in (ACCELERATE_CONFIG_DIR / name, ACCELERATE_CONFIG_DIR / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    known = ", ".join(sorted(f.stem for f in ACCELERATE_CONFIG_DIR.glob("*.yaml")))
    raise CliError(f"--accelerate_config: no file {name!r}; choose one of {known} or pass a path")


# ----------------------------------------------------------------------------------------------------- train


def accelerate_command(
    config_args: Sequence[str], accelerate_config: str, num_processes: int | None = None
) -> list[str]:
    """The `accelerate launch ... -m experiments.train ...` command for a run."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(accelerate_config_path(accelerate_config)),
    ]
    if num_processes:
        cmd += ["--num_processes", str(num_processes)]
    return [*cmd, "-m", "experiments.train", *config_args]


def launch(cmd: Sequence[str]) -> int:
    """Run `cmd` (an `accelerate launch`) and return its exit status. A SIGTERM sent to this process alone (a
    container's first process, a scheduler's batch shell) is passed on to it, which passes it to every rank, and
    this process waits for it to end: ended at once, it would leave the ranks training. Ctrl-C reaches the whole
    terminal's process group, so it is not passed on (the ranks would read a second one as "stop at once")."""
    import signal

    import psutil  # accelerate's dependency

    def pass_on(signum: int, frame: Any) -> None:
        for child in psutil.Process().children():  # the launcher, started below by this process
            with contextlib.suppress(psutil.NoSuchProcess):
                child.send_signal(signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, pass_on) if main_thread else None
    try:
        return subprocess.call(list(cmd), env=child_env())
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def cmd_train(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args:
        raise CliError(
            "train needs a CONFIG and a method: passk train CONFIG --method M [--key value ...] "
            "(passk train --help)"
        )
    if args[0] in ("-h", "--help"):
        _print_train_help()
        return 0
    acc = _pop_flag(args, "accelerate_config")
    nproc = _pop_flag(args, "num_processes")
    check = bool(_pop_flag(args, "check", has_value=False))
    show_all = bool(_pop_flag(args, "all", has_value=False))
    args = _resolve_config(args)
    if "--help" in args or "-h" in args:
        return _print_config_help(args, show_all)
    if check:  # no accelerator is touched: a GPU config checks out on a CPU machine too
        _print_config(*parse_config(args, device_free=True), show_all=show_all)
        return 0
    if show_all:
        raise CliError("--all goes with --check (it lists the trainer config's keys left at their defaults)")
    exp, cfg = parse_config(args)  # fail here, in the launcher, before any process or model starts
    if acc:
        cmd = accelerate_command(args, str(acc), int(nproc) if nproc else None)
        print("passk: " + shlex.join(cmd), flush=True)
        return launch(cmd)
    if nproc:
        raise CliError("--num_processes needs --accelerate_config")
    from experiments.run.train import interrupted_message, nothing_to_resume, run

    finished = nothing_to_resume(exp, cfg)
    try:
        out = run(exp, cfg)
    except KeyboardInterrupt as stopped:  # Ctrl-C or SIGTERM (experiments.run.stopping)
        # The command as typed (its CONFIG by name, not resolved to a path), plus --resume true.
        print(interrupted_message(list(argv), cfg), file=sys.stderr)
        return exit_status(stopped)
    if not finished:  # a finished run resumed: run said there was nothing to do
        print(f"passk: run written to {out}")
    return 0


def _field_default(f: Any) -> Any:
    import dataclasses
    from enum import Enum

    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return dataclasses.MISSING
    return value.value if isinstance(value, Enum) else value


def _print_config(exp: Any, cfg: Any, *, show_all: bool = False) -> None:
    """The resolved config as YAML: passk's own keys (ExperimentArgs) first, then the trainer config's keys that
    differ from its class defaults (set by passk, the method, the budget file or the command line), then, with
    `show_all`, those left at TRL's defaults."""
    import dataclasses

    import yaml

    from experiments.run.config import DEVICE_KEYS, to_dict
    from experiments.trainers import method_hparams

    def plain(value: Any) -> Any:
        return json.loads(json.dumps(value, default=str))

    data = plain(to_dict(exp, cfg))
    own = [f.name for f in dataclasses.fields(ExperimentArgs)]
    # The defaults as TRL resolves them (its __post_init__ fills some in), on the CPU as --check parses; the
    # device keys against the class's own defaults.
    with warnings.catch_warnings():  # TRL's own default for the deprecated name, not the user's to fix
        warnings.filterwarnings(
            "ignore", message=r"`gradient_checkpointing\S*` is deprecated", category=FutureWarning
        )
        baseline = plain(
            type(cfg)(output_dir=str(cfg.output_dir), use_cpu=True, bf16=False, fp16=False).to_dict()
        )
    baseline.update(
        {f.name: plain(_field_default(f)) for f in dataclasses.fields(cfg) if f.name in DEVICE_KEYS}
    )
    trainer = {k: v for k, v in data.items() if k not in own}
    unchanged = {k for k, v in trainer.items() if k in baseline and baseline[k] == v}

    def dump(values: dict[str, Any]) -> None:
        print(yaml.safe_dump(values, sort_keys=False) if values else "", end="")

    print("# passk (ExperimentArgs)")
    dump({k: data[k] for k in own if k in data})
    print(f"# {type(cfg).__name__}: set by passk, the method, the budget file or the command line")
    dump({k: trainer[k] for k in sorted(trainer) if k not in unchanged})
    if show_all:
        print(f"# {type(cfg).__name__}: TRL / transformers defaults, unchanged")
        dump({k: trainer[k] for k in sorted(unchanged)})
    else:
        print(
            f"# {len(unchanged)} more {type(cfg).__name__} keys at their TRL / transformers defaults "
            "(--check --all lists them)"
        )
    values = method_hparams(exp.method, cfg)
    # A config without the key takes log π at the sampling temperature (TRL's trainers): say where the value is from.
    derived = {"logprob_temperature": "temperature"} if not hasattr(cfg, "logprob_temperature") else {}
    hparams = ", ".join(
        f"{k}={v}" + (f" (= {derived[k]})" if k in derived else "") for k, v in values.items()
    )
    print(f"# {exp.method} hyperparameters (METHODS): {hparams}")
    budget = f"{exp.budget_prompts} fresh prompts, " if exp.budget_prompts else ""
    print(f"# budget: {budget}max_steps {cfg.max_steps}, {cfg.num_generations} completions per prompt")
    if exp.model_generation_config:
        print(
            "# sampling: top_k, min_p and repetition_penalty are read from the model's generation_config when it "
            "loads (recorded in run.json under sampling)"
        )
    for key, reason in exp.not_applicable.items():
        own = f"; {exp.method} uses {key}={values[key]}, above" if key in values else ""
        print(f"# not used by {exp.method}: the budget file's {key} ({reason}{own})")
    print(f"# OK: {exp.method} with {type(cfg).__name__}; nothing was loaded, no accelerator was touched")


def _clip(text: str, width: int) -> str:
    """`text`, or as many of its words as fit in `width` characters with "…" after them (never a cut word)."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip(" ,;:(") + "…"


def _help_line(name: str, value: Any, text: str, width: int = 34) -> str:
    """`  --name value   first sentence of the help` for the help screens."""
    from enum import Enum

    value = value.value if isinstance(value, Enum) else value
    shown = json.dumps(value, default=str) if isinstance(value, list | dict) else str(value)
    flag = f"  --{name} {shown}"
    first = " ".join(str(text or "").split())
    first = _clip(first.split(". ")[0].rstrip("."), 100)
    return f"{flag:<{width}} {first}" if len(flag) < width else f"{flag}\n{'':<{width}} {first}"


def _methods_help() -> list[str]:
    from experiments.trainers import METHODS

    lines = ["Methods (--method, or --methods a,b for passk compare):"]
    for name, spec in METHODS.items():
        defining = ", ".join(f"{k}={v}" for k, v in spec.defaults.items()) or spec.paper.split(",")[0]
        lines.append(f"  {name:<15} {spec.trainer_cls.__name__:<17} {defining}".rstrip())
    return lines


def _configs_help() -> list[str]:
    from experiments.run.config import shipped_configs

    lines = ["Budget files (CONFIG: a name below or a YAML path), shared by every method:"]
    for path in shipped_configs():
        first = next(
            (ln.lstrip("# ").strip() for ln in path.read_text().splitlines() if ln.startswith("#")), ""
        )
        lines.append(f"  {path.stem:<18} {_clip(first, 90)}")
    return lines


def _passk_keys_help(exp: Any | None) -> list[str]:
    """passk's own keys (ExperimentArgs): each with its value (a budget file's, when `exp` is parsed from one)."""
    import dataclasses

    lines = []
    for f in dataclasses.fields(ExperimentArgs):
        if not f.init:
            continue
        value = getattr(exp, f.name) if exp is not None else _field_default(f)
        if f.name == "method" and value is None:
            value = "M"
        lines.append(_help_line(f.name, value, f.metadata.get("help", "")))
    return lines


def _print_train_help() -> None:
    """`passk train --help`: the usage, the methods, the budget files and passk's own keys."""
    print(
        "usage: passk train CONFIG --method M [--key value ...]\n"
        "       passk train CONFIG --method M --check [--all]   the resolved config; loads nothing\n"
        "       passk train CONFIG [--method M] --help [--all]  the keys with CONFIG's values\n"
    )
    print("\n".join(_methods_help()), end="\n\n")
    print("\n".join(_configs_help()), end="\n\n")
    print(
        "passk's keys (ExperimentArgs), at their defaults (a budget file sets its own; --key value overrides):"
    )
    print("\n".join(_passk_keys_help(None)))
    print(
        "\nThe trainer's keys (TRL's GRPOConfig / RLOOConfig and the methods' configs): "
        "passk train CONFIG --method M --help [--all]"
    )


def _print_config_help(args: list[str], show_all: bool = False) -> int:
    """`passk train CONFIG [--method M] --help [--all]`: passk's keys with CONFIG's values, then the method's own
    hyperparameters and the trainer keys the file sets; with --all, TRL's every key with the values in force."""
    import dataclasses

    from experiments.run.config import PASSK_TRAINER_DEFAULTS, shipped_configs
    from experiments.trainers import METHODS, PROCEDURE_OPTIONS

    args = [a for a in args if a not in ("-h", "--help")]
    name = Path(args[0]).stem if Path(args[0]).parent == shipped_configs()[0].parent else args[0]
    method = cli_value(args[1:], "method") or load_yaml(args[0]).get("method")
    print(f"usage: passk train {name} --method M [--key value ...]\n")
    if not method:
        print("\n".join(_methods_help()), end="\n\n")
        exp, _ = parse_config([*args, "--method", next(iter(METHODS))], device_free=True)
        print(f"passk's keys (ExperimentArgs) with {name}'s values (--key value overrides):")
        print("\n".join(_passk_keys_help(exp)))
        print(f"\nThe trainer's keys depend on the method: passk train {name} --method M --help [--all]")
        return 0
    exp, cfg = parse_config(args, device_free=True)
    spec = method_spec(exp.method)
    fields = {f.name: f for f in dataclasses.fields(cfg) if f.init}
    print(f"passk's keys (ExperimentArgs) with {name}'s values (--key value overrides):")
    print("\n".join(_passk_keys_help(exp)))
    own = [k for k in (*spec.hparams, *PROCEDURE_OPTIONS) if k in fields]
    print(
        f"\n{exp.method}'s own hyperparameters ({spec.trainer_cls.__name__}; METHODS sets them, a budget file "
        "cannot, --key value can):"
    )
    print("\n".join(_help_line(k, getattr(cfg, k), fields[k].metadata.get("help", "")) for k in own))
    data = load_yaml(args[0])
    set_here = [
        k for k in fields if k not in own and (k in data or k in PASSK_TRAINER_DEFAULTS or k == "max_steps")
    ]
    print(f"\n{type(cfg).__name__} keys {name} or passk sets (max_steps: derived from budget_prompts):")
    print("\n".join(_help_line(k, getattr(cfg, k), fields[k].metadata.get("help", "")) for k in set_here))
    rest = len(fields) - len(own) - len(set_here)
    if not show_all:
        print(
            f"\n{rest} more {type(cfg).__name__} keys at TRL / transformers defaults: passk train {name} --method "
            f"{exp.method} --help --all"
        )
        return 0
    from experiments.run.config import to_dict

    parser = trl_parser_cls()((ExperimentArgs, spec.config_cls), prog=f"passk train {name}")
    resolved = {
        k: v for k, v in to_dict(exp, cfg).items() if k in fields or k in ExperimentArgs.__dataclass_fields__
    }
    parser.set_defaults(**resolved)  # "(default: X)" shows the values in force, not the classes' own
    print()
    parser.print_help()
    return 0


# ------------------------------------------------------------------------------------------------------ eval


@dataclass
class EvalArgs:
    """Options of `passk eval` besides the ExperimentArgs data and pass@k keys."""

    out: str | None = field(
        default=None, metadata={"help": "Output JSON (default: MODEL/eval.json or ./eval.json)."}
    )
    seed: int = field(default=0, metadata={"help": "Sampling seed (a training config's seed when given)."})
    device: str = field(default="auto", metadata={"help": "auto | cpu | cuda."})
    dtype: str = field(
        default="auto", metadata={"help": "auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16."}
    )
    split: str = field(
        default="eval", metadata={"help": "eval | train: which split of the dataset to score."}
    )
    turns: int = field(
        default=0,
        metadata={
            "help": "0: single-turn pass@k. N >= 1: multi-turn repair, up to N runs of the visible tests per "
            "rollout (rewards.repair; docs/repair.md): pass@1 of the first and final answers, the repair rate."
        },
    )
    visible: str = field(
        default="prompt", metadata={"help": "With --turns: prompt | split:K, the tests run_tests runs."}
    )
    submit: str = field(
        default="tool",
        metadata={
            "help": "With --turns: tool (the model calls run_tests) | answer (every answer is run and its report "
            "is the next user turn, RLEF's loop; no tool template needed)."
        },
    )
    tool_template: bool = field(
        default=False,
        metadata={"help": "With --turns: give a ChatML model TRL's Qwen2.5 tool template (tiny, smollm2)."},
    )
    engine: str = field(
        default="transformers",
        metadata={
            "help": "transformers | vllm: what generates (vllm: vLLM's engine, on a CPU its CPU build; the same "
            "sampling settings, other random draws, no entropy; compare records of one engine). With --turns, "
            "TRL's colocated engine runs the tool loop."
        },
    )


def cmd_eval(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: passk eval MODEL [--config CONFIG] [--out FILE] [--key value ...]\n\n"
            "MODEL: tiny | smollm2 | a model folder | a run's output_dir | a checkpoint-N folder | a hub id.\n"
            "Keys: the data and eval_* keys of ExperimentArgs, plus out, seed, device, dtype, split, engine, and for\n"
            "multi-turn repair turns, visible, submit, tool_template (docs/repair.md)."
        )
        return 0
    model = args.pop(0)
    args = rename_trl_flags(args)
    config = _pop_flag(args, "config")
    parser = trl_parser_cls()((ExperimentArgs, EvalArgs), allow_abbrev=False)
    record = None if config else _run_record_of(model)
    if config:
        data = load_yaml(config_path(str(config)))
        data.pop("env", None)
        source = f"--config {config}"
    elif record is not None:
        data = {
            k: v for k, v in json.loads(record.read_text()).get("config", {}).items() if k in RUN_EVAL_KEYS
        }
        source = f"the run's {record}"
        data.setdefault("stop_at_code_end", False)  # a run from before the stop generated to EOS or the cap
    else:
        data, source = {}, None
    if data:
        known = {f for cls in (ExperimentArgs, EvalArgs) for f in cls.__dataclass_fields__}
        # A training YAML or run.json is a natural input: keep its data/eval keys and seed, skip trainer-only keys.
        data = {k: v for k, v in data.items() if k in known}
        check_types(data, (ExperimentArgs, EvalArgs), str(config or record))
        parser.set_defaults_with_config(**data)
    exp, ea, rest = parser.parse_args_into_dataclasses(
        args=join_negative_values(args), return_remaining_strings=True
    )
    if rest:
        key = rest[0].lstrip("-").split("=")[0]
        raise ConfigError(
            f"{key}: unknown option {rest[0]!r} for passk eval"
            + did_you_mean(key, [*ExperimentArgs.__dataclass_fields__, *EvalArgs.__dataclass_fields__])
        )
    from experiments.inputs.data import looks_like_path

    if looks_like_path(model) and not Path(model).expanduser().exists():
        _model_folder(model)  # a missing folder: its one-line error, before the settings line
    told = sorted(set(flag_keys(args)) & set(RUN_EVAL_KEYS))
    print(
        f"passk eval: {exp.dataset} ({ea.split} split of split_seed {exp.split_seed}, {exp.n_eval} eval problems), "
        f"{exp.style} prompts, n={exp.eval_n} at temperature {exp.eval_temperature:g} (top_p {exp.eval_top_p:g}), "
        f"up to {exp.eval_max_new_tokens} new tokens, seed {ea.seed}: "
        + (f"settings of {source}" if source else "passk's defaults (no run.json or --config)")
        + (f", with {', '.join('--' + k for k in told)} from the command line" if told else ""),
        flush=True,
    )
    if ea.split not in ("eval", "train"):
        raise ConfigError(f"split: must be eval or train, got {ea.split!r}")

    import torch

    from experiments.run.train import library_output_to_run_log

    with library_output_to_run_log() as run_log:  # the libraries' records to OUT's .log, off the console
        return _evaluate(model, exp, ea, run_log, torch)


def _evaluate(model: str, exp: ExperimentArgs, ea: EvalArgs, run_log: Any, torch: Any) -> int:
    """`passk eval` once its arguments are parsed: the model is found before any data is touched."""
    from experiments.evaluation.evaluate import evaluate_to_file
    from experiments.inputs.data import DataSpec, build_datasets
    from experiments.inputs.models import (
        eval_generation_kwargs,
        load_model_and_tokenizer,
        model_sampling,
        model_source,
    )

    device = torch.device(
        "cuda"
        if ea.device == "auto" and torch.cuda.is_available()
        else ("cpu" if ea.device == "auto" else ea.device)
    )
    dtype = {
        "auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
    }.get(ea.dtype)
    if dtype is None:
        raise ConfigError(f"dtype: must be auto, float32 or bfloat16, got {ea.dtype!r}")
    if exp.num_threads and (ea.device == "cpu" or not torch.cuda.is_available()):
        torch.set_num_threads(exp.num_threads)
    path = _model_folder(model)
    train_rows, eval_rows = build_datasets(DataSpec.from_config(exp))
    rows = eval_rows if ea.split == "eval" else train_rows
    out = (
        Path(ea.out)
        if ea.out
        else (Path(path) / "eval.json" if Path(path).is_dir() and Path(model).is_dir() else Path("eval.json"))
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    if run_log is not None:
        run_log.open(out.with_suffix(".log"))
    if ea.engine not in ("transformers", "vllm"):
        raise ConfigError(f"engine: must be transformers or vllm, got {ea.engine!r}")
    if ea.engine == "vllm" and not ea.turns and not (Path(path) / "adapter_config.json").is_file():
        from experiments.inputs.models import load_tokenizer

        net, tokenizer = None, load_tokenizer(path)  # the engine reads the folder itself
    else:
        net, tokenizer = load_model_and_tokenizer(path, dtype, device)
    generation = eval_generation_kwargs(model_sampling(path)) if exp.model_generation_config else None
    if ea.turns:
        data = _evaluate_repair(net, tokenizer, rows, exp, ea, out)
    elif ea.engine == "vllm":
        from experiments.evaluation.vllm_engine import eval_engine
        from experiments.trainers.vllm_cpu import host_dtype

        engine_dtype = host_dtype(exp.vllm_dtype) if ea.dtype == "auto" else ea.dtype
        dtype = getattr(torch, engine_dtype) if engine_dtype else dtype
        with eval_engine(path, net, tokenizer, dtype=engine_dtype, seed=ea.seed) as engine:
            net = None  # a merged adapter's weights are in the engine now
            data = evaluate_to_file(None, tokenizer, rows, exp, ea.seed, out, generation, engine=engine)
    else:
        data = evaluate_to_file(net, tokenizer, rows, exp, ea.seed, out, generation)
    # The model as the user named it (a passk name stays a name, not this machine's cache path) and, for a
    # folder passk built, what it was built from.
    data["model"] = model
    # What it computed in: a built folder's own dtype need not be it.
    data["dtype"] = str(dtype).removeprefix("torch.")
    data["device"] = device.type
    source = model_source(path)
    if source is not None:
        data["model_source"] = source
    out.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    summary = {k: v["value"] for k, v in data.get("metrics", {}).items()} if "metrics" in data else {}
    print(f"passk: {out}" + (f"  {summary}" if summary else ""))
    return 0


def _evaluate_repair(
    net: Any, tokenizer: Any, rows: Any, exp: ExperimentArgs, ea: EvalArgs, out: Path
) -> dict:
    """`passk eval --turns N`: the repair environment's evaluation with the config's sampling settings."""
    from experiments.evaluation.evaluate import write_json
    from experiments.evaluation.repair import evaluate_repair, use_tool_template

    if ea.turns < 0:
        raise ConfigError(f"turns: must be >= 0, got {ea.turns}")
    if ea.tool_template:
        use_tool_template(tokenizer)
    try:
        data = evaluate_repair(
            net,
            tokenizer,
            rows,
            turns=ea.turns,
            n_samples=exp.eval_n,
            temperature=exp.eval_temperature,
            top_p=exp.eval_top_p,
            max_new_tokens=exp.eval_max_new_tokens,
            seed=ea.seed,
            batch_size=exp.eval_batch_size,
            visible=ea.visible,
            submit=ea.submit,
            timeout=exp.reward_timeout,
            memory_mb=exp.reward_memory_mb,
            use_vllm=ea.engine == "vllm",
        )
    except ValueError as e:  # a template without tools, a visible split the rows cannot give: one line
        hint = "; for a ChatML model, pass --tool_template true" if "render tool calls" in str(e) else ""
        raise ConfigError(f"--turns {ea.turns}: {e}{hint}") from None
    write_json(out, data)
    return data


# The keys of a run's config that decide what `passk eval` scores and how: data, split, prompt style, sampling,
# the sandbox's limits and the seed.
RUN_EVAL_KEYS: tuple[str, ...] = (
    "dataset",
    "n_train",
    "n_eval",
    "split_seed",
    "style",
    "system_prompt",
    "model_generation_config",
    "stop_at_code_end",
    "reward_timeout",
    "reward_memory_mb",
    "eval_n",
    "eval_ks",
    "eval_temperature",
    "eval_top_p",
    "eval_max_new_tokens",
    "eval_greedy",
    "eval_batch_size",
    "eval_processes",
    "num_threads",
    "seed",
)


def _run_record_of(model: str) -> Path | None:
    """The run.json of a run directory or of the run a `checkpoint-N` folder belongs to; None for anything else."""
    p = Path(model)
    for folder in (p, p.parent) if p.is_dir() else ():
        if (folder / "run.json").is_file():
            return folder / "run.json"
    return None


def _model_folder(model: str) -> str:
    """MODEL as a folder that holds weights: a run directory's saved model, else its last checkpoint."""
    p = Path(model)
    if p.is_dir() and not (p / "config.json").is_file() and not (p / "adapter_config.json").is_file():
        from experiments.run.train import last_checkpoint

        last = last_checkpoint(p)
        if last is None:
            raise CliError(
                f"{p} holds no model (config.json / adapter_config.json) and no saved checkpoint-*"
            )
        return last
    if p.is_dir():
        return str(p)
    from experiments.learnable.warm_start import resolve_base_model

    return resolve_base_model(model)


# --------------------------------------------------------------------------------------------------- compare


def _parse_compare(argv: Sequence[str]) -> tuple[list[str], dict[str, Any], list[str]]:
    args = list(argv)
    opts: dict[str, Any] = {
        "out": _pop_flag(args, "out"),
        "methods": _pop_flag(args, "methods"),
        "seed": _pop_flag(args, "seed"),
        "seeds": _pop_flag(args, "seeds"),
        "in_process": bool(_pop_flag(args, "in_process", has_value=False)),
        "verbose": bool(_pop_flag(args, "verbose", has_value=False)),
        "jobs": _jobs(_pop_flag(args, "jobs"), 1),
    }
    configs = []
    while args and not args[0].startswith("-"):
        configs.append(args.pop(0))
    return configs, opts, args


def _jobs(value: Any, default: int) -> int:
    """`--jobs N`: how many runs at a time (each takes `num_threads` cores)."""
    if value is None:
        return default
    if not str(value).isdigit() or int(value) < 1:
        raise CliError(f"--jobs: must be a whole number >= 1, got {value!r}")
    return int(value)


def parse_methods(value: str | None) -> list[str]:
    """`--methods`: "all" (or nothing) for every method of METHODS, else a comma-separated list of them."""
    from experiments.trainers import METHODS

    if not value or value == "all":
        return list(METHODS)
    methods = [m.strip() for m in value.split(",") if m.strip()]
    for m in methods:
        try:
            method_spec(m)
        except ConfigError as e:
            raise CliError(f"--methods: {str(e).removeprefix('method: ')}") from None
    if len(set(methods)) != len(methods):
        raise CliError(f"--methods: a method is listed twice in {value!r}")
    return methods


def cmd_compare(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: passk compare CONFIG [--methods all|a,b,...] [--out DIR] [--seed N | --seeds 0,1,2] [--jobs N] "
            "[--in_process] [--verbose] [--key value ...]\n\n"
            "Runs every method (default all) on the one budget file CONFIG into DIR/<method> with the same seed and\n"
            "overrides (with --seeds: once per seed, into DIR/<method>-seed<N>), each in its own process, N at a time\n"
            "(default 1), unless --in_process; its output in DIR/logs/<run>.log unless --verbose, its progress on one\n"
            "console line. An existing DIR/<method> is refused unless --overwrite or --resume true. Then writes\n"
            "DIR/report.md with write_report. The methods share the file, so they share the budget: the same fresh\n"
            "prompts and completions (budget_prompts); each method's own hyperparameters come from METHODS. An\n"
            "override that only some methods' configs have (e.g. --lam) goes to those."
        )
        return 0
    configs, opts, overrides = _parse_compare(argv)
    if len(configs) != 1:
        raise CliError(
            "compare takes one budget file (CONFIG) and the methods to run on it (--methods all|a,b); "
            f"got {len(configs)} config(s)"
        )
    out = Path(opts["out"] or f"runs/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    seeds = [s for s in str(opts["seeds"]).split(",") if s] if opts["seeds"] else []
    bad = [s for s in seeds if not s.lstrip("-").isdigit()]
    if bad:
        raise CliError(f"--seeds: {bad[0]!r} is not an integer")
    check_writable_dir(out, "--out")  # before the libraries' log is opened there
    try:
        with _libraries_to(out / "logs" / PARENT_LOG):
            report = compare(
                str(config_path(configs[0])),
                out,
                methods=parse_methods(opts["methods"]),
                seed=opts["seed"],
                seeds=seeds,
                overrides=overrides,
                in_process=opts["in_process"],
                verbose=opts["verbose"],
                jobs=opts["jobs"],
            )
    except ComparisonInterrupted as stopped:
        print(compare_interrupted_message("compare", argv, out, stopped), file=sys.stderr)
        return exit_status(stopped)
    print(f"passk: report written to {report}")
    for line in report_verdict(report):
        print(line)
    return 0


def report_verdict(report: str | os.PathLike[str]) -> list[str]:
    """The verdict the report leads with (report.md's "## Verdict" items), as console lines."""
    try:
        text = Path(report).read_text()
    except OSError:
        return []
    section = text.split("## Verdict", 1)[1].split("\n## ", 1)[0] if "## Verdict" in text else ""
    items = [line[2:] for line in section.splitlines() if line.startswith("- ")]
    return ["verdict: " + item.replace("**", "") for item in items]


PARENT_LOG = "passk.log"  # in DIR/logs: what the libraries log in the passk compare / demo process itself


@contextlib.contextmanager
def _libraries_to(log: Path) -> Iterator[None]:
    """The libraries' records, warnings and bars in this process (model builds, the warm start, matplotlib) go to
    `log`, not the console (experiments.run.train.library_output_to_run_log)."""
    from experiments.run.train import library_output_to_run_log

    with library_output_to_run_log() as run_log:
        if run_log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            run_log.open(log)
        yield


def compare_interrupted_message(command: str, argv: Sequence[str], out: Path, stopped: Any) -> str:
    """After Ctrl-C in `passk compare` / `passk demo`: which runs finished, where the others stand, and the command
    that continues the comparison (finished runs kept, the others resumed from their checkpoint or started again)."""
    kept = drop_flags(argv, dict.fromkeys(("overwrite", "resume", "out"), True))
    again = ["passk", command, *kept, "--out", str(out), "--resume", "true"]
    done = ", ".join(stopped.done) or "none"
    return (
        f"passk {command}: interrupted; finished: {done}; not finished: {', '.join(stopped.left) or 'none'}; "
        f"continue with: {shlex.join(again)}"
    )


# ------------------------------------------------------------------------------------------------------ demo


def cmd_demo(argv: Sequence[str]) -> int:
    args = list(argv)
    if args and args[0] in ("-h", "--help"):
        print(
            "usage: passk demo [--out DIR] [--methods a,b,...] [--jobs N] [--in_process] [--verbose] [--overwrite] "
            "[--key value ...]\n\n"
            "The seven original methods side by side on CPU (ORIGINAL_METHODS; --methods all: every one): the tiny\n"
            "task model, warm-started once (cached) on the learnable task, then RL with each method on the budget\n"
            f"experiments/configs/{DEMO_CONFIG}.yaml, two runs at a time on two cores or more (--jobs). Ends with the\n"
            "report path; --overwrite replaces an earlier demo."
        )
        return 0
    out = Path(str(_pop_flag(args, "out") or DEMO_OUT))
    from experiments.trainers import ORIGINAL_METHODS

    # The seven original methods, within the demo's 5 minutes; --methods all runs every row.
    methods = parse_methods(_pop_flag(args, "methods") or ",".join(ORIGINAL_METHODS))
    in_process = bool(_pop_flag(args, "in_process", has_value=False))
    verbose = bool(_pop_flag(args, "verbose", has_value=False))
    # Every run takes one thread (demo.yaml's num_threads): two at a time on a machine with two cores or more.
    jobs = _jobs(_pop_flag(args, "jobs"), min(2, os.cpu_count() or 1))
    config = str(config_path(DEMO_CONFIG))
    t0 = time.time()
    # Build the shared warm-started model once, here, so every run finds it in the cache.
    exp, cfg = parse_config([config, "--method", methods[0], *overrides_for(methods[0], args)[0]])
    from experiments.learnable.warm_start import resolve_base_model, warm_start_cached, warm_started_model
    from experiments.run.train import setup_torch

    setup_torch(exp, cfg)
    check_writable_dir(out, "--out")
    check_run_dirs(config, out, methods, args)  # an earlier demo: refused before the warm start is built
    try:
        with _libraries_to(out / "logs" / PARENT_LOG):
            base = resolve_base_model(exp.model)
            if exp.warm_start_steps:
                steps = exp.warm_start_steps
                if warm_start_cached(base, steps, seed=exp.split_seed):
                    print(f"passk demo: warm start ({steps} SFT steps) from the cache", flush=True)
                else:
                    print(
                        f"passk demo: building the warm start ({steps} SFT steps; cached for later runs)",
                        flush=True,
                    )
                warm_started_model(base, steps, seed=exp.split_seed)
            report = compare(
                config,
                out,
                methods=methods,
                overrides=args,
                in_process=in_process,
                verbose=verbose,
                jobs=jobs,
            )
    except ComparisonInterrupted as stopped:
        print(compare_interrupted_message("demo", argv, out, stopped), file=sys.stderr)
        return exit_status(stopped)
    print(f"passk demo: {len(methods)} methods in {time.time() - t0:.0f}s")
    print(f"passk demo: report: {report}")
    for line in report_verdict(report):
        print(line)
    return 0


# ------------------------------------------------------------------------------------------------------ main

COMMANDS = {"train": cmd_train, "eval": cmd_eval, "compare": cmd_compare, "demo": cmd_demo}


def main(argv: Sequence[str] | None = None) -> int:
    """The `passk` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="passk",
        description="RL fine-tuning of code LLMs with unit-test rewards (TRL): train, eval, compare, demo.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    sub = parser.add_subparsers(dest="command", metavar="{train,eval,compare,demo}")
    helps = {
        "train": "train one method (--method) on a budget file (+ --key value overrides)",
        "eval": "pass@k of a model, run directory or checkpoint",
        "compare": "run every method (--methods) on one budget file and seed, write one report",
        "demo": "the seven original methods on CPU (tiny model, learnable task), ends with the report path",
    }
    for name, text in helps.items():
        sub.add_parser(name, help=text, add_help=False)
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    if args[0] not in COMMANDS:
        parser.print_usage(sys.stderr)
        print(
            f"passk: error: unknown command {args[0]!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 2
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    try:
        with sigterm_interrupts():  # SIGTERM stops as Ctrl-C does, from the first import on
            return COMMANDS[args[0]](args[1:])
    except USER_ERRORS as e:
        print(f"passk: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stopped:  # no traceback: what was written stays; train said how to resume
        print(f"passk {args[0]}: interrupted", file=sys.stderr)
        return exit_status(stopped)


if __name__ == "__main__":
    sys.exit(main())
