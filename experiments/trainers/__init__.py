"""The RL methods of passk by name: `METHODS` binds each to its trainer, config, defining values and paper.

`build_config(method, **overrides)` builds a method's config, and every trainer takes GRPOTrainer's constructor,
so the runner builds any of them the same way. `PPOTrainer` (ppo.py) and `ReinforceTrainer` (reinforce.py) are
passk's own, on GRPOTrainer's seams (seams.py). The methods, where they coincide, their hyperparameters and
sources: docs/methods.md. To add a method, add one `MethodSpec` to `METHODS` below.
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
    "method_hparams",
    "PROCEDURE_OPTIONS",
]


@dataclass(frozen=True)
class MethodSpec:
    """A method name bound to its trainer class, config class, the config values that define it, the names of its
    own hyperparameters (reported in run.json's `method_hparams`; a shared budget file may not set them) and its
    paper."""

    name: str
    trainer_cls: type
    config_cls: type
    defaults: dict[str, Any] = field(default_factory=dict)
    paper: str = ""
    hparams: tuple[str, ...] = ()


_REINFORCE_HPARAMS = ("baseline", "normalize_advantages", "kl_coef")
_PPO_HPARAMS = (
    "critic_learning_rate", "vf_coef", "cliprange_value", "gamma", "lam", "advantage_normalization",
    "critic_warmup_rollouts", "kl_coef", "epsilon", "num_iterations", "entropy_coef",
)  # fmt: skip

# Procedure options that only passk's trainers have (the seed's choices, see docs/seed-fidelity.md). A shared
# budget file may set them; they apply to the methods whose config has them and are reported for every method.
PROCEDURE_OPTIONS = ("logprob_temperature", "loss_normalization")

# GRPO's KL coefficient: DeepSeekMath's (Shao et al. 2024, section 4.2: "The KL coefficient is 0.04").
GRPO_BETA = 0.04

METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            "vanilla_pg",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "none", "kl_coef": 0.0, "normalize_advantages": False},
            "Williams 1992, Simple statistical gradient-following algorithms (REINFORCE)",
            _REINFORCE_HPARAMS,
        ),
        MethodSpec(
            "reinforce",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "batch_mean", "kl_coef": 0.0, "normalize_advantages": False},
            "Williams 1992 (REINFORCE with a baseline)",
            _REINFORCE_HPARAMS,
        ),
        MethodSpec(
            "reinforce_kl",
            ReinforceTrainer,
            ReinforceConfig,
            # β: the seed gives none; 0.05 is the RL Fundamentals chapter's example and TRL RLOO's default.
            {"baseline": "batch_mean", "kl_coef": 0.05, "normalize_advantages": False},
            "Williams 1992; KL-regularised reward as in Ziegler et al. 2019 (arXiv:1909.08593)",
            _REINFORCE_HPARAMS,
        ),
        MethodSpec(
            "reinforce_rloo",
            ReinforceTrainer,
            ReinforceConfig,
            {"baseline": "rloo", "kl_coef": 0.0, "normalize_advantages": True},
            "Ahmadian et al. 2024, Back to Basics (RLOO), arXiv:2402.14740",
            _REINFORCE_HPARAMS,
        ),
        MethodSpec(
            "ppo",
            PPOTrainer,
            PPOConfig,
            {},
            "Schulman et al. 2017, PPO, arXiv:1707.06347; GAE: Schulman et al. 2015, arXiv:1506.02438",
            _PPO_HPARAMS,
        ),
        MethodSpec(
            "grpo",
            GRPOTrainer,
            GRPOConfig,
            {"beta": GRPO_BETA},
            "Shao et al. 2024, DeepSeekMath (GRPO), arXiv:2402.03300",
            ("beta", "epsilon", "loss_type", "scale_rewards", "num_iterations"),
        ),
        MethodSpec(
            "rloo",
            RLOOTrainer,
            RLOOConfig,
            {},
            "Ahmadian et al. 2024, Back to Basics (RLOO), arXiv:2402.14740; TRL's RLOOTrainer",
            ("beta", "epsilon", "normalize_advantages", "num_iterations"),
        ),
    )
}


def method_hparams(method: str, config: Any) -> dict[str, Any]:
    """The values of `METHODS[method].hparams` in `config` (PPO's critic learning rate resolved), then the
    procedure options where the config has them, and the log-prob temperature every method really uses (TRL's
    trainers take log π at the sampling temperature)."""
    spec = METHODS[method]
    out = {key: getattr(config, key) for key in spec.hparams}
    if "critic_learning_rate" in out:
        out["critic_learning_rate"] = config.critic_lr
    for key in PROCEDURE_OPTIONS:
        if hasattr(config, key):
            out[key] = getattr(config, key)
    if out.get("logprob_temperature") is None:
        out["logprob_temperature"] = config.temperature
    return out


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
        raise ValueError(
            f"unknown config key(s) for {method} ({spec.config_cls.__name__}): {', '.join(unknown)}"
        )
    return spec.config_cls(**(spec.defaults | overrides))
