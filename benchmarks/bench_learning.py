"""Learning curves of the study's rows on unseen problems of the synthetic task, with between-method intervals.

    python benchmarks/bench_learning.py --prompts 160 --seeds 0 --methods grpo ppo --out runs/quick
    python benchmarks/bench_learning.py --final-samples 64 --seeds 0 --out runs/a   # coverage curves, k = 1 ... 64
    python benchmarks/bench_learning.py --merge runs/a runs/b --out runs/ab          # two jobs' runs, one report
    python benchmarks/bench_learning.py --contrast pkpo pkpo_k1 --out runs/ab         # one pair at every k
    python benchmarks/bench_learning.py --lr-search --prompts 600 --out runs/lr      # the learning-rate search
    python benchmarks/bench_learning.py --lr-from runs/lr --prompts 600 ... --out runs/s0   # each row at its rate

The side-by-side study (benchmarks/results/side_by_side/README.md, "The rerun") is the learning-rate search, then
three seeds with the chosen rates, one merge and two contrasts; what it can show is fixed beforehand in
benchmarks/side_by_side_preregistration.md. Its protocol is `experiments.learnable.study`:

- Rows: `study.STUDY_METHODS`, the 12 of `experiments.trainers.METHODS`, `grpo_seq` (GRPO with the paper's
  sequence-mean loss, TRL's loss_type "grpo"; the `grpo` row keeps TRL's default token-level "dapo") and
  `pkpo_k1` (PKPO's trainer at k = 1, PKPO's control).
- The rows that clip (`study.OFF_POLICY_METHODS`) take `--off-policy-steps` (5) optimizer steps per generation
  batch, one mini-batch each, once: every step after a batch's first is off-policy, so the clip acts; learning.json
  and the report give each run's clip share. The REINFORCE rows stay on-policy. Every row samples the same fresh
  prompts in the same optimizer steps (`budget_views` in learning.json says so, or where they differ; the curves
  are also drawn against optimizer steps, learning_heldout_steps.png).
- `--lr-search`: every row at every rate of `study.LR_GRID`, one seed (`study.LR_SEARCH_SEED`), the study's
  budget, scored on `study.TUNING_PROBLEMS` training-family problems no run trains on (`tasks.tuning_rows`; no
  held-out problem is loaded); `<out>/lr_search.json` keeps every cell and the choice (`study.SELECT_ON`, the
  smaller rate on a tie). `--lr-from` trains each row at its chosen rate and records it in learning.json
  (`learning_rates`, each run's `learning_rate`) and run.json (the report's "What was trained").
- One log-prob temperature for every row: the driver, `--merge` and the report refuse a mix in one line.

The longer version of tests/test_learning.py: the same warm-started model (95 SFT steps), recipe
(`experiments.learnable.recipe.RL_DEFAULTS`), reward (`rewards.unit_test_reward`) and family split (no held-out body in
training). Every method samples the same `--prompts` fresh prompts, 8 completions each, 8 prompts per optimizer
step (`experiments.run.budget.derive_max_steps`), counted by `experiments.run.budget.SampleLog`.

- Curves: every `--eval-every` fresh prompts the policy is scored on `--curve-problems` held-out problems (2
  samples at T=1 and one greedy completion each), drawn against the fresh prompts sampled so the methods line up.
- Final: the warm start and every trained policy are scored on `--final-problems` held-out problems
  (`--final-samples` at T=1, 4 by default; pass@k for k = 1, 2, 4, ..., n, greedy pass@1, the policy's entropy); a
  two-proportion z (sampled) and an exact sign test (greedy) compare each run with the warm start. With many
  samples the report draws the coverage curves (pass@k against k).
- Two jobs at a time: run each on its own `--out` (say one seed each), then `--merge` their outs into one
  learning.json, plots and report.
- Each run is written as a passk run directory (run.json with the counted budget and the method's
  hyperparameters, eval_before.json, eval_after.json, trainer_state.json) under `<out>/runs/`, and
  `experiments.report.write_report` pools the seeds and compares every pair of methods, paired on problems, in
  `<out>/report/` (report.md, report.json, counts.json, PNGs).

Writes `learning.json` (settings, warm start, per run: final scores, tests, curves, rewards, entropy, clip share)
and `learning_heldout.png` / `learning_heldout_steps.png` / `learning_reward.png` to `--out`. `--plot-only` redraws
the PNGs from learning.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CURVE_EVAL = {"n_samples": 2, "ks": (1,)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--methods",
        nargs="*",
        default=None,
        help="study rows (default: experiments.learnable.study.STUDY_METHODS, METHODS' 12 and grpo_seq, pkpo_k1)",
    )
    parser.add_argument("--prompts", type=int, default=1200, help="fresh prompts every method samples")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    parser.add_argument("--eval-every", type=int, default=200, help="fresh prompts between curve points")
    parser.add_argument("--curve-problems", type=int, default=250)
    parser.add_argument("--final-problems", type=int, default=500)
    parser.add_argument(
        "--final-samples", type=int, default=4, help="samples per problem of the final scores"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--off-policy-steps",
        type=int,
        default=None,
        help="optimizer steps per generation batch of the rows that clip (study.OFF_POLICY_METHODS; default "
        f"{_STUDY_DEFAULTS['off_policy_steps']}); 1: every row on-policy, as the 2026-12-02 study",
    )
    parser.add_argument(
        "--ppo-steps-per-generation",
        type=int,
        default=None,
        help="PPO's steps per rollout, when it should differ from --off-policy-steps",
    )
    parser.add_argument(
        "--lr-search",
        action="store_true",
        help="the learning-rate search: every row at every rate of --lr-grid, one seed (study.LR_SEARCH_SEED), "
        "scored on training-family tuning problems; writes <out>/lr_search.json",
    )
    parser.add_argument(
        "--lr-grid", nargs="+", type=float, default=None, help="the search's rates (default: study.LR_GRID)"
    )
    parser.add_argument(
        "--lr-from",
        nargs="+",
        type=Path,
        default=None,
        help="outs of --lr-search: each row trains at the rate its search chose",
    )
    parser.add_argument("--select-on", default=None, help="the search's criterion (default: study.SELECT_ON)")
    parser.add_argument("--tuning-problems", type=int, default=None, help="default: study.TUNING_PROBLEMS")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_learning")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNGs from <out>/learning.json")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        help="outs of earlier runs: one learning.json and report",
    )
    parser.add_argument(
        "--contrast",
        nargs=2,
        metavar=("A", "B"),
        default=None,
        help="with the runs of --out: A - B at every k of the coverage curve, Holm over the k (contrast_A_B.json)",
    )
    args = parser.parse_args()
    if args.contrast:
        contrast(args.out, *args.contrast)
        return
    if args.plot_only:
        plot(json.loads((args.out / "learning.json").read_text()), args.out)
        return
    if args.merge:
        merge(args.merge, args.out)
        return

    from experiments.learnable import study

    args.off_policy_steps = args.off_policy_steps or study.OFF_POLICY_STEPS
    args.lr_grid = tuple(args.lr_grid or study.LR_GRID)
    args.select_on = args.select_on or study.SELECT_ON
    args.tuning_problems = args.tuning_problems or study.TUNING_PROBLEMS
    methods = args.methods or list(study.STUDY_METHODS)
    try:
        for row in methods:
            study.base_method(row)
        lrs = chosen_learning_rates(args.lr_from, methods, args.lr_grid) if args.lr_from else {}
        # One log-prob temperature for every row of the comparison, before anything trains.
        study.check_one_logprob_temperature(
            {row: row_hparams(row, args, lr=lrs.get(row))["logprob_temperature"] for row in methods}
        )
    except study.StudyError as err:
        raise SystemExit(str(err)) from None

    import torch

    torch.set_num_threads(args.threads)
    if args.lr_search:
        lr_search(args, methods)
        return
    study_runs(args, methods, lrs)


# What the study's flags default to when main() has not resolved them (a caller of row_config, the tests).
_STUDY_DEFAULTS = {"off_policy_steps": 5, "ppo_steps_per_generation": None}


def row_config(row: str, args, run_dir: Path, seed: int, lr: float | None = None):
    """The trainer config of a study row: its METHODS row's, the variant's values, the off-policy shape where it
    clips (`study.off_policy_overrides`), PPO's own steps per rollout if given, and the learning rate `lr` (else
    RL_DEFAULTS')."""
    from experiments.learnable import study
    from experiments.learnable.recipe import rl_config

    steps = getattr(args, "off_policy_steps", None) or _STUDY_DEFAULTS["off_policy_steps"]
    overrides = study.method_overrides(row) | study.off_policy_overrides(row, steps)
    if row == "ppo" and getattr(args, "ppo_steps_per_generation", None):
        overrides["steps_per_generation"] = args.ppo_steps_per_generation
    if lr is not None:
        overrides["learning_rate"] = lr
    return rl_config(study.base_method(row), run_dir, budget_prompts=args.prompts, seed=seed, **overrides)


def row_hparams(row: str, args, lr: float | None = None) -> dict:
    """run.json's `method_hparams` of a study row (its base row's hyperparameters, as configured)."""
    import tempfile

    from experiments.learnable import study
    from experiments.trainers import method_hparams

    with tempfile.TemporaryDirectory() as tmp:
        return method_hparams(study.base_method(row), row_config(row, args, Path(tmp), 0, lr))


def chosen_learning_rates(outs: list[Path], methods: list[str], grid: tuple[float, ...]) -> dict[str, float]:
    """{row: the rate its search chose} from the lr_search.json of `outs` (jobs of one search, merged)."""
    from experiments.learnable import study

    cells, select_on = [], None
    for o in outs:
        path = o / "lr_search.json"
        if not path.is_file():
            raise study.StudyError(f"--lr-from: {path} missing; run bench_learning.py --lr-search --out {o}")
        part = json.loads(path.read_text())
        if select_on not in (None, part["select_on"]):
            raise study.StudyError(f"--lr-from: {o} chose on {part['select_on']}, the others on {select_on}")
        select_on = part["select_on"]
        cells.extend(part["cells"])
    return {row: study.select_learning_rate(cells, row, select_on, grid)["learning_rate"] for row in methods}


def _train(args, row: str, seed: int, run_dir: Path, warm: Path, tokenizer, lr: float | None, callbacks=()):
    """Train one study row from the warm start; (trainer, SampleLog, seconds, budget)."""
    from transformers.trainer_callback import PrinterCallback

    import rewards
    from experiments.learnable.study import base_method
    from experiments.learnable.tasks import train_rows
    from experiments.run.budget import SampleLog, generation_shape
    from experiments.trainers import METHODS

    config = row_config(row, args, run_dir, seed, lr)
    trainer = METHODS[base_method(row)].trainer_cls(
        model=str(warm),
        reward_funcs=[rewards.unit_test_reward],
        args=config,
        train_dataset=train_rows(3000),
        processing_class=tokenizer,
    )
    log = SampleLog(trainer)
    for make in callbacks:
        trainer.add_callback(make(log, config))
    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    budget = {**log.totals(), "optimizer_steps": trainer.state.global_step, **generation_shape(config)}
    return trainer, log, seconds, budget


def steps_per_batch(config) -> int:
    """Optimizer steps per generation batch (a curve point is taken at a batch's end)."""
    from experiments.run.budget import generation_shape

    shape = generation_shape(config)
    return max(
        1, shape["steps_per_generation"] * shape["num_iterations"] // shape["gradient_accumulation_steps"]
    )


def _clip(trainer, budget: dict) -> dict:
    """The clip's share per step, for a run off-policy (experiments.report.analysis.clip_fraction)."""
    from experiments.report.analysis import clip_fraction, off_policy

    key, value = clip_fraction(trainer.state.log_history)
    return {"off_policy": bool(off_policy(budget)), "clip_metric": key, "clip_fraction": value}


def lr_search(args, methods: list[str]) -> None:
    """Every row at every rate of the grid, one tuning seed, the study's budget; each cell scored on
    `args.tuning_problems` training-family problems that no run trains on (`tasks.tuning_rows`), 8 samples at T=1
    and greedy. No held-out problem is loaded. Cells already in <out>/lr_search.json are kept, so a search
    stopped part-way goes on, and two jobs (--methods split) are read together by --lr-from."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experiments.evaluation.stats import pass_at_k_per_problem
    from experiments.learnable import study
    from experiments.learnable.recipe import heldout_score
    from experiments.learnable.tasks import tuning_rows
    from experiments.learnable.warm_start import WARM_START_STEPS, task_model_path
    from experiments.learnable.warm_start import warm_start as sft_warm_start

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "lr_search.json"
    settings = {
        "grid": list(args.lr_grid),
        "seed": study.LR_SEARCH_SEED,
        "prompts": args.prompts,
        "tuning_problems": args.tuning_problems,
        "tuning_samples": study.TUNING_SAMPLES,
        "off_policy_steps": args.off_policy_steps,
        "ppo_steps_per_generation": args.ppo_steps_per_generation,
        "warm_start_steps": WARM_START_STEPS,
    }
    record = {"select_on": args.select_on, "settings": settings, "start": None, "cells": []}
    if path.is_file():
        record = json.loads(path.read_text())
        if record["settings"] != settings or record["select_on"] != args.select_on:
            raise SystemExit(f"--lr-search: {path} was searched with other settings; give another --out")
    warm = sft_warm_start(task_model_path(), args.out / "warm_start", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(warm)
    rows = tuning_rows(args.tuning_problems)
    tuning = {"n_samples": study.TUNING_SAMPLES, "ks": (1, study.TUNING_SAMPLES)}

    def scores(model) -> dict:
        s = heldout_score(model, tokenizer, rows, **tuning)
        probs = s.result["problems"]
        at = {
            k: float(pass_at_k_per_problem([p["n"] for p in probs], [p["correct"] for p in probs], k).mean())
            for k in (1, study.TUNING_SAMPLES)
        }
        return {
            "pass@1": at[1],
            f"pass@{study.TUNING_SAMPLES}": at[study.TUNING_SAMPLES],
            "greedy_pass@1": s.greedy_rate,
        }

    if record["start"] is None:
        record["start"] = scores(AutoModelForCausalLM.from_pretrained(warm))
    done = {(c["method"], float(c["learning_rate"])) for c in record["cells"]}
    for row in methods:
        for lr in args.lr_grid:
            if (row, float(lr)) in done:
                continue
            run_dir = args.out / "runs" / f"{row}-lr{lr:g}"
            trainer, log, seconds, budget = _train(
                args, row, study.LR_SEARCH_SEED, run_dir, warm, tokenizer, lr
            )
            t0 = time.perf_counter()
            cell_scores = scores(trainer.model)
            cell = {
                "method": row,
                "learning_rate": float(lr),
                "scores": cell_scores,
                "train_seconds": seconds,
                "eval_seconds": time.perf_counter() - t0,
                "budget": budget,
                **_clip(trainer, budget),
            }
            record["cells"].append(cell)
            path.write_text(json.dumps(record, indent=1))
            print(
                f"lr search {row:<16} lr {lr:g}: {args.select_on} {cell_scores[args.select_on]:.3f} "
                f"(start {record['start'][args.select_on]:.3f}); {seconds:.0f} s training",
                flush=True,
            )
    chosen = {}
    for row in methods:
        try:
            chosen[row] = study.select_learning_rate(record["cells"], row, args.select_on, args.lr_grid)
        except study.StudyError:
            continue  # another job holds this row's other cells: --lr-from reads them together
    record["chosen"] = chosen
    path.write_text(json.dumps(record, indent=1))
    for row, c in chosen.items():
        print(f"chosen {row:<16} lr {c['learning_rate']:g}  ({args.select_on}: {c['scores']})")
    print(f"lr search: {path}")


def study_runs(args, methods: list[str], lrs: dict[str, float]) -> None:
    """Every row and seed from the warm start, scored on the held-out families: learning.json, plots, report."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from experiments.evaluation.stats import coverage_ks
    from experiments.learnable.recipe import greedy_sign_test, heldout_score, two_proportion_z
    from experiments.learnable.study import base_method
    from experiments.learnable.tasks import heldout_rows
    from experiments.learnable.warm_start import WARM_START_STEPS, task_model_path
    from experiments.learnable.warm_start import warm_start as sft_warm_start
    from experiments.trainers import method_hparams

    args.out.mkdir(parents=True, exist_ok=True)
    warm = sft_warm_start(task_model_path(), args.out / "warm_start", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(warm)
    curve_rows, final_rows = heldout_rows(args.curve_problems), heldout_rows(args.final_problems)
    final_eval = {"n_samples": args.final_samples, "ks": tuple(coverage_ks(args.final_samples))}
    base = AutoModelForCausalLM.from_pretrained(warm)
    before = heldout_score(base, tokenizer, final_rows, **final_eval)
    before_curve = heldout_score(base, tokenizer, curve_rows, **CURVE_EVAL)
    print(
        f"warm start: sampled {before.passed}/{before.n}, greedy {before.greedy_passed}/{before.problems}",
        flush=True,
    )

    class HeldoutCurve(TrainerCallback):
        """Held-out pass every `--eval-every` fresh prompts, at the end of a generation batch's last step:
        points (fresh prompts, sampled, greedy, optimizer steps)."""

        def __init__(self, log, config):
            self.log, self.steps_per_batch = log, steps_per_batch(config)
            self.points = [(0, before_curve.rate, before_curve.greedy_rate, 0)]
            self.next_at = args.eval_every

        def on_step_end(self, cb_args, state, control, model=None, **kwargs):
            fresh = self.log.totals()["fresh_prompts"]
            if fresh >= self.next_at and state.global_step % self.steps_per_batch == 0:
                if state.global_step < state.max_steps:  # the last point is the final model's, below
                    s = heldout_score(model, tokenizer, curve_rows, **CURVE_EVAL)
                    self.points.append((fresh, s.rate, s.greedy_rate, state.global_step))
                self.next_at += args.eval_every

    settings = {k: str(v) for k, v in vars(args).items()} | {"warm_start_steps": WARM_START_STEPS}
    results = {"settings": settings, "before": _score_dict(before), "runs": []}
    if lrs:
        results["learning_rates"] = lrs | {"from": [str(o) for o in args.lr_from]}
    run_dirs = []
    for seed in args.seeds:
        for method in methods:
            run_dir = args.out / "runs" / f"{method}-seed{seed}"
            curves = []

            def make_curve(log, config, curves=curves):
                curves.append(HeldoutCurve(log, config))
                return curves[-1]

            trainer, log, seconds, budget = _train(
                args, method, seed, run_dir, warm, tokenizer, lrs.get(method), (make_curve,)
            )
            curve = curves[0]
            steps = trainer.state.global_step
            after = heldout_score(trainer.model, tokenizer, final_rows, **final_eval)
            end = heldout_score(trainer.model, tokenizer, curve_rows, **CURVE_EVAL)
            curve.points.append((budget["fresh_prompts"], end.rate, end.greedy_rate, steps))
            gained, lost, p_greedy = greedy_sign_test(before, after)
            history = trainer.state.log_history
            run = {
                "method": method,
                "seed": seed,
                "learning_rate": float(trainer.args.learning_rate),
                "train_seconds": seconds,
                "budget": budget,
                "method_hparams": method_hparams(base_method(method), trainer.args),
                **_clip(trainer, budget),
                "after": _score_dict(after),
                "z": two_proportion_z(before.passed, before.n, after.passed, after.n),
                "greedy_gained": gained,
                "greedy_lost": lost,
                "greedy_sign_p": p_greedy,
                "curve": curve.points,
                "reward": [(fresh_at(log, h["step"]), h["reward"]) for h in history if "reward" in h],
                "entropy": [(fresh_at(log, h["step"]), h["entropy"]) for h in history if "entropy" in h],
            }
            results["runs"].append(run)
            results["budget_views"] = budget_views(results["runs"])
            _write_run_dir(run_dir, trainer, run, before, after)
            run_dirs.append(run_dir)
            clip = "" if run["clip_fraction"] is None else f", clipped {run['clip_fraction']:.1%}"
            print(
                f"{method:<16} seed {seed}: sampled {before.passed}/{before.n} -> {after.passed}/{after.n} "
                f"(z {run['z']:.1f}), greedy {before.greedy_passed} -> {after.greedy_passed}/{after.problems} "
                f"(+{gained} -{lost}, sign-test p {p_greedy:.2g}); {budget['fresh_prompts']} prompts, {steps} steps, "
                f"{seconds / steps:.2f} s/step, lr {run['learning_rate']:g}{clip}",
                flush=True,
            )
            (args.out / "learning.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    _write_report(run_dirs, args.out, results["settings"])


def budget_views(runs: list[dict]) -> dict:
    """The two budgets the rows are compared at: fresh samples (the primary view) and optimizer steps. Each row's
    counts, and whether every row had the same; where steps differ, the equal-steps view is the curves against
    optimizer steps (learning_heldout_steps.png), read at the steps every row reached."""
    rows: dict[str, dict] = {}
    for run in runs:
        b = run["budget"]
        rows.setdefault(run["method"], {})[str(run["seed"])] = {
            "fresh_prompts": b["fresh_prompts"],
            "fresh_completions": b["fresh_completions"],
            "optimizer_steps": b["optimizer_steps"],
            "steps_per_generation": b.get("steps_per_generation"),
            "num_iterations": b.get("num_iterations"),
        }
    every = [v for per_seed in rows.values() for v in per_seed.values()]
    return {
        "equal_fresh_samples": len({v["fresh_completions"] for v in every}) <= 1,
        "equal_optimizer_steps": len({v["optimizer_steps"] for v in every}) <= 1,
        "common_optimizer_steps": min((v["optimizer_steps"] for v in every), default=0),
        "rows": rows,
    }


def _write_report(run_dirs: list[Path], out: Path, settings: dict) -> None:
    from experiments.report import console_table, write_report

    seeds = ", ".join(dict.fromkeys(str(json.loads((d / "run.json").read_text())["seed"]) for d in run_dirs))
    title = f"Learning on unseen problems: {settings['prompts']} fresh prompts, seeds {seeds}"
    report = write_report(run_dirs, out / "report", title=title)
    print(console_table(json.loads(report.with_suffix(".json").read_text())))
    print(f"report: {report}")


def contrast(out: Path, a: str, b: str) -> None:
    """One planned comparison, A - B after training, at every k = 1, 2, 4, ..., n of the coverage curve and at
    greedy pass@1: paired by problem and by seed (A's seed s against B's seed s, which sampled the same fresh
    prompts), problems and seed pairs resampled, Holm over the k, each null with its minimum detectable effect
    (80% power, Bonferroni over the k). Written to `out`/contrast_A_B.json."""
    import numpy as np

    from experiments.evaluation.stats import (
        bootstrap_p_value,
        coverage_ks,
        hierarchical_bootstrap,
        holm,
        pass_at_k_per_problem,
        percentile_interval,
    )
    from experiments.report.analysis import minimum_detectable_effect, p_floor
    from experiments.report.markdown import format_p_value
    from experiments.report.runs import load_run

    results = json.loads((out / "learning.json").read_text())
    outs = [Path(o) for o in results["settings"].get("merged_from", [str(out)])]
    runs = {}
    for o in outs:
        for d in sorted((o / "runs").iterdir()):
            run = load_run(d)
            runs[(run.method, run.seed)] = run
    seeds = sorted({s for m, s in runs if m == a} & {s for m, s in runs if m == b})
    if not seeds:
        raise SystemExit(f"--contrast: no seed has runs of both {a} and {b} under {out}")

    def per_problem(run, name: str) -> dict[str, float]:
        rows = run.after["problems"]
        if name == "greedy_pass@1":
            return {r["task_id"]: float(r["greedy_passed"]) for r in rows}
        k = int(name.split("@")[1])
        vals = pass_at_k_per_problem([r["n"] for r in rows], [r["correct"] for r in rows], k)
        return {r["task_id"]: float(v) for r, v in zip(rows, vals)}

    n = min(r["n"] for s in seeds for m in (a, b) for r in runs[(m, s)].after["problems"])
    names = ["greedy_pass@1"] + [f"pass@{k}" for k in coverage_ks(n)]
    rows = []
    for name in names:
        pa = [per_problem(runs[(a, s)], name) for s in seeds]
        pb = [per_problem(runs[(b, s)], name) for s in seeds]
        tasks = sorted(pa[0])
        diff = np.array([[x[t] - y[t] for t in tasks] for x, y in zip(pa, pb)])
        reps = hierarchical_bootstrap([diff], n_bootstrap=10_000, seed=0)[:, 0]
        rows.append(
            {
                "metric": name,
                "delta": float(diff.mean()),
                "ci": percentile_interval(reps),
                "p": bootstrap_p_value(reps),
                "mde": minimum_detectable_effect(reps, tests=len(names)),  # Holm over the family's metrics
            }
        )
    for row, adjusted in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = adjusted
    floor = p_floor(10_000)
    summary = {
        "contrast": f"{a} - {b}",
        "p_floor": floor,
        "seeds": seeds,
        "problems": len(tasks),
        "n": n,
        "correction": f"holm over the {len(rows)} metrics",
        "rows": rows,
    }
    path = out / f"contrast_{a}_{b}.json"
    path.write_text(json.dumps(summary, indent=1))
    for row in rows:
        print(
            f"{row['metric']:<14} {a} - {b} {100 * row['delta']:+6.1f} pp "
            f"[{100 * row['ci'][0]:+.1f}, {100 * row['ci'][1]:+.1f}]  p {format_p_value(row['p'], floor)}  "
            f"p_holm {format_p_value(row['p_holm'], floor, row['p'])}"
            + (f"  MDE {100 * row['mde']:.1f} pp" if row["p_holm"] >= 0.05 and row["mde"] is not None else "")
        )
    print(f"contrast: {path}")


def merge(outs: list[Path], out: Path) -> None:
    """One learning.json, its plots and one report from the runs of several outs (jobs run side by side), which
    must share their settings but the seeds and methods, and their warm start's scores."""
    parts = [json.loads((o / "learning.json").read_text()) for o in outs]
    own = {"seeds", "methods", "out"}
    first = {k: v for k, v in parts[0]["settings"].items() if k not in own}

    def warm_start(part: dict) -> dict:
        """Its scores and its scorer's versions: the commit may differ (`scorer_key`)."""
        from experiments.evaluation.scorer import scorer_key

        return {**part["before"], "scorer": scorer_key(part["before"].get("scorer"))}

    for o, part in zip(outs[1:], parts[1:]):
        theirs = {k: v for k, v in part["settings"].items() if k not in own}
        if theirs != first or warm_start(part) != warm_start(parts[0]):
            raise SystemExit(f"--merge: {o} ran with other settings or another warm start than {outs[0]}")
    runs = [run for part in parts for run in part["runs"]]
    from experiments.learnable.study import StudyError, check_one_logprob_temperature

    try:
        check_one_logprob_temperature(
            {f"{r['method']} seed {r['seed']}": r["method_hparams"].get("logprob_temperature") for r in runs}
        )
    except StudyError as err:
        raise SystemExit(f"--merge: {err}") from None
    settings = first | {
        "seeds": str(sorted({run["seed"] for run in runs})),
        "methods": str(list(dict.fromkeys(run["method"] for run in runs))),
        "merged_from": [str(o) for o in outs],
    }
    results = {
        "settings": settings,
        "before": parts[0]["before"],
        "runs": runs,
        "budget_views": budget_views(runs),
    }
    rates = [p["learning_rates"] for p in parts if "learning_rates" in p]
    if rates:
        results["learning_rates"] = rates[0]
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(results, indent=1))
    plot(results, out)
    run_dirs = [
        o / "runs" / f"{run['method']}-seed{run['seed']}"
        for o in outs
        for run in json.loads((o / "learning.json").read_text())["runs"]
    ]
    _write_report(run_dirs, out, settings)


def _score_dict(score) -> dict:
    """The totals, and per problem [samples, correct, greedy passed (1/0, None without greedy)]: the compact
    counts every committed comparison is recomputed from when the run directories are not committed."""
    rows = (score.result or {}).get("problems") or []
    return {
        "passed": score.passed,
        "n": score.n,
        "greedy_passed": score.greedy_passed,
        "problems": score.problems,
        "per_problem": {
            r["task_id"]: [
                r["n"],
                r["correct"],
                None if r["greedy_passed"] is None else int(r["greedy_passed"]),
            ]
            for r in rows
        },
        "scorer": (score.result or {}).get("scorer"),
    }


def fresh_at(log, step: int) -> int:
    """Fresh prompts sampled before optimizer step `step` ended (a batch is logged at the step it feeds first)."""
    return sum(len(g["prompts"]) for g in log.generations if g["step"] < step)


def _run_config(args, seed: int, n_eval: int) -> dict:
    """The settings of a run that `passk train` keeps in run.json's `config`: the task, the prompt style, the
    learning rate and the sampling, from the trainer's arguments."""
    from experiments.learnable.warm_start import WARM_START_STEPS

    return {
        "dataset": "learnable",
        "n_train": 3000,  # train_rows(3000) below
        "n_eval": n_eval,
        "style": "completion",
        "seed": seed,
        "warm_start_steps": WARM_START_STEPS,
        **{
            key: getattr(args, key, None)
            for key in (
                "learning_rate",
                "lr_scheduler_type",
                "max_completion_length",
                "temperature",
                "num_generations",
            )
        },
        "lr_scheduler_type": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
    }


def _write_run_dir(run_dir: Path, trainer, run: dict, before, after) -> None:
    """The files `experiments.report` reads, as `passk train` writes them."""
    from experiments.evaluation.scorer import scorer_stamp
    from experiments.learnable.warm_start import WARM_START_STEPS

    run_dir.mkdir(parents=True, exist_ok=True)
    trainer.save_state()  # trainer_state.json with the per-step log
    (run_dir / "eval_before.json").write_text(json.dumps(before.result, indent=1))
    (run_dir / "eval_after.json").write_text(json.dumps(after.result, indent=1))
    meta = {
        "method": run["method"],
        "seed": run["seed"],
        "model": f"task model, {WARM_START_STEPS} SFT steps",
        "wall_time_s": run["train_seconds"],
        "global_step": trainer.state.global_step,
        "budget": run["budget"],
        "method_hparams": run["method_hparams"],
        "model_parameters": sum(p.numel() for p in trainer.model.parameters()),
        "scorer": scorer_stamp(),
        # what the report's "What was trained" reads (experiments.report.analysis._setup), so it prints no "?"
        "config": _run_config(trainer.args, run["seed"], len(after.greedy) or after.problems),
    }
    (run_dir / "run.json").write_text(json.dumps(meta, indent=1, default=str))


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(run["method"] for run in results["runs"]))
    seeds = list(dict.fromkeys(run["seed"] for run in results["runs"]))
    styles = ["-", "--", ":", "-."]
    seed_note = f"one colour per method; seeds {seeds} as {', '.join(styles[: len(seeds)])}"

    def line(ax, run, xs, ys, marker=None):
        seed_index = seeds.index(run["seed"])
        ax.plot(
            xs,
            ys,
            color=f"C{methods.index(run['method'])}",
            linestyle=styles[seed_index % len(styles)],
            marker=marker,
            ms=3,
            label=run["method"] if seed_index == 0 else None,
        )

    # Held-out pass during training: sampled (T=1) and greedy side by side.
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for run in results["runs"]:
        steps = [p[0] for p in run["curve"]]
        line(axes[0], run, steps, [p[1] for p in run["curve"]], marker="o")
        line(axes[1], run, steps, [p[2] for p in run["curve"]], marker="o")
    for ax, title in zip(axes, ("sampled pass@1 (T=1, 2 samples)", "greedy pass@1")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("fresh prompts sampled (8 completions each)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out pass rate (unseen families)")
    axes[1].legend(fontsize=7)
    fig.suptitle(seed_note, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "learning_heldout.png", dpi=120)
    plt.close(fig)

    # The same curves against optimizer steps: the view at equal updates (points recorded before the steps were
    # kept, in older learning.json files, have no step and are left out).
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for run in results["runs"]:
        points = [p for p in run["curve"] if len(p) > 3]
        line(axes[0], run, [p[3] for p in points], [p[1] for p in points], marker="o")
        line(axes[1], run, [p[3] for p in points], [p[2] for p in points], marker="o")
    for ax, title in zip(axes, ("sampled pass@1 (T=1, 2 samples)", "greedy pass@1")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimizer steps")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out pass rate (unseen families)")
    axes[1].legend(fontsize=7)
    fig.suptitle(seed_note, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "learning_heldout_steps.png", dpi=120)
    plt.close(fig)

    def smooth(points: list, k: int = 10) -> tuple[list, list]:
        xs, ys = zip(*points)
        return list(xs), [
            sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1]) for i in range(len(ys))
        ]

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in results["runs"]:
        line(axes[0], run, *smooth(run["reward"]))
        if run["entropy"]:
            line(axes[1], run, *smooth(run["entropy"]))
    for ax, ylabel in zip(
        axes, ("training reward (10-step mean)", "policy entropy, nats/token (10-step mean)")
    ):
        ax.set_xlabel("fresh prompts sampled (8 completions each)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(seed_note, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "learning_reward.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
