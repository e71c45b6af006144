"""report.md from the report dict (`render_markdown`), and a short fixed-width table for a terminal
(`console_table`): formatting only, every number comes from `experiments.report.analysis`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.report.analysis import (
    ALPHA,
    ATOL,
    COINCIDE_SHARE,
    RATE_METRICS,
    RTOL,
    build_report,
    metric_list,
)

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


def format_p_value(p: float, floor: float | None, raw: float | None = None) -> str:
    """A p-value, or `< x` where it sits at the bootstrap's floor (no replicate on the far side of 0): the
    replicates resolve nothing below it. `raw` is the unadjusted p of a Holm-adjusted `p`: when the raw one is
    at the floor, the adjusted one is a bound too."""
    at_floor = floor is not None and (raw if raw is not None else p) <= floor * (1 + 1e-9)
    return f"< {p:.2g}" if at_floor else f"{p:.4f}"


def _fmt_mde(name: str, mde: float | None) -> str:
    """The minimum detectable effect beside a null verdict: the smallest true difference its test would have
    caught with MDE_POWER (report.json's `mde_power`) probability."""
    if mde is None:
        return "; smallest effect detectable: not estimable (no problem's value differs)"
    return f"; smallest effect detectable (80% power): {_num(name, mde)}{' pp' if _is_rate(name) else ''}"


def _fmt_num(x: Any, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _fmt_seeds(seeds: Sequence[Any]) -> str:
    """`1 (seed 42)`, `3 (seeds 0, 1, 2)`: how many training seeds, then which (an id alone reads as a count)."""
    ids = ", ".join("?" if s is None else str(s) for s in seeds)
    return f"{len(seeds)} (seed{'s' if len(seeds) > 1 else ''} {ids})"


def _metric_names(entry: Mapping[str, Any]) -> list[str]:
    return [n for n in metric_list(entry.get("k")) if n in entry["before"] or n in entry["after"]]


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
        start_text = (
            "?"
            if not start
            else (
                _fmt(name, {"value": start[0]})
                if start[0] == start[1]
                else f"{_fmt(name, {'value': start[0]})}-{_fmt(name, {'value': start[1]})}"
            )
        )
        head = (
            f"- **{_label(name)}** ({_fmt_num(v['problems'], 'd')} problems; before training {start_text}): "
        )
        if v.get("none_solved"):
            ran = "the method" if len(v["methods"]) == 1 else f"any of the {len(v['methods'])} methods"
            text = (
                f"no problem solved by {ran}, "
                + (
                    "nor by the starting model"
                    if v.get("start")
                    else "(the starting model was not evaluated)"
                )
                + ": nothing to rank. At this budget the comparison is a smoke test of the pipeline, not a result "
                "(a larger budget, or a model that solves some problems before training, compares the methods)."
            )
        elif "not_below_best" in v:
            text = f"best **{v['best']}**, {_fmt(name, v)}. "
            tied = [m for m in v["not_below_best"] if m != v["best"]]
            mde = v.get("mde_range")
            span = (
                "" if not mde else _num(name, mde[0]) + ("" if mde[0] == mde[1] else f"-{_num(name, mde[1])}")
            )
            mde_text = (
                f" (the smallest gap these tests detect with 80% power: {span}{' pp' if _is_rate(name) else ''})"
                if tied and mde
                else ""
            )
            text += (
                f"Not significantly below it (Holm, alpha {v['alpha']}): {', '.join(tied)}{mde_text}. "
                if tied
                else f"Every other method is significantly below it (Holm, alpha {v['alpha']}). "
            )
            if tied and v["below_best"]:
                text += f"Significantly below it: {', '.join(v['below_best'])}."
        else:
            text = f"{v['best']} {_fmt(name, v)} after training, {_fmt_delta(name, v.get('delta'), v.get('delta_ci'))}."
        lines.append(head + text.rstrip())
    if report.get("single_seed"):
        lines += [
            "",
            "One training run per method (one seed): this ranks these runs, not the methods; the intervals "
            "are over evaluation problems only (`passk compare --seeds 0,1,2` pools several).",
        ]
    return lines + [""]


def _setup_section(report: Mapping[str, Any]) -> list[str]:
    """What was trained (task, model and size, budget, learning rate) and how it was evaluated."""
    s = report.get("setup") or {}
    lines = ["## What was trained", ""]
    lines.append(f"- Task: {_per_run(s.get('task'))}; prompt style: {_per_run(s.get('style'))}.")
    model = (
        f"- Model: {_per_run(s.get('model'), lambda m: f'`{m}`')} ({_per_run(s.get('model_parameters'), _params)} "
        "parameters)"
    )
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
    scorer = s.get("scorer") or {}
    text = scorer.get("text") or "not recorded"
    if text == "not recorded":
        lines.append(
            "- Scored by: not recorded in these records (they predate the scorer stamp), so nothing here shows that "
            "one extraction and sandbox version scored every row."
        )
    else:
        commits = scorer.get("commits") or []
        where = f" (commits {', '.join(c[:12] for c in commits)})" if commits else ""
        declared = "; declared in scorer.json for records without a stamp" if scorer.get("declared") else ""
        lines.append(f"- Scored by: {text}, every row{where}{declared}.")
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
        cells = [
            e["method"],
            _fmt_seeds(e["seeds"]),
            _fmt_num(e["num_problems"], "d"),
            _fmt_num(e["n"], "d"),
            _fmt_num(e["k"], "d"),
        ]
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
            cells = [
                e["method"] if i == 0 else "",
                "?" if seed is None else str(seed),
                _fmt_num(e["num_problems"], "d"),
                _fmt_num(e["n"], "d"),
            ]
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


def _coverage_section(report: Mapping[str, Any]) -> list[str]:
    """Pass@k for k = 1, 2, 4, ..., n and coverage per curve, then per method where the starting model catches up."""
    cov = report.get("coverage")
    if not cov:
        return []
    curves = ([("Starting model (eval_before)", cov["base"])] if cov.get("base") else []) + [
        (m["method"], m) for m in cov["methods"]
    ]
    ks = sorted({k for _, c in curves for k in c["ks"]})
    lines = ["", "## Pass@k against k (coverage)", ""]
    lines.append(
        "Pass@k for k = 1, 2, 4, ... up to the n samples per problem (unbiased estimator), each with its 95% bootstrap "
        "interval (problems, and a method's seeds); coverage is the share of problems that at least one of the n "
        "samples solves. A policy that only sharpens its distribution gains at small k and can lose at large k, "
        "where the starting model's spread of samples catches up."
    )
    header = ["Model", "Runs", "Problems", "n"] + [f"Pass@{k}" for k in ks] + ["Coverage"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, c in curves:
        by_k = dict(zip(c["ks"], zip(c["values"], c["ci"])))
        cells = [label, str(c.get("seeds", c["evals"])), _fmt_num(c["problems"], "d"), _fmt_num(c["n"], "d")]
        for k in ks:
            v = by_k.get(k)
            cells.append(_fmt(f"pass@{k}", {"value": v[0], "ci": v[1]}) if v else "—")
        cells.append(_fmt("pass@1", c["coverage"]))
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for m in cov["methods"]:
        x = m.get("crossover")
        if x is None:
            continue
        name, at = m["method"], x["at"]
        diff = f"{name} − start {_fmt_delta('pass@1', at['delta'], at['ci'])}"
        if x["k"] is not None:
            text = f"the starting model's pass@k is not below {name}'s from k = {at['k']} ({diff}, paired)"
        else:
            text = f"the starting model's pass@k stays below {name}'s up to k = n = {x['n']} (at k = {at['k']}: {diff}, paired)"
        if x["k_ci"] is not None and x["k_ci"] != x["k"]:
            text += f"; the interval of the difference first reaches 0 at k = {x['k_ci']}"
        elif x["k_ci"] is None:
            text += "; its interval stays above 0 up to n"
        notes.append(f"- **{name}**: {text}.")
    if notes:
        lines += ["", *notes]
    return lines


def _from_start_section(report: Mapping[str, Any]) -> list[str]:
    """Each method's change from its starting model per metric, Holm-adjusted over the methods."""
    fs = report.get("from_start")
    if not fs:
        return []
    names = list(fs)
    m = max(v["family"] for v in fs.values())
    lines = ["", "## Change from the starting model, Holm over the methods", ""]
    lines.append(
        f"Each method's paired change (after − before, on the same problems), with its simultaneous interval over "
        f"the {m} methods (Bonferroni, {100 * (1 - ALPHA / m):.2f}% each, so all hold together at 95%) and the "
        f"p-value adjusted by Holm over the methods. **Raised** / **lowered**: Holm-adjusted p < {ALPHA}. Beside "
        'each "no change shown": the smallest change its test would have caught with 80% probability (the '
        "minimum detectable effect), so a smaller change may be there unseen. `< x`: the bootstrap's floor, no "
        "replicate on the far side of 0."
    )
    header = ["Method"] + [_label(n) for n in names]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in dict.fromkeys(r["method"] for v in fs.values() for r in v["methods"]):
        cells = [method]
        for name in names:
            row = next((r for r in fs[name]["methods"] if r["method"] == method), None)
            if row is None:
                cells.append("—")
                continue
            word = {"raised": "**raised**", "lowered": "**lowered**"}.get(row["verdict"], "no change shown")
            if row["verdict"] == "no change shown":
                word += _fmt_mde(name, row.get("mde"))
            p_holm = format_p_value(row["p_holm"], fs[name].get("p_floor"), row.get("p"))
            cells.append(f"{_fmt_delta(name, row['delta'], row['simultaneous_ci'])}, p_Holm {p_holm}: {word}")
        lines.append("| " + " | ".join(cells) + " |")
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
            lines.append(
                f"| {r['rank']} | {r['method']} | {seeds} | {_fmt(name, entry['after'].get(name))} | "
                f"{', '.join(r['better_than']) or '—'} |"
            )
        lines += ["", "| Better − worse | Δ [95% CI] | p | Holm p | Significant |", "|---|---|---|---|---|"]
        floor = comp.get("p_floor")
        for p in comp["pairs"]:
            verdict = "yes" if p["significant"] else "no" + _fmt_mde(name, p.get("mde"))
            lines.append(
                f"| {p['better']} − {p['worse']} | {_fmt_delta(name, p['delta'], p['ci'])} | {format_p_value(p['p'], floor)} "
                f"| {format_p_value(p['p_holm'], floor, p['p'])} | {verdict} |"
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
    header = [
        "Run",
        "Method",
        "Seed",
        "Fresh prompts",
        "Fresh completions",
        "Tokens generated",
        "Optimizer steps",
        "Cut by the cap",
        "Wall time (s)",
        "Train tokens/s",
        "Eval n x problems",
        "Method hyperparameters",
    ]
    clipped = any("clip_fraction" in r for r in rows)  # some run took several steps per generation batch
    if clipped:
        header.insert(header.index("Cut by the cap") + 1, "Clipped")
    if len(models) > 1:
        header.insert(3, "Model")
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        evals = f"{_fmt_num(r['eval_n'], 'd')} x {_fmt_num(r['eval_problems'], 'd')}"
        cells = [
            r["run"],
            r["method"],
            "?" if r["seed"] is None else str(r["seed"]),
            _fmt_num(r["fresh_prompts"], ",d"),
            _fmt_num(r["fresh_completions"], ",d"),
            _fmt_num(r["tokens_generated"], ",d"),
            _fmt_num(r["optimizer_steps"], ",d"),
            _fmt_num(r.get("cut_by_cap_frac"), ".0%"),  # — where the run logged no cap share
            _fmt_num(r["wall_time_s"], ".1f"),
            _fmt_num(r["train_tokens_per_s"], ".1f"),
            evals,
            _fmt_hparams(r["method_hparams"]),
        ]
        if clipped:
            cells.insert(header.index("Clipped") - (len(models) > 1), _fmt_clip(r))
        if len(models) > 1:
            cells.insert(3, r["model"] or "—")
        lines.append("| " + " | ".join(cells) + " |")
    cap = (
        "Cut by the cap: the mean share of training completions that reached max_completion_length without ending "
        "(`completions/cut_by_cap_frac`; a completion stopped at the end of its code is not cut); — where a run did "
        "not log it."
    )
    if clipped:
        cap += (
            " Clipped: the mean share of tokens (of sequences, for a sequence-level ratio) whose importance ratio the "
            "clip cut, or whose weight hit CISPO's cap, per optimizer step (the metric in brackets: TRL's "
            "`clip_ratio/region_mean` or `cispo_clip_ratio`, PPO's `ppo/clipfrac`), for the runs that took several "
            "optimizer steps per generation batch; on-policy (one step per batch) the ratio is 1 and the clip idle "
            "(—)."
        )
    return lines + ["", cap, ""]


def _fmt_clip(row: Mapping[str, Any]) -> str:
    if "clip_fraction" not in row:
        return "— (on-policy)"
    if row["clip_fraction"] is None:
        return "— (not logged)"
    return f"{row['clip_fraction']:.1%} ({row['clip_metric']})"


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
                head = [
                    entry["method"],
                    _fmt_seeds(entry["seeds"]),
                    _fmt_num(entry["num_problems"], "d"),
                    _fmt_num(entry["n"], "d"),
                ]
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
    lines += _coverage_section(report)
    lines += _from_start_section(report)
    if report["comparisons"]:
        lines += _comparison_section(report)
    lines += _runs_table(report)
    lines += _coincidence_section(report)
    plots = report.get("plots", {})
    if plots:
        lines += ["", "## Plots", ""]
        titles = {
            "pass_at_k": "Before and after training",
            "comparisons": "Between methods",
            "pass_at_k_curve": "Pass@k against k",
        }
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
