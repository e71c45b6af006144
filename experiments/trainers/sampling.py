"""log π of the sampled tokens, recorded while `generate` samples them, to save a forward pass of the policy.

Both REINFORCE with a KL penalty and PPO need log π_old(y_t), the log-probabilities under the policy that
sampled the batch. GRPOTrainer computes them with a second forward pass over the whole generation batch (when
off-policy) or not at all (on-policy). `SampledLogprobsMixin` records them during generation instead: a logits
processor reads the distribution generate samples each token from. Only the transformers generation path is
recorded (not vLLM, where GRPOTrainer computes them anyway for its importance-sampling correction, nor continuous
batching), and only without a repetition penalty (which would change the distribution); every recording is
checked against the completion ids it must describe, and callers fall back to a forward pass if it does not match.

The mixin also owns the log-prob temperature of passk's trainers (`logprob_temperature` in their configs): the
temperature the logits are divided by wherever log π is computed (the loss, log π_old, log π_ref, the recording).
GRPOTrainer uses the sampling temperature; the seed experiment takes log π from the raw logits (T = 1) while it
samples at 0.8.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers import LogitsProcessor, LogitsProcessorList
from trl.trainer.utils import add_fused_lm_head

__all__ = ["SampledLogprobs", "SampledLogprobsMixin", "check_logprob_temperature"]


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

    def _logprob_temperature(self) -> float:
        """The temperature log π is computed at: the config's `logprob_temperature`, else the sampling one."""
        temperature = getattr(self.args, "logprob_temperature", None)
        return self.temperature if temperature is None else float(temperature)

    def _apply_logprob_temperature(self) -> None:
        """Call at the end of `__init__`: when the log-prob temperature differs from the sampling temperature,
        patch the policy's and the reference model's fused LM heads again with it (GRPOTrainer patched them with
        the sampling temperature; the new head wraps the old one, whose plain forward generation still uses)."""
        temperature = self._logprob_temperature()
        if temperature == self.temperature:
            return
        model = self.model.get_base_model() if is_peft_model(self.model) else self.model  # as GRPOTrainer does
        cast = self.args.cast_lm_head_to_fp32
        add_fused_lm_head(model, temperature=temperature, cast_lm_head_to_fp32=cast, outputs=("log_probs", "entropy"))
        if self.ref_model is not None:
            add_fused_lm_head(self.ref_model, temperature=temperature, cast_lm_head_to_fp32=cast)

    def _can_record(self) -> bool:
        return (
            not self.use_vllm
            and not self.use_transformers_continuous_batching
            and self.repetition_penalty == 1.0  # a penalty would change the recorded distribution
        )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        record = self._wants_sampled_logps() and self._can_record()
        self._sampling_recorder = SampledLogprobs(self._logprob_temperature()) if record else None
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
