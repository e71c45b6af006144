"""run.json's content (``experiments.run.record``) on a stand-in trainer, no model: each figure from its own
source, the tokens counted after a resume from the checkpoint on, and every fallback where a source is missing.

The end-to-end runs (test_cli, test_resume) check that a real run writes these keys; here each value is checked
exactly, with numbers chosen so that a figure taken from the wrong source, or combined the wrong way, differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from experiments.run import record as record_module
from experiments.run.argv import parse_config
from experiments.run.record import _tokens_at, run_budget_record, run_record


class _Accelerator:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def unwrap_model(self, wrapped: Any) -> torch.nn.Module:
        return wrapped.inner


def _trainer(history: list[dict[str, Any]], *, seen: int = 0, step: int = 6) -> SimpleNamespace:
    inner = torch.nn.Linear(3, 2)  # 3 * 2 + 2 = 8 parameters
    wrapped = SimpleNamespace(inner=inner)  # what the trainer holds is not what counts: the unwrapped model
    return SimpleNamespace(
        state=SimpleNamespace(log_history=history, num_input_tokens_seen=seen, global_step=step),
        accelerator=_Accelerator(inner),
        model=wrapped,
    )


def _configs(tmp_path: Path, *extra: str) -> tuple[Any, Any]:
    return parse_config(
        [
            "--method",
            "grpo",
            "--model",
            "tiny",
            "--output_dir",
            str(tmp_path / "out"),
            "--seed",
            "13",
            *(extra or ("--max_steps", "6")),
        ],
        device_free=True,
    )


def _checkpoint(tmp_path: Path, history: list[dict[str, Any]]) -> str:
    folder = tmp_path / "out" / "checkpoint-4"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return str(folder)


def _record(tmp_path: Path, trainer: Any, **kw: Any) -> dict[str, Any]:
    exp, cfg = kw.pop("configs", None) or _configs(tmp_path)
    args = {
        "train_output": SimpleNamespace(metrics={"train_runtime": 7.5}),
        "model_path": str(tmp_path / "model"),
        "resume_from": None,
        "t_start": 1000.0,
        "train_seconds": 4.0,
        "before": None,
        "after": None,
        "num_processes": 3,
    }
    args.update(kw)
    return run_record(exp, cfg, trainer, **args)


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_module.time, "time", lambda: 1012.5)


def test_each_figure_comes_from_its_own_source(tmp_path: Path) -> None:
    history = [{"num_tokens": 100.0, "loss": 1.0}, {"num_tokens": 300.0}, {"loss": 0.5}]
    before = {"timing": {"tokens_per_s": 11.0}}
    after = {"timing": {"tokens_per_s": 22.0}}
    exp, cfg = _configs(tmp_path)
    got = _record(tmp_path, _trainer(history, seen=9999), configs=(exp, cfg), before=before, after=after)
    assert got["method"] == "grpo" and got["seed"] == 13 and got["model"] == "tiny"
    assert got["model_path"] == str(tmp_path / "model") and got["model_source"] is None
    assert got["model_parameters"] == 8
    assert got["output_dir"] == str(tmp_path / "out")
    assert got["config"]["seed"] == 13 and got["config"]["method"] == "grpo"
    assert got["global_step"] == 6 and got["num_processes"] == 3 and got["resumed_from"] is None
    assert got["wall_time_s"] == 12.5  # the fake clock's now minus t_start
    assert got["train_time_s"] == 4.0 and got["train_runtime_s"] == 7.5
    # The last logged num_tokens, even when a later row has no such key, and ahead of the trainer's own counter.
    assert got["num_tokens"] == 300.0
    assert got["tokens_per_s"] == 75.0
    assert got["eval_tokens_per_s"] == {"before": 11.0, "after": 22.0}
    assert got["versions"]["torch"] == torch.__version__
    assert got["torch_threads"] == torch.get_num_threads()


def test_a_built_model_folder_records_what_it_was_built_from(tmp_path: Path) -> None:
    from experiments.inputs.models import BUILD_INFO

    model = tmp_path / "model"
    model.mkdir()
    (model / BUILD_INFO).write_text(json.dumps({"gguf_sha256": "ab"}))
    got = _record(tmp_path, _trainer([{"num_tokens": 8.0}]), model_path=str(model))
    assert got["model_source"] == {"gguf_sha256": "ab"}


def test_without_a_logged_count_the_trainers_counter_then_zero(tmp_path: Path) -> None:
    got = _record(tmp_path, _trainer([{"loss": 1.0}], seen=40))
    assert got["num_tokens"] == 40 and got["tokens_per_s"] == 10.0
    got = _record(tmp_path, _trainer([], seen=0))
    assert got["num_tokens"] == 0 and got["tokens_per_s"] == 0.0


def test_no_rate_without_training_time(tmp_path: Path) -> None:
    for seconds in (0.0, -1.0):  # a clock stepped back gives no rate rather than a negative one
        got = _record(tmp_path, _trainer([{"num_tokens": 8.0}]), train_seconds=seconds)
        assert got["tokens_per_s"] is None
    # Under a second, and a rate that is no whole number.
    got = _record(tmp_path, _trainer([{"num_tokens": 7.0}]), train_seconds=0.5)
    assert got["tokens_per_s"] == 14.0
    got = _record(tmp_path, _trainer([{"num_tokens": 7.0}]), train_seconds=2.0)
    assert got["tokens_per_s"] == 3.5
    # A run resumed at its end trains nothing: TRL's TrainOutput then has no metrics.
    got = _record(tmp_path, _trainer([{"num_tokens": 8.0}]), train_output=SimpleNamespace(metrics=None))
    assert got["train_runtime_s"] is None


def test_a_resumed_run_counts_its_rate_from_the_checkpoint_on(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, [{"num_tokens": 50.0}, {"num_tokens": 120.0}, {"loss": 2.0}])
    got = _record(tmp_path, _trainer([{"num_tokens": 120.0}, {"num_tokens": 320.0}]), resume_from=checkpoint)
    assert got["resumed_from"] == checkpoint
    assert got["num_tokens"] == 320.0  # counted from the start of training, as TRL logs it
    assert got["tokens_per_s"] == 50.0  # (320 - 120) tokens in this attempt's 4 s


@pytest.mark.parametrize(
    "state", [None, "not json", json.dumps({"global_step": 4}), json.dumps({"log_history": []})]
)
def test_a_checkpoint_without_a_count_counts_as_zero(tmp_path: Path, state: str | None) -> None:
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    if state is not None:
        (folder / "trainer_state.json").write_text(state)
    assert _tokens_at(str(folder)) == 0


def test_eval_rates_are_none_where_an_evaluation_or_its_timing_is_missing(tmp_path: Path) -> None:
    got = _record(tmp_path, _trainer([]), before={"metrics": {}}, after=None)
    assert got["eval_tokens_per_s"] == {"before": None, "after": None}
    got = _record(tmp_path, _trainer([]), before=None, after={"timing": None})
    assert got["eval_tokens_per_s"] == {"before": None, "after": None}
    got = _record(tmp_path, _trainer([]), before=None, after={"timing": {"tokens_per_s": 3.0}})
    assert got["eval_tokens_per_s"] == {"before": None, "after": 3.0}


@pytest.mark.parametrize(
    ("use_cpu", "cuda", "device"), [(True, True, "cpu"), (False, False, "cpu"), (False, True, "cuda")]
)
def test_the_device_is_the_cpu_when_asked_or_when_there_is_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_cpu: bool, cuda: bool, device: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    cfg = SimpleNamespace(seed=1, output_dir="o", use_cpu=use_cpu, to_dict=lambda: {})
    exp, _ = _configs(tmp_path)
    got = _record(tmp_path, _trainer([]), configs=(exp, cfg))
    assert got["device"] == device
    # A config without use_cpu (not a TrainingArguments) trains where torch finds a GPU.
    del cfg.use_cpu
    assert _record(tmp_path, _trainer([]), configs=(exp, cfg))["device"] == ("cuda" if cuda else "cpu")


class _Samples:
    def totals(self) -> dict[str, Any]:
        return {"fresh_prompts": 5}


@pytest.mark.parametrize(("budget_prompts", "source"), [("0", "max_steps"), ("32", "budget_prompts")])
def test_the_budget_record_names_where_max_steps_came_from(
    tmp_path: Path, budget_prompts: str, source: str
) -> None:
    steps = ("--max_steps", "6") if budget_prompts == "0" else ()
    exp, cfg = _configs(tmp_path, "--budget_prompts", budget_prompts, "--beta", "0.25", *steps)
    exp.not_applicable["cliprange_value"] = "grpo has no critic"
    got = run_budget_record(exp, cfg, _trainer([], step=5), _Samples(), 2, {"eval": {"top_p": 0.9}})
    assert got["budget"]["max_steps_from"] == source
    assert got["budget"]["optimizer_steps"] == 5 and got["budget"]["num_processes"] == 2
    assert got["budget"]["fresh_prompts"] == 5
    assert got["method_hparams"]["beta"] == 0.25
    assert got["sampling"] == {"eval": {"top_p": 0.9}}
    assert got["not_applicable"] == {"cliprange_value": "grpo has no critic"}
    # A copy: the record does not change when the config's dict does later.
    exp.not_applicable["other"] = "x"
    assert "other" not in got["not_applicable"]


def test_run_json_names_the_scorer_its_evaluations_ran_with(tmp_path: Path) -> None:
    """The extraction rules' and the sandbox's versions, and the commit, as every evaluation record stamps them."""
    from experiments.evaluation.scorer import scorer_stamp
    from rewards.extraction import EXTRACTION_VERSION
    from sandbox import SANDBOX_VERSION

    got = _record(tmp_path, _trainer([]))
    assert got["scorer"] == scorer_stamp()
    assert (got["scorer"]["extraction"], got["scorer"]["sandbox"]) == (EXTRACTION_VERSION, SANDBOX_VERSION)
