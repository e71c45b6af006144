"""experiments.run.train's `run`, in the order of a run, on the tiny model and one or two steps of grpo (a few
seconds each): the files a run leaves, which evaluations it runs (and which it reuses), what --overwrite removes,
and each way a resume goes (a finished run, a checkpoint inside the run, a checkpoint at its last step). The
one-minute runs of every method are tests/run/test_resume.py's and tests/run/test_cli.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.run import train
from experiments.run.argv import parse_config

CPU_YAML = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "cpu.yaml"


def _argv(model: Path, out: Path, *extra: str) -> list[str]:
    """grpo on the learnable task: 2 prompts of 2 completions, one per step, so budget_prompts is max_steps."""
    return [
        str(CPU_YAML),
        "--method",
        "grpo",
        "--model",
        str(model),
        "--dataset",
        "learnable",
        "--n_train",
        "8",
        "--n_eval",
        "2",
        "--eval_n",
        "2",
        "--eval_ks",
        "1",
        "--eval_max_new_tokens",
        "4",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--max_completion_length",
        "4",
        "--budget_prompts",
        "2",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--save_model",
        "false",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(out),
        *extra,
    ]


@pytest.fixture
def evaluations(monkeypatch):
    """The paths `evaluate_to_file` wrote, in order (the real evaluation runs)."""
    from experiments.evaluation import evaluate

    written: list[str] = []
    real = evaluate.evaluate_to_file

    def counting(model, tokenizer, rows, exp, seed, path, *args, **kwargs):
        written.append(Path(path).name)
        return real(model, tokenizer, rows, exp, seed, path, *args, **kwargs)

    monkeypatch.setattr(evaluate, "evaluate_to_file", counting)
    return written


def _run(argv: list[str]) -> Path:
    return train.run(*parse_config(argv))


def _record(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def test_a_run_evaluates_before_and_after_and_records_what_it_did(
    tiny_model_dir, tmp_path, evaluations
) -> None:
    out = tmp_path / "run"
    assert _run(_argv(tiny_model_dir, out)) == out
    assert evaluations == ["eval_before.json", "eval_after.json"]
    record = _record(out)
    assert (record["method"], record["global_step"], record["resumed_from"]) == ("grpo", 2, None)
    assert record["model_path"] == str(tiny_model_dir) and record["num_processes"] == 1
    assert record["budget"]["optimizer_steps"] == 2 and record["train_time_s"] > 0
    assert record["wall_time_s"] >= record["train_time_s"]
    for name in (
        "eval_before.json",
        "eval_after.json",
        "sampled_prompts.jsonl",
        "trainer_state.json",
        "train.log",
    ):
        assert (out / name).is_file(), name
    assert len((out / "sampled_prompts.jsonl").read_text().splitlines()) == 2  # one generation batch per step
    assert not (out / "model.safetensors").exists() and not list(out.glob("checkpoint-*"))
    before, after = (json.loads((out / f"eval_{when}.json").read_text()) for when in ("before", "after"))
    assert before["num_problems"] == after["num_problems"] == 2
    assert record["eval_tokens_per_s"] == {
        "before": before["timing"]["tokens_per_s"],
        "after": after["timing"]["tokens_per_s"],
    }


def test_without_evaluations_none_runs(tiny_model_dir, tmp_path, evaluations) -> None:
    out = tmp_path / "run"
    _run(_argv(tiny_model_dir, out, "--eval_before", "false", "--eval_after", "false"))
    assert evaluations == [] and not list(out.glob("eval_*.json")) and _record(out)["global_step"] == 2
    _run(_argv(tiny_model_dir, tmp_path / "none", "--n_eval", "0"))
    assert evaluations == []


def test_the_last_periodic_evaluation_is_the_evaluation_after(tiny_model_dir, tmp_path, evaluations) -> None:
    """The callback scored the model at the last step with the same settings: eval_after.json is that result, not
    a second evaluation."""
    out = tmp_path / "run"
    _run(_argv(tiny_model_dir, out, "--eval_every_n_steps", "2"))
    assert evaluations == ["eval_before.json"]
    after = json.loads((out / "eval_after.json").read_text())
    assert after["num_problems"] == 2
    assert _record(out)["eval_tokens_per_s"]["after"] == after["timing"]["tokens_per_s"]


def test_save_model_writes_the_trained_weights(tiny_model_dir, tmp_path) -> None:
    out = tmp_path / "run"
    _run(
        _argv(tiny_model_dir, out, "--save_model", "true", "--eval_before", "false", "--eval_after", "false")
    )
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()


def test_overwrite_replaces_the_earlier_run(tiny_model_dir, tmp_path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "stale.txt").write_text("an earlier run's file")
    _run(_argv(tiny_model_dir, out, "--overwrite", "true", "--eval_before", "false", "--eval_after", "false"))
    assert not (out / "stale.txt").exists() and (out / "run.json").is_file()


def test_resuming_a_finished_run_trains_nothing(tiny_model_dir, tmp_path, capsys, evaluations) -> None:
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, out, "--eval_after", "false")
    _run(argv)
    stamp = (out / "run.json").stat().st_mtime_ns
    assert _run([*argv, "--resume", "true"]) == out
    assert (
        f"passk: {out} already trained its 2 steps (run.json): nothing to resume" in capsys.readouterr().out
    )
    assert (out / "run.json").stat().st_mtime_ns == stamp and evaluations == ["eval_before.json"]


def test_a_resume_continues_from_the_checkpoint_and_keeps_the_first_evaluation(
    tiny_model_dir, tmp_path, capsys, evaluations
) -> None:
    """A run stopped after checkpoint-1 (its run.json never written): the resume loads checkpoint-1, takes step
    2, and reuses eval_before.json instead of evaluating the starting model again."""
    out = tmp_path / "run"
    argv = _argv(
        tiny_model_dir, out, "--save_strategy", "steps", "--save_steps", "1", "--eval_after", "false"
    )
    _run(argv)
    before = (out / "eval_before.json").read_text()
    for path in (
        out / "run.json",
        *sorted((out / "checkpoint-2").rglob("*"), reverse=True),
        out / "checkpoint-2",
    ):
        path.rmdir() if path.is_dir() else path.unlink()
    capsys.readouterr()
    _run([*argv, "--resume", "true"])
    assert f"passk: resuming from {out / 'checkpoint-1'} (step 1)" in capsys.readouterr().out
    record = _record(out)
    assert (record["resumed_from"], record["global_step"]) == (str(out / "checkpoint-1"), 2)
    assert evaluations == ["eval_before.json"] and (out / "eval_before.json").read_text() == before
    assert record["eval_tokens_per_s"]["before"] == json.loads(before)["timing"]["tokens_per_s"]


def test_a_checkpoint_at_the_last_step_finishes_the_run_without_training(
    tiny_model_dir, tmp_path, monkeypatch, evaluations
) -> None:
    """Ctrl-C after the last step's checkpoint, before run.json: the resume writes the run's record from the
    checkpoint and takes no step past max_steps. The periodic evaluation did not run in this process, so the
    trained model is evaluated afresh."""
    from trl import GRPOTrainer

    out = tmp_path / "run"
    argv = _argv(
        tiny_model_dir, out, "--save_strategy", "steps", "--save_steps", "1", "--eval_before", "false"
    )
    _run(argv)
    (out / "run.json").unlink()
    evaluations.clear()

    def no_training(self, *args, **kwargs):
        raise AssertionError("trained past max_steps")

    monkeypatch.setattr(GRPOTrainer, "train", no_training)
    _run([*argv, "--resume", "true"])
    record = _record(out)
    assert (record["resumed_from"], record["global_step"]) == (str(out / "checkpoint-2"), 2)
    assert evaluations == ["eval_after.json"]  # the trained model is still evaluated
