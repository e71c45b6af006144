"""The REINFORCE family on TRL's GRPOTrainer: vanilla policy gradient, group-mean baseline, KL-in-reward, RLOO.

One trainer, `ReinforceTrainer`, selected by `ReinforceConfig` (the four loops of the seed experiment,
docs/provenance.md):

| method           | baseline       | kl_coef | normalize_advantages |
|------------------|----------------|---------|----------------------|
| `vanilla_pg`     | `"none"`       | 0       | False                |
| `reinforce`      | `"batch_mean"` | 0       | False                |
| `reinforce_kl`   | `"batch_mean"` | 0.05    | False                |
| `reinforce_rloo` | `"rloo"`       | 0       | True (the seed's default) |

`"group_mean"` (the per-prompt mean) is available too; it is TRL's RLOO advantage up to the constant G/(G-1).

It reuses everything of GRPOTrainer up to the rewards (sampling, generation, reward-function calling, gathering
across processes, the reference model) and replaces two seams:

1. `_generate_and_score_completions`: after `super()`, recompute the advantages on the whole gathered generation
   batch (groups are shuffled across micro-batches before the loss, so a baseline can only be computed here),
   optionally after subtracting `kl_coef * sum_t (log pi - log pi_ref)` from each reward, then keep this
   process's slice.
2. `_compute_loss`: the REINFORCE surrogate -sum_t A * log pi(y_t) per completion, averaged over completions
   (`loss_normalization="sequence"`) or divided by the batch's token count (`"token"`, the seed's one mean over
   all tokens), scaled for gradient accumulation (GRPOTrainer sets `loss_is_scaled_for_ga=True`). There is no
   clipping and no KL term in the loss: each sample is used for one gradient step. When GRPOTrainer supplies
   log pi_old (one generation feeding several optimizer steps, or vLLM), each token's term is weighted by the
   detached pi/pi_old (1 on-policy) and by vLLM's importance weights, as GRPO's loss is.

log pi is taken at `logprob_temperature` (default: the sampling temperature, as GRPOTrainer does; the seed: 1).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import gather
from trl import GRPOConfig, GRPOTrainer

from .estimators import (
    batch_baseline_advantages,
    group_baseline_advantages,
    kl_k1,
    masked_whiten,
    policy_gradient_loss,
    rloo_advantages,
)
from .sampling import check_logprob_temperature
from .seams import GRPOSeamsMixin

__all__ = ["BASELINES", "LOSS_NORMALIZATIONS", "ReinforceConfig", "ReinforceTrainer"]

BASELINES = ("none", "batch_mean", "group_mean", "rloo")
LOSS_NORMALIZATIONS = ("sequence", "token")


@dataclass
class ReinforceConfig(GRPOConfig):
    r"""
    Configuration class for [`ReinforceTrainer`]: GRPOConfig plus the REINFORCE estimator's parameters.

    Sampling, generation, reward and logging parameters are GRPOConfig's (see its documentation). The GRPO loss
    parameters (`loss_type`, `epsilon`, `scale_rewards`, `beta`, ...) do not apply: this trainer has its own loss.

    Parameters:
        > Parameters that control the advantage estimator

        baseline (`str`, *optional*, defaults to `"batch_mean"`):
            What is subtracted from each completion's reward before it weights the log-likelihood gradient.
            `"none"`: vanilla policy gradient, A = R (high variance; with 0/1 rewards it only pushes up passing
            completions). `"batch_mean"`: the mean reward of the whole generation batch, one constant for every
            prompt (the seed experiment's REINFORCE: "averages over the batch of rewards"). `"group_mean"`: the mean
            reward of the completions of the same prompt (GRPO's mean, TRL's RLOO up to G/(G-1)). `"rloo"`: the
            leave-one-out mean of the other completions of the same prompt (Ahmadian et al., 2024), an exactly
            unbiased baseline. All baselines lower the variance without changing the expected gradient (up to a
            constant factor for the two means, which include the completion's own reward).
        normalize_advantages (`bool`, *optional*, defaults to `False`):
            Divide the advantages by their standard deviation: per prompt group for `"group_mean"` and `"rloo"`
            (the `normalize=True` of the seed's RLOO loop; then the advantage is GRPO's), over the batch for
            `"batch_mean"`. Requires a baseline.

        > Parameters that control the loss

        loss_normalization (`str`, *optional*, defaults to `"sequence"`):
            `"sequence"`: sum log π over each completion's tokens, average over completions (the estimator as
            written, Williams 1992). `"token"`: one mean over all the tokens of the generation batch, the seed
            blog's `loss_per_token.sum() / shift_mask.sum()` (TRL's "dapo" aggregation). Within a batch they differ
            by a constant; from batch to batch by the completions' lengths.
        logprob_temperature (`float`, *optional*):
            Temperature the logits are divided by wherever log π is taken (loss, KL penalty). None uses the
            sampling `temperature`, as GRPOTrainer does; the seed experiment samples at 0.8 but takes log π from the raw
            logits (1.0).

        > Parameters that control the KL penalty

        kl_coef (`float`, *optional*, defaults to `0.0`):
            Coefficient β of the KL penalty to the frozen reference model (the initial policy), folded into the
            reward: R' = R - β * Σ_t (log π(y_t) - log π_ref(y_t)) (the k1 estimator, as in RLOO). Use it to keep
            the policy close to its starting point; 0.01-0.1 is usual for 0/1 rewards. When > 0, GRPOConfig's
            `beta` is set to the same value only so that GRPOTrainer loads the reference model and computes its
            log-probabilities; GRPO's own KL loss term is never added.

    REINFORCE is on-policy: `num_iterations` must be 1, so every sample is used for one gradient step. To fill a
    GPU, one generation may feed several optimizer steps (`steps_per_generation` or `generation_batch_size` above
    the accumulation steps): the samples of the later steps were drawn by an older policy π_old, and each token's
    log-likelihood gradient is weighted by π(y_t)/π_old(y_t) (exactly 1 on the first step; the first-order
    off-policy policy gradient of the TRPO/PPO surrogate, unclipped), with π_old computed by GRPOTrainer. Keep
    that drift small (a few steps at a small learning rate), or use PPO or GRPO, which clip it.
    """

    baseline: str = field(
        default="batch_mean",
        metadata={
            "help": "Baseline subtracted from the reward: 'none' (vanilla policy gradient), 'batch_mean' (mean "
            "reward of the batch), 'group_mean' (mean reward of the prompt's group), or 'rloo' (leave-one-out "
            "mean of the other completions).",
            "choices": list(BASELINES),
        },
    )
    normalize_advantages: bool = field(
        default=False,
        metadata={
            "help": "Divide the advantages by their standard deviation (per group; per batch for "
            "batch_mean). Needs a baseline."
        },
    )
    loss_normalization: str = field(
        default="sequence",
        metadata={
            "help": "'sequence': sum over a completion's tokens, mean over completions; 'token': one mean over "
            "all the tokens of the batch (the seed's).",
            "choices": list(LOSS_NORMALIZATIONS),
        },
    )
    logprob_temperature: float | None = field(
        default=None,
        metadata={
            "help": "Temperature of log π in the loss and KL (None: the sampling temperature; the seed: 1)."
        },
    )
    kl_coef: float = field(
        default=0.0,
        metadata={
            "help": "β of the k1 KL penalty to the reference model, subtracted from each completion's reward. "
            "0 disables it (and the reference model)."
        },
    )

    def __post_init__(self):
        if self.baseline not in BASELINES:
            raise ValueError(
                f"baseline must be one of {', '.join(map(repr, BASELINES))}; got {self.baseline!r}"
            )
        if self.loss_normalization not in LOSS_NORMALIZATIONS:
            raise ValueError(
                f"loss_normalization must be one of {', '.join(map(repr, LOSS_NORMALIZATIONS))}; "
                f"got {self.loss_normalization!r}"
            )
        if self.logprob_temperature is not None and not self.logprob_temperature > 0:
            raise ValueError(f"logprob_temperature must be > 0; got {self.logprob_temperature}")
        check_logprob_temperature(self)
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0; got {self.kl_coef}")
        if self.normalize_advantages and self.baseline == "none":
            raise ValueError(
                "normalize_advantages=True needs a baseline ('batch_mean', 'group_mean' or 'rloo'), not 'none'"
            )
        if self.beta not in (0.0, self.kl_coef):
            raise ValueError(
                f"ReinforceConfig puts its KL penalty in the reward with kl_coef; leave beta at 0 (got beta={self.beta})"
            )
        # beta != 0 makes GRPOTrainer load the reference model and compute ref log-probs; the loss ignores beta.
        self.beta = self.kl_coef
        if self.num_iterations != 1:
            raise ValueError(f"REINFORCE is on-policy: num_iterations must be 1; got {self.num_iterations}")
        # GRPOConfig's rule (at least 2 completions per prompt) is for per-prompt baselines; this config's own:
        # 'none' and 'batch_mean' never group completions by prompt, so they accept 1.
        requested = self.num_generations
        if requested is not None and requested < 2:
            if self.baseline in ("group_mean", "rloo"):
                raise ValueError(
                    f"num_generations: REINFORCE with baseline {self.baseline!r} compares the completions of one "
                    f"prompt, so it needs at least 2 per prompt; got {requested} (vanilla_pg, reinforce and "
                    "reinforce_kl, whose baselines are 'none' and 'batch_mean', take 1)"
                )
            self.num_generations = 2
        try:
            super().__post_init__()
        finally:
            self.num_generations = requested


class ReinforceTrainer(GRPOSeamsMixin, GRPOTrainer):
    """REINFORCE (Williams, 1992) for language models, with optional baselines and a KL-shaped reward.

    The gradient estimator is  ∇J ≈ 1/N Σ_i A_i Σ_t ∇ log π(y_{i,t} | y_{i,<t}),  with A_i the completion's
    reward minus a baseline that does not depend on the completion itself (none, the group mean, or the RLOO
    leave-one-out mean of Ahmadian et al., 2024). Everything else (generation, reward functions, logging) is
    GRPOTrainer's, so it takes the same arguments and reward functions.

    Example:

    ```python
    from rewards import unit_test_reward
    from experiments.trainers import ReinforceConfig, ReinforceTrainer

    args = ReinforceConfig(output_dir="out", baseline="rloo", normalize_advantages=True, num_generations=8)
    trainer = ReinforceTrainer(model="path/to/model", reward_funcs=[unit_test_reward], args=args, train_dataset=ds)
    trainer.train()
    ```

    Args: as [`~trl.GRPOTrainer`], with `args` a [`ReinforceConfig`].
    """

    _tag_names = ["trl", "reinforce", "passk"]
    _name = "REINFORCE"
    _paper = {
        "title": "Back to Basics: Revisiting REINFORCE-Style Optimization for Learning from Human Feedback in LLMs",
        "id": "2402.14740",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{williams1992simple,
                title        = {{Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement Learning}},
                author       = {Ronald J. Williams},
                year         = 1992,
                journal      = {Machine Learning},
                volume       = 8,
                pages        = {229--256},
            }
            @inproceedings{ahmadian2024back,
                title        = {{Back to Basics: Revisiting REINFORCE-Style Optimization for Learning from Human Feedback in LLMs}},
                author       = {Arash Ahmadian and Chris Cremer and Matthias Gall{\\'e} and Marzieh Fadaee and Julia Kreutzer and Olivier Pietquin and Ahmet {\\"U}st{\\"u}n and Sara Hooker},
                year         = 2024,
                booktitle    = {ACL},
                eprint       = {arXiv:2402.14740},
            }"""),
    }

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, ReinforceConfig):
            raise TypeError(f"ReinforceTrainer needs a ReinforceConfig; got {type(self.args).__name__}")
        self._apply_logprob_temperature()

    # ---- generation: record log π of the sampled tokens when the KL penalty needs them (see sampling.py) ------
    def _wants_sampled_logps(self) -> bool:
        return self.args.kl_coef > 0 and not self._trl_computes_old_logps(self.num_iterations)

    # ---- seam 1: the advantages, over the whole generation batch ----------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        mode = self._mode()
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        args: ReinforceConfig = self.args
        metrics = self._metrics[mode]

        # 1. The scalar reward of each completion: weighted sum over reward functions; NaN if unscorable.
        rewards_per_func = self._last_rewards_per_func
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)
        rewards[unscorable] = torch.nan

        # 2. KL shaping: R' = R - β Σ_t (log π_old - log π_ref), with π_old the policy that sampled.
        if args.kl_coef > 0:
            mask = self._loss_mask(out)
            # log π of the sampling policy: GRPO's when it computed them (off-policy, vLLM), else those recorded
            # while sampling, else (if the recording does not line up) one extra forward pass.
            sampled = self._sampled_logps(out)
            old_logps = out.get("old_per_token_logps")
            recorded = old_logps is None and sampled is not None
            if old_logps is None:
                old_logps = sampled if sampled is not None else self._policy_logps(out, mode)
            metrics["reinforce/kl_logps_recorded"].append(float(recorded))
            kl_tokens = kl_k1(old_logps, out["ref_per_token_logps"], mask)
            kl_seq = gather(kl_tokens.sum(dim=1))
            rewards = rewards - args.kl_coef * kl_seq
            stats = self.accelerator.reduce(
                torch.stack([kl_tokens.sum(), mask.sum().float()]), reduction="sum"
            )
            metrics["kl"].append((stats[0] / stats[1].clamp(min=1.0)).item())
            metrics["reinforce/kl_penalty"].append((args.kl_coef * kl_seq).mean().item())

        # 3. Advantages: reward minus baseline, over the global batch, laid out group by group.
        if args.baseline == "none":
            advantages = torch.nan_to_num(rewards, nan=0.0)
        elif args.baseline == "batch_mean":
            advantages = batch_baseline_advantages(rewards)
            if args.normalize_advantages:
                advantages = masked_whiten(advantages, ~torch.isnan(rewards))
        elif args.baseline == "group_mean":
            advantages = group_baseline_advantages(rewards, group_size, normalize=args.normalize_advantages)
        else:
            advantages = rloo_advantages(rewards, group_size, normalize=args.normalize_advantages)

        scorable = ~unscorable
        if not args.normalize_advantages and scorable.any():
            metrics["reinforce/baseline"].append((rewards - advantages)[scorable].mean().item())
        metrics["reinforce/advantage_mean"].append(
            advantages[scorable].mean().item() if scorable.any() else 0.0
        )
        metrics["reinforce/advantage_std"].append(
            advantages[scorable].std().item() if scorable.sum() > 1 else 0.0
        )

        return self._set_advantages(out, advantages)

    # ---- seam 2: the loss --------------------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        mode = self._mode()
        mask = self._loss_mask(inputs)
        per_token_logps, entropies = self._completion_logps(model, inputs, compute_entropy=True)
        # Samples drawn before the last update(s) (one generation feeding several steps) or by vLLM: GRPOTrainer
        # computed log π_old. Weighting log π by the detached ratio π/π_old gives the gradient A ρ ∇log π of the
        # off-policy surrogate; ρ is 1 on-policy. vLLM's truncated π_old/π_vLLM weights multiply in, as in GRPO.
        weights = None
        if inputs.get("old_per_token_logps") is not None:
            weights = torch.exp(per_token_logps.detach() - inputs["old_per_token_logps"])
            self._metrics[mode]["reinforce/is_ratio_max"].append(
                self.accelerator.gather((weights * mask).max().reshape(1)).max().item()
            )
        if inputs.get("importance_sampling_ratio") is not None:
            weights = inputs["importance_sampling_ratio"] * (1.0 if weights is None else weights)
        weighted_logps = per_token_logps if weights is None else per_token_logps * weights
        if self.args.loss_normalization == "token":
            # One mean over the tokens of the batch: the generation batch's global token count, rescaled to one
            # accumulation window and one process, as TRL's "dapo" loss does (DDP then averages the processes).
            num_tokens = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                num_tokens = (
                    num_tokens * self.current_gradient_accumulation_steps / self.args.steps_per_generation
                )
            loss = policy_gradient_loss(weighted_logps, inputs["advantages"], mask, num_tokens=num_tokens)
            normalizer = 1.0
        else:
            # -Σ_t A log π(y_t) per completion, mean over the micro-batch's completions. Summing (not averaging) the
            # tokens keeps the estimator's weighting; the mean over completions, with equal micro-batches, makes
            # the accumulated gradient the mean over the generation batch once divided by the accumulation steps.
            loss = policy_gradient_loss(weighted_logps, inputs["advantages"], mask)
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0

        stats = self.accelerator.reduce(
            torch.stack([(entropies.detach() * mask).sum(), mask.sum().float()]), reduction="sum"
        )
        self._metrics[mode]["entropy"].append((stats[0] / stats[1].clamp(min=1.0)).item())
        return loss / normalizer
