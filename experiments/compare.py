"""`passk compare` as a library function: several methods on one budget file, each in its own run, then one report.

`compare(config, out, methods=..., seeds=...)` runs each method (default: all of `experiments.trainers.METHODS`)
on the same budget file with the same seed and overrides, one after the other, each in its own process (or in this
one with `in_process`), into `out/<method>` (`out/<method>-seed<N>` with several seeds), then writes
`out/report.md` with `experiments.report.write_report`. `passk compare` and `passk demo` call it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.config import overrides_for, parse_config
from experiments.errors import CliError, ConfigError

__all__ = ["REPO_ROOT", "child_env", "compare"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_env() -> dict[str, str]:
    """The environment of a passk child process (a compared run, an `accelerate launch`)."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Children import experiments/rewards/sandbox from this checkout even without `pip install -e .`.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _summary(run_dir: Path) -> str:
    """`pass@1 21.5% -> 39.2%, 320 prompts` from a run's eval files and run.json (whichever exist)."""
    values = []
    for name in ("eval_before.json", "eval_after.json"):
        f = run_dir / name
        metrics = json.loads(f.read_text()).get("metrics", {}) if f.is_file() else {}
        values.append(metrics.get("pass@1", {}).get("value"))
    run = run_dir / "run.json"
    budget = json.loads(run.read_text()).get("budget", {}) if run.is_file() else {}
    sampled = (f"{budget['fresh_prompts']} prompts / {budget['fresh_completions']} completions / "
               f"{budget['optimizer_steps']} steps") if budget else ""  # fmt: skip
    if values == [None, None]:
        return sampled or "done"
    before, after = (f"{100 * v:.1f}%" if v is not None else "-" for v in values)
    return f"pass@1 {before} -> {after}" + (f", {sampled}" if sampled else "")


def compare(
    config: str,
    out: str | os.PathLike[str],
    *,
    methods: Sequence[str] | None = None,
    seed: int | str | None = None,
    seeds: Sequence[int | str] = (),
    overrides: Sequence[str] = (),
    in_process: bool = False,
    verbose: bool = False,
) -> Path:
    """Run each method (default: all of METHODS) on the budget file `config` into `out/<method>`, with one seed and
    the same overrides, then `write_report`.

    Equal budgets hold by construction: every run reads the same file, and `budget_prompts` gives each method the
    optimizer steps that sample the same fresh prompts. An override goes to the methods whose config has the key
    (an option only some trainers have, e.g. `--lam`), and must exist in at least one. With `seeds`, every method
    runs once per seed into `out/<method>-seed<N>`; the report pools a method's seeds. Every run is parsed and
    checked before the first one starts.
    """
    from experiments.trainers import METHODS

    out = Path(out)
    methods = list(methods or METHODS)
    seed_list = [str(s) for s in seeds] or ([str(seed)] if seed is not None else [None])
    first_seed = ["--seed", seed_list[0]] if seed_list[0] is not None else []
    per_method: dict[str, list[str]] = {}
    not_in: dict[str, list[str]] = {}  # override key -> the methods whose config lacks it
    for method in methods:
        per_method[method], skipped = overrides_for(method, overrides)
        for key in skipped:
            not_in.setdefault(key, []).append(method)
        parse_config([config, "--method", method, *per_method[method], *first_seed])  # fail before any run
    for key, lacking in not_in.items():
        if len(lacking) == len(methods):
            raise ConfigError(f"{key}: none of {', '.join(methods)} has this option")
        print(
            f"passk compare: --{key} goes to {', '.join(m for m in methods if m not in lacking)} only",
            flush=True,
        )
    out.mkdir(parents=True, exist_ok=True)
    run_dirs = []
    jobs = [(m, s) for s in seed_list for m in methods]
    for i, (method, run_seed) in enumerate(jobs, 1):
        name = f"{method}-seed{run_seed}" if len(seed_list) > 1 else method
        run_dir = out / name
        seed_args = ["--seed", run_seed] if run_seed is not None else []
        argv = [config, "--method", method, *per_method[method], *seed_args, "--output_dir", str(run_dir)]
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
                rc = subprocess.call(cmd, env=child_env())
            else:
                with open(log, "w") as f:
                    rc = subprocess.call(cmd, env=child_env(), stdout=f, stderr=subprocess.STDOUT)
            if rc != 0:
                tail = "" if verbose else "".join(log.read_text(errors="replace").splitlines(True)[-15:])
                raise CliError(f"{name}: training exited with status {rc}\n{tail}")
        print(f"{head}: {_summary(run_dir)} ({time.time() - t0:.0f}s)", flush=True)
        run_dirs.append(run_dir)
    from experiments.report import write_report

    return Path(write_report(run_dirs, out))
