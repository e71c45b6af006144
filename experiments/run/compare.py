"""`passk compare` as a library function: several methods on one budget file, each in its own run, then one report.

`compare(config, out, methods=..., seeds=...)` runs each method (default: all of `experiments.trainers.METHODS`)
on the same budget file with the same seed and overrides, each in its own process (`jobs` at a time) or in this
one with `in_process`, into `out/<method>` (`out/<method>-seed<N>` with several seeds), then writes
`out/report.md` with `experiments.report.write_report`. `passk compare` and `passk demo` call it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.errors import CliError, ConfigError
from experiments.run.argv import overrides_for, parse_config

__all__ = ["REPO_ROOT", "ComparisonInterrupted", "check_run_dirs", "child_env", "compare"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """The environment of a passk child process (a compared run, an `accelerate launch`)."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Children import experiments/rewards/sandbox from this checkout even without `pip install -e .`.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


class ComparisonInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (`signum`) during `compare`: `done` names the runs that finished, `left` the others (each
    with where it stands)."""

    def __init__(self, done: Sequence[str], left: Sequence[str], signum: int = 2) -> None:
        super().__init__()
        self.done, self.left, self.signum = list(done), list(left), signum


def check_run_dir(exp: Any, cfg: Any) -> None:
    """`experiments.run.validation.check_output_dir` for a run of a comparison, whose folder the command's `--out`
    names (there is no --output_dir to give it)."""
    from experiments.run.validation import check_output_dir

    try:
        check_output_dir(exp, cfg)
    except ConfigError as e:
        raise ConfigError(str(e).replace("another --output_dir", "another --out")) from None


def check_run_dirs(config: str, out: Path, methods: Sequence[str], overrides: Sequence[str] = ()) -> None:
    """`check_run_dir` for each method's run of `config` in `out` (one seed): before anything is built for them."""
    for method in methods:
        own = overrides_for(method, overrides)[0]
        check_run_dir(*parse_config([config, "--method", method, *own, "--output_dir", str(out / method)]))


def _resume_plan(exp: Any, cfg: Any, argv: list[str]) -> tuple[str, list[str]]:
    """With `--resume true`, what a run of the comparison does: ("finished", argv) when its run.json says it trained
    its budget (it is kept, not run: a finished run has nothing to resume), ("resume", argv) from its last whole
    checkpoint, else ("start", argv without --resume): no checkpoint was saved (never started, or stopped before
    its first save), so it starts again."""
    from experiments.run.argv import drop_flags
    from experiments.run.train import finished_run, last_checkpoint

    out = Path(cfg.output_dir)
    if finished_run(out, cfg.max_steps):
        return "finished", argv
    if last_checkpoint(out) is not None:
        return "resume", argv
    argv = drop_flags(argv, {"resume": True})
    return "start", argv + (["--overwrite", "true"] if out.is_dir() else [])


def _summary(run_dir: Path) -> str:
    """`pass@1 21.5% -> 39.2%, 320 prompts` from a run's eval files and run.json (whichever exist)."""
    values = []
    for name in ("eval_before.json", "eval_after.json"):
        f = run_dir / name
        metrics = json.loads(f.read_text()).get("metrics", {}) if f.is_file() else {}
        values.append(metrics.get("pass@1", {}).get("value"))
    run = run_dir / "run.json"
    budget = json.loads(run.read_text()).get("budget", {}) if run.is_file() else {}
    sampled = (
        (
            f"{budget['fresh_prompts']} prompts / {budget['fresh_completions']} completions / "
            f"{budget['optimizer_steps']} steps"
        )
        if budget
        else ""
    )
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
    jobs: int = 1,
) -> Path:
    """Run each method (default: all of METHODS) on the budget file `config` into `out/<method>`, with one seed and
    the same overrides, then `write_report`.

    Equal budgets hold by construction: every run reads the same file, and `budget_prompts` gives each method the
    optimizer steps that sample the same fresh prompts. An override goes to the methods whose config has the key
    (an option only some trainers have, e.g. `--lam`), and must exist in at least one. With `seeds`, every method
    runs once per seed into `out/<method>-seed<N>`; the report pools a method's seeds. Every run is parsed and
    checked (its output_dir too) before the first one starts.

    Each run is a process of its own (memory goes back to the OS, no state leaks between methods), `jobs` of them
    at a time, its output in `out/logs/<run>.log` and its progress on one console line (experiments.run.progress);
    `verbose` runs them one at a time with their output on the console, `in_process` in this process.
    """
    from experiments.trainers import METHODS

    out = Path(out)
    methods = list(methods or METHODS)
    seed_list = [str(s) for s in seeds] or ([str(seed)] if seed is not None else [None])
    per_method: dict[str, list[str]] = {}
    not_in: dict[str, list[str]] = {}  # override key -> the methods whose config lacks it
    for method in methods:
        per_method[method], skipped = overrides_for(method, overrides)
        for key in skipped:
            not_in.setdefault(key, []).append(method)
    for key, lacking in not_in.items():
        if len(lacking) == len(methods):
            raise ConfigError(f"{key}: none of {', '.join(methods)} has this option")
    runs: list[tuple[str, Path, list[str]]] = []  # (name, run dir, argv)
    steps: dict[str, int] = {}
    plans: dict[str, str] = {}
    for run_seed in seed_list:
        for method in methods:
            name = f"{method}-seed{run_seed}" if len(seed_list) > 1 else method
            seed_args = ["--seed", run_seed] if run_seed is not None else []
            argv = [
                config,
                "--method",
                method,
                *per_method[method],
                *seed_args,
                "--output_dir",
                str(out / name),
            ]
            exp, cfg = parse_config(argv)
            check_run_dir(exp, cfg)  # fail before any run
            if exp.resume:
                plans[name], argv = _resume_plan(exp, cfg, argv)
            runs.append((name, out / name, argv))
            steps[name] = cfg.max_steps
    for key, lacking in not_in.items():
        print(
            f"passk compare: --{key} goes to {', '.join(m for m in methods if m not in lacking)} only",
            flush=True,
        )
    out.mkdir(parents=True, exist_ok=True)
    heads = {name: f"passk compare [{i}/{len(runs)}] {name}" for i, (name, _, _) in enumerate(runs, 1)}
    todo = []
    for name, run_dir, argv in runs:
        if plans.get(name) == "finished":
            print(f"{heads[name]}: finished earlier, kept ({_summary(run_dir)})", flush=True)
        else:
            if name in plans:
                what = {
                    "resume": "resuming from its last checkpoint",
                    "start": "no checkpoint: starting it again",
                }

                print(f"{heads[name]}: {what[plans[name]]}", flush=True)
            todo.append((name, run_dir, argv))
    try:
        if in_process:
            from experiments.run.train import run

            for name, run_dir, argv in todo:
                print(f"{heads[name]} -> {run_dir}", flush=True)
                t0 = time.time()
                run(*parse_config(argv))
                print(f"{heads[name]}: {_summary(run_dir)} ({time.time() - t0:.0f}s)", flush=True)
        else:
            # Longest first (most optimizer steps: PPO), so that with several jobs no core idles at the end.
            by_cost = sorted(todo, key=lambda r: -steps[r[0]]) if jobs > 1 and not verbose else todo
            _run_processes(by_cost, heads, out / "logs", jobs=1 if verbose else jobs, verbose=verbose)
    except KeyboardInterrupt as stopped:
        raise _interrupted(runs, getattr(stopped, "signum", 2)) from None
    from experiments.report import write_report

    return Path(write_report([run_dir for _, run_dir, _ in runs], out))


def _interrupted(runs: Sequence[tuple[str, Path, list[str]]], signum: int = 2) -> ComparisonInterrupted:
    from experiments.run.argv import parse_config
    from experiments.run.train import finished_run, last_checkpoint

    done, left = [], []
    for name, run_dir, argv in runs:
        if finished_run(run_dir, parse_config(argv)[1].max_steps):
            done.append(name)
        else:
            last = last_checkpoint(run_dir)
            left.append(f"{name} ({'at ' + Path(last).name if last else 'no checkpoint: starts again'})")
    return ComparisonInterrupted(done, left, signum)


def _run_processes(
    runs: Sequence[tuple[str, Path, list[str]]],
    heads: dict[str, str],
    logs: Path,
    *,
    jobs: int,
    verbose: bool,
) -> None:
    """The runs as `python -m experiments.train` children, `jobs` at a time (experiments.run.progress.run_children)."""
    from experiments.run.progress import Child, ProgressBoard, run_children

    if not verbose:
        logs.mkdir(parents=True, exist_ok=True)
    dirs = {name: run_dir for name, run_dir, _ in runs}
    children = [
        Child(
            name,
            [sys.executable, "-m", "experiments.train", *argv],
            None if verbose else logs / f"{name}.log",
            child_env(),
        )
        for name, _, argv in runs
    ]
    board = ProgressBoard()

    def started(child: Child) -> None:
        log = "" if child.log is None else f" (log: {child.log})"
        board.message(f"{heads[child.label]} -> {dirs[child.label]}{log}")

    def done(child: Child) -> None:
        if child.returncode == 0:
            board.message(f"{heads[child.label]}: {_summary(dirs[child.label])} ({child.seconds:.0f}s)")

    run_children(children, jobs=jobs, board=board, on_start=started, on_done=done)
    for child in children:
        if child.returncode not in (0, None):
            tail = (
                ""
                if child.log is None
                else "".join(child.log.read_text(errors="replace").splitlines(True)[-15:])
            )
            raise CliError(f"{child.label}: training exited with status {child.returncode}\n{tail}")
