"""Weights that can move: full fine-tuning keeps float32 master weights (bf16 only computes), and a config that
would step bfloat16 weights by less than half their spacing is refused before anything loads, in one line naming
the fix (`experiments.inputs.models.low_precision_step_problem`, checked by experiments.run.validation).

The step itself is checked on the tiny model (its weights are N(0, 0.02), as Qwen2's): one AdamW step at the seed's
learning rate, 1e-6, moves the float32 weights the trainer loads from `seed.yaml`'s settings, and leaves nearly all
bfloat16 ones where they were (the seed's own setting).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from datasets import Dataset
from transformers import AutoTokenizer

from experiments.errors import ConfigError
from experiments.inputs.models import low_precision_step_problem
from experiments.run.argv import parse_config
from experiments.run.config import config_path

SEED_YAML = config_path("seed")


def test_pure_bfloat16_weights_at_the_seeds_learning_rate_are_refused_with_the_fix() -> None:
    message = low_precision_step_problem({"dtype": "bfloat16"}, 1e-6, use_peft=False)
    assert message is not None and "\n" not in message
    assert message.startswith("model_init_kwargs: dtype bfloat16") and "drop the dtype" in message
    assert "float32 master weights" in message and "use_peft true" in message
    assert low_precision_step_problem({"dtype": torch.float16}, 1e-6, use_peft=False) is not None
    # What moves: float32 weights, LoRA's float32 adapters, or a step above half a bfloat16 spacing near 0.02.
    assert low_precision_step_problem({"dtype": "float32"}, 1e-6, use_peft=False) is None
    assert low_precision_step_problem(None, 1e-6, use_peft=False) is None
    assert low_precision_step_problem({"dtype": "bfloat16"}, 1e-6, use_peft=True) is None
    assert low_precision_step_problem({"dtype": "bfloat16"}, 1e-4, use_peft=False) is None


def test_a_config_that_would_train_pure_bfloat16_weights_fails_before_loading(tmp_path: Path) -> None:
    text = (
        "method: grpo\nmodel: tiny\nuse_cpu: true\nbf16: false\nactivation_checkpointing: false\n"
        "learning_rate: 1.0e-6\nmodel_init_kwargs: {dtype: bfloat16}\n"
    )
    path = tmp_path / "bf16.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=r"^model_init_kwargs: dtype bfloat16 trains bfloat16 weights"
    ) as caught:
        parse_config([str(path)])
    assert "\n" not in str(caught.value)
    parse_config([str(path), "--use_peft", "true"])  # LoRA: the adapters are float32


def test_seed_yaml_keeps_float32_master_weights_and_computes_in_bf16() -> None:
    raw = yaml.safe_load(SEED_YAML.read_text())
    assert raw["model_init_kwargs"] == {"dtype": "float32"} and raw["bf16"] is True
    assert raw["learning_rate"] == 1e-6
    for name in ("seed", "throughput"):  # every shipped GPU file parses under the guard
        _, cfg = parse_config([str(config_path(name)), "--method", "reinforce"], device_free=True)
        assert cfg.model_init_kwargs["dtype"] == "float32"


def _one_step(model_dir: Path, tmp_path: Path, dtype: str) -> tuple[float, torch.dtype]:
    """The share of the first decoder layer's linear weights that one AdamW step at lr 1e-6 changes, and the
    weights' dtype, for the model loaded as the trainer loads it with `model_init_kwargs: {dtype: ...}`."""
    from experiments.trainers import CPU_ARGS, METHODS, build_config

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = Dataset.from_list([{"prompt": "def f(x):\n"}] * 2)

    def reward(completions, **kwargs):  # vanilla_pg with reward 1: every completion token carries a gradient
        return [1.0] * len(completions)

    args = build_config(
        "vanilla_pg",
        **(
            CPU_ARGS | {"output_dir": str(tmp_path / dtype), "max_steps": 1, "per_device_train_batch_size": 2}
        ),
        num_generations=2,
        max_completion_length=8,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        model_init_kwargs={"dtype": dtype},
        seed=0,
    )
    trainer = METHODS["vanilla_pg"].trainer_cls(
        model=str(model_dir), reward_funcs=[reward], train_dataset=rows, args=args, processing_class=tokenizer
    )
    layer = trainer.model.model.layers[0]
    linears = {n: m.weight for n, m in layer.named_modules() if isinstance(m, torch.nn.Linear)}
    before = {n: w.detach().clone() for n, w in linears.items()}
    trainer.train()
    changed = sum(int((w.detach() != before[n]).sum()) for n, w in linears.items())
    total = sum(w.numel() for w in linears.values())
    return changed / total, next(iter(linears.values())).dtype


def test_one_step_at_lr_1e6_moves_the_float32_master_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    dtype = yaml.safe_load(SEED_YAML.read_text())["model_init_kwargs"]["dtype"]
    moved, held = _one_step(tiny_model_dir, tmp_path, dtype)
    assert held == torch.float32
    assert moved > 0.99  # every weight whose gradient is not exactly 0
    moved_bf16, held_bf16 = _one_step(tiny_model_dir, tmp_path, "bfloat16")  # the seed's own setting
    assert held_bf16 == torch.bfloat16
    assert moved_bf16 < 0.1  # rounded away: about 2% of N(0, 0.02) weights change
