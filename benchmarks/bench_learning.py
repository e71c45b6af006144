"""Learning curves of the seven methods on the synthetic task: held-out pass rate vs step, with a bigger budget.

    python benchmarks/bench_learning.py                          # 150 steps, seed 0, eval every 25 steps
    python benchmarks/bench_learning.py --steps 300 --seeds 0 1 --out runs/bench_learning

The longer version of tests/test_learning.py: the same warm-started model (80 SFT steps), recipe
(`experiments.tasks.RL_DEFAULTS`) and reward (`rewards.unit_test_reward`). Every `--eval-every` steps the policy
samples 2 completions at T=1 for each of `--curve-problems` held-out problems; at the end, the full
`--final-problems` set is scored (sampled and greedy) and compared with the warm start by a two-proportion z test.
Writes `learning.json` (curves, training rewards, before/after with z) and `learning_heldout.png` /
`learning_reward.png` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="*", default=None)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", nargs="*", type=int, default=[0])
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--curve-problems", type=int, default=250)
    parser.add_argument("--final-problems", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_learning")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNGs from <out>/learning.json")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads((args.out / "learning.json").read_text()), args.out)
        return

    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    import rewards
    from experiments.tasks import (
        heldout_rows,
        heldout_score,
        rl_config,
        task_model_path,
        train_rows,
        two_proportion_z,
    )
    from experiments.tasks import warm_start as sft_warm_start
    from experiments.trainers import METHODS

    methods = args.methods or list(METHODS)
    args.out.mkdir(parents=True, exist_ok=True)
    warm = sft_warm_start(task_model_path(), args.out / "warm_start", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(warm)
    curve_rows, final_rows = heldout_rows(args.curve_problems), heldout_rows(args.final_problems)
    base = AutoModelForCausalLM.from_pretrained(warm)
    before = heldout_score(base, tokenizer, final_rows)
    before_curve = heldout_score(base, tokenizer, curve_rows, greedy=False)
    print(f"warm start: sampled {before.passed}/{before.n}, greedy {before.greedy_passed}/{before.problems}", flush=True)

    class HeldoutCurve(TrainerCallback):
        def __init__(self):
            self.points = [(0, before_curve.rate)]

        def on_step_end(self, cb_args, state, control, model=None, **kwargs):
            if state.global_step % args.eval_every == 0 and state.global_step < state.max_steps:
                self.points.append((state.global_step, heldout_score(model, tokenizer, curve_rows, greedy=False).rate))

    results = {"settings": {k: str(v) for k, v in vars(args).items()}, "before": vars(before), "runs": []}
    for seed in args.seeds:
        for method in methods:
            curve = HeldoutCurve()
            trainer = METHODS[method].trainer_cls(
                model=str(warm),
                reward_funcs=[rewards.unit_test_reward],
                args=rl_config(method, args.out / f"{method}-seed{seed}", max_steps=args.steps, seed=seed),
                train_dataset=train_rows(3000),
                processing_class=tokenizer,
                callbacks=[curve],
            )
            trainer.remove_callback(PrinterCallback)
            t0 = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - t0
            after = heldout_score(trainer.model, tokenizer, final_rows)
            curve.points.append((args.steps, heldout_score(trainer.model, tokenizer, curve_rows, greedy=False).rate))
            history = trainer.state.log_history
            run = {
                "method": method,
                "seed": seed,
                "train_seconds": seconds,
                "after": vars(after),
                "z": two_proportion_z(before.passed, before.n, after.passed, after.n),
                "z_greedy": two_proportion_z(before.greedy_passed, before.problems, after.greedy_passed, after.problems),
                "curve": curve.points,
                "reward": [(h["step"], h["reward"]) for h in history if "reward" in h],
                "entropy": [(h["step"], h["entropy"]) for h in history if "entropy" in h],
            }
            results["runs"].append(run)
            print(
                f"{method:<16} seed {seed}: sampled {before.passed}/{before.n} -> {after.passed}/{after.n} "
                f"(z {run['z']:.1f}), greedy {before.greedy_passed} -> {after.greedy_passed}/{after.problems} "
                f"(z {run['z_greedy']:.1f}), {seconds / args.steps:.2f} s/step",
                flush=True,
            )
            (args.out / "learning.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(points: list, k: int = 10) -> tuple[list, list]:
        xs, ys = zip(*points)
        return list(xs), [sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1]) for i in range(len(ys))]

    for key, fname, ylabel in (
        ("curve", "learning_heldout.png", "held-out pass rate (T=1)"),
        ("reward", "learning_reward.png", "training reward (10-step mean)"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        methods = list(dict.fromkeys(run["method"] for run in results["runs"]))
        seeds = list(dict.fromkeys(run["seed"] for run in results["runs"]))
        styles = ["-", "--", ":", "-."]
        for run in results["runs"]:
            xs, ys = smooth(run[key]) if key == "reward" else zip(*run[key])
            seed_index = seeds.index(run["seed"])
            ax.plot(
                xs, ys, color=f"C{methods.index(run['method'])}", linestyle=styles[seed_index % len(styles)],
                marker="o" if key == "curve" else None, ms=3,
                label=run["method"] if seed_index == 0 else None,
            )  # fmt: skip
        if len(seeds) > 1:
            ax.set_title(f"one colour per method; seeds {seeds} as {', '.join(styles[: len(seeds)])}", fontsize=9)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    main()
