"""PassAtKCallback: evaluation schedule, log_history entries, best-checkpoint saving, and a real GRPO run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import TrainerControl, TrainerState, TrainingArguments

import experiments.evaluation.evaluate as ev
from experiments.evaluation.evaluate import PassAtKCallback
from experiments.evaluation.stats import Estimate, EvalResult


def _result(value: float) -> EvalResult:
    est = Estimate(value, value, value)
    return EvalResult({"pass@1": est}, est, est, 1, 1, [1], 10, 1.0, 0.1, [])


@pytest.fixture
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def test_schedule_logging_and_best_checkpoint(tiny, tmp_path: Path, monkeypatch) -> None:
    model, tok = tiny
    scripted = iter([0.2, 0.5, 0.3, 0.4])
    seen_kwargs = []

    def fake_evaluate(m, t, dataset, **kwargs):
        assert m is model and t is tok and dataset == ["rows"]
        seen_kwargs.append(kwargs)
        return _result(next(scripted))

    monkeypatch.setattr(ev, "evaluate_model", fake_evaluate)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True)
    state = TrainerState(max_steps=5)
    control = TrainerControl()
    cb = PassAtKCallback(["rows"], tok, every_n_steps=2, n_samples=3)

    cb.on_train_begin(args, state, control, model=model)
    for step in range(1, 6):
        state.global_step = step
        cb.on_step_end(args, state, control, model=model, processing_class=None)
    cb.on_train_end(args, state, control, model=model)  # step 5 was evaluated already: no second eval

    evals = [e for e in state.log_history if "eval/pass@1" in e]
    assert [e["step"] for e in evals] == [2, 4, 5]  # every 2 steps plus the final step
    assert [e["eval/pass@1"] for e in evals] == [0.2, 0.5, 0.3]
    assert set(evals[0]) == {"step", "eval/pass@1", "eval/greedy_pass@1", "eval/avg_reward", "eval_ci"}
    # each metric's interval, for the report's eval curve
    assert evals[1]["eval_ci"] == {
        "pass@1": [0.5, 0.5],
        "greedy_pass@1": [0.5, 0.5],
        "avg_reward": [0.5, 0.5],
    }
    assert seen_kwargs[0] == {"progress": False, "n_samples": 3}
    assert (cb.best_step, cb.best_metric) == (4, 0.5)

    best = tmp_path / "run" / "best"
    meta = json.loads((best / "eval.json").read_text())
    assert (meta["step"], meta["metric"], meta["value"]) == (4, "pass@1", 0.5)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reloaded = AutoModelForCausalLM.from_pretrained(best)
    assert sum(p.numel() for p in reloaded.parameters()) == sum(p.numel() for p in model.parameters())
    assert AutoTokenizer.from_pretrained(best).eos_token == tok.eos_token


def test_early_stop_evaluates_at_train_end_and_tokenizer_fallback(tiny, tmp_path: Path, monkeypatch) -> None:
    model, tok = tiny
    used = []
    monkeypatch.setattr(ev, "evaluate_model", lambda m, t, d, **kw: used.append(t) or _result(0.1))
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True)
    state = TrainerState(max_steps=100)
    cb = PassAtKCallback(["rows"], every_n_steps=10, output_dir=tmp_path / "elsewhere", metric="avg_reward")
    for step in (1, 2, 3):
        state.global_step = step
        cb.on_step_end(args, state, TrainerControl(), model=model, processing_class=tok)
    assert not any("eval/pass@1" in e for e in state.log_history)
    cb.on_train_end(args, state, TrainerControl(), model=model, processing_class=tok)
    assert [e["step"] for e in state.log_history] == [3]
    assert used == [tok]  # no tokenizer given: the trainer's processing_class is used
    assert (tmp_path / "elsewhere" / "best" / "eval.json").is_file()
    assert cb.best_step == 3


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="every_n_steps"):
        PassAtKCallback(["rows"], 10)  # the old positional form (dataset, every_n_steps)
    with pytest.raises(ValueError):
        PassAtKCallback(["rows"], every_n_steps=0)


def test_unknown_metric_is_reported(tiny, tmp_path: Path, monkeypatch) -> None:
    model, tok = tiny
    monkeypatch.setattr(ev, "evaluate_model", lambda *a, **k: _result(0.1))
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    cb = PassAtKCallback(["rows"], tok, every_n_steps=1, metric="pass@10")
    with pytest.raises(KeyError, match="pass@10"):
        cb.on_step_end(args, TrainerState(global_step=1, max_steps=2), TrainerControl(), model=model)


def test_real_grpo_run_logs_eval_metrics(tiny_model_dir, humaneval, tmp_path: Path) -> None:
    """Two GRPO steps on the tiny model: eval/* lands in trainer_state.json and in a TensorBoard event file."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import rewards
    from experiments.inputs.data import to_rl_rows

    rows = to_rl_rows(humaneval.select(range(4)))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    out = tmp_path / "grpo"
    cb = PassAtKCallback(
        rows.select(range(2)), tok, every_n_steps=1, n_samples=2, ks=(1, 2), max_new_tokens=8
    )
    config = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        save_strategy="no",
        report_to=["tensorboard"],
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[rewards.unit_test_reward],
        args=config,
        train_dataset=rows,
        processing_class=tok,
        callbacks=[cb],
    )
    trainer.train()
    trainer.save_state()

    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    evals = [e for e in history if "eval/pass@1" in e]
    assert [e["step"] for e in evals] == [1, 2]
    assert {"eval/pass@2", "eval/greedy_pass@1", "eval/avg_reward"} <= set(evals[0])
    assert any("reward" in e for e in history)  # the trainer's own logging is untouched
    best = max(e["eval/pass@1"] for e in evals)
    assert cb.best_metric == best and cb.best_step == next(
        e["step"] for e in evals if e["eval/pass@1"] == best
    )
    assert (out / "best" / "config.json").is_file() and (out / "best" / "eval.json").is_file()
    events = list((out / "runs" / "pass_at_k").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file for the eval scalars"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "runs" / "pass_at_k"))
    acc.Reload()
    assert [s.step for s in acc.Scalars("eval/pass@1")] == [1, 2]


def test_peft_model_saves_only_the_adapter(tiny, tmp_path: Path, monkeypatch) -> None:
    from peft import LoraConfig, get_peft_model

    model, tok = tiny
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    monkeypatch.setattr(ev, "evaluate_model", lambda *a, **k: _result(0.3))
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    cb = PassAtKCallback(["rows"], tok, every_n_steps=1)
    cb.on_step_end(args, TrainerState(global_step=1, max_steps=3), TrainerControl(), model=peft_model)
    files = {p.name for p in (tmp_path / "best").iterdir()}
    assert "adapter_config.json" in files and "config.json" not in files


def test_sharded_runs_are_refused_by_either_sign_of_sharding(tiny) -> None:
    from types import SimpleNamespace

    model, _ = tiny

    class FullyShardedDataParallel(torch.nn.Module):  # what FSDP's wrapper is called
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

    plain = SimpleNamespace(fsdp="")
    assert ev._is_sharded(SimpleNamespace(fsdp="full_shard"), model)
    assert ev._is_sharded(plain, FullyShardedDataParallel())
    assert not ev._is_sharded(plain, model)
    callback = PassAtKCallback([], every_n_steps=1)
    with pytest.raises(NotImplementedError, match="FSDP / ZeRO-3"):
        callback.on_train_begin(SimpleNamespace(fsdp="full_shard"), None, None, model=model)
    callback.on_train_begin(plain, None, None, model=model)  # unsharded: nothing to refuse


def test_the_default_schedule_is_every_50_steps(monkeypatch) -> None:
    from types import SimpleNamespace

    callback = PassAtKCallback([])
    steps = []
    monkeypatch.setattr(callback, "_evaluate", lambda args, state, **kw: steps.append(state.global_step))
    for step in range(1, 121):
        callback.on_step_end(None, SimpleNamespace(global_step=step, max_steps=0), None)
    assert steps == [50, 100]


def test_the_best_model_is_saved_beside_a_tokenizer_that_cannot_save(tmp_path: Path) -> None:
    from types import SimpleNamespace

    class Model:
        def save_pretrained(self, path) -> None:
            (Path(path) / "weights").write_text("w")

    callback = PassAtKCallback([], output_dir=tmp_path, every_n_steps=1)
    callback.best_metric = 0.5
    callback._save_best(SimpleNamespace(output_dir=str(tmp_path)), Model(), object(), _result(0.5), 3)
    meta = json.loads((tmp_path / "best" / "eval.json").read_text())
    assert (tmp_path / "best" / "weights").exists() and (meta["step"], meta["value"]) == (3, 0.5)


def test_write_json_writes_sorted_indented_json_and_leaves_no_temporary(tmp_path: Path) -> None:
    data = {"b": 1, "a": {"z": [1, 2], "y": Path("p")}}
    out = tmp_path / "eval_after.json"
    ev.write_json(out, data)
    assert out.read_text() == json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    assert out.read_text().index('"a"') < out.read_text().index('"b"')
    assert [p.name for p in tmp_path.iterdir()] == ["eval_after.json"]


def test_zero3_parameters_non_main_ranks_and_a_missing_tensorboard(tiny, tmp_path: Path, monkeypatch) -> None:
    import sys
    from types import SimpleNamespace

    model, _ = tiny

    class Zero3(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.weight.ds_id = 0  # what DeepSpeed ZeRO-3 marks a partitioned parameter with

    assert ev._is_sharded(SimpleNamespace(fsdp=""), Zero3()) and not ev._is_sharded(
        SimpleNamespace(fsdp=""), model
    )
    barriers = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: barriers.append(1))
    callback = PassAtKCallback([], every_n_steps=1)
    callback._evaluate(None, SimpleNamespace(global_step=1, is_world_process_zero=False))
    assert barriers == [1] and callback.history == []  # another rank waits for the main one's evaluation
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    args = SimpleNamespace(report_to=["tensorboard"], output_dir=str(tmp_path))
    callback._log_tensorboard(args, {"eval/pass@1": 0.5}, 1)
    assert callback._tb_writer is None
