"""benchmarks/repair_compare.py on the tiny model: each phase's record is kept and skipped when the command runs
again, and an arm stopped after a checkpoint resumes from it with its token budget recounted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("repair_compare", ROOT / "benchmarks" / "repair_compare.py")
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_comparison_goes_on_where_it_stopped(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    small = ["--model", str(tiny_model_dir), "--tool_template", "--out", str(out), "--n_train", "4"]
    small += ["--n_eval", "2", "--eval_n", "1", "--num_generations", "2", "--max_completion_length", "8"]
    small += ["--budget_tokens", "100000", "--save_steps", "1", "--threads", "1"]
    assert compare.main([*small, "--max_steps", "1"]) == 0
    first = json.loads((out / "result.json").read_text())
    assert first["single"]["steps"] == 1 and not first["single"]["resumed"]
    assert (out / "single" / "checkpoint-1").is_dir() and (out / "multi" / "final").is_dir()
    assert "interval" in first["primary"] and first["start"]["turns_1"]["settings"]["turns"] == 1
    start = (out / "start" / "eval_turns_3.json").read_text()

    # The single-turn arm stopped after its first checkpoint: its records never written.
    for done in ("train.json", "eval_turns_1.json", "eval_turns_3.json"):
        (out / "single" / done).unlink()
    capsys.readouterr()
    assert compare.main([*small, "--max_steps", "2"]) == 0
    said = capsys.readouterr().out
    assert "start/eval_turns_3: done before, kept" in said and "multi/train: done before, kept" in said
    assert "single/train: running" in said and "multi/eval_turns_1: running" not in said
    assert (out / "start" / "eval_turns_3.json").read_text() == start
    again = json.loads((out / "result.json").read_text())
    assert again["single"]["resumed"] and again["single"]["steps"] == 2
    logged = [
        r["completions/mean_length"] * 2
        for r in again["single"]["log_history"]
        if "completions/mean_length" in r
    ]
    assert len(logged) == 2 and again["single"]["generated_tokens"] == pytest.approx(sum(logged))
    assert again["multi"]["steps"] == 1  # kept, not trained again


def test_use_vllm_refuses_a_training_top_p_below_1() -> None:
    with pytest.raises(SystemExit):
        compare.main(["--use_vllm", "--train_top_p", "0.9"])


@pytest.mark.slow
def test_the_comparison_runs_rlefs_answer_loop(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "answer"
    small = ["--model", str(tiny_model_dir), "--submit", "answer", "--out", str(out), "--n_train", "4"]
    small += ["--n_eval", "2", "--eval_n", "1", "--num_generations", "2", "--max_completion_length", "16"]
    small += ["--budget_tokens", "100000", "--max_steps", "1", "--threads", "1", "--micro_batch", "1"]
    assert compare.main(small) == 0
    result = json.loads((out / "result.json").read_text())
    for arm in ("single", "multi"):
        assert result[arm]["steps"] == 1  # one optimizer step over both completions, one per pass
        logged = result[arm]["log_history"][0]
        assert logged["repair/submissions_mean"] >= 1.0  # every answer is an attempt, no tool call needed
        assert "tools/call_frequency" not in logged
    for who in ("start", "single", "multi"):
        record = result[who]["turns_3"] if who == "start" else result[who]["eval"]["turns_3"]
        assert record["settings"]["submit"] == "answer" and record["submissions_mean"] >= 1.0


def test_humaneval_rows_are_split_disjoint_and_carry_no_solution() -> None:
    train, heldout = compare._rows("humaneval", 100, 64)
    assert (len(train), len(heldout)) == (100, 64)
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in heldout}
    for row in (train[0], heldout[0]):
        assert "canonical_solution" not in row and row["code_prompt"] in row["prompt"][-1]["content"]
        assert {"test", "entry_point"} <= set(row)


@pytest.mark.slow
def test_a_failed_signal_check_stops_the_comparison(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "check"
    small = ["--model", str(tiny_model_dir), "--submit", "answer", "--out", str(out), "--n_train", "4"]
    small += ["--n_eval", "2", "--max_completion_length", "16", "--threads", "1"]
    assert compare.main([*small, "--signal_check"]) == 0
    record = json.loads((out / "signal_check.json").read_text())
    assert record["num_problems"] == 2 and record["settings"]["n_samples"] == compare.SIGNAL_SAMPLES
    # The tiny model writes noise: no first attempt passes, so the rule fails and the comparison does not run.
    assert record["metrics"]["first_pass@1"]["value"] == 0.0 and record["rule"]["passed"] is False
    with pytest.raises(SystemExit, match="signal check failed"):
        compare.main(small)
    assert not (out / "start").exists()


def test_rows_the_visible_split_cannot_read_are_dropped_and_named() -> None:
    train, heldout = compare._rows("humaneval", 100, 64)
    kept, dropped = compare._splittable(heldout, "split:2")
    assert dropped and len(kept) + len(dropped) == 64
    assert "HumanEval/29" in dropped  # two asserts: none would be left hidden


def test_a_screened_file_is_split_as_the_sized_run_split_it() -> None:
    screen = ROOT / "benchmarks" / "results" / "sized_0.5b" / "records" / "screened35.jsonl"
    train, heldout = compare._rows(str(screen), 20, 15)
    assert (len(train), len(heldout)) == (20, 15)
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in heldout}
    assert "HumanEval/0" in {r["task_id"] for r in train} and "canonical_solution" not in train[0]
    assert "HumanEval/11" in {r["task_id"] for r in heldout}


@pytest.mark.slow
def test_eval_rows_all_scores_the_trained_problems_then_the_held_out_ones(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    out = tmp_path / "all"
    small = ["--model", str(tiny_model_dir), "--submit", "answer", "--out", str(out), "--n_train", "3"]
    small += ["--n_eval", "2", "--max_completion_length", "8", "--threads", "1", "--eval_rows", "all"]
    assert compare.main([*small, "--signal_check"]) == 0
    record = json.loads((out / "signal_check.json").read_text())
    train, heldout = compare._rows("learnable", 3, 2)
    assert [p["task_id"] for p in record["problems"]] == [r["task_id"] for r in train + heldout]


def _record(final: list[int], first: list[int]) -> dict:
    problems = [
        {"task_id": f"T/{i}", "n": 4, "final_passed": f, "first_passed": g}
        for i, (f, g) in enumerate(zip(final, first, strict=True))
    ]
    return {"problems": problems}


def test_the_comparisons_pair_each_problem_and_split_trained_from_held_out() -> None:
    start = _record([1, 1, 1, 1], [1, 1, 1, 1])
    single = _record([2, 2, 1, 1], [2, 2, 1, 1])
    multi = _record([4, 4, 1, 3], [2, 2, 1, 1])
    result = {"start": {"turns_1": start, "turns_3": start}}
    result |= {
        arm: {"eval": {"turns_1": r, "turns_3": r}} for arm, r in (("single", single), ("multi", multi))
    }
    out = compare._comparisons(result, n_trained=2, seed=0)
    assert out["primary"]["difference"] == pytest.approx((2 + 2 + 0 + 2) / 4 / 4)
    by_part = out["multi_minus_single_at_3_turns"]
    assert by_part["trained"]["difference"] == pytest.approx(0.5) and by_part["trained"]["problems"] == 2
    assert by_part["heldout"]["difference"] == pytest.approx(0.25) and by_part["heldout"]["problems"] == 2
    assert by_part["all"]["difference"] == pytest.approx(out["primary"]["difference"])
    lo, hi = by_part["trained"]["interval"]
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)  # both trained problems moved by 2 of 4
    assert out["single_minus_start_at_1_turns"]["all"]["difference"] == pytest.approx(0.125)
    assert out["multi_minus_start_at_3_turns"]["heldout"]["difference"] == pytest.approx(0.25)
    assert set(compare._comparisons(result, None, 0)["multi_minus_single_at_3_turns"]) == {"all"}


def test_an_evaluation_of_copies_is_kept_aside_and_stops_the_comparison(tmp_path: Path) -> None:
    """Every problem's samples the same text: one draw counted n times, so the record is void and the run stops;
    samples that differ on some problem are an evaluation like any other."""

    from experiments.evaluation.repair import _distinct_share

    def record(distinct: list[int]) -> dict:
        problems = [{"task_id": str(i), "n": 4, "distinct_rollouts": d} for i, d in enumerate(distinct)]
        share = _distinct_share(problems)
        return {"num_problems": 2, "problems": problems, "distinct_rollouts_share": share} | {
            "settings": {"n_samples": 4}
        }

    path = tmp_path / "start" / "eval_turns_1.json"
    with pytest.raises(SystemExit, match="copies of one sample"):
        compare._write(path, record([1, 1]))
    assert not path.exists() and (path.parent / "eval_turns_1.copies.json").exists()
    compare._write(path, record([1, 3]))
    assert json.loads(path.read_text())["distinct_rollouts_share"] == pytest.approx(1 / 3)
