"""A resume continues the run as it was set (experiments.run.settings): a changed setting that defines the run is
refused in one line naming it and both values, before anything loads; logging, evaluation cadence, threads, saving
and the budget may change, and run.json records each change with the step it took effect at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.run import train
from experiments.run.argv import parse_config
from experiments.run.config import config_path
from experiments.run.settings import RESUME_MAY_CHANGE, RUN_CONFIG, resume_changes, write_run_config


def _argv(out: Path, *extra: str, model: str = "tiny") -> list[str]:
    return [
        str(config_path("cpu")),
        "--method",
        "reinforce",
        "--model",
        model,
        "--budget_prompts",
        "0",
        "--max_steps",
        "2",
        "--save_steps",
        "1",
        "--n_eval",
        "0",
        "--report_to",
        "none",
        "--output_dir",
        str(out),
        *extra,
    ]


def _started(out: Path, *extra: str, model: str = "tiny") -> Path:
    """A run started with `extra` and stopped at checkpoint-1 (its run_config.json and a checkpoint, no model)."""
    out.mkdir(parents=True)
    exp, cfg = parse_config(_argv(out, *extra, model=model), device_free=True)
    write_run_config(out, exp, cfg, [], None)
    checkpoint = out / "checkpoint-1"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    return checkpoint


def test_a_resume_that_changes_the_learning_rate_is_refused_before_anything_loads(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _started(out, model="/nonexistent-model")
    exp, cfg = parse_config(
        _argv(out, "--resume", "true", "--learning_rate", "1e-3", model="/nonexistent-model")
    )
    with pytest.raises(ConfigError) as refused:
        train.run(exp, cfg)  # the model does not exist: the check comes first
    said = str(refused.value)
    assert said == (
        f"learning_rate: the run at {out} was started with 1e-06, this resume gives 0.001; a resume continues the "
        "run as it was set (only logging, evaluation cadence, threads, saving and the budget may change): drop the "
        "change, or pass --overwrite to start a new run"
    )
    assert "\n" not in said


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("seed", "7"),
        ("method", "grpo"),
        ("dataset", "learnable"),
        ("num_generations", "4"),
        ("temperature", "1.0"),
    ],
)
def test_a_setting_that_defines_the_run_cannot_change_at_a_resume(
    tmp_path: Path, flag: str, value: str
) -> None:
    checkpoint = _started(tmp_path / "run")
    extra = ("--per_device_train_batch_size", "4") if flag == "num_generations" else ()
    argv = _argv(tmp_path / "run", "--resume", "true", f"--{flag}", value, *extra)
    if flag == "method":  # read from its first place
        argv[argv.index("reinforce")] = value
    exp, cfg = parse_config(argv, device_free=True)
    with pytest.raises(ConfigError, match=rf"^{flag}: the run at .* was started with "):
        resume_changes(exp, cfg, checkpoint, 1)


def test_several_changes_name_the_first_and_count_the_others(tmp_path: Path) -> None:
    checkpoint = _started(tmp_path / "run")
    argv = _argv(
        tmp_path / "run", "--resume", "true", "--learning_rate", "1e-3", "--seed", "3", "--top_p", "0.5"
    )
    exp, cfg = parse_config(argv, device_free=True)
    with pytest.raises(ConfigError, match=r"^learning_rate: .* gives 0\.001 \(and 2 more: seed, top_p\); "):
        resume_changes(exp, cfg, checkpoint, 1)


def test_logging_evaluation_cadence_threads_and_the_budget_may_change_and_are_recorded_at_their_step(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    checkpoint = _started(out)
    argv = _argv(out, "--resume", "true", "--logging_steps", "5", "--num_threads", "2", "--max_steps", "4")
    exp, cfg = parse_config([*argv, "--eval_every_n_steps", "2", "--save_steps", "2"], device_free=True)
    changes = resume_changes(exp, cfg, checkpoint, 1)
    assert {c["key"]: (c["step"], c["from"], c["to"]) for c in changes} == {
        "logging_steps": (1, 1, 5),
        "num_threads": (1, 1, 2),
        "max_steps": (1, 2, 4),
        "eval_every_n_steps": (1, 0, 2),
        "save_steps": (1, 1, 2),
    }
    # A later resume keeps them and compares with the settings as the last attempt ran.
    write_run_config(out, exp, cfg, changes, str(checkpoint))
    assert json.loads((out / RUN_CONFIG).read_text())["config"]["logging_steps"] == 1  # as started
    later = out / "checkpoint-3"
    later.mkdir()
    assert resume_changes(exp, cfg, later, 3) == changes
    exp, cfg = parse_config([*argv[:-2], "--max_steps", "6"], device_free=True)
    assert resume_changes(exp, cfg, later, 3)[-3:] == [
        {"step": 3, "key": "eval_every_n_steps", "from": 2, "to": 0},
        {"step": 3, "key": "max_steps", "from": 4, "to": 6},
        {"step": 3, "key": "save_steps", "from": 2, "to": 1},
    ]


def test_a_run_saved_before_run_config_json_is_not_checked(tmp_path: Path) -> None:
    out = tmp_path / "run"
    checkpoint = _started(out)
    (out / RUN_CONFIG).unlink()
    exp, cfg = parse_config(_argv(out, "--resume", "true", "--learning_rate", "1e-3"), device_free=True)
    assert resume_changes(exp, cfg, checkpoint, 1) == []


def test_what_a_resume_may_change_cannot_change_what_is_trained() -> None:
    defining = {
        "learning_rate",
        "seed",
        "method",
        "model",
        "dataset",
        "num_generations",
        "beta",
        "temperature",
    }
    assert not defining & RESUME_MAY_CHANGE
    assert {"logging_steps", "report_to", "eval_every_n_steps", "num_threads"} <= RESUME_MAY_CHANGE


def test_a_real_resume_records_its_changes_in_run_json_and_refuses_a_new_learning_rate(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    train.run(*parse_config(_argv(out, model=str(tiny_model_dir))))
    assert json.loads((out / "run.json").read_text())["config_changes"] == []
    resume = _argv(out, "--resume", "true", "--max_steps", "3", model=str(tiny_model_dir))
    with pytest.raises(
        ConfigError, match=r"^learning_rate: .* started with 1e-06, this resume gives 0\.001;"
    ):
        train.run(*parse_config([*resume, "--learning_rate", "1e-3"]))
    train.run(*parse_config([*resume, "--logging_steps", "2"]))
    record = json.loads((out / "run.json").read_text())
    assert record["global_step"] == 3 and record["config"]["learning_rate"] == 1e-6
    assert record["config_changes"] == [
        {"step": 2, "key": "logging_steps", "from": 1, "to": 2},
        {"step": 2, "key": "max_steps", "from": 2, "to": 3},
    ]
