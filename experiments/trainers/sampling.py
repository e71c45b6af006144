"""log π of the sampled tokens, recorded while `generate` samples them, to save a forward pass of the policy.

Both REINFORCE with a KL penalty and PPO need log π_old(y_t), the log-probabilities under the policy that
sampled the batch. GRPOTrainer computes them with a second forward pass over the whole generation batch (when
off-policy) or not at all (on-policy). `SampledLogprobs` records them during generation instead: a logits
processor reads the distribution generate samples each token from (`GRPOSeamsMixin`, experiments.trainers.seams,
installs it). Only the transformers generation path is
recorded (not vLLM, where GRPOTrainer computes them anyway for its importance-sampling correction, nor continuous
batching), and only without a repetition penalty (which would change the distribution); every recording is
checked against the completion ids it must describe, and callers fall back to a forward pass if it does not match.

`check_logprob_temperature` checks a config's `logprob_temperature` (the temperature the logits are divided by
wherever passk's trainers compute log π) against vLLM's importance-sampling correction.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessor

__all__ = ["SampledLogprobs", "check_logprob_temperature"]


def check_logprob_temperature(args: Any) -> None:
    """A config's `logprob_temperature` must agree with vLLM's importance-sampling correction, which divides
    log π_old (taken at the log-prob temperature) by vLLM's log-probs (at the sampling temperature)."""
    t = args.logprob_temperature
    if t is not None and t != args.temperature and args.use_vllm and args.vllm_importance_sampling_correction:
        raise ValueError(
            f"logprob_temperature ({t}) differs from temperature ({args.temperature}), which vLLM's importance-"
            "sampling correction assumes; leave logprob_temperature unset or set vllm_importance_sampling_correction false"
        )


class SampledLogprobs(LogitsProcessor):
    """Records log π(y_t) of every sampled token.

    Custom processors run before generate's temperature warper, so the scores are divided by the log-prob
    temperature here: the result is GRPOTrainer's definition of the log-probabilities (temperature-scaled softmax
    over the whole vocabulary, no top-k/top-p), at the trainer's log-prob temperature. Only the previous step's (B, V) distribution is kept; each call gathers
    the token that was sampled from it, which is the last column of the next call's `input_ids`.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self._prev: torch.Tensor | None = None
        self._logps: list[torch.Tensor] = []
        self._tokens: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._prev is not None:
            token = input_ids[:, -1:]
            self._logps.append(self._prev.gather(1, token).squeeze(1))
            self._tokens.append(token.squeeze(1))
        self._prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def per_token_logps(self, completion_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        """`(B, C)` log-probs aligned with right-padded `completion_ids`, or None if the recording does not
        describe them (other rows, other tokens, or fewer positions)."""
        if self._prev is None or self._prev.size(0) != completion_ids.size(0):
            return None
        steps = len(self._logps) + 1
        if completion_ids.size(1) < steps:
            return None
        if self._tokens:
            recorded = torch.stack(self._tokens, dim=1).to(completion_ids.device)
            seen = mask[:, : steps - 1].bool()
            if not torch.equal(recorded[seen], completion_ids[:, : steps - 1][seen]):
                return None
        last = self._prev.gather(1, completion_ids[:, steps - 1 : steps].to(self._prev.device)).squeeze(1)
        logps = torch.stack([*self._logps, last], dim=1).to(completion_ids.device)
        pad = completion_ids.size(1) - steps
        return torch.nn.functional.pad(logps, (0, pad)) if pad else logps
