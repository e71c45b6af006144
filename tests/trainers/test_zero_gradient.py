"""SkipZeroGradientSteps (experiments.trainers.zero_gradient): a step without gradient leaves weights and optimizer.

- on a toy model, AdamW moves the weights on a zero-gradient step by the momentum the module docstring states, and
  with the callback neither the weights nor the optimizer's state change; a step with any gradient is taken;
- GRPO on the tiny model, with a reward that varies in the first generation batch only: without the callback the
  later steps move the policy, with it they do not, and the log says which steps were skipped;
- `passk train --skip_zero_gradient_steps true` attaches it (a model that never passes ends where it started), and
  the runner refuses the set-ups it cannot serve in one line before loading a model.
"""

from __future__ import annotations

import copy
import json
import math
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType
from transformers import TrainerCallback, TrainerControl, TrainerState

from experiments.errors import ConfigError
from experiments.trainers.zero_gradient import (
    ZERO_GRADIENT_METRIC,
    SkipZeroGradientSteps,
    gradient_is_zero,
    unsupported_setup,
)


def fake_trainer(distributed=DistributedType.NO, fp16=False, max_grad_norm=1.0):
    return SimpleNamespace(
        accelerator=SimpleNamespace(distributed_type=distributed),
        args=SimpleNamespace(fp16=fp16, max_grad_norm=max_grad_norm),
        _metrics={"train": defaultdict(list)},
    )


def toy_step(model, optimizer, grads, callback=None):
    """One optimizer step with the given gradients, the callback called where transformers' Trainer calls it."""
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g.clone()
    if callback is not None:
        callback.on_pre_optimizer_step(None, TrainerState(), TrainerControl(), optimizer=optimizer)
    optimizer.step()
    optimizer.zero_grad()


def toy():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)


def test_adamw_steps_on_momentum_after_a_real_gradient_and_the_callback_stops_it():
    """The module docstring's figure: right after the first real step, a zero-gradient AdamW step moves each weight
    by lr * (b1 / (1 + b1)) / sqrt(b2 / (1 + b2)), about 0.67 lr. With the callback: no change at all."""
    model, opt = toy()
    real = [torch.full_like(p, 0.5) for p in model.parameters()]
    zero = [torch.zeros_like(p) for p in model.parameters()]
    toy_step(model, opt, real)
    before = [p.detach().clone() for p in model.parameters()]
    state_before = copy.deepcopy(opt.state_dict())

    drifted = copy.deepcopy(model)
    drift_opt = torch.optim.AdamW(drifted.parameters(), lr=0.1, weight_decay=0.0)
    drift_opt.load_state_dict(copy.deepcopy(state_before))
    toy_step(drifted, drift_opt, zero)
    b1, b2 = 0.9, 0.999
    expected = 0.1 * (b1 / (1 + b1)) / math.sqrt(b2 / (1 + b2))
    moved = [(b - p.detach()).abs() for b, p in zip(before, drifted.parameters(), strict=True)]
    assert all(torch.allclose(m, torch.full_like(m, expected), rtol=1e-4) for m in moved)
    assert 0.66 < expected / 0.1 < 0.68

    trainer = fake_trainer()
    callback = SkipZeroGradientSteps(trainer)
    toy_step(model, opt, zero, callback)
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))
    after = opt.state_dict()
    for key, saved in state_before["state"].items():
        for name, value in saved.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(after["state"][key][name])), name
    assert trainer._metrics["train"][ZERO_GRADIENT_METRIC] == [1.0]
    assert callback.skipped_steps == [1]


def test_a_step_with_any_gradient_is_taken_and_logged_as_taken():
    model, opt = toy()
    trainer = fake_trainer()
    callback = SkipZeroGradientSteps(trainer)
    weight, bias = list(model.parameters())
    grads = [torch.zeros_like(weight), torch.zeros_like(bias)]
    grads[1][0] = 1e-6  # one small entry of one tensor is a gradient
    before = bias.detach().clone()
    toy_step(model, opt, grads, callback)
    assert not torch.equal(before, bias.detach())
    assert all(int(opt.state[p]["step"]) == 1 for p in (weight, bias))  # every parameter took the step
    assert trainer._metrics["train"][ZERO_GRADIENT_METRIC] == [0.0]
    assert callback.skipped_steps == []


def test_nan_and_inf_are_not_zero_gradients():
    model, opt = toy()
    for bad in (math.nan, math.inf):
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        next(model.parameters()).grad[0, 0] = bad
        assert not gradient_is_zero(opt)
    for p in model.parameters():
        p.grad = None
    assert gradient_is_zero(opt)


@pytest.mark.parametrize(
    "setup, words",
    [
        ({"distributed": DistributedType.DEEPSPEED}, "DEEPSPEED"),
        ({"distributed": DistributedType.FSDP}, "FSDP"),
        ({"fp16": True, "max_grad_norm": 0.0}, "max_grad_norm"),
    ],
)
def test_set_ups_it_cannot_serve_are_refused_in_one_line(setup, words):
    with pytest.raises(ValueError) as err:
        SkipZeroGradientSteps(fake_trainer(**setup))
    message = str(err.value)
    assert message.startswith("skip_zero_gradient_steps: ") and words in message and "\n" not in message
    assert unsupported_setup("MULTI_GPU", False, 1.0) is None
    assert unsupported_setup(DistributedType.NO, True, 1.0) is None


def first_batch_varies():
    """A reward that varies within each group in the first generation batch and is 0 for all afterwards."""
    calls = []

    def reward(completions: list[str], **kwargs) -> list[float]:
        calls.append(len(completions))
        if len(calls) == 1:
            return [float(i % 2) for i in range(len(completions))]
        return [0.0] * len(completions)

    return reward


class WeightsPerStep(TrainerCallback):
    def __init__(self, model):
        self.model, self.seen = model, []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append({k: v.detach().clone() for k, v in self.model.state_dict().items()})


def _train_three_steps(tiny_model_dir, tmp_path, tiny_train_args, skip: bool):
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from experiments.learnable.tasks import train_rows

    args = GRPOConfig(output_dir=str(tmp_path / f"skip{skip}"), **(tiny_train_args | {"max_steps": 3}))
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[first_batch_varies()],
        args=args,
        train_dataset=train_rows(32),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    weights = WeightsPerStep(trainer.model)
    trainer.add_callback(weights)
    if skip:
        trainer.add_callback(SkipZeroGradientSteps(trainer))
    trainer.train()
    logged = [h.get(ZERO_GRADIENT_METRIC) for h in trainer.state.log_history if "loss" in h]
    return weights.seen, logged


def _same(a, b) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_grpo_steps_without_reward_variance_move_the_policy_only_without_the_callback(
    tiny_model_dir, tmp_path, tiny_train_args
):
    assert tiny_train_args["per_device_train_batch_size"] == 8 and tiny_train_args["num_generations"] == 4
    drifting, logged = _train_three_steps(tiny_model_dir, tmp_path, tiny_train_args, skip=False)
    assert logged == [None, None, None]
    assert not _same(drifting[0], drifting[1]) and not _same(drifting[1], drifting[2])  # momentum alone

    kept, logged = _train_three_steps(tiny_model_dir, tmp_path, tiny_train_args, skip=True)
    assert logged == [0.0, 1.0, 1.0]
    assert _same(kept[0], drifting[0])  # the first step, with a gradient, is the same step
    assert _same(kept[0], kept[1]) and _same(kept[1], kept[2])


def test_the_runner_skips_every_step_of_a_model_that_never_passes(
    tiny_model_dir, tmp_path, passk_cache, monkeypatch
):
    """`passk train cpu --skip_zero_gradient_steps true`: the random tiny model passes no test, so no step has a
    gradient (vanilla_pg: A = R = 0); each step's log row says it was skipped and the saved weights are the
    starting model's, though AdamW's weight decay would have shrunk them on every step taken."""
    from safetensors.torch import load_file

    from experiments.run import train

    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))
    out = tmp_path / "run"
    config = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "cpu.yaml"
    argv = [
        str(config),
        "--method",
        "vanilla_pg",
        "--model",
        str(tiny_model_dir),
        "--budget_prompts",
        "2",
        "--eval_before",
        "false",
        "--eval_after",
        "false",
        "--report_to",
        "none",
        "--save_steps",
        "100",
        "--weight_decay",  # AdamW would decay the weights even on a zero gradient
        "0.1",
        "--learning_rate",
        "0.01",
        "--skip_zero_gradient_steps",
        "true",
        "--output_dir",
        str(out),
    ]
    assert train.main(argv) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    rows = [h for h in history if "loss" in h]
    assert len(rows) == 2 and [h[ZERO_GRADIENT_METRIC] for h in rows] == [1.0, 1.0]
    assert all(h["reward"] == 0.0 for h in rows)
    start, trained = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(start) <= set(trained) and all(torch.equal(start[k], trained[k]) for k in start)


def test_the_runners_validation_refuses_deepspeed_before_any_model_is_loaded(monkeypatch):
    from experiments.run.config import ExperimentArgs
    from experiments.run.validation import validate
    from experiments.trainers import build_config

    exp = ExperimentArgs(method="grpo", skip_zero_gradient_steps=True)
    cfg = build_config("grpo", output_dir="unused", use_cpu=True, bf16=False, activation_checkpointing=False)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ConfigError, match=r"^skip_zero_gradient_steps: not supported under DEEPSPEED"):
        validate(exp, cfg, world_size=1)
