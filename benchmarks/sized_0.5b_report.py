"""The sized 0.5B run's report (issue 50 item 4): each method's change on the trained and on the held-out problems,
paired by problem, beside the power calculation written before the run, and the signal checks read from every
log row of every run.

Reads what `benchmarks/sized_0.5b.sh` writes under RUNS: `base_{train,eval}.json` (the base model's evaluation),
`<method>/eval_{train,eval}.json` (after training), `<method>/trainer_state.json` or its last checkpoint's, and
`<method>/completion_ends.jsonl`. A method neither trained (`run.json`) nor evaluated is listed as not run; a
trained one whose evaluations are not all there is reported with its signal checks and says which set is left.
Before and after must agree in every sampling setting, the problems and the scorer's versions, or the report
refuses in one line. Writes report.md, report.json and the plots to OUT.

    python benchmarks/sized_0.5b_report.py RUNS --out benchmarks/results/sized_0.5b
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.evaluation.scorer import scorer_key  # noqa: E402
from experiments.evaluation.stats import (  # noqa: E402
    bootstrap_p_value,
    hierarchical_bootstrap,
    pass_at_k_per_problem,
    percentile_interval,
)

METHODS = ("grpo", "reinforce_rloo", "ppo")
SPLITS = {"train": "trained (20)", "eval": "held out (15)"}
PRIMARY = ("grpo", "train", "pass@1")
N_BOOTSTRAP = 10_000
# What must match between a before and an after record for their difference to be a training effect.
SAME_SETTINGS = (
    "temperature",
    "top_p",
    "max_new_tokens",
    "greedy",
    "seed",
    "style",
    "stop_at_code_end",
    "generator",
)


class ReportError(Exception):
    """A before/after pair that cannot be compared; one line."""


def per_problem(record: dict, metric: str) -> dict[str, float]:
    """Each problem's value of `metric` (pass@K from its n samples, or greedy_pass@1) by task id."""
    rows = record["problems"]
    if metric == "greedy_pass@1":
        return {r["task_id"]: float(bool(r["greedy_passed"])) for r in rows}
    k = int(metric.split("@")[1])
    values = pass_at_k_per_problem([r["n"] for r in rows], [r["correct"] for r in rows], k)
    return {r["task_id"]: float(v) for r, v in zip(rows, values)}


def check_comparable(before: dict, after: dict, what: str) -> None:
    """Refuse a pair whose problems, sampling settings or scorer differ."""
    b_ids = sorted(p["task_id"] for p in before["problems"])
    a_ids = sorted(p["task_id"] for p in after["problems"])
    if b_ids != a_ids:
        raise ReportError(f"{what}: before and after scored different problems")
    for key in SAME_SETTINGS:
        if before["settings"].get(key) != after["settings"].get(key):
            raise ReportError(
                f"{what}: before and after differ in {key} ({before['settings'].get(key)!r} against "
                f"{after['settings'].get(key)!r}); evaluate both alike"
            )
    if before.get("n") != after.get("n"):
        raise ReportError(
            f"{what}: before and after drew different n ({before.get('n')} against {after.get('n')})"
        )
    if scorer_key(before.get("scorer")) != scorer_key(after.get("scorer")):
        raise ReportError(f"{what}: before and after were scored by different extraction/sandbox versions")


def change(before: dict, after: dict, metric: str, seed: int = 0) -> dict[str, Any]:
    """after - before of `metric`, paired by problem: the mean change, its 95% percentile bootstrap interval over
    problems and the bootstrap p-value of "no change"."""
    b, a = per_problem(before, metric), per_problem(after, metric)
    tasks = sorted(b)
    diff = np.array([[a[t] - b[t] for t in tasks]])
    reps = hierarchical_bootstrap([diff], n_bootstrap=N_BOOTSTRAP, seed=seed)[:, 0]
    return {
        "metric": metric,
        "before": float(np.mean([b[t] for t in tasks])),
        "after": float(np.mean([a[t] for t in tasks])),
        "delta": float(diff.mean()),
        "ci": percentile_interval(reps),
        "p": bootstrap_p_value(reps),
        "p_floor": 2 / (N_BOOTSTRAP + 1),
        "problems": len(tasks),
        "improved": int(sum(a[t] > b[t] for t in tasks)),
        "worsened": int(sum(a[t] < b[t] for t in tasks)),
    }


def log_rows(run: Path) -> list[dict]:
    """Every training log row of the run (TRL's `log_history`, one per optimizer step): the finished run's, else its
    latest checkpoint's."""
    checkpoints = sorted(
        run.glob("checkpoint-*/trainer_state.json"), key=lambda p: -int(p.parent.name.split("-")[1])
    )
    for state in [run / "trainer_state.json", *checkpoints]:
        if state.is_file():
            history = json.loads(state.read_text())["log_history"]
            return [r for r in history if "train_runtime" not in r]  # that last row sums the run up
    return []


def _num_generations(run: Path) -> int | None:
    record = run / "run.json"
    if record.is_file():
        return json.loads(record.read_text()).get("config", {}).get("num_generations")
    return None


def _mean(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return float(np.mean(values)) if values else float("nan")


def _span(rows: list[dict], key: str) -> list[float] | None:
    values = [r[key] for r in rows if key in r]
    return [float(min(values)), float(max(values))] if values else None


def signal_checks(run: Path) -> dict[str, Any]:
    """What the run's every log row and every completion's end say about whether the run could move.

    A row with a reward is a scored generation batch: every step for GRPO and RLOO here, every 4th for PPO, which
    samples 4 steps' problems at once and then takes 4 updates on them; groups are counted, not rows, so the
    methods' reward-variance counts compare.
    """
    rows = log_rows(run)
    scored = [r for r in rows if "reward" in r]
    ends: Counter[str] = Counter()
    batch_sizes: list[int] = []
    ends_file = run / "completion_ends.jsonl"
    if ends_file.is_file():
        for line in ends_file.read_text().splitlines():
            batch = json.loads(line)["ends"]
            ends.update(batch)
            batch_sizes.append(len(batch))
    total = sum(ends.values())
    out: dict[str, Any] = {
        "log_rows": len(rows),
        "scored_batches": len(scored),
        "generation_batches": len(batch_sizes),
        "completions": total,
        "completion_ends": dict(ends),
        "cut_by_cap_frac": ends["cap"] / total if total else None,
    }
    group = _num_generations(run)
    if scored and group and len(batch_sizes) >= len(scored):
        # the i-th scored row is the i-th generation batch; frac_reward_zero_std is over that batch's groups
        groups = [n // group for n in batch_sizes[: len(scored)]]
        out["groups"] = int(sum(groups))
        out["groups_with_reward_variance"] = int(
            round(sum((1 - r["frac_reward_zero_std"]) * g for r, g in zip(scored, groups, strict=True)))
        )
    if scored:
        rewards = np.array([r["reward"] for r in scored], dtype=float)
        third = max(len(rewards) // 3, 1)
        out |= {
            "mean_frac_reward_zero_std": float(np.mean([r["frac_reward_zero_std"] for r in scored])),
            "reward_first_third": float(rewards[:third].mean()),
            "reward_last_third": float(rewards[-third:].mean()),
            "mean_completion_length": _mean(scored, "completions/mean_length"),
            "trl_clipped_ratio_mean": _mean(scored, "completions/clipped_ratio"),
        }
        lowest = _span(scored, "sampling/importance_sampling_ratio/min")
        highest = _span(scored, "sampling/importance_sampling_ratio/max")
        if lowest and highest:  # over every completion of the run (TRL logs each batch's min and max)
            out["importance_sampling_ratio_span"] = [lowest[0], highest[1]]
    if rows:
        out["step_time_s_mean"] = _mean(rows, "step_time")
    ppo = {
        key: _span(rows, f"ppo/{key}")
        for key in ("explained_variance", "clipfrac", "approx_kl", "vf_clipfrac")
    }
    if any(ppo.values()):
        out["ppo_spans"] = ppo
    return out


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def _p(row: dict) -> str:
    return f"< {row['p_floor']:.2g}" if row["p"] <= row["p_floor"] * (1 + 1e-9) else f"{row['p']:.4f}"


def verdict(row: dict, mde: float | None) -> str:
    if row["ci"][0] > 0:
        return "**raised**"
    if row["ci"][1] < 0:
        return "**lowered**"
    seen = f"; the design's smallest change seen with 80% power: {100 * mde:.1f} pp" if mde else ""
    return "no change shown" + seen


def build(runs: Path, power: dict) -> dict[str, Any]:
    before = {s: json.loads((runs / f"base_{s}.json").read_text()) for s in SPLITS}
    report: dict[str, Any] = {"primary": "/".join(PRIMARY), "methods": {}, "not_run": []}
    report["base"] = {
        s: {m: before[s]["metrics"][m]["value"] for m in ("pass@1", "greedy_pass@1")} for s in SPLITS
    }
    for method in METHODS:
        run = runs / method
        files = {s: run / f"eval_{s}.json" for s in SPLITS if (run / f"eval_{s}.json").is_file()}
        # a finished training is reported (its signal checks) before its evaluations are in
        if not files and not (run / "run.json").is_file():
            report["not_run"].append(method)
            continue
        entry: dict[str, Any] = {"splits": {}, "signal": signal_checks(run)}
        entry["not_evaluated"] = [SPLITS[s] for s in SPLITS if s not in files]
        if (run / "run.json").is_file():
            record = json.loads((run / "run.json").read_text())
            entry["run"] = {
                k: record.get(k) for k in ("global_step", "train_time_s", "wall_time_s", "method_hparams")
            }
        for split in files:
            after = json.loads(files[split].read_text())
            check_comparable(before[split], after, f"{method}, {split} split")
            mde = power["intervals"]["trained" if split == "train" else "held_out"]["tau=0.15"][
                "smallest_change_80pct_power"
            ]
            rows = [change(before[split], after, m) for m in ("pass@1", "pass@16", "greedy_pass@1")]
            for row in rows:
                row["verdict"] = verdict(row, mde if row["metric"] == "pass@1" else None)
            entry["splits"][split] = rows
        report["methods"][method] = entry
    return report


def render(report: dict, power: dict) -> str:
    lines = [
        "# The sized run: Qwen2.5-Coder-0.5B-Instruct, LoRA, 35 screened HumanEval problems",
        "",
        "Design, written before the run: `benchmarks/sized_0.5b.yaml`, `benchmarks/sized_0.5b_power.py` (its output,",
        "`power.json`, is beside this file). Primary endpoint: "
        + power["design"]["primary"]
        + ". One training seed (42) per method; evaluation seed 42, n = 16 at T 0.8 plus greedy, vLLM's engine for"
        " every before and after.",
        "",
        "Intervals: 95% percentile bootstrap over problems (10,000 replicates), paired by problem. `< x`: a p at the",
        "bootstrap's floor. A null is written with the smallest change the design could see (power.json, τ = 0.15).",
        "",
        "## Base model",
        "",
        "| split | pass@1 | greedy pass@1 |",
        "|---|---|---|",
    ]
    for split, label in SPLITS.items():
        b = report["base"][split]
        lines.append(f"| {label} | {100 * b['pass@1']:.1f}% | {100 * b['greedy_pass@1']:.1f}% |")
    lines += ["", "## Change after training", ""]
    lines += [
        "| method | problems | metric | before | after | change (pp) [95% CI] | p | up / down | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in report["methods"].items():
        for split, rows in entry["splits"].items():
            for row in rows:
                lines.append(
                    f"| {method} | {SPLITS[split]} | {row['metric']} | {100 * row['before']:.1f}% | "
                    f"{100 * row['after']:.1f}% | {_pp(row['delta'])} [{_pp(row['ci'][0])}, {_pp(row['ci'][1])}] | "
                    f"{_p(row)} | {row['improved']} / {row['worsened']} | {row['verdict']} |"
                )
    if report["not_run"]:
        lines += ["", f"Not run yet: {', '.join(report['not_run'])}."]
    for method, entry in report["methods"].items():
        if entry["not_evaluated"]:
            lines += [
                "",
                f"{method}: not evaluated yet after training on the {', '.join(entry['not_evaluated'])} problems.",
            ]
    lines += ["", "## Signal checks (every log row, every completion)", ""]
    lines += [
        "| method | optimizer steps | scored batches | groups with reward variance | completions | cut by the cap | "
        "ended by the stop rule | TRL clipped_ratio (counts stop strings) | IS ratio, lowest-highest completion | "
        "reward, first third -> last third of batches | mean s/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in report["methods"].items():
        s = entry["signal"]
        ends = s["completion_ends"]
        stopped = ends.get("stop_string", 0) + ends.get("code_end", 0)
        varied = f"{s['groups_with_reward_variance']} of {s['groups']}" if "groups" in s else "—"
        ratio = s.get("importance_sampling_ratio_span", [float("nan")] * 2)
        lines.append(
            f"| {method} | {s['log_rows']} | {s['scored_batches']} | {varied} | {s['completions']} | "
            f"{ends.get('cap', 0)} ({100 * (s['cut_by_cap_frac'] or 0):.1f}%) | {stopped} | "
            f"{s.get('trl_clipped_ratio_mean', float('nan')):.2f} | {ratio[0]:.3f}-{ratio[1]:.3f} | "
            f"{s.get('reward_first_third', float('nan')):.3f} -> {s.get('reward_last_third', float('nan')):.3f} | "
            f"{s.get('step_time_s_mean', float('nan')):.0f} |"
        )
    spans = {m: e["signal"]["ppo_spans"] for m, e in report["methods"].items() if "ppo_spans" in e["signal"]}
    if spans:
        lines += ["", "PPO's own diagnostics over every optimizer step (min-max):", ""]
        lines += [
            "| method | explained variance | clip fraction | approx. KL | value clip fraction |",
            "|---|---|---|---|---|",
        ]
        for method, span in spans.items():
            cells = [f"{v[0]:.3g} to {v[1]:.3g}" if v else "—" for v in span.values()]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(report: dict, runs: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(report["methods"])
    if not methods:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    before = {s: per_problem(json.loads((runs / f"base_{s}.json").read_text()), "pass@1") for s in SPLITS}
    for ax, (split, label) in zip(axes, SPLITS.items()):
        for method in methods:
            if not (runs / method / f"eval_{split}.json").is_file():
                continue
            after = per_problem(json.loads((runs / method / f"eval_{split}.json").read_text()), "pass@1")
            tasks = sorted(before[split])
            ax.scatter([before[split][t] for t in tasks], [after[t] for t in tasks], label=method, alpha=0.7)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set(
            title=f"{label} problems",
            xlabel="pass@1 before (n = 16)",
            ylabel="pass@1 after",
            xlim=(-0.03, 1.03),
        )
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "per_problem.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    for method in methods:
        rows = [r for r in log_rows(runs / method) if "reward" in r]
        ax.plot([r["step"] for r in rows], [r["reward"] for r in rows], label=method, alpha=0.8)
    ax.set(xlabel="optimizer step", ylabel="mean reward of the batch's completions", title="Training reward")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "reward.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/sized_0.5b")
    args = parser.parse_args(argv)
    power = json.loads((args.out / "power.json").read_text())
    try:
        report = build(args.runs, power)
    except (ReportError, FileNotFoundError) as e:
        print(f"sized_0.5b_report: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "report.md").write_text(render(report, power))
    plot(report, args.runs, args.out)
    print(render(report, power))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
