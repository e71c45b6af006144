"""`passk`: train one method, evaluate a model, compare methods side by side, or run the CPU demo.

    passk train CONFIG [--key value ...]                 one run (same as `python -m experiments.train`)
    passk train CONFIG --accelerate_config cpu|multi_gpu|PATH [--num_processes N] [--key value ...]
                                                         the same run through `accelerate launch`
    passk train CONFIG --check [--key value ...]         parse and check the config, print it, load nothing
    passk eval MODEL [--config CONFIG] [--out FILE] [--key value ...]
                                                         pass@k of a model, run directory or checkpoint
    passk compare CONFIG CONFIG ... [--out DIR] [--seed N | --seeds 0,1,2] [--key value ...]
                                                         every config with the same seed and budget, one report
    passk demo [--out DIR] [--methods a,b,...]           all methods on CPU, tiny model, learnable task

CONFIG is a YAML path or the name of a file in experiments/configs/ (`grpo_cpu`). `--key value` overrides any
key of the YAML (ExperimentArgs or the method's trainer config), as in TRL's scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.config import (
    BUDGET_KEYS,
    USER_ERRORS,
    ConfigError,
    ExperimentArgs,
    budget,
    config_path,
    load_yaml,
    parse_config,
    shipped_configs,
    split_config_argv,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
ACCELERATE_CONFIG_DIR = REPO_ROOT / "accelerate_configs"
DEMO_PATTERN = "*_demo.yaml"
DEMO_OUT = "runs/demo"


class CliError(RuntimeError):
    """A usage error; printed as one line."""


def _env_for_children() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Children import experiments/rewards/sandbox from this checkout even without `pip install -e .`.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


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


def cmd_train(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        print("Keys: see ExperimentArgs in experiments/config.py and the method's config class "
              "(`passk train CONFIG --help` lists them all).")  # fmt: skip
        return 0
    acc = _pop_flag(args, "accelerate_config")
    nproc = _pop_flag(args, "num_processes")
    check = bool(_pop_flag(args, "check", has_value=False))
    args = _resolve_config(args)
    if "--help" in args or "-h" in args:
        return _print_config_help(args)
    exp, cfg = parse_config(args)  # fail here, in the launcher, before any process or model starts
    if check:
        _print_config(exp, cfg)
        return 0
    if acc:
        cmd = accelerate_command(args, str(acc), int(nproc) if nproc else None)
        print("passk: " + shlex.join(cmd), flush=True)
        return subprocess.call(cmd, env=_env_for_children())
    if nproc:
        raise CliError("--num_processes needs --accelerate_config")
    from experiments.train import run

    out = run(exp, cfg)
    print(f"passk: run written to {out}")
    return 0


def _print_config(exp: Any, cfg: Any) -> None:
    import yaml

    from experiments.config import to_dict

    print(yaml.safe_dump(json.loads(json.dumps(to_dict(exp, cfg), default=str)), sort_keys=True), end="")
    print(f"# OK: {exp.method} with {type(cfg).__name__}; nothing was loaded")


def _print_config_help(args: list[str]) -> int:
    from experiments.config import _trl_parser_cls, method_spec

    method = load_yaml(args[0]).get("method")
    if not method:
        raise CliError(f"{args[0]} sets no method")
    parser = _trl_parser_cls()((ExperimentArgs, method_spec(method).config_cls), prog="passk train CONFIG")
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


def cmd_eval(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: passk eval MODEL [--config CONFIG] [--out FILE] [--key value ...]\n\n"
              "MODEL: tiny | smollm2 | a model folder | a run's output_dir | a checkpoint-N folder | a hub id.\n"
              "Keys: the data and eval_* keys of ExperimentArgs, plus out, seed, device, dtype, split.")  # fmt: skip
        return 0
    model = args.pop(0)
    config = _pop_flag(args, "config")
    from experiments.config import _check_types, _trl_parser_cls

    parser = _trl_parser_cls()((ExperimentArgs, EvalArgs), allow_abbrev=False)
    if config:
        data = load_yaml(config_path(str(config)))
        data.pop("env", None)
        known = {f for cls in (ExperimentArgs, EvalArgs) for f in cls.__dataclass_fields__}
        # A training YAML is a natural input: keep its data/eval keys and seed, skip trainer-only keys.
        data = {k: v for k, v in data.items() if k in known}
        _check_types(data, (ExperimentArgs, EvalArgs), str(config))
        parser.set_defaults_with_config(**data)
    exp, ea, rest = parser.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
    if rest:
        raise ConfigError(f"{rest[0].lstrip('-')}: unknown option {rest[0]!r} for passk eval")
    if ea.split not in ("eval", "train"):
        raise ConfigError(f"split: must be eval or train, got {ea.split!r}")

    import torch

    from experiments.train import _evaluate, build_datasets

    if exp.num_threads and (ea.device == "cpu" or not torch.cuda.is_available()):
        torch.set_num_threads(exp.num_threads)
    train_rows, eval_rows = build_datasets(exp)
    rows = eval_rows if ea.split == "eval" else train_rows
    path = _model_folder(model, exp)
    device = torch.device("cuda" if ea.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if ea.device == "auto" else ea.device))  # fmt: skip
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16}.get(ea.dtype)  # fmt: skip
    if dtype is None:
        raise ConfigError(f"dtype: must be auto, float32 or bfloat16, got {ea.dtype!r}")
    from experiments.train import load_model

    net, tokenizer = load_model(path, dtype, device)
    out = Path(ea.out) if ea.out else (Path(path) / "eval.json" if Path(path).is_dir() and Path(model).is_dir()
                                       else Path("eval.json"))  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    data = _evaluate(net, tokenizer, rows, exp, ea.seed, out)
    data["model"] = str(path)
    out.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    summary = {k: v["value"] for k, v in data.get("metrics", {}).items()} if "metrics" in data else {}
    print(f"passk: {out}" + (f"  {summary}" if summary else ""))
    return 0


def _model_folder(model: str, exp: ExperimentArgs) -> str:
    """MODEL as a folder that holds weights: a run directory's saved model, else its last checkpoint."""
    p = Path(model)
    if p.is_dir() and not (p / "config.json").is_file() and not (p / "adapter_config.json").is_file():
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(p))
        if last is None:
            raise CliError(f"{p} holds no model (config.json / adapter_config.json) and no checkpoint-*")
        return last
    if p.is_dir():
        return str(p)
    from experiments.train import resolve_base_model

    exp.model = model
    return resolve_base_model(exp)


# --------------------------------------------------------------------------------------------------- compare


def _parse_compare(argv: Sequence[str]) -> tuple[list[str], dict[str, Any], list[str]]:
    args = list(argv)
    opts: dict[str, Any] = {
        "out": _pop_flag(args, "out"),
        "seed": _pop_flag(args, "seed"),
        "seeds": _pop_flag(args, "seeds"),
        "allow_budget_mismatch": bool(_pop_flag(args, "allow_budget_mismatch", has_value=False)),
        "in_process": bool(_pop_flag(args, "in_process", has_value=False)),
        "verbose": bool(_pop_flag(args, "verbose", has_value=False)),
    }
    configs = []
    while args and not args[0].startswith("-"):
        configs.append(args.pop(0))
    return configs, opts, args


def cmd_compare(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: passk compare CONFIG CONFIG ... [--out DIR] [--seed N | --seeds 0,1,2] [--in_process] [--verbose] "
              "[--allow_budget_mismatch] [--key value ...]\n\n"
              "Runs every config into DIR/<name> with the same seed and overrides (with --seeds: once per seed,\n"
              "into DIR/<name>-seed<N>), one after the other, each in its own process unless --in_process, its\n"
              "output in DIR/<name>/train.log unless --verbose; then writes DIR/report.md with write_report.\n"
              f"Configs must agree on the budget keys: {', '.join(BUDGET_KEYS)}.")  # fmt: skip
        return 0
    configs, opts, overrides = _parse_compare(argv)
    if not configs:
        raise CliError("compare needs at least one CONFIG")
    out = Path(opts["out"] or f"runs/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    seeds = [s for s in str(opts["seeds"]).split(",") if s] if opts["seeds"] else []
    bad = [s for s in seeds if not s.lstrip("-").isdigit()]
    if bad:
        raise CliError(f"--seeds: {bad[0]!r} is not an integer")
    report = compare([str(config_path(c)) for c in configs], out, seed=opts["seed"], seeds=seeds, overrides=overrides,
                     allow_budget_mismatch=opts["allow_budget_mismatch"], in_process=opts["in_process"],
                     verbose=opts["verbose"])  # fmt: skip
    print(f"passk: report written to {report}")
    return 0


def _summary(run_dir: Path) -> str:
    """`pass@1 21.5% -> 39.2%` from a run's eval files (whichever exist)."""
    values = []
    for name in ("eval_before.json", "eval_after.json"):
        f = run_dir / name
        metrics = json.loads(f.read_text()).get("metrics", {}) if f.is_file() else {}
        values.append(metrics.get("pass@1", {}).get("value"))
    if values == [None, None]:
        return "done"
    before, after = (f"{100 * v:.1f}%" if v is not None else "-" for v in values)
    return f"pass@1 {before} -> {after}"


def run_names(configs: Sequence[str], methods: Sequence[str]) -> list[str]:
    """Run directory names: the method, or the config's file name when two configs share a method."""
    return [m if list(methods).count(m) == 1 else Path(c).stem for c, m in zip(configs, methods)]


def compare(
    configs: Sequence[str],
    out: str | os.PathLike[str],
    *,
    seed: int | str | None = None,
    seeds: Sequence[int | str] = (),
    overrides: Sequence[str] = (),
    allow_budget_mismatch: bool = False,
    in_process: bool = False,
    verbose: bool = False,
) -> Path:
    """Run each config into `out/<name>` with one seed and the same overrides, then `write_report`.

    With `seeds`, every config runs once per seed into `out/<name>-seed<N>`; the report pools a method's seeds.
    Every config is parsed and checked before the first run starts, and their budgets (BUDGET_KEYS) must agree.
    """
    out = Path(out)
    seed_list = [str(s) for s in seeds] or ([str(seed)] if seed is not None else [None])
    common = list(overrides)
    first_seed = ["--seed", seed_list[0]] if seed_list[0] is not None else []
    parsed = [parse_config([c, *common, *first_seed]) for c in configs]
    names = run_names(configs, [exp.method for exp, _ in parsed])
    budgets = [budget(exp, cfg) for exp, cfg in parsed]
    if not allow_budget_mismatch:
        for name, b in zip(names[1:], budgets[1:]):
            diff = [k for k in BUDGET_KEYS if b[k] != budgets[0][k]]
            if diff:
                raise ConfigError(f"{diff[0]}: {names[0]} has {budgets[0][diff[0]]!r} but {name} has "
                                  f"{b[diff[0]]!r}; compare needs one budget (or --allow_budget_mismatch)")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    run_dirs = []
    jobs = [(c, n, s) for s in seed_list for c, n in zip(configs, names)]
    for i, (config, name, run_seed) in enumerate(jobs, 1):
        if len(seed_list) > 1:
            name = f"{name}-seed{run_seed}"
        run_dir = out / name
        seed_args = ["--seed", run_seed] if run_seed is not None else []
        argv = [config, *common, *seed_args, "--output_dir", str(run_dir)]
        head = f"passk compare [{i}/{len(jobs)}] {name}"
        t0 = time.time()
        if in_process:
            print(f"{head} -> {run_dir}", flush=True)
            from experiments.train import run

            run(*parse_config(argv))
        else:
            # Each run in its own process: memory goes back to the OS and no state leaks between methods. Its
            # progress bars and per-step logs go to train.log unless verbose.
            run_dir.mkdir(parents=True, exist_ok=True)
            log = run_dir / "train.log"
            print(f"{head} -> {run_dir}" + ("" if verbose else f" (log: {log})"), flush=True)
            cmd = [sys.executable, "-m", "experiments.train", *argv]
            if verbose:
                rc = subprocess.call(cmd, env=_env_for_children())
            else:
                with open(log, "w") as f:
                    rc = subprocess.call(cmd, env=_env_for_children(), stdout=f, stderr=subprocess.STDOUT)
            if rc != 0:
                tail = "" if verbose else "".join(log.read_text(errors="replace").splitlines(True)[-15:])
                raise CliError(f"{name}: training exited with status {rc}\n{tail}")
        print(f"{head}: {_summary(run_dir)} ({time.time() - t0:.0f}s)", flush=True)
        run_dirs.append(run_dir)
    from experiments.report import write_report

    return Path(write_report(run_dirs, out))


# ------------------------------------------------------------------------------------------------------ demo


def demo_configs(methods: Sequence[str] | None = None) -> list[Path]:
    """The shipped demo configs (one per method), optionally only `methods`."""
    found = {load_yaml(p)["method"]: p for p in shipped_configs(DEMO_PATTERN)}
    if methods:
        missing = [m for m in methods if m not in found]
        if missing:
            raise CliError(f"--methods: no demo config for {', '.join(missing)}; have {', '.join(found)}")
        return [found[m] for m in methods]
    return list(found.values())


def cmd_demo(argv: Sequence[str]) -> int:
    args = list(argv)
    if args and args[0] in ("-h", "--help"):
        print("usage: passk demo [--out DIR] [--methods a,b,...] [--in_process] [--verbose] [--key value ...]\n\n"
              "Every method side by side on CPU: the tiny task model, warm-started once (cached) on the learnable\n"
              f"task, then RL with each method; configs experiments/configs/{DEMO_PATTERN}. Ends with the report path.")  # fmt: skip
        return 0
    out = Path(str(_pop_flag(args, "out") or DEMO_OUT))
    methods = _pop_flag(args, "methods")
    in_process = bool(_pop_flag(args, "in_process", has_value=False))
    verbose = bool(_pop_flag(args, "verbose", has_value=False))
    configs = [str(p) for p in demo_configs(str(methods).split(",") if methods else None)]
    t0 = time.time()
    # Build the shared warm-started model once, here, so every run finds it in the cache.
    exp, cfg = parse_config([configs[0], *args])
    from experiments.train import resolve_base_model, setup_torch, warm_started_model

    setup_torch(exp, cfg)
    base = resolve_base_model(exp)
    if exp.warm_start_steps:
        print(f"passk demo: warm start ({exp.warm_start_steps} SFT steps, cached)", flush=True)
        warm_started_model(base, exp.warm_start_steps, seed=exp.split_seed)
    report = compare(configs, out, overrides=args, in_process=in_process, verbose=verbose)
    print(f"passk demo: {len(configs)} methods in {time.time() - t0:.0f}s")
    print(f"passk demo: report: {report}")
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
        "train": "train one method from a YAML config (+ --key value overrides)",
        "eval": "pass@k of a model, run directory or checkpoint",
        "compare": "run several configs with one seed and budget, write one report",
        "demo": "every method on CPU (tiny model, learnable task), ends with the report path",
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
        return COMMANDS[args[0]](args[1:])
    except (*USER_ERRORS, CliError) as e:
        print(f"passk: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
