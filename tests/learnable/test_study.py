"""The side-by-side study's protocol (issue 52, item 3; experiments.learnable.study and benchmarks/bench_learning.py):
every row tuned on the same learning-rate grid, chosen on training-family problems no run trains on; the rows that
clip run off-policy, so that their clip acts, with the clip's share in the report; every row at the same fresh
samples and the same optimizer steps; one log-prob temperature per comparison; the `grpo` row's loss named and the
paper's available; PKPO's control the same trainer with k = 1."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.errors import DataError
from experiments.evaluation.scorer import scorer_stamp
from experiments.evaluation.stats import EvalResult, ProblemResult, summarize
from experiments.learnable import study
from experiments.learnable.tasks import (
    build_row,
    is_heldout,
    train_problems,
    tuning_problems,
    tuning_rows,
)
from experiments.report import build_report, render_markdown
from experiments.run.budget import generation_shape
from experiments.trainers import METHODS

ROOT = Path(__file__).resolve().parents[2]
STUDY = SimpleNamespace(prompts=600, off_policy_steps=study.OFF_POLICY_STEPS, ppo_steps_per_generation=None)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def configs(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("cfg")
    return {row: bench.row_config(row, STUDY, out / row, 0) for row in study.STUDY_METHODS}


def test_tuning_problems_are_training_families_that_no_run_trains_on() -> None:
    rows = tuning_rows(50)
    ids = set(rows["task_id"])
    problems = tuning_problems(50, exclude=[*train_problems(3000, seed=0), *train_problems(400, seed=1)])
    assert len(ids) == 50 and ids == {build_row(p)["task_id"] for p in problems}
    assert not any(is_heldout(p) for p in problems)  # never a held-out family
    rl = {build_row(p)["task_id"] for p in train_problems(3000, seed=0)}
    sft = {build_row(p)["task_id"] for p in train_problems(400, seed=1)}
    assert not ids & rl and not ids & sft
    assert list(tuning_rows(50)["task_id"]) == list(rows["task_id"])  # the same rows every time


def test_every_row_samples_the_same_fresh_prompts_in_the_same_optimizer_steps(configs) -> None:
    shapes = {row: generation_shape(c) for row, c in configs.items()}
    assert {c.max_steps for c in configs.values()} == {75}
    assert {s["generation_batch_size"] // s["steps_per_generation"] for s in shapes.values()} == {64}
    for row, s in shapes.items():
        prompts = 75 // (s["steps_per_generation"] * s["num_iterations"]) * s["prompts_per_generation"]
        assert prompts == 600, row


def test_the_rows_that_clip_take_several_steps_per_generation_batch_and_the_others_one(configs) -> None:
    for row, config in configs.items():
        shape = generation_shape(config)
        if row in study.OFF_POLICY_METHODS:
            assert shape["steps_per_generation"] == study.OFF_POLICY_STEPS > 1, row
        else:
            assert shape["steps_per_generation"] == 1, row
        assert shape["num_iterations"] == 1, row  # one pass over each sample: steps equal at equal samples
    clipping = {"grpo", "dr_grpo", "dapo", "gspo", "cispo", "pkpo", "rloo", "ppo"}
    assert clipping <= study.OFF_POLICY_METHODS
    assert {r for r in METHODS if r not in study.OFF_POLICY_METHODS} == {
        "vanilla_pg",
        "reinforce",
        "reinforce_kl",
        "reinforce_rloo",
    }


def test_grpo_row_is_trls_token_loss_and_grpo_seq_the_papers_sequence_mean(configs) -> None:
    assert configs["grpo"].loss_type == "dapo"  # TRL's default: one mean over the batch's tokens
    assert (
        configs["grpo_seq"].loss_type == "grpo"
    )  # DeepSeekMath eq. 3: a mean per completion, then over them
    a, b = configs["grpo"].to_dict(), configs["grpo_seq"].to_dict()
    assert {k for k in a if a[k] != b[k]} == {"loss_type", "output_dir", "logging_dir"} & set(a)


def test_pkpos_control_is_the_same_trainer_with_k_1(configs) -> None:
    assert study.base_method("pkpo_k1") == "pkpo" and configs["pkpo_k1"].pkpo_k == 1
    assert configs["pkpo"].pkpo_k == 2
    a, b = configs["pkpo"].to_dict(), configs["pkpo_k1"].to_dict()
    assert {k for k in a if a[k] != b[k]} - {"output_dir", "logging_dir"} == {"pkpo_k"}
    assert type(configs["pkpo"]) is type(configs["pkpo_k1"])


def test_every_row_takes_log_probs_at_one_temperature_and_a_mix_is_refused(bench) -> None:
    temps = {row: bench.row_hparams(row, STUDY)["logprob_temperature"] for row in study.STUDY_METHODS}
    assert study.check_one_logprob_temperature(temps) == 1.0
    with pytest.raises(study.StudyError, match=r"^log-prob temperatures differ \(grpo 0.8, ppo 1\)") as err:
        study.check_one_logprob_temperature({"grpo": 0.8, "ppo": 1.0})
    assert "\n" not in str(err.value) and "logprob_temperature" in str(err.value)


def test_an_unknown_row_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(study.StudyError, match="unknown row 'grpo2'.*grpo_seq, pkpo_k1"):
        study.base_method("grpo2")


def _cells(method: str, values: dict[float, float]) -> list[dict]:
    return [
        {"method": method, "learning_rate": lr, "scores": {"pass@1": v, "greedy_pass@1": 0.5}}
        for lr, v in values.items()
    ]


def test_the_chosen_rate_is_the_best_on_the_criterion_and_the_smaller_on_a_tie() -> None:
    cells = _cells("grpo", {1e-4: 0.30, 3e-4: 0.41, 1e-3: 0.40}) + _cells(
        "ppo", {1e-4: 0.5, 3e-4: 0.5, 1e-3: 0.4}
    )
    assert study.select_learning_rate(cells, "grpo")["learning_rate"] == 3e-4
    assert study.select_learning_rate(cells, "ppo")["learning_rate"] == 1e-4
    assert study.select_learning_rate(cells, "grpo", "greedy_pass@1")["learning_rate"] == 1e-4


def test_a_search_that_did_not_cover_the_grid_is_refused_in_one_line() -> None:
    with pytest.raises(
        study.StudyError, match=r"cells at 0.0001, 0.0003, not the grid .*--lr-search --methods dapo"
    ):
        study.select_learning_rate(_cells("dapo", {1e-4: 0.3, 3e-4: 0.4}), "dapo")


def test_the_study_reads_the_chosen_rates_of_a_search_split_across_jobs(bench, tmp_path: Path) -> None:
    cells = _cells("grpo", {1e-4: 0.30, 3e-4: 0.41, 1e-3: 0.40})
    for job, part in (("a", cells[:2]), ("b", cells[2:])):
        (tmp_path / job).mkdir()
        (tmp_path / job / "lr_search.json").write_text(json.dumps({"select_on": "pass@1", "cells": part}))
    rates = bench.chosen_learning_rates([tmp_path / "a", tmp_path / "b"], ["grpo"], study.LR_GRID)
    assert rates == {"grpo": 3e-4}
    with pytest.raises(study.StudyError, match="lr_search.json missing; run bench_learning.py --lr-search"):
        bench.chosen_learning_rates([tmp_path / "c"], ["grpo"], study.LR_GRID)


def test_the_chosen_rate_goes_into_the_rows_config(bench, tmp_path: Path) -> None:
    assert bench.row_config("gspo", STUDY, tmp_path, 0, lr=1e-3).learning_rate == 1e-3


def test_budget_views_say_whether_fresh_samples_and_optimizer_steps_are_equal(bench) -> None:
    def run(method, steps, completions=4800):
        budget = {"fresh_prompts": 600, "fresh_completions": completions, "optimizer_steps": steps}
        return {"method": method, "seed": 0, "budget": budget}

    views = bench.budget_views([run("grpo", 75), run("ppo", 75)])
    assert views["equal_fresh_samples"] and views["equal_optimizer_steps"]
    views = bench.budget_views([run("grpo", 75), run("ppo", 150)])
    assert views["equal_fresh_samples"] and not views["equal_optimizer_steps"]
    assert views["common_optimizer_steps"] == 75 and views["rows"]["ppo"]["0"]["optimizer_steps"] == 150


# ---- the report: the clip's share of an off-policy run, and one log-prob temperature ----------------------------


def _report_run(path: Path, method: str, budget: dict, log: list[dict], temperature: float = 1.0) -> Path:
    path.mkdir(parents=True)
    meta = {
        "method": method,
        "seed": 0,
        "model": "tiny",
        "budget": budget,
        "method_hparams": {"logprob_temperature": temperature},
    }
    (path / "run.json").write_text(json.dumps(meta))
    (path / "eval_before.json").write_text(json.dumps(_eval([1] * 20, scorer_stamp())))
    (path / "eval_after.json").write_text(json.dumps(_eval([2] * 20, scorer_stamp())))
    (path / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    return path


def _eval(correct: list[int], scorer: dict) -> dict:
    """An eval record of 20 problems, 4 samples each, `correct` of them passing."""
    problems = [
        ProblemResult(f"t{i}", 4, c, [1.0] * c + [0.0] * (4 - c), c > 1, "x", 0)
        for i, c in enumerate(correct)
    ]
    passk, greedy, avg = summarize(problems, ks=(1, 4))
    settings = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16, "greedy": True, "seed": 0}
    return EvalResult(
        passk,
        greedy,
        avg,
        len(problems),
        4,
        [1, 4],
        100,
        1.0,
        1.0,
        problems,
        settings=settings,
        scorer=scorer,
    ).to_dict()


OFF = {"steps_per_generation": 5, "num_iterations": 1, "gradient_accumulation_steps": 1}
ON = {"steps_per_generation": 1, "num_iterations": 1, "gradient_accumulation_steps": 1}


def test_the_report_gives_each_off_policy_runs_clip_fraction_and_marks_on_policy_runs(tmp_path: Path) -> None:
    log = [{"step": s, "clip_ratio/region_mean": v, "reward": 0.5} for s, v in ((1, 0.0), (2, 0.1), (3, 0.2))]
    dirs = [
        _report_run(tmp_path / "gspo", "gspo", OFF, log),
        _report_run(tmp_path / "cispo", "cispo", OFF, [{"step": 1, "cispo_clip_ratio": 0.02}]),
        _report_run(
            tmp_path / "ppo", "ppo", OFF, [{"step": 1, "ppo/clipfrac": 0.3, "clip_ratio/region_mean": 0}]
        ),
        _report_run(tmp_path / "grpo_on", "grpo_on", ON, log),
    ]
    report = build_report(dirs, tmp_path)
    rows = {r["method"]: r for r in report["runs"]}
    assert rows["gspo"]["clip_fraction"] == pytest.approx(0.1)
    assert rows["gspo"]["clip_metric"] == "clip_ratio/region_mean"
    assert (rows["cispo"]["clip_metric"], rows["cispo"]["clip_fraction"]) == ("cispo_clip_ratio", 0.02)
    assert (rows["ppo"]["clip_metric"], rows["ppo"]["clip_fraction"]) == ("ppo/clipfrac", 0.3)
    assert "clip_fraction" not in rows["grpo_on"]  # on-policy: the ratio is 1, the clip idle
    md = render_markdown(report)
    header = next(line for line in md.splitlines() if line.startswith("| Run |"))
    assert "| Cut by the cap | Clipped |" in header
    assert "| 10.0% (clip_ratio/region_mean) |" in md and "| — (on-policy) |" in md


def test_a_report_without_off_policy_runs_has_no_clip_column(tmp_path: Path) -> None:
    dirs = [
        _report_run(tmp_path / m, m, ON, [{"step": 1, "clip_ratio/region_mean": 0.0}]) for m in ("a", "b")
    ]
    report = build_report(dirs, tmp_path)
    assert all("clip_fraction" not in r for r in report["runs"])
    assert "Clipped" not in render_markdown(report)


def test_a_report_refuses_runs_at_different_log_prob_temperatures_in_one_line(tmp_path: Path) -> None:
    dirs = [
        _report_run(tmp_path / "grpo", "grpo", ON, [], temperature=0.8),
        _report_run(tmp_path / "ppo", "ppo", ON, [], temperature=1.0),
    ]
    with pytest.raises(DataError, match=r"different temperatures \(grpo 0.8, ppo 1\)") as err:
        build_report(dirs, tmp_path)
    assert "\n" not in str(err.value) and "logprob_temperature" in str(err.value)


# ---- end to end, tiny: the search on tuning problems only, then the rows at their chosen rates ------------------


@pytest.mark.slow
def test_the_search_sees_no_held_out_problem_and_the_rerun_trains_each_row_at_its_chosen_rate(
    bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rows (one that clips, one on-policy) at two rates, 40 prompts each (one generation batch of 5 steps for
    gspo), 10 tuning problems; then the study with --lr-from: learning.json and run.json carry each row's chosen
    rate, gspo's clip share is logged and above 0, and the budgets are equal in samples and steps."""
    from experiments.learnable import tasks

    def no_heldout(*args, **kwargs):
        raise AssertionError("the learning-rate search loaded held-out problems")

    search = tmp_path / "lr"
    common = ["--prompts", "40", "--methods", "gspo", "reinforce", "--threads", "1"]
    with monkeypatch.context() as m:
        m.setattr(tasks, "heldout_rows", no_heldout)
        m.setattr(
            sys,
            "argv",
            ["bench", "--lr-search", "--lr-grid", "1e-4", "1e-3", "--tuning-problems", "10", *common]
            + ["--out", str(search)],
        )
        bench.main()
    record = json.loads((search / "lr_search.json").read_text())
    assert sorted((c["method"], c["learning_rate"]) for c in record["cells"]) == [
        ("gspo", 1e-4),
        ("gspo", 1e-3),
        ("reinforce", 1e-4),
        ("reinforce", 1e-3),
    ]
    assert set(record["chosen"]) == {"gspo", "reinforce"}
    chosen = {row: c["learning_rate"] for row, c in record["chosen"].items()}
    gspo_cell = next(c for c in record["cells"] if c["method"] == "gspo")
    assert gspo_cell["off_policy"] and gspo_cell["clip_metric"] == "clip_ratio/region_mean"

    out = tmp_path / "study"
    monkeypatch.setattr(
        sys,
        "argv",
        ["bench", "--lr-from", str(search), "--lr-grid", "1e-4", "1e-3", "--seeds", "0", *common]
        + ["--final-problems", "10", "--curve-problems", "5", "--eval-every", "40", "--out", str(out)],
    )
    bench.main()
    results = json.loads((out / "learning.json").read_text())
    assert {k: v for k, v in results["learning_rates"].items() if k != "from"} == chosen
    for run in results["runs"]:
        assert run["learning_rate"] == chosen[run["method"]]
        meta = json.loads((out / "runs" / f"{run['method']}-seed0" / "run.json").read_text())
        assert meta["config"]["learning_rate"] == chosen[run["method"]]
    runs = {r["method"]: r for r in results["runs"]}
    assert runs["gspo"]["off_policy"] and runs["gspo"]["clip_fraction"] > 0  # GSPO's band of 3e-4 / 4e-4 acts
    assert not runs["reinforce"]["off_policy"]
    views = results["budget_views"]
    assert (
        views["equal_fresh_samples"]
        and views["equal_optimizer_steps"]
        and views["common_optimizer_steps"] == 5
    )
    report = json.loads((out / "report" / "report.json").read_text())
    assert {r["method"]: "clip_fraction" in r for r in report["runs"]} == {"gspo": True, "reinforce": False}
