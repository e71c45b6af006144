"""Side-by-side comparison report of training runs: report.md, report.json and PNG plots.

`write_report(run_dirs, out_dir)` reads only files inside each run directory (docs/contracts.md):

- `run.json`: `method` (else the directory name), `seed` (or `config.seed`), wall time (`wall_time_s`, else
  `wall_time`, else `train_runtime`), training tokens/s (`tokens_per_s`, else `train_tokens_per_s`), `model`.
- `eval_before.json`, `eval_after.json`: `EvalResult.to_dict()` from `experiments.evaluation`.
- `trainer_state.json` (else the newest `checkpoint-*/trainer_state.json`): TRL's `log_history`, from which it
  plots `reward`, `kl`, `entropy`, `completions/mean_length`, `frac_reward_zero_std` and the callback's
  `eval/pass@1`.

Runs with the same method are different seeds of one method. One seed: the method's numbers are that run's
(with its bootstrap CI). Several seeds evaluated on the same problems: per-problem estimates are averaged over
seeds and the CI bootstraps problems again (seed 0). A metric or file that is missing is skipped and named in
the report's "Skipped" section instead of failing. The output depends only on the inputs: no timestamps, fixed
bootstrap seed, fixed plot metadata, and paths written relative to `out_dir`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.evaluation import bootstrap_ci, pass_at_k_per_problem

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
N_BOOTSTRAP = 1000
BOOTSTRAP_SEED = 0
PNG_METADATA = {"Software": None}  # no matplotlib version in the file: same inputs, same bytes


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
    return {
        "dir": run_dir,
        "has_run_json": bool(meta),
        "method": str(meta.get("method") or run_dir.name),
        "seed": meta["seed"] if meta.get("seed") is not None else config.get("seed"),
        "model": _first(meta, "model", "model_name_or_path"),
        "wall_time_s": wall,
        "tokens_per_s": _first(meta, "tokens_per_s", "train_tokens_per_s"),
        "before": _read_json(run_dir / "eval_before.json"),
        "after": _read_json(run_dir / "eval_after.json"),
        "log_history": log_history,
    }


# ---------------------------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------------------------


def _headline_k(evals: Sequence[Mapping[str, Any]]) -> int | None:
    """The largest k > 1 every eval reports (the seed's "Pass@5" column)."""
    common = None
    for ev in evals:
        ks = {int(name.split("@")[1]) for name in ev.get("metrics", {}) if name.startswith("pass@")}
        common = ks if common is None else common & ks
    candidates = sorted(k for k in (common or set()) if k > 1)
    return candidates[-1] if candidates else None


def _per_problem(ev: Mapping[str, Any], name: str) -> dict[str, float] | None:
    rows = ev.get("problems") or []
    if not rows:
        return None
    if name.startswith("pass@"):
        k = int(name.split("@")[1])
        if any(r["n"] < k for r in rows):
            return None
        vals = pass_at_k_per_problem([r["n"] for r in rows], [r["correct"] for r in rows], k)
    elif name == "greedy_pass@1":
        if any(r.get("greedy_passed") is None for r in rows):
            return None
        vals = [float(r["greedy_passed"]) for r in rows]
    elif name == "avg_reward":
        vals = [float(r["mean_reward"]) for r in rows]
    else:
        return None
    return {r["task_id"]: float(v) for r, v in zip(rows, vals)}


def _pooled(evals: Sequence[Mapping[str, Any]], name: str) -> dict[str, float] | None:
    """Per-problem values of `name` averaged over seeds, in the first eval's problem order; None if the evals
    lack per-problem rows or cover different problems."""
    per = [_per_problem(ev, name) for ev in evals]
    if not per or any(p is None for p in per) or any(set(p) != set(per[0]) for p in per):
        return None
    return {t: float(np.mean([p[t] for p in per])) for t in per[0]}


def _combine(evals: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any] | None:
    """One method's estimate of `name` over its seeds: {"value", "ci" ([lo, hi] or None), "n_seeds"}."""
    present = [ev["metrics"][name] for ev in evals if name in ev.get("metrics", {})]
    if len(present) != len(evals) or not present:
        return None
    if len(evals) == 1:
        return {"value": present[0]["value"], "ci": list(present[0]["ci"]), "n_seeds": 1}
    pooled = _pooled(evals, name)
    if pooled is not None:
        vals = np.array(list(pooled.values()))
        lo, hi = bootstrap_ci(vals, n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED)
        return {"value": float(vals.mean()), "ci": [lo, hi], "n_seeds": len(evals)}
    # Seeds evaluated on different problems: no joint CI, only the mean of the seeds' values.
    return {"value": float(np.mean([m["value"] for m in present])), "ci": None, "n_seeds": len(evals)}


def _delta_ci(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], name: str
) -> list | None:
    """Paired bootstrap CI of after - before: both evals score the same problems, so resample problems once
    and difference within each. Much tighter than comparing the two unpaired CIs."""
    b, a = _pooled(before, name), _pooled(after, name)
    if b is None or a is None or set(a) != set(b):
        return None
    lo, hi = bootstrap_ci([a[t] - b[t] for t in a], n_bootstrap=N_BOOTSTRAP, seed=BOOTSTRAP_SEED)
    return [lo, hi]


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, 6)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_round(v) for v in x]
    return x


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

    methods = []
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
        after_timing = [r["after"].get("timing", {}) for r in mruns if r["after"] is not None]
        entry["eval_tokens_per_s"] = _mean([t.get("tokens_per_s") for t in after_timing])
        names = ["pass@1"] + ([f"pass@{k}"] if k else []) + ["avg_reward", "greedy_pass@1"]
        for phase in ("before", "after"):
            evals = [r[phase] for r in mruns if r[phase] is not None]
            entry[phase] = {}
            if len(evals) != len(mruns):
                continue
            for name in names:
                est = _combine(evals, name)
                if est is None:
                    skipped.append(f"{method}: {name} ({phase}) not in every eval_{phase}.json")
                else:
                    entry[phase][name] = est
        entry["delta"] = {
            name: entry["after"][name]["value"] - entry["before"][name]["value"]
            for name in names
            if name in entry["before"] and name in entry["after"]
        }
        befores = [r["before"] for r in mruns if r["before"] is not None]
        afters = [r["after"] for r in mruns if r["after"] is not None]
        entry["delta_ci"] = {name: _delta_ci(befores, afters, name) for name in entry["delta"]}
        methods.append(entry)

    curves, curve_skips = _curves(runs, order)
    skipped.extend(curve_skips)
    report = {
        "title": title or "passk: " + ", ".join(order),
        "methods": methods,
        "curves": curves,
        "skipped": skipped,
        "bootstrap": {"n_bootstrap": N_BOOTSTRAP, "seed": BOOTSTRAP_SEED, "confidence": 0.95},
    }
    return _round(report)


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


def _curves(runs: Sequence[Mapping[str, Any]], order: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """{file stem: {key, title, ylabel, series: [{method, seed, steps, values}]}} and what was skipped."""
    out: dict[str, Any] = {}
    skips: list[str] = []
    with_logs = [r for r in runs if r["log_history"] is not None]
    for key, stem, title, ylabel in CURVES:
        series, missing = [], []
        for run in with_logs:
            steps, vals = _series(run["log_history"], key)
            before = (run["before"] or {}).get("metrics", {}).get(key.removeprefix("eval/"))
            if key.startswith("eval/") and vals and before and 0.0 not in steps:
                # The starting model's score (same settings and seed as the callback's evals) is step 0.
                steps, vals = [0.0, *steps], [float(before["value"]), *vals]
            if vals:
                series.append({"method": run["method"], "seed": run["seed"], "steps": steps, "values": vals})
            elif run["method"] not in missing:
                missing.append(run["method"])
        missing = [m for m in order if m in missing and m not in {s["method"] for s in series}]
        if not series:
            if with_logs:
                skips.append(f"plot {stem}: no run logged `{key}`")
            continue
        if missing:
            skips.append(f"plot {stem}: `{key}` not logged by {', '.join(missing)}")
        out[stem] = {"key": key, "title": title, "ylabel": ylabel, "series": series}
    return out, skips


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------

_LABELS = {"avg_reward": "Avg reward", "greedy_pass@1": "Greedy pass@1"}


def _label(name: str) -> str:
    return _LABELS.get(name, name.replace("pass@", "Pass@"))


def _fmt(name: str, est: Mapping[str, Any] | None, *, ci: bool = True) -> str:
    if est is None or est.get("value") is None:
        return "—"
    pct = name != "avg_reward"
    f = (lambda x: f"{100 * x:.1f}%") if pct else (lambda x: f"{x:.3f}")
    text = f(est["value"])
    if ci and est.get("ci") is not None and None not in est["ci"]:
        lo, hi = est["ci"]
        text += f" [{100 * lo:.1f}, {100 * hi:.1f}]" if pct else f" [{lo:.3f}, {hi:.3f}]"
    return text


def _fmt_delta(name: str, delta: float | None, ci: Sequence[float] | None = None) -> str:
    if delta is None:
        return "—"
    pct = name != "avg_reward"
    text = f"{100 * delta:+.1f} pp" if pct else f"{delta:+.3f}"
    if ci is not None and None not in ci:
        text += f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if pct else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]"
    return text


def _fmt_num(x: Any, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _metric_names(entry: Mapping[str, Any]) -> list[str]:
    names = ["pass@1"] + ([f"pass@{entry['k']}"] if entry.get("k") else []) + ["avg_reward", "greedy_pass@1"]
    return [n for n in names if n in entry["before"] or n in entry["after"]]


def render_markdown(report: Mapping[str, Any]) -> str:
    """report.md from the report dict; images are linked by file name (they sit next to report.md)."""
    lines = [f"# {report['title']}", ""]
    lines += [
        "Pass@k is the unbiased estimator of Chen et al. (2021) over n samples per problem; greedy pass@1 uses one "
        "greedy completion. Brackets are 95% bootstrap confidence intervals over problems; the Δ interval is a "
        "paired bootstrap (before and after score the same problems), so it can exclude 0 while the two "
        "intervals overlap. Avg reward is the mean unit-test reward over all samples, as in the seed chapter.",
        "",
        "## Results",
        "",
        "| Method | Metric | Before | After | Δ |",
        "|---|---|---|---|---|",
    ]
    for entry in report["methods"]:
        for i, name in enumerate(_metric_names(entry)):
            lines.append(
                f"| {entry['method'] if i == 0 else ''} | {_label(name)} | {_fmt(name, entry['before'].get(name))} "
                f"| {_fmt(name, entry['after'].get(name))} | {_fmt_delta(name, entry['delta'].get(name), entry['delta_ci'].get(name))} |"
            )
    lines += [
        "",
        "## Runs",
        "",
        "| Method | Seeds | n | k | Problems | Wall time (s) | Train tokens/s | Eval tokens/s | Model |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["methods"]:
        seeds = ", ".join("?" if s is None else str(s) for s in e["seeds"])
        lines.append(
            f"| {e['method']} | {seeds} | {_fmt_num(e['n'], 'd')} | {_fmt_num(e['k'], 'd')} "
            f"| {_fmt_num(e['num_problems'], 'd')} | {_fmt_num(e['wall_time_s'], '.1f')} "
            f"| {_fmt_num(e['train_tokens_per_s'], '.1f')} | {_fmt_num(e['eval_tokens_per_s'], '.1f')} "
            f"| {e['model'] or '—'} |"
        )
    plots = report.get("plots", {})
    if plots:
        lines += ["", "## Plots", ""]
        for stem, fname in plots.items():
            title = report["curves"][stem]["title"] if stem in report["curves"] else "Pass@k before and after"
            lines += [f"### {title}", "", f"![{title}]({fname})", ""]
    if report["skipped"]:
        lines += ["## Skipped", ""] + [f"- {s}" for s in report["skipped"]]
    return "\n".join(lines).rstrip() + "\n"


def console_table(report: Mapping[str, Any] | Sequence[str | os.PathLike]) -> str:
    """A short fixed-width table (method x before -> after) for a terminal; takes a report dict or run dirs."""
    if not isinstance(report, Mapping):
        report = build_report(report)
    header = ["method", "seeds", "pass@1", "pass@k", "avg reward", "greedy"]
    rows = [header]
    for e in report["methods"]:
        k = e.get("k")
        cells = [e["method"], str(len(e["seeds"]))]
        for name in ("pass@1", f"pass@{k}" if k else None, "avg_reward", "greedy_pass@1"):
            if name is None:
                cells.append("—")
                continue
            b = _fmt(name, e["before"].get(name), ci=False)
            a = _fmt(name, e["after"].get(name), ci=False)
            cells.append(f"{b} -> {a}")
        if k:
            cells[3] = f"(k={k}) " + cells[3]
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
    n_seeds = {m: sum(s["method"] == m for s in spec["series"]) for m in order}
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    styles = ["-", "--", ":", "-."]
    seen: dict[str, int] = {}
    for s in spec["series"]:
        m = s["method"]
        idx = seen.get(m, 0)
        seen[m] = idx + 1
        color = colors[m]
        # Few points (e.g. periodic evals): markers make each measurement visible.
        marker = "o" if len(s["steps"]) <= 30 else None
        ax.plot(s["steps"], s["values"], color=color, alpha=0.25, linewidth=1)
        label = m if n_seeds[m] == 1 else f"{m} (seed {'?' if s['seed'] is None else s['seed']})"
        ax.plot(s["steps"], _smooth(s["values"]), color=color, linewidth=2, linestyle=styles[idx % 4],
                marker=marker, markersize=4, label=label)  # fmt: skip
    smoothed = any(len(s["values"]) >= 20 for s in spec["series"])  # _smooth is the identity below 20 points
    note = " (step 0: eval_before.json)" if spec["key"].startswith("eval/") else ""
    ax.set_title(spec["title"] + (" (faint: raw, bold: smoothed)" if smoothed else "") + note)
    ax.set_xlabel("training step")
    ax.set_ylabel(spec["ylabel"])
    ax.grid(alpha=0.3)
    ax.legend(loc="best", frameon=False)
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)


def _plot_passk(methods: Sequence[Mapping[str, Any]], path: Path) -> bool:
    import matplotlib.pyplot as plt

    panels = []
    for name in ("pass@1", "pass@k", "greedy_pass@1"):

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
        for j, (phase, color) in enumerate((("before", "#9ecae1"), ("after", "#08519c"))):
            vals, err = [], [[], []]
            for e in methods:
                est = e[phase].get(key(e))
                v = est["value"] if est else math.nan
                lo, hi = est["ci"] if est and est.get("ci") else (v, v)
                vals.append(100 * v)
                err[0].append(100 * (v - lo))
                err[1].append(100 * (hi - v))
            ax.bar(x + (j - 0.5) * width, vals, width, yerr=err, capsize=4, color=color, label=phase,
                   error_kw={"elinewidth": 1, "ecolor": "#333333"})  # fmt: skip
        ks = sorted({e["k"] for e in methods if e.get("k")})
        title = name if name != "pass@k" else ("pass@" + "/".join(map(str, ks)) if ks else "pass@k")
        ax.set_title(title.replace("greedy_pass@1", "greedy pass@1"))
        ax.set_xticks(x, [e["method"] for e in methods], rotation=20 if len(methods) > 3 else 0, ha="right"
                      if len(methods) > 3 else "center")  # fmt: skip
        ax.set_ylim(0, 105)
        ax.set_ylabel("% of problems")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(loc="upper left", frameon=False)
    fig.suptitle("Before vs after training (whiskers: 95% bootstrap CI over problems)")
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
    for stem, spec in report["curves"].items():
        _plot_curve(spec, order, out / f"{stem}.png")
        plots[stem] = f"{stem}.png"
    report["plots"] = plots
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    md = out / "report.md"
    md.write_text(render_markdown(report))
    return md
