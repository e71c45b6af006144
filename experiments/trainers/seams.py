"""The GRPOTrainer seams passk's own trainers (PPO, the REINFORCE family) share, in one mixin.

`GRPOSeamsMixin` goes before `GRPOTrainer` in a trainer's bases. It gives each trainer, once:

- `_calculate_rewards`: GRPOTrainer's, keeping the gathered per-function rewards in `_last_rewards_per_func` for
  the trainer's own advantage estimator (GRPOTrainer folds them into its advantages and drops them), and logging
  the share of passing completions and their mean length (`answers/...`);
- `_completion_logps`: the policy's forward pass over prompt + completion (GRPOTrainer's
  `_get_per_token_logps_and_entropies`), and `_policy_logps`, the same without gradient for log π_old;
- `_generate_single_turn`: records log π of the sampled tokens while `generate` samples them
  (experiments.trainers.sampling.SampledLogprobs) when `_wants_sampled_logps()` says so, read back with
  `_sampled_logps(out)`;
- the log-prob temperature (`logprob_temperature` in their configs): the temperature the logits are divided by
  wherever log π is computed (the loss, log π_old, log π_ref, the recording). GRPOTrainer uses the sampling
  temperature; the seed experiment takes log π from the raw logits (T = 1) while it samples at 0.8;
- `_mode()` ("train" or "eval"), `_loss_mask(batch)` (the completion tokens that count) and `_set_advantages`
  (advantages of the gathered batch into this process's slice and the logged completions table);
- a checkpoint taken inside a rollout (a generation batch that feeds several optimizer steps) keeps the rest of
  it (`ROLLOUT_FILE`, one per process), so that resuming continues that rollout: GRPOTrainer would generate a new
  one, sampling its prompts a second time, and its micro-step counter would start again at 0.

tests/trainers/test_trl_seams.py pins the signatures of the GRPOTrainer methods overridden or called here.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import is_peft_model, send_to_device
from transformers import LogitsProcessorList
from trl.trainer.utils import add_fused_lm_head

from .sampling import SampledLogprobs

__all__ = ["ROLLOUT_FILE", "GRPOSeamsMixin"]

ROLLOUT_FILE = "passk_rollout_rank{rank}.pt"  # in a checkpoint taken inside a rollout


class GRPOSeamsMixin:
    """For GRPOTrainer subclasses with their own advantages and loss; see the module docstring."""

    _sampling_recorder: SampledLogprobs | None = None
    _last_rewards_per_func: torch.Tensor | None = None

    def _mode(self) -> str:
        """Which of GRPOTrainer's metric and batch-size settings apply now: "train" or "eval"."""
        return "train" if self.model.training else "eval"

    # ---- rewards ------------------------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # (N_global, n_funcs), gathered across processes
        self._log_passed_length(rewards_per_func, completion_ids_list)
        return rewards_per_func

    def _log_passed_length(self, rewards_per_func: torch.Tensor, completion_ids_list: list) -> None:
        """`answers/passed_frac` and, when any passed, `answers/passed_mean_length` (tokens): a completion passes
        when every reward function that scored it gave 1.0. A policy that learns to pass with shorter and shorter
        answers shows here before its held-out pass rate falls (TRL logs lengths of all completions only)."""
        lengths = torch.tensor([len(ids) for ids in completion_ids_list], device=rewards_per_func.device)
        lengths = self.accelerator.gather(lengths).float()  # the rewards are gathered in process order too
        scored = ~torch.isnan(rewards_per_func)
        passed = scored.any(dim=1) & torch.where(scored, rewards_per_func == 1.0, True).all(dim=1)
        metrics = self._metrics[self._mode()]
        metrics["answers/passed_frac"].append(passed.float().mean().item())
        if passed.any():
            metrics["answers/passed_mean_length"].append(lengths[passed].mean().item())

    def _set_advantages(self, out: dict[str, Any], advantages: torch.Tensor) -> dict[str, Any]:
        """Put advantages computed over the gathered batch into `out` (this process's slice) and into the
        completions table GRPOTrainer logs, which holds GRPOTrainer's own advantages until then."""
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        n_local = out["completion_ids"].size(0)
        start = self.accelerator.process_index * n_local
        out["advantages"] = advantages[start : start + n_local].to(out["completion_ids"].device)
        return out

    # ---- the policy's forward pass over prompt + completion ----------------------------------------------------
    @staticmethod
    def _prompt_and_completion(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask) of the left-padded prompts followed by the right-padded completions."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        return input_ids, attention_mask

    def _completion_logps(
        self, model: Any, batch: dict, *, batch_size: int | None = None, compute_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log π(y_t), entropy or None) per completion token, at the log-prob temperature (GRPOTrainer's fused head)."""
        input_ids, attention_mask = self._prompt_and_completion(batch)
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            batch["completion_ids"].size(1),
            batch_size=batch_size,
            compute_entropy=compute_entropy,
        )
        return logps, entropies

    @torch.no_grad()
    def _policy_logps(self, out: dict, mode: str) -> torch.Tensor:
        """log π(y_t) of the sampled tokens under the current policy, without gradient: a forward pass, for when
        nothing was recorded during sampling."""
        batch_size = (
            self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        )
        return self._completion_logps(self.model, out, batch_size=batch_size)[0]

    @staticmethod
    def _loss_mask(batch: dict) -> torch.Tensor:
        """The completion tokens that count: GRPOTrainer's completion mask, without tool-result tokens."""
        mask = batch["completion_mask"]
        return mask * batch["tool_mask"] if "tool_mask" in batch else mask

    # ---- checkpoints inside a rollout ---------------------------------------------------------------------------
    def _inside_rollout(self) -> bool:
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self._buffered_inputs is not None and self._step % generate_every != 0

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if not self._inside_rollout():
            return
        checkpoint = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        checkpoint.mkdir(parents=True, exist_ok=True)  # every process writes its own share of the rollout
        rollout = {"step": self._step, "buffered_inputs": self._buffered_inputs}
        torch.save(rollout, checkpoint / ROLLOUT_FILE.format(rank=self.accelerator.process_index))

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        path = Path(checkpoint or "") / ROLLOUT_FILE.format(rank=self.accelerator.process_index)
        if checkpoint is not None and path.is_file():
            # weights_only=False: the buffer holds GRPOTrainer's batch dicts; the file is this run's own.
            rollout = torch.load(path, map_location="cpu", weights_only=False)
            self._step = rollout["step"]
            self._buffered_inputs = send_to_device(rollout["buffered_inputs"], self.accelerator.device)

    # ---- log π recorded while sampling (see sampling.py) --------------------------------------------------------
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

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        record = self._wants_sampled_logps() and self._can_record()
        self._sampling_recorder = SampledLogprobs(self._logprob_temperature()) if record else None
        if not record:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        model = self.accelerator.unwrap_model(self.model)
        model.generate = functools.partial(
            model.generate, logits_processor=LogitsProcessorList([self._sampling_recorder])
        )
        try:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        finally:
            del model.generate  # the instance attribute; the class's method is back

    def _sampled_logps(self, out: dict) -> torch.Tensor | None:
        """The `(B, C)` log π recorded while sampling `out`, or None when nothing usable was recorded."""
        recorder, self._sampling_recorder = self._sampling_recorder, None
        if recorder is None:
            return None
        return recorder.per_token_logps(out["completion_ids"], self._loss_mask(out))

    # ---- the log-prob temperature ------------------------------------------------------------------------------
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
        model = (
            self.model.get_base_model() if is_peft_model(self.model) else self.model
        )  # as GRPOTrainer does
        cast = self.args.cast_lm_head_to_fp32
        add_fused_lm_head(
            model, temperature=temperature, cast_lm_head_to_fp32=cast, outputs=("log_probs", "entropy")
        )
        if self.ref_model is not None:
            add_fused_lm_head(self.ref_model, temperature=temperature, cast_lm_head_to_fp32=cast)
