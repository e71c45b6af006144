"""experiments.run.train's `run`, in the order of a run, on the tiny model and one or two steps of grpo (a few
seconds each): the files a run leaves, which evaluations it runs (and which it reuses), what --overwrite removes,
and each way a resume goes (a finished run, a checkpoint inside the run, a checkpoint at its last step). The
one-minute runs of every method are tests/run/test_resume.py's and tests/run/test_cli.py's.
"""

from __future__ import annotations

import json
import shutil
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
    out = tmp_path / "runs" / "new" / "run"  # its parents are made too
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


@pytest.mark.parametrize("budget", ["1", "2"])
def test_a_checkpoint_at_the_last_step_finishes_the_run_without_training(
    tiny_model_dir, tmp_path, monkeypatch, evaluations, budget
) -> None:
    """Ctrl-C after the last step's checkpoint, before run.json: the resume writes the run's record from the
    checkpoint and takes no step past max_steps (TRL's own resume would take one more). The periodic evaluation did
    not run in this process, so the trained model is evaluated afresh."""
    from trl import GRPOTrainer

    out = tmp_path / "run"
    argv = _argv(
        tiny_model_dir, out, "--save_strategy", "steps", "--save_steps", "1", "--eval_before", "false"
    )
    argv += ["--eval_every_n_steps", "2", "--budget_prompts", budget]
    _run(argv)
    (out / "run.json").unlink()
    evaluations.clear()

    def no_training(self, *args, **kwargs):
        raise AssertionError("trained past max_steps")

    monkeypatch.setattr(GRPOTrainer, "train", no_training)
    _run([*argv, "--resume", "true"])
    record = _record(out)
    assert (record["resumed_from"], record["global_step"]) == (str(out / f"checkpoint-{budget}"), int(budget))
    assert evaluations == ["eval_after.json"]  # the trained model is still evaluated


def test_a_checkpoint_past_step_256_at_the_last_step_finishes_the_run_too(
    tiny_model_dir, tmp_path, monkeypatch
) -> None:
    """The same at step 300 (past CPython's cached small ints: the steps are compared by value): a two-step run's
    checkpoint renamed and restamped as the last one of a 300-step budget."""
    from trl import GRPOTrainer

    out = tmp_path / "run"
    argv = _argv(
        tiny_model_dir, out, "--save_strategy", "steps", "--save_steps", "2", "--eval_before", "false"
    )
    argv += ["--eval_after", "false"]
    _run(argv)
    (out / "run.json").unlink()
    (out / "checkpoint-2").rename(out / "checkpoint-300")
    state_path = out / "checkpoint-300" / "trainer_state.json"
    state = json.loads(state_path.read_text())
    state["global_step"], state["max_steps"] = 300, 300
    state_path.write_text(json.dumps(state))

    def no_training(self, *args, **kwargs):
        raise AssertionError("trained past max_steps")

    monkeypatch.setattr(GRPOTrainer, "train", no_training)
    _run([*argv, "--resume", "true", "--budget_prompts", "300"])
    assert _record(out)["global_step"] == 300


def test_a_run_that_epochs_end_resumes_and_trains_to_its_end(tiny_model_dir, tmp_path) -> None:
    """max_steps -1: num_train_epochs decides (8 prompts, one a step). A resume from checkpoint-2 trains on."""
    out = tmp_path / "run"
    argv = _argv(
        tiny_model_dir, out, "--save_strategy", "steps", "--save_steps", "2", "--eval_before", "false"
    )
    argv += [
        "--eval_after",
        "false",
        "--budget_prompts",
        "0",
        "--max_steps",
        "-1",
        "--num_train_epochs",
        "1",
    ]
    _run(argv)
    assert _record(out)["global_step"] == 8
    for path in (out / "run.json", *out.glob("checkpoint-[468]")):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    _run([*argv, "--resume", "true"])
    record = _record(out)
    assert (record["resumed_from"], record["global_step"]) == (str(out / "checkpoint-2"), 8)


def test_checkpoints_move_to_the_end_of_trls_generation_batch_and_not_of_passks(
    tiny_model_dir, tmp_path
) -> None:
    """TRL's trainers would sample again the generation batch a checkpoint was taken in, so its saves move to the
    batch's end (steps_per_generation 2: step 2, not 1); passk's trainers save the batch and keep every step's."""
    common = (
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
        "--eval_before",
        "false",
        "--eval_after",
        "false",
    )
    grpo = tmp_path / "grpo"
    _run(_argv(tiny_model_dir, grpo, *common, "--steps_per_generation", "2"))
    assert sorted(p.name for p in grpo.glob("checkpoint-*")) == ["checkpoint-2"]
    reinforce = tmp_path / "reinforce"
    argv = _argv(tiny_model_dir, reinforce, *common)
    argv[argv.index("grpo")] = "reinforce"
    _run(argv)
    assert sorted(p.name for p in reinforce.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_the_training_time_is_measured_around_training_alone(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """train_time_s is the difference of two readings of the clock (a stand-in that advances 7 s a reading)."""
    import itertools
    from types import SimpleNamespace

    ticks = itertools.count(1000.0, 7.0)
    monkeypatch.setattr(train, "time", SimpleNamespace(time=lambda: next(ticks)))
    out = tmp_path / "run"
    _run(_argv(tiny_model_dir, out, "--eval_before", "false", "--eval_after", "false"))
    seconds = _record(out)["train_time_s"]
    assert seconds > 0 and seconds % 7.0 == 0


def test_a_run_under_compare_writes_no_log_of_its_own(tiny_model_dir, tmp_path, monkeypatch) -> None:
    """passk compare gives each run a progress fd and keeps its output itself: no train.log in output_dir."""
    import os

    from experiments.run.progress import PROGRESS_FD_ENV

    read, write = os.pipe()
    monkeypatch.setenv(PROGRESS_FD_ENV, str(write))
    try:
        out = tmp_path / "run"
        _run(_argv(tiny_model_dir, out, "--eval_before", "false", "--eval_after", "false"))
        assert (out / "run.json").is_file() and not (out / "train.log").exists()
    finally:
        os.close(write)
        os.close(read)


def test_a_setting_the_method_does_not_have_is_named_in_the_log(tiny_model_dir, tmp_path, caplog) -> None:
    shared = tmp_path / "shared.yaml"
    shared.write_text(CPU_YAML.read_text() + "logprob_temperature: 1.0\n")
    argv = _argv(tiny_model_dir, tmp_path / "run", "--eval_before", "false", "--eval_after", "false")
    argv[0] = str(shared)
    with caplog.at_level("WARNING", logger="passk.train"):
        _run(argv)
    assert "logprob_temperature: not used by grpo (GRPOConfig has no such option)" in caplog.messages


def test_the_trainer_gets_the_models_own_pad_token(tiny_model_dir, tmp_path) -> None:
    from transformers import TrainerCallback

    seen = []

    class Seen(TrainerCallback):
        def on_train_begin(self, args, state, control, processing_class=None, **kwargs):
            seen.append(processing_class.pad_token)

    exp, cfg = parse_config(
        _argv(tiny_model_dir, tmp_path / "run", "--eval_before", "false", "--eval_after", "false")
    )
    train.run(exp, cfg, callbacks=[Seen()])
    assert seen == ["<|endoftext|>"]  # the tiny tokenizer's pad, not replaced by its eos


def test_a_run_on_one_device_evaluates_the_model_in_memory(
    tiny_model_dir, tmp_path, monkeypatch, evaluations
) -> None:
    """With save_model the weights are on disk too, but the model in memory is evaluated: no second copy loads."""
    real = train.load_for_eval

    def load_for_eval(path, cfg):
        assert path == str(tiny_model_dir), f"loaded {path} for evaluation"
        return real(path, cfg)

    monkeypatch.setattr(train, "load_for_eval", load_for_eval)
    out = tmp_path / "run"
    _run(_argv(tiny_model_dir, out, "--save_model", "true"))
    assert evaluations == ["eval_before.json", "eval_after.json"] and (out / "model.safetensors").is_file()
