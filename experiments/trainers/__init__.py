"""The seven RL methods of passk, by name: one table maps each to its trainer, config, defining values and paper.

| name             | trainer             | what it is (defining values in `MethodSpec.defaults`)                          |
|------------------|---------------------|--------------------------------------------------------------------------------|
| `vanilla_pg`     | `ReinforceTrainer`  | the seed experiment's first loop: -log π · R, no baseline                      |
| `reinforce`      | `ReinforceTrainer`  | the seed's REINFORCE: batch-average baseline (one mean over the batch)         |
| `reinforce_kl`   | `ReinforceTrainer`  | the seed's REINFORCE + KL: R - β·KL(π‖π_ref) per completion, then the batch mean |
| `reinforce_rloo` | `ReinforceTrainer`  | the seed's RLOO code: leave-one-out baseline per prompt, whitened per prompt   |
| `ppo`            | `PPOTrainer`        | the chapter's PPO: critic, GAE (γ = 1, λ = 1), clipped ratio and value losses  |
| `grpo`           | `trl.GRPOTrainer`   | TRL's GRPO with the chapter's KL term to the reference (β = 0.04, in the loss) |
| `rloo`           | `trl.RLOOTrainer`   | TRL's RLOO, unchanged (leave-one-out per prompt, β = 0.05 KL in the reward)    |

"The seed" is the seed experiment's blog post and "the chapter" the RL Fundamentals chapter (docs/provenance.md).

Each method's own hyperparameters live here (`defaults`) and in its config class; `MethodSpec.hparams` names
them, and the runner writes their values to run.json (`method_hparams`) for the report's run table. A shared
budget file (experiments/configs/) may not set them, so every method of a comparison keeps its own.

Where the rows still coincide (all checked by tests/test_trainers.py where they are exact):

- `reinforce` vs `reinforce_rloo` when a batch holds one prompt with G = 2 and 0/1 rewards (the seed's own
  setup): the batch mean is then the group mean, its advantages are ±(r1 - r2)/2 and the whitened leave-one-out
  ones ±(r1 - r2)/√2, a constant factor, which Adam (without gradient clipping) cancels. Any other shape, or
  rewards that are not 0/1, tells them apart.
- `reinforce_rloo` vs `grpo` with `beta=0`: both whiten the rewards per prompt (TRL's std carries 1e-4, the seed's
  1e-8) and take one on-policy step per batch; with the same log-prob temperature and `loss_normalization="token"`
  (TRL's default "dapo" aggregation) they take the same steps. The chapter's KL term (β = 0.04) separates them.
- A group-mean baseline (`baseline="group_mean"`) is TRL's RLOO advantage times (G-1)/G: `reinforce` or
  `reinforce_kl` with it, at the same β, log-prob temperature and a sequence-sum loss, take RLOO's steps under
  Adam. The rows above use the batch mean, as the seed does, so they do not.
- TRL's GRPO and RLOO take log π at the sampling temperature; passk's trainers take it at `logprob_temperature`
  (the seed config: 1). At temperature 1 (the demo) that difference vanishes.

Completions per prompt (`num_generations`): each config class holds its own lower bound, checked when it is
built (and so when a config file is parsed): `PPOConfig` accepts 1, since its baseline is the critic, and so does
`ReinforceConfig` with no baseline or the batch mean (vanilla_pg, reinforce, reinforce_kl); GRPO's and RLOO's
configs, and `ReinforceConfig` with a per-prompt baseline (group_mean, rloo), need 2, since their advantages compare
the completions of one prompt.

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
