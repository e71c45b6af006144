"""Side-by-side comparison report of training runs: report.md, report.json and PNG plots.

`write_report(run_dirs, out_dir)` here; the parts in `runs` (reading a run directory into a `Run`), `analysis`
(the numbers: `build_report`), `markdown` (`render_markdown`, `console_table`) and `plots`. It reads only files
inside each run directory (docs/contracts.md):

- `run.json`: `method` (else the directory name), `seed` (or `config.seed`), wall time (`wall_time_s`, else
  `wall_time`, else `train_runtime`), training tokens/s (`tokens_per_s`, else `train_tokens_per_s`), `model`,
  and when present `budget` (`fresh_prompts`, `fresh_completions`, `tokens_generated`, `optimizer_steps`),
  `method_hparams` (the method's own hyperparameters), `model_parameters` (else counted from the run's saved
  `model.safetensors`) and `config` (the task, learning rate and sampling settings). Older run directories lack
  some: their cells read "—" or "?", and optimizer steps fall back to `global_step`.
- `eval_before.json`, `eval_after.json`: `EvalResult.to_dict()` from `experiments.evaluation.stats`.
- `trainer_state.json` (else the newest `checkpoint-*/trainer_state.json`): TRL's `log_history`, from which it
  plots `reward`, `kl`, `entropy`, `completions/mean_length`, `frac_reward_zero_std` and the callback's
  `eval/pass@1`.
- `sampled_prompts.jsonl` (experiments.run.budget): the fresh prompts of each generation batch, the curves' x.

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
  method's value is its mean and its interval comes from `stats.hierarchical_bootstrap`, which resamples
  problems (one resample shared by every method and phase, so differences are paired) and, within the method,
  seeds. Each seed's own value and interval, and the spread across seeds, are listed beside the pooled one.
- Between methods, after training, for greedy pass@1, pass@1 and pass@k: every pair's difference (better
  minus worse point estimate) with its paired 95% interval and a bootstrap p-value; a difference is called
  significant when its Holm-adjusted p-value is below 0.05 over all pairs of that metric (family-wise error
  <= 5% per metric). A method's rank is 1 + the number of methods significantly better than it.
- Coverage: pass@k for k = 1, 2, 4, ..., n (the unbiased estimator on each eval's per-problem `correct` and `n`)
  with bootstrap bands over problems and seeds, and coverage (the share of problems any of the n samples
  solves), for the starting model (every distinct eval_before) and each method after training, drawn on a log2
  k axis (`pass_at_k_curve.png`); per method, the smallest k at which the starting model's pass@k is not below
  the method's (paired by run and problem, with the interval of the difference), or that it stays below up to n.
- Coinciding curves: two runs whose logged curve (reward, KL, length, ...) matches at >= 90% of their common
  steps are named in a note, and drawn with distinct line styles and markers so that neither hides the other.

- Curves: against the fresh prompts sampled by each logged step (`sampled_prompts.jsonl`, else run.json's budget
  shape), the quantity every method of a budget shares, not optimizer steps (PPO takes two per generation batch);
  the eval curve with each evaluation's interval; TRL's `rloo` is left out of the
  `frac_reward_zero_std` plot (measured after its KL penalty, `zero_std_after_kl`), and a run that does not log
  a curve's key is named under that plot.

Beside report.md it writes counts.json (`experiments.report.counts`): each run's per-problem counts, compact, from
which `runs_from_counts` rebuilds run directories that give every table but the training curves. It refuses, in
one line, runs whose evaluations were scored by different extraction rules or sandboxes (each eval's `scorer`
stamp, else the run directory's `scorer.json`; `experiments.evaluation.scorer`), and says which scored them. Beside
each null verdict it prints the minimum detectable effect (80% power), and a p-value at the bootstrap's floor as
"< floor".

A metric or file that is missing is skipped and named in the report's "Skipped" section instead of failing.
The output depends only on the inputs: no timestamps, fixed bootstrap seeds, fixed plot metadata, and paths
written relative to `out_dir`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from experiments.report.analysis import CURVES, build_report
from experiments.report.counts import counts_record, runs_from_counts
from experiments.report.markdown import console_table, render_markdown
from experiments.report.plots import plot_comparisons, plot_coverage, plot_curve, plot_passk
from experiments.report.runs import Run, fresh_prompts_at, load_run, zero_std_after_kl

__all__ = [
    "CURVES",
    "Run",
    "build_report",
    "console_table",
    "fresh_prompts_at",
    "load_run",
    "render_markdown",
    "runs_from_counts",
    "write_report",
    "zero_std_after_kl",
]


def write_report(
    run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, title: str | None = None
) -> Path:
    """Write report.md, report.json and the PNG plots into `out_dir`; return the path of report.md."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(run_dirs, out, title)
    order = [e["method"] for e in report["methods"]]
    plots: dict[str, str] = {}
    if plot_passk(report["methods"], out / "pass_at_k.png"):
        plots["pass_at_k"] = "pass_at_k.png"
    else:
        report["skipped"].append("plot pass_at_k: no eval_before/eval_after metrics")
    if plot_coverage(report.get("coverage"), order, out / "pass_at_k_curve.png"):
        plots["pass_at_k_curve"] = "pass_at_k_curve.png"
    if plot_comparisons(report["comparisons"], out / "comparisons.png"):
        plots["comparisons"] = "comparisons.png"
    for stem, spec in report["curves"].items():
        plot_curve(spec, order, out / f"{stem}.png")
        plots[stem] = f"{stem}.png"
    report["plots"] = plots
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    # The per-problem counts behind every table, so that the report can be recomputed without the run directories.
    counts = counts_record([load_run(d) for d in run_dirs], out)
    (out / "counts.json").write_text(json.dumps(counts, sort_keys=True, separators=(",", ":")) + "\n")
    md = out / "report.md"
    md.write_text(render_markdown(report))
    return md
