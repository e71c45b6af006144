"""The RL methods of passk by name: `METHODS` binds each to its trainer, config, defining values and paper.

`build_config(method, **overrides)` builds a method's config, and every trainer takes GRPOTrainer's constructor,
so the runner builds any of them the same way. `PPOTrainer` (ppo.py), `ReinforceTrainer` (reinforce.py) and
`PKPOTrainer` (pkpo.py) are passk's own, on GRPOTrainer's seams (seams.py). The methods, where they coincide, their
hyperparameters and sources: docs/methods.md. To add a method, add one `MethodSpec` to `METHODS` below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

from .pkpo import PKPOConfig, PKPOTrainer
from .ppo import PPOConfig, PPOTrainer
from .reinforce import ReinforceConfig, ReinforceTrainer

__all__ = [
    "CPU_ARGS",
    "METHODS",
    "MethodSpec",
    "ORIGINAL_METHODS",
    "PKPOConfig",
    "PKPOTrainer",
    "PPOConfig",
    "PPOTrainer",
    "ReinforceConfig",
    "ReinforceTrainer",
    "build_config",
    "config_fields",
    "method_hparams",
    "PROCEDURE_OPTIONS",
]

# What a scripted CPU run of any trainer sets (the learnable task, the warm start, the tests): TRL's defaults, bf16
# and activation checkpointing, are for GPUs; such a run writes no TensorBoard logs, checkpoints or progress bars.
CPU_ARGS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "activation_checkpointing": False,
    "report_to": "none",
    "save_strategy": "no",
    "disable_tqdm": True,
}


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
    "critic_learning_rate",
    "cliprange_value",
    "gamma",
    "lam",
    "advantage_normalization",
    "critic_warmup_rollouts",
    "kl_coef",
    "kl_in",
    "epsilon",
    "num_iterations",
    "entropy_coef",
)

# Procedure options that only passk's trainers have (the seed's choices, see docs/seed-fidelity.md). A shared
# budget file may set them; they apply to the methods whose config has them and are reported for every method.
PROCEDURE_OPTIONS = ("logprob_temperature", "loss_normalization")

# What the GRPO variants' papers change; reported for each of them.
_GRPO_VARIANT_HPARAMS = (
    "beta",
    "epsilon",
    "epsilon_high",
    "loss_type",
    "scale_rewards",
    "importance_sampling_level",
    "mask_truncated_completions",
    "num_iterations",
)

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
        # The GRPO variants: TRL's GRPOTrainer as it is, each with the values its paper changes from the `grpo` row
        # (which keeps TRL's defaults: loss_type "dapo", scale_rewards "group", epsilon 0.2, token-level ratios).
        # All four papers train without a KL term (beta 0), which the `grpo` row keeps from DeepSeekMath.
        MethodSpec(
            "dr_grpo",
            GRPOTrainer,
            GRPOConfig,
            # Liu et al.: no 1/|o_i| length normalisation (the token sum over a constant, in TRL the
            # max_completion_length) and no division by the group's reward std; beta 0 as in their training settings.
            {"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0},
            "Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO), arXiv:2503.20783",
            _GRPO_VARIANT_HPARAMS,
        ),
        MethodSpec(
            "dapo",
            GRPOTrainer,
            GRPOConfig,
            # Yu et al. section 3 and 4.1: clip-higher (epsilon_low 0.2, epsilon_high 0.28), token-level loss, overlong
            # filtering (truncated completions masked out of the loss), no KL term (section 2.3). Left out, as TRL
            # has them not as config values: dynamic sampling (re-sampling until no group has all-equal rewards,
            # which would change the budget) and the soft overlong punishment (a reward term, and the budget file
            # names the reward functions).
            {
                "loss_type": "dapo",
                "epsilon": 0.2,
                "epsilon_high": 0.28,
                "mask_truncated_completions": True,
                "beta": 0.0,
            },
            "Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale, arXiv:2503.14476",
            _GRPO_VARIANT_HPARAMS,
        ),
        MethodSpec(
            "gspo",
            GRPOTrainer,
            GRPOConfig,
            # Zheng et al. (v2) section 5.1: one length-normalised importance ratio per sequence, clipped to
            # [1 - 3e-4, 1 + 4e-4], the sequence-level objective (loss_type "grpo": a mean per sequence), no KL.
            # The paper's 4 mini-batches per rollout are a generation shape (steps_per_generation), which the budget
            # file sets for every method; on-policy (one step per generation) the ratio is 1 and the clip idle.
            {
                "importance_sampling_level": "sequence",
                "loss_type": "grpo",
                "epsilon": 3e-4,
                "epsilon_high": 4e-4,
                "beta": 0.0,
            },
            "Zheng et al. 2025, Group Sequence Policy Optimization (GSPO), arXiv:2507.18071",
            _GRPO_VARIANT_HPARAMS,
        ),
        MethodSpec(
            "cispo",
            GRPOTrainer,
            GRPOConfig,
            # MiniMax-M1: clip the (detached) importance weight, not the update, with no lower bound (the paper tunes
            # only the upper one), normalised by the batch's tokens; no KL term. epsilon_high is the value TRL
            # documents for loss_type "cispo", a cap on the ratio itself: 5.0, ScaleRL's (arXiv:2510.13786).
            {"loss_type": "cispo", "epsilon_high": 5.0, "beta": 0.0},
            "MiniMax 2025, MiniMax-M1 (CISPO), arXiv:2506.13585",
            _GRPO_VARIANT_HPARAMS,
        ),
        # Training for pass@k: GRPO (the `grpo` row's values) with PKPO's advantages for k = pkpo_k (pkpo.py).
        # k = 2: the group size of the smallest shared budget files (cpu, seed, smollm2), so every one of them runs.
        MethodSpec(
            "pkpo",
            PKPOTrainer,
            PKPOConfig,
            {"beta": GRPO_BETA, "pkpo_k": 2},
            "Walder & Karkhanis 2025, Pass@K Policy Optimization (PKPO), arXiv:2505.15201",
            ("pkpo_k", "beta", "epsilon", "loss_type", "num_iterations"),
        ),
    )
}

# The seven methods the project started with (the demo's set; the tests too slow to run for every row run these).
ORIGINAL_METHODS = ("vanilla_pg", "reinforce", "reinforce_kl", "reinforce_rloo", "ppo", "grpo", "rloo")


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
