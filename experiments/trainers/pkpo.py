"""Training for pass@k on TRL's GRPOTrainer: PKPO's advantages (`estimators.pkpo_advantages`) in GRPO's loss.

`PKPOTrainer` keeps everything of GRPOTrainer (sampling, rewards, clipped loss, KL term) except the advantages:
after `super()._generate_and_score_completions`, it recomputes them on the whole gathered generation batch from the
rewards, group by group, with the PKPO transform for the config's `pkpo_k`, then keeps this process's slice, as
`ReinforceTrainer` does with its baselines (reinforce.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from .estimators import max_at_k_estimate, pkpo_advantages
from .seams import GRPOSeamsMixin

__all__ = ["PKPOConfig", "PKPOTrainer"]


@dataclass
class PKPOConfig(GRPOConfig):
    r"""
    Configuration class for [`PKPOTrainer`]: GRPOConfig plus the k of the pass@k objective.

    Parameters:
        pkpo_k (`int`, *optional*, defaults to `2`):
            The k of the pass@k (maxg@k) objective PKPO trains for (Walder & Karkhanis 2025, arXiv:2505.15201),
            1 <= k <= `num_generations`. k = 1 is pass@1 with RLOO's leave-one-out advantage; k = num_generations
            gives only a strictly best completion of its group a nonzero advantage.

    GRPO's advantage settings (`scale_rewards`, `multi_objective_aggregation`) do not apply: the advantages are
    PKPO's, computed from the weighted sum of the reward functions. The loss (`loss_type`, `epsilon`, `beta`, ...)
    is GRPO's.
    """

    pkpo_k: int = field(
        default=2,
        metadata={"help": "The k of the pass@k objective (1 <= pkpo_k <= num_generations)."},
    )

    def __post_init__(self):
        super().__post_init__()
        if not 1 <= self.pkpo_k <= self.num_generations:
            raise ValueError(
                f"pkpo_k: the pass@k objective needs 1 <= k <= num_generations ({self.num_generations}); "
                f"got {self.pkpo_k}"
            )


class PKPOTrainer(GRPOSeamsMixin, GRPOTrainer):
    """GRPO with Pass@k Policy Optimization's advantages (Walder & Karkhanis 2025, arXiv:2505.15201).

    Each prompt's completions get A_i = (n/k) s_i - b_i (`estimators.pkpo_advantages`): the policy gradient
    estimates the gradient of pass@k without bias (times 1/k), instead of GRPO's whitened pass@1 advantage.

    Args: as [`~trl.GRPOTrainer`], with `args` a [`PKPOConfig`].
    """

    _tag_names = ["trl", "grpo", "pkpo", "passk"]
    _name = "PKPO"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, PKPOConfig):
            raise TypeError(f"PKPOTrainer needs a PKPOConfig; got {type(self.args).__name__}")

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        mode = self._mode()
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        k = min(self.args.pkpo_k, group_size)  # an eval group may be smaller than the training one
        metrics = self._metrics[mode]

        # The scalar reward of each completion (gathered over processes): weighted sum; NaN if unscorable.
        rewards_per_func = self._last_rewards_per_func
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)
        rewards[unscorable] = torch.nan

        advantages = pkpo_advantages(rewards, group_size, k)
        groups = [g[~torch.isnan(g)] for g in rewards.view(-1, group_size)]
        estimates = [max_at_k_estimate(g, k).item() for g in groups if g.numel() >= k]
        metrics["pkpo/pass_at_k"].append(sum(estimates) / len(estimates) if estimates else 0.0)
        scorable = ~unscorable
        metrics["pkpo/advantage_std"].append(advantages[scorable].std().item() if scorable.sum() > 1 else 0.0)

        return self._set_advantages(out, advantages)
