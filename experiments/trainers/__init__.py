"""The seven RL methods of passk, by name: one table maps each to its trainer, config and defaults.

| name             | trainer                  | config                  | what it is |
|------------------|--------------------------|-------------------------|------------|
| `vanilla_pg`     | `ReinforceTrainer`       | `ReinforceConfig`       | -log π · R, no baseline |
| `reinforce`      | `ReinforceTrainer`       | `ReinforceConfig`       | group-mean baseline (the seed blog's REINFORCE) |
| `reinforce_kl`   | `ReinforceTrainer`       | `ReinforceConfig`       | + k1 KL to the reference, in the reward |
| `reinforce_rloo` | `ReinforceTrainer`       | `ReinforceConfig`       | leave-one-out baseline, per-group normalised |
| `ppo`            | `PPOTrainer`             | `PPOConfig`             | critic, GAE, clipped ratio and value losses |
| `grpo`           | `trl.GRPOTrainer`        | `trl.GRPOConfig`        | TRL's GRPO, unchanged |
| `rloo`           | `trl.RLOOTrainer`        | `trl.RLOOConfig`        | TRL's RLOO, unchanged |

Every trainer takes GRPOTrainer's constructor (`model` path, `reward_funcs`, `args`, `train_dataset`,
`processing_class`, ...), so the runner builds any of them the same way::

    spec = METHODS["reinforce_rloo"]
    trainer = spec.trainer_cls(model=path, reward_funcs=[unit_test_reward], args=build_config("reinforce_rloo",
                               output_dir="out"), train_dataset=ds, processing_class=tokenizer)

To add a method, add one `MethodSpec` to `METHODS` below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

from .ppo import PPOConfig, PPOTrainer
from .reinforce import ReinforceConfig, ReinforceTrainer

__all__ = [
    "METHODS",
    "MethodSpec",
    "PPOConfig",
    "PPOTrainer",
    "ReinforceConfig",
    "ReinforceTrainer",
    "build_config",
    "config_fields",
]


@dataclass(frozen=True)
class MethodSpec:
    """A method name bound to its trainer class, config class, the config values that define it, and its paper."""

    name: str
    trainer_cls: type
    config_cls: type
    defaults: dict[str, Any] = field(default_factory=dict)
    paper: str = ""


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            "vanilla_pg",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "none"},
            "Williams 1992, Simple statistical gradient-following algorithms (REINFORCE)",
        ),
        MethodSpec(
            "reinforce",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "group_mean"},
            "Williams 1992 (REINFORCE with a baseline)",
        ),
        MethodSpec(
            "reinforce_kl",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "group_mean", "kl_coef": 0.05},
            "Williams 1992; KL-regularised reward as in Ziegler et al. 2019 (arXiv:1909.08593)",
        ),
        MethodSpec(
            "reinforce_rloo",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "rloo", "normalize_advantages": True},
            "Ahmadian et al. 2024, Back to Basics (RLOO), arXiv:2402.14740",
        ),
        MethodSpec(
            "ppo",
            PPOTrainer,
            PPOConfig,
            {},
            "Schulman et al. 2017, PPO, arXiv:1707.06347; GAE: Schulman et al. 2015, arXiv:1506.02438",
        ),
        MethodSpec("grpo", GRPOTrainer, GRPOConfig, {}, "Shao et al. 2024, DeepSeekMath (GRPO), arXiv:2402.03300"),
        MethodSpec(
            "rloo",
            RLOOTrainer,
            RLOOConfig,
            {},
            "Ahmadian et al. 2024, Back to Basics (RLOO), arXiv:2402.14740; TRL's RLOOTrainer",
        ),
    )
}


def config_fields(config_cls: type) -> set[str]:
    """The names a config class accepts as constructor keywords."""
    return {f.name for f in dataclasses.fields(config_cls) if f.init}


def build_config(method: str, **overrides: Any) -> Any:
    """`METHODS[method].config_cls(**(defaults | overrides))`, rejecting unknown methods and keys by name."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    spec = METHODS[method]
    unknown = sorted(set(overrides) - config_fields(spec.config_cls))
    if unknown:
        raise ValueError(f"unknown config key(s) for {method} ({spec.config_cls.__name__}): {', '.join(unknown)}")
    return spec.config_cls(**(spec.defaults | overrides))
