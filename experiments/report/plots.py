"""The report's PNG plots (matplotlib, imported when drawing): training curves, before/after bars and the
between-method intervals. Fixed metadata, so the same inputs give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PNG_METADATA = {"Software": None}  # no matplotlib version in the file: same inputs, same bytes


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


def _colors(order: Sequence[str]) -> dict[str, Any]:
    """One colour per method, distinct up to 20 methods (tab10, then tab20's pairs of light and dark)."""
    import matplotlib.pyplot as plt

    cmap, n = ("tab10", 10) if len(order) <= 10 else ("tab20", 20)
    return {m: plt.get_cmap(cmap)(i % n) for i, m in enumerate(order)}


def _legend(ax: Any, n_entries: int, loc: str) -> None:
    """The legend inside the axes for a few entries, beside them (right) for many, where it would hide curves."""
    if n_entries > 6:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    else:
        ax.legend(loc=loc, frameon=False)


def plot_curve(spec: Mapping[str, Any], order: Sequence[str], path: Path) -> None:
    import matplotlib.pyplot as plt

    colors = _colors(order)
    wide = len(spec["series"]) > 6
    fig, ax = plt.subplots(figsize=(10.5 if wide else 8, 4.5), dpi=110)
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
            ax.errorbar(
                [v + shift for v in s[x]],
                s["values"],
                yerr=[lo, hi],
                fmt="none",
                ecolor=color,
                elinewidth=1,
                capsize=3,
                alpha=0.7,
            )
            i_ci += 1
        ax.plot(s[x], s["values"], color=color, alpha=0.25, linewidth=1)
        ax.plot(
            s[x],
            _smooth(s["values"]),
            color=color,
            linewidth=2,
            linestyle=style,
            marker=marker,
            markersize=5,
            markevery=markevery,
            label=label,
        )
    smoothed = any(len(s["values"]) >= 20 for s in spec["series"])  # _smooth is the identity below 20 points
    note = ""
    if spec["key"].startswith("eval/"):
        whiskers = ", whiskers: 95% CI over problems" if any(s.get("ci") for s in spec["series"]) else ""
        note = f" (step 0: eval_before.json{whiskers})"
    ax.set_title(spec["title"] + (" (faint: raw, bold: smoothed)" if smoothed else "") + note)
    ax.set_xlabel(spec.get("xlabel", "training step"))
    ax.set_ylabel(spec["ylabel"])
    ax.grid(alpha=0.3)
    _legend(ax, len(spec["series"]), "best")
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)


def plot_passk(methods: Sequence[Mapping[str, Any]], path: Path) -> bool:
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
            ax.bar(
                x + (j - 0.5) * width,
                vals,
                width,
                yerr=err,
                capsize=4,
                color=color,
                label=phase,
                error_kw={"elinewidth": 1, "ecolor": "#333333"},
            )
        ks = sorted({e["k"] for e in methods if e.get("k")})
        title = name if name != "pass@k" else ("pass@" + "/".join(map(str, ks)) if ks else "pass@k")
        ax.set_title({"greedy_pass@1": "greedy pass@1", "entropy": "policy entropy"}.get(title, title))
        ax.set_xticks(
            x,
            [e["method"] for e in methods],
            rotation=20 if len(methods) > 3 else 0,
            ha="right" if len(methods) > 3 else "center",
        )
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


def plot_comparisons(comparisons: Mapping[str, Any], path: Path) -> bool:
    """One panel per metric: every pair's difference with its paired 95% interval; filled when significant."""
    import matplotlib.pyplot as plt

    if not comparisons:
        return False
    n_pairs = max(len(c["pairs"]) for c in comparisons.values())
    fig, axes = plt.subplots(
        1, len(comparisons), figsize=(5.2 * len(comparisons), 1.6 + 0.32 * n_pairs), dpi=110, squeeze=False
    )
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


def plot_coverage(coverage: Mapping[str, Any] | None, order: Sequence[str], path: Path) -> bool:
    """Pass@k against k (log2 axis) for the starting model and each method, with 95% bands."""
    import matplotlib.pyplot as plt

    if not coverage:
        return False
    curves = (
        [("starting model (eval_before)", coverage["base"], "#333333", "--")] if coverage.get("base") else []
    )
    colors = _colors(order)
    curves += [(m["method"], m, colors.get(m["method"], "#1f77b4"), "-") for m in coverage["methods"]]
    if not curves:
        return False
    many = len(curves) > 6
    fig, ax = plt.subplots(figsize=(10 if many else 7, 4.5), dpi=110)
    for label, c, color, style in curves:
        ks = c["ks"]
        ax.fill_between(
            ks,
            [100 * lo for lo, _ in c["ci"]],
            [100 * hi for _, hi in c["ci"]],
            color=color,
            alpha=0.06 if many else 0.15,  # a dozen overlapping bands at 0.15 read as one grey field
            linewidth=0,
        )
        ax.plot(
            ks,
            [100 * v for v in c["values"]],
            color=color,
            linestyle=style,
            marker="o",
            markersize=4,
            label=f"{label} (coverage {100 * c['coverage']['value']:.1f}%)",
        )
    all_ks = sorted({k for _, c, _, _ in curves for k in c["ks"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(all_ks, [str(k) for k in all_ks])
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("pass@k (% of problems)")
    ax.set_ylim(0, 105)
    ax.set_title("Pass@k against k (bands: 95% bootstrap over problems and seeds)")
    ax.grid(alpha=0.3)
    _legend(ax, len(curves), "lower right")
    fig.tight_layout()
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)
    return True
