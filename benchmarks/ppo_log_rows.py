"""Every log row of a PPO run, read per rollout: what the SmolLM2 PPO ablations are diagnosed from.

    python benchmarks/ppo_log_rows.py benchmarks/results/smollm2/records/ppo [more run folders] [--json out.json]

A rollout opens at the row that carries the per-rollout diagnostics (`ppo/no_reward_variance`); the optimizer
steps after it, up to the next, are its updates. Per rollout it prints the training reward and the share of
4-completion groups without reward variance, the completions' mean length, the share of answers that give back the
prompt's stub and the mean length of the passing ones (runs logged after 889b286), and over its update rows the
entropy, the largest clip fractions and approx_kl at the rollout's last update. Then, over every row of the run,
how many steps had each clip active; and, from `eval_after.json`, the share of the held-out first answers that are
the prompt's stub and greedy pass@1 per operation family. Nothing is sampled: each number is read from every row
that logs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def rollouts(log_history: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The training rows (those with a loss) grouped by rollout, in order."""
    groups: list[list[dict[str, Any]]] = []
    for row in log_history:
        if "loss" not in row:
            continue
        if "ppo/no_reward_variance" in row or not groups:
            groups.append([])
        groups[-1].append(row)
    return groups


def held_out(run: Path) -> dict[str, Any] | None:
    """Stub answers among the stored first answers of `eval_after.json`, and greedy pass@1 per family (the
    learnable task's task ids read `synth/<family>/<function>/...`)."""
    from rewards.extraction import extract_code, has_empty_body

    path = run / "eval_after.json"
    if not path.is_file():
        return None
    problems = json.loads(path.read_text())["problems"]
    stubs = 0
    families: dict[str, list[bool]] = {}
    for p in problems:
        _, family, entry_point, *_ = p["task_id"].split("/")
        stubs += has_empty_body(extract_code(None, p["first_completion"], entry_point), entry_point)
        families.setdefault(family, []).append(bool(p["greedy_passed"]))
    return {
        "first_answers_no_body": stubs,
        "problems": len(problems),
        "greedy_pass_by_family": {f: round(sum(v) / len(v), 3) for f, v in sorted(families.items())},
    }


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return statistics.fmean(values) if values else None


def _max(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return max(values) if values else None


def summarize(run: Path) -> dict[str, Any]:
    """Per-rollout and whole-run figures of one run folder's trainer_state.json."""
    state = json.loads((run / "trainer_state.json").read_text())
    rows = [r for r in state["log_history"] if "loss" in r]
    per_rollout = []
    for group in rollouts(state["log_history"]):
        head = group[0]
        per_rollout.append(
            {
                "steps": [group[0]["step"], group[-1]["step"]],
                "reward": head.get("reward"),
                "frac_reward_zero_std": head.get("frac_reward_zero_std"),
                "mean_length": head.get("completions/mean_length"),
                "no_body_frac": head.get("unit_test/no_body_frac"),
                "passed_mean_length": head.get("answers/passed_mean_length"),
                "adv_divisor": head.get("ppo/adv_divisor"),
                "explained_variance": head.get("ppo/explained_variance"),
                "kl_penalty": head.get("ppo/kl_penalty"),
                "entropy": _mean(group, "entropy"),
                "clipfrac_max": _max(group, "ppo/clipfrac"),
                "vf_clipfrac_max": _max(group, "ppo/vf_clipfrac"),
                "approx_kl_max": _max(group, "ppo/approx_kl"),
                "approx_kl_rollout_end": group[-1].get("ppo/approx_kl_rollout_end"),
            }
        )
    return {
        "run": str(run),
        "rows": len(rows),
        "rollouts": per_rollout,
        "steps_clipfrac_above_0": sum(r.get("ppo/clipfrac", 0) > 0 for r in rows),
        "steps_vf_clipfrac_above_0": sum(r.get("ppo/vf_clipfrac", 0) > 0 for r in rows),
        "clipfrac_max": _max(rows, "ppo/clipfrac"),
        "vf_clipfrac_max": _max(rows, "ppo/vf_clipfrac"),
        "held_out": held_out(run),
    }


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(summary: dict[str, Any]) -> str:
    head = (
        "| steps | reward | groups w/o variance | mean length | no body | passing length | divisor | "
        "expl. var. | entropy | clipfrac max | vf_clipfrac max | approx_kl at end |"
    )
    lines = [f"{summary['run']}: {summary['rows']} rows, {len(summary['rollouts'])} rollouts", "", head]
    lines.append("|" + " --- |" * 12)
    for r in summary["rollouts"]:
        cells = [
            f"{r['steps'][0]}-{r['steps'][1]}",
            _fmt(r["reward"]),
            _fmt(r["frac_reward_zero_std"]),
            _fmt(r["mean_length"], 1),
            _fmt(r["no_body_frac"]),
            _fmt(r["passed_mean_length"], 1),
            _fmt(r["adv_divisor"]),
            _fmt(r["explained_variance"]),
            _fmt(r["entropy"]),
            _fmt(r["clipfrac_max"], 3),
            _fmt(r["vf_clipfrac_max"], 3),
            _fmt(r["approx_kl_rollout_end"], 3),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"clipfrac > 0 at {summary['steps_clipfrac_above_0']} of {summary['rows']} steps (max "
        f"{_fmt(summary['clipfrac_max'], 3)}); vf_clipfrac > 0 at {summary['steps_vf_clipfrac_above_0']} "
        f"(max {_fmt(summary['vf_clipfrac_max'], 3)})"
    )
    if summary["held_out"]:
        h = summary["held_out"]
        lines.append(
            f"held out: {h['first_answers_no_body']} of {h['problems']} first answers are the stub; greedy pass@1 "
            "by family: " + ", ".join(f"{f} {v:.2f}" for f, v in h["greedy_pass_by_family"].items())
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders holding trainer_state.json")
    parser.add_argument("--json", type=Path, help="also write every summary here")
    args = parser.parse_args()
    summaries = [summarize(run) for run in args.runs]
    print("\n\n".join(markdown(s) for s in summaries))
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1) + "\n")


if __name__ == "__main__":
    main()
