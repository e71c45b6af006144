"""log π of the sampled tokens, recorded while `generate` samples them, to save a forward pass of the policy.

Both REINFORCE with a KL penalty and PPO need log π_old(y_t), the log-probabilities under the policy that
sampled the batch. GRPOTrainer computes them with a second forward pass over the whole generation batch (when
off-policy) or not at all (on-policy). `SampledLogprobsMixin` records them during generation instead: a logits
processor reads the distribution generate samples each token from. Only the transformers generation path is
recorded (not vLLM, where GRPOTrainer computes them anyway for its importance-sampling correction, nor continuous
batching), and only without a repetition penalty (which would change the distribution); every recording is
checked against the completion ids it must describe, and callers fall back to a forward pass if it does not match.
"""

from __future__ import annotations

import functools

import torch
from transformers import LogitsProcessor, LogitsProcessorList

__all__ = ["SampledLogprobs", "SampledLogprobsMixin"]


class SampledLogprobs(LogitsProcessor):
    """Records log π(y_t) of every sampled token.

    Custom processors run before generate's temperature warper, so the scores are divided by the temperature
    here: the result is GRPOTrainer's definition of the log-probabilities (temperature-scaled softmax over the
    whole vocabulary, no top-k/top-p). Only the previous step's (B, V) distribution is kept; each call gathers
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


class SampledLogprobsMixin:
    """For GRPOTrainer subclasses: records log π of the sampled tokens when `_wants_sampled_logps()` says so.

    After `super()._generate_and_score_completions`, call `self._sampled_logps(out)` for the `(B, C)` tensor, or
    None when nothing usable was recorded.
    """

    _sampling_recorder: SampledLogprobs | None = None

    def _wants_sampled_logps(self) -> bool:
        return False

    def _trl_computes_old_logps(self, num_iterations: int) -> bool:
        """Whether GRPOTrainer runs its own forward pass for log π_old on a generation batch: when the batch feeds
        more optimizer steps than one (`steps_per_generation * num_iterations` not dividing the accumulation
        steps) or for vLLM's importance-sampling correction. Recording is wasted then."""
        generate_every = self.args.steps_per_generation * num_iterations
        off_policy = self.args.gradient_accumulation_steps % generate_every != 0
        return off_policy or (self.use_vllm and self.vllm_importance_sampling_correction)

    def _can_record(self) -> bool:
        return (
            not self.use_vllm
            and not self.use_transformers_continuous_batching
            and self.repetition_penalty == 1.0  # a penalty would change the recorded distribution
        )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        record = self._wants_sampled_logps() and self._can_record()
        self._sampling_recorder = SampledLogprobs(self.temperature) if record else None
        if not record:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        model = self.accelerator.unwrap_model(self.model)
        model.generate = functools.partial(
            model.generate, logits_processor=LogitsProcessorList([self._sampling_recorder])
        )
        try:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        finally:
            del model.generate  # the instance attribute; the class's method is back

    def _sampled_logps(self, out: dict) -> torch.Tensor | None:
        recorder, self._sampling_recorder = self._sampling_recorder, None
        if recorder is None:
            return None
        return recorder.per_token_logps(out["completion_ids"], self._loss_mask(out))

    @staticmethod
    def _loss_mask(batch: dict) -> torch.Tensor:
        """The completion tokens that count: GRPOTrainer's completion mask, without tool-result tokens."""
        mask = batch["completion_mask"]
        return mask * batch["tool_mask"] if "tool_mask" in batch else mask

    @torch.no_grad()
    def _policy_logps(self, out: dict, mode: str) -> torch.Tensor:
        """log π(y_t) of the sampled tokens under the current policy, without gradient: a forward pass, for when
        nothing was recorded during sampling."""
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model,
            torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1),
            torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1),
            out["completion_ids"].size(1),
            batch_size=batch_size,
        )
        return logps
