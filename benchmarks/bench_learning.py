"""Learning curves of the seven methods on unseen problems of the synthetic task, with between-method intervals.

    python benchmarks/bench_learning.py --prompts 1200 --seeds 0 1        # the committed results
    python benchmarks/bench_learning.py --prompts 1200 --seeds 0 1 --methods ppo --ppo-steps-per-generation 5
    python benchmarks/bench_learning.py --prompts 160 --seeds 0 --methods grpo ppo --out runs/quick
    python benchmarks/bench_learning.py --final-samples 64 --seeds 0 --out runs/a   # coverage curves, k = 1 ... 64
    python benchmarks/bench_learning.py --merge runs/a runs/b --out runs/ab          # two jobs' runs, one report
    python benchmarks/bench_learning.py --contrast pkpo grpo --out runs/ab            # one pair at every k

The longer version of tests/test_learning.py: the same warm-started model (95 SFT steps), recipe
(`experiments.learnable.recipe.RL_DEFAULTS`), reward (`rewards.unit_test_reward`) and family split (no held-out body in
training). Every method samples the same `--prompts` fresh prompts, 8 completions each, in generation batches of
8 prompts (`experiments.run.budget.derive_max_steps`: a one-epoch method takes one optimizer step per batch, PPO two),
counted by `experiments.run.budget.SampleLog`.

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
  `<out>/report/` (report.md, report.json, PNGs).

Writes `learning.json` (settings, warm start, per run: final scores, tests, curves, rewards, entropy) and
`learning_heldout.png` / `learning_reward.png` to `--out`. `--plot-only` redraws the PNGs from learning.json.
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
    parser.add_argument("--methods", nargs="*", default=None)
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
        "--ppo-steps-per-generation",
        type=int,
        default=None,
        help="optimizer steps per PPO rollout (default: PPO's own, 4; 1200 prompts need one that divides 150)",
    )
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

    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    import rewards
    from experiments.evaluation.stats import coverage_ks
    from experiments.learnable.recipe import greedy_sign_test, heldout_score, rl_config, two_proportion_z
    from experiments.learnable.tasks import heldout_rows, train_rows
    from experiments.learnable.warm_start import WARM_START_STEPS, task_model_path
    from experiments.learnable.warm_start import warm_start as sft_warm_start
    from experiments.run.budget import SampleLog, generation_shape
    from experiments.trainers import METHODS, method_hparams

    methods = args.methods or list(METHODS)
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
        """Held-out pass every `--eval-every` fresh prompts, at the end of a generation batch's last step."""

        def __init__(self, log: SampleLog, steps_per_batch: int):
            self.log, self.steps_per_batch = log, steps_per_batch
            self.points = [(0, before_curve.rate, before_curve.greedy_rate)]
            self.next_at = args.eval_every

        def on_step_end(self, cb_args, state, control, model=None, **kwargs):
            fresh = self.log.totals()["fresh_prompts"]
            if fresh >= self.next_at and state.global_step % self.steps_per_batch == 0:
                if state.global_step < state.max_steps:  # the last point is the final model's, below
                    s = heldout_score(model, tokenizer, curve_rows, **CURVE_EVAL)
                    self.points.append((fresh, s.rate, s.greedy_rate))
                self.next_at += args.eval_every

    settings = {k: str(v) for k, v in vars(args).items()} | {"warm_start_steps": WARM_START_STEPS}
    results = {"settings": settings, "before": _score_dict(before), "runs": []}
    run_dirs = []
    for seed in args.seeds:
        for method in methods:
            run_dir = args.out / "runs" / f"{method}-seed{seed}"
            overrides = {}
            if method == "ppo" and args.ppo_steps_per_generation:
                overrides["steps_per_generation"] = args.ppo_steps_per_generation
            config = rl_config(method, run_dir, budget_prompts=args.prompts, seed=seed, **overrides)
            shape = generation_shape(config)
            steps_per_batch = (
                shape["steps_per_generation"]
                * shape["num_iterations"]
                // shape["gradient_accumulation_steps"]
            )
            trainer = METHODS[method].trainer_cls(
                model=str(warm),
                reward_funcs=[rewards.unit_test_reward],
                args=config,
                train_dataset=train_rows(3000),
                processing_class=tokenizer,
            )
            log = SampleLog(trainer)
            curve = HeldoutCurve(log, max(1, steps_per_batch))
            trainer.add_callback(curve)
            trainer.remove_callback(PrinterCallback)
            t0 = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - t0
            steps = trainer.state.global_step
            after = heldout_score(trainer.model, tokenizer, final_rows, **final_eval)
            end = heldout_score(trainer.model, tokenizer, curve_rows, **CURVE_EVAL)
            budget = {**log.totals(), "optimizer_steps": steps, **shape}  # the shape: the report's x-axis
            curve.points.append((budget["fresh_prompts"], end.rate, end.greedy_rate))
            gained, lost, p_greedy = greedy_sign_test(before, after)
            history = trainer.state.log_history
            run = {
                "method": method,
                "seed": seed,
                "train_seconds": seconds,
                "budget": budget,
                "method_hparams": method_hparams(method, config),
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
            _write_run_dir(run_dir, trainer, run, before, after)
            run_dirs.append(run_dir)
            print(
                f"{method:<16} seed {seed}: sampled {before.passed}/{before.n} -> {after.passed}/{after.n} "
                f"(z {run['z']:.1f}), greedy {before.greedy_passed} -> {after.greedy_passed}/{after.problems} "
                f"(+{gained} -{lost}, sign-test p {p_greedy:.2g}); {budget['fresh_prompts']} prompts, {steps} steps, "
                f"{seconds / steps:.2f} s/step",
                flush=True,
            )
            (args.out / "learning.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    _write_report(run_dirs, args.out, results["settings"])


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
    prompts), problems and seed pairs resampled, Holm over the k. Written to `out`/contrast_A_B.json."""
    import numpy as np

    from experiments.evaluation.stats import (
        bootstrap_p_value,
        coverage_ks,
        hierarchical_bootstrap,
        holm,
        pass_at_k_per_problem,
        percentile_interval,
    )
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
            }
        )
    for row, adjusted in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = adjusted
    summary = {
        "contrast": f"{a} - {b}",
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
            f"[{100 * row['ci'][0]:+.1f}, {100 * row['ci'][1]:+.1f}]  p {row['p']:.3g}  p_holm {row['p_holm']:.3g}"
        )
    print(f"contrast: {path}")


def merge(outs: list[Path], out: Path) -> None:
    """One learning.json, its plots and one report from the runs of several outs (jobs run side by side), which
    must share their settings but the seeds and methods, and their warm start's scores."""
    parts = [json.loads((o / "learning.json").read_text()) for o in outs]
    own = {"seeds", "methods", "out"}
    first = {k: v for k, v in parts[0]["settings"].items() if k not in own}
    for o, part in zip(outs[1:], parts[1:]):
        theirs = {k: v for k, v in part["settings"].items() if k not in own}
        if theirs != first or part["before"] != parts[0]["before"]:
            raise SystemExit(f"--merge: {o} ran with other settings or another warm start than {outs[0]}")
    runs = [run for part in parts for run in part["runs"]]
    settings = first | {
        "seeds": str(sorted({run["seed"] for run in runs})),
        "methods": str(list(dict.fromkeys(run["method"] for run in runs))),
        "merged_from": [str(o) for o in outs],
    }
    results = {"settings": settings, "before": parts[0]["before"], "runs": runs}
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
