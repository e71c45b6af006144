"""The report's run table shows, per run, the share of training completions the token cap cut
(`completions/cut_by_cap_frac`, logged when generation stops at the end of the code; issue 50 item 1)."""

from __future__ import annotations

from types import SimpleNamespace

from experiments.report.analysis import _run_row
from experiments.report.markdown import _runs_table


def _run(log_history):
    return SimpleNamespace(
        dir="/runs/grpo", label="grpo", method="grpo", seed=0, model="tiny", budget={}, wall_time_s=1.0,
        tokens_per_s=2.0, after=None, before=None, method_hparams={}, log_history=log_history,
        scorer=lambda when: None,
    )  # fmt: skip


def test_the_run_table_shows_the_share_the_cap_cut_per_run() -> None:
    logged = [
        {"step": 1, "completions/cut_by_cap_frac": 0.5},
        {"step": 2, "completions/cut_by_cap_frac": 0.0},
    ]
    row = _run_row(_run(logged), "/runs")
    assert row["cut_by_cap_frac"] == 0.25
    silent = _run_row(_run([{"step": 1, "loss": 0.0}]), "/runs")
    assert silent["cut_by_cap_frac"] is None
    text = "\n".join(_runs_table({"runs": [row, {**silent, "run": "old"}]}))
    assert "| Cut by the cap |" in text
    header = next(line for line in text.splitlines() if line.startswith("| Run |")).split(" | ")
    column = header.index("Cut by the cap")
    cells = [line.split(" | ") for line in text.splitlines() if line.startswith(("| grpo", "| old"))]
    assert [c[column] for c in cells] == ["25%", "—"]
    assert "Cut by the cap: the mean share of training completions" in text
