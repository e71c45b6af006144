"""benchmarks/sized_0.5b_report.py: the sized 0.5B run's before/after report, on records written here: the change is
paired by problem, a pair evaluated differently is refused in one line, and the signal checks count every log row
and every completion."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from experiments.evaluation.scorer import scorer_stamp

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sized_report", ROOT / "benchmarks" / "sized_0.5b_report.py")
sized = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sized)  # type: ignore[union-attr]

SETTINGS = {"temperature": 0.8, "top_p": 1.0, "max_new_tokens": 192, "greedy": True, "seed": 42}
SETTINGS |= {"style": "completion", "stop_at_code_end": True, "generator": "vllm"}


def _record(correct: dict[str, int], greedy: dict[str, bool], **settings: Any) -> dict:
    problems = [
        {"task_id": t, "n": 16, "correct": c, "greedy_passed": greedy[t]} for t, c in sorted(correct.items())
    ]
    mean = sum(correct.values()) / (16 * len(correct))
    metrics = {"pass@1": {"value": mean}, "greedy_pass@1": {"value": sum(greedy.values()) / len(greedy)}}
    return {
        "problems": problems,
        "n": 16,
        "settings": SETTINGS | settings,
        "scorer": scorer_stamp(),
        "metrics": metrics,
    }


def test_the_change_is_paired_by_problem() -> None:
    before = _record({"a": 0, "b": 16, "c": 8}, {"a": False, "b": True, "c": False})
    after = _record({"a": 16, "b": 16, "c": 8}, {"a": True, "b": True, "c": False})
    row = sized.change(before, after, "pass@1")
    assert row["delta"] == pytest.approx(1 / 3)
    assert (row["improved"], row["worsened"]) == (1, 0)
    assert row["before"] == pytest.approx(0.5) and row["after"] == pytest.approx(5 / 6)
    greedy = sized.change(before, after, "greedy_pass@1")
    assert greedy["delta"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(("key", "value"), [("generator", None), ("temperature", 1.0), ("seed", 0)])
def test_a_pair_evaluated_differently_is_refused_in_one_line(key: str, value: Any) -> None:
    before = _record({"a": 1}, {"a": False})
    after = _record({"a": 2}, {"a": True}, **{key: value})
    with pytest.raises(sized.ReportError, match=f"differ in {key}") as err:
        sized.check_comparable(before, after, "grpo, train split")
    assert "\n" not in str(err.value)


def test_a_pair_on_other_problems_or_scorers_is_refused() -> None:
    before = _record({"a": 1}, {"a": False})
    with pytest.raises(sized.ReportError, match="different problems"):
        sized.check_comparable(before, _record({"b": 1}, {"b": False}), "x")
    other = _record({"a": 1}, {"a": False})
    other["scorer"] = {**other["scorer"], "sandbox": -1}
    with pytest.raises(sized.ReportError, match="different extraction/sandbox versions"):
        sized.check_comparable(before, other, "x")


def test_the_report_reads_every_log_row_and_every_completion(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = runs / "grpo"
    run.mkdir(parents=True)
    tasks = {f"t{i}": i % 17 for i in range(10)}
    for split in ("train", "eval"):
        (runs / f"base_{split}.json").write_text(json.dumps(_record(tasks, dict.fromkeys(tasks, False))))
        better = {t: min(c + 4, 16) for t, c in tasks.items()}
        (run / f"eval_{split}.json").write_text(json.dumps(_record(better, dict.fromkeys(tasks, True))))
    log = [
        {"step": s, "reward": s / 10, "frac_reward_zero_std": float(s == 3), "step_time": 60.0}
        for s in range(1, 7)
    ]
    (run / "trainer_state.json").write_text(json.dumps({"log_history": [*log, {"train_runtime": 1.0}]}))
    ends = [["stop_string"] * 7 + ["cap"], ["eos"] * 8, ["stop_string"] * 8]
    (run / "completion_ends.jsonl").write_text(
        "".join(json.dumps({"step": i, "ends": e}) + "\n" for i, e in enumerate(ends))
    )
    power = json.loads((ROOT / "benchmarks/results/sized_0.5b/power.json").read_text())

    report = sized.build(runs, power)
    assert report["not_run"] == ["reinforce_rloo", "ppo"]
    signal = report["methods"]["grpo"]["signal"]
    assert (signal["log_rows"], signal["scored_batches"], signal["completions"]) == (6, 6, 24)
    assert "groups" not in signal  # no run.json yet: the group size is not known, and nothing is guessed
    assert signal["cut_by_cap_frac"] == pytest.approx(1 / 24)
    assert signal["reward_first_third"] == pytest.approx(0.15) and signal[
        "reward_last_third"
    ] == pytest.approx(0.55)
    train = report["methods"]["grpo"]["splits"]["train"]
    assert [r["metric"] for r in train] == ["pass@1", "pass@16", "greedy_pass@1"]
    assert train[0]["verdict"] == "**raised**" and train[2]["delta"] == pytest.approx(1.0)
    assert "| grpo | trained (20) | pass@1 |" in sized.render(report, power)


def test_a_run_still_training_is_read_from_its_latest_checkpoint(tmp_path: Path) -> None:
    for step in (5, 10, 15):  # "checkpoint-10" sorts before "checkpoint-5" as text
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        rows = [{"step": s, "reward": 0.5, "step_time": 1.0} for s in range(1, step + 1)]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": rows}))
    assert len(sized.log_rows(tmp_path)) == 15


def test_groups_not_rows_are_counted_when_a_method_samples_several_steps_at_once(tmp_path: Path) -> None:
    # PPO's shape: one scored batch of 4 groups of 8 every 4th optimizer step
    run = tmp_path / "ppo"
    run.mkdir()
    log = [{"step": s, "step_time": 100.0} for s in range(1, 9)]
    log[0] |= {"reward": 0.5, "frac_reward_zero_std": 0.25, "ppo/explained_variance": -0.1}
    log[4] |= {"reward": 0.25, "frac_reward_zero_std": 0.5, "ppo/explained_variance": 0.3}
    (run / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    (run / "run.json").write_text(json.dumps({"config": {"num_generations": 8}}))
    (run / "completion_ends.jsonl").write_text(
        "".join(json.dumps({"step": s, "ends": ["stop_string"] * 32}) + "\n" for s in (0, 4))
    )
    signal = sized.signal_checks(run)
    assert (signal["log_rows"], signal["scored_batches"], signal["completions"]) == (8, 2, 64)
    assert (signal["groups"], signal["groups_with_reward_variance"]) == (8, 5)
    assert signal["ppo_spans"]["explained_variance"] == [pytest.approx(-0.1), pytest.approx(0.3)]
    assert signal["ppo_spans"]["clipfrac"] is None


def test_a_method_evaluated_on_one_set_so_far_is_reported_on_that_set_and_says_so(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "grpo").mkdir(parents=True)
    tasks = {"a": 2, "b": 8}
    for split in ("train", "eval"):
        (runs / f"base_{split}.json").write_text(json.dumps(_record(tasks, dict.fromkeys(tasks, False))))
    (runs / "grpo" / "eval_train.json").write_text(
        json.dumps(_record({"a": 6, "b": 9}, dict.fromkeys(tasks, True)))
    )
    power = json.loads((ROOT / "benchmarks/results/sized_0.5b/power.json").read_text())
    report = sized.build(runs, power)
    assert list(report["methods"]["grpo"]["splits"]) == ["train"]
    assert "grpo: not evaluated yet after training on the held out (15) problems." in sized.render(
        report, power
    )


def test_a_trained_method_not_yet_evaluated_shows_its_signal_checks_and_says_so(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = runs / "reinforce_rloo"
    run.mkdir(parents=True)
    tasks = {"a": 2, "b": 8}
    for split in ("train", "eval"):
        (runs / f"base_{split}.json").write_text(json.dumps(_record(tasks, dict.fromkeys(tasks, False))))
    (run / "run.json").write_text(json.dumps({"global_step": 2}))
    log = [{"step": s, "reward": 0.5, "frac_reward_zero_std": 0.0} for s in (1, 2)]
    (run / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    (run / "completion_ends.jsonl").write_text(json.dumps({"step": 0, "ends": ["stop_string", "cap"]}) + "\n")
    power = json.loads((ROOT / "benchmarks/results/sized_0.5b/power.json").read_text())
    report = sized.build(runs, power)
    assert report["not_run"] == ["grpo", "ppo"]
    assert report["methods"]["reinforce_rloo"]["splits"] == {}
    text = sized.render(report, power)
    assert (
        "reinforce_rloo: not evaluated yet after training on the trained (20), held out (15) problems."
        in text
    )
    assert "| reinforce_rloo | 2 | 2 | — | 2 | 1 (50.0%) | 1 |" in text
