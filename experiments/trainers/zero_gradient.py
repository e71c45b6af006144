"""`SkipZeroGradientSteps`: an optimizer step whose gradient is exactly zero leaves the weights as they are.

A GRPO step in which no group has reward variance has advantage 0 everywhere; with no KL term (β = 0, TRL's
default) and no entropy bonus its loss carries no gradient. AdamW steps anyway, on its momentum: after a real
gradient g at step t, a zero-gradient step moves each weight by

    lr · β1·m_t / (1 - β1^(t+1)) / (sqrt(β2·v_t / (1 - β2^(t+1))) + ε)

which for the defaults (β1 = 0.9, β2 = 0.999) is about 0.67 of the first step's size right after it (t = 1) and
about 0.9 of it late in training: the update of a step that saw no signal is the last one's, repeated. (The
REINFORCE family's batch baseline and PPO's advantages are 0 the same way when every reward is equal.)

The callback sets every gradient of such a step to None just before `optimizer.step()`; torch's optimizers skip a
parameter without a gradient, so neither its weight nor its optimizer state (moments, step count) changes, as if
the step had not been taken. The learning-rate schedule still advances: it counts optimizer steps taken by the
trainer, signal or not. The rule is the gradient's, not the reward's: a step with a KL term or an entropy bonus has
a gradient and is taken. Each optimizer step logs `optimizer/zero_gradient_skipped` (1 skipped, 0 taken; its mean
over a logging window is the share skipped).

Where it works: one process, DDP (gradients are all-reduced before the check, so every process decides alike).
Refused: DeepSpeed and FSDP (their optimizers keep the gradients in their own flat or sharded buffers, which the
check cannot read whole), and fp16 without gradient clipping (the gradient scaler would then unscale no gradient
and stop on its own assertion).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

__all__ = ["ZERO_GRADIENT_METRIC", "SkipZeroGradientSteps", "gradient_is_zero", "unsupported_setup"]

ZERO_GRADIENT_METRIC = "optimizer/zero_gradient_skipped"


def gradient_is_zero(optimizer: Any) -> bool:
    """Whether every gradient the optimizer would use is None or exactly zero (a NaN or inf is not zero)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None and bool(p.grad.ne(0).any()):
                return False
    return True


def unsupported_setup(distributed: str, fp16: bool, max_grad_norm: float) -> str | None:
    """Why the skip cannot work in this set-up (one line, starting with the option's name), else None.
    `distributed` is accelerate's `DistributedType` (a str: "NO", "MULTI_GPU", "DEEPSPEED", "FSDP", ...)."""
    name = str(getattr(distributed, "value", distributed)).upper()
    if name in ("DEEPSPEED", "FSDP"):
        return (
            f"skip_zero_gradient_steps: not supported under {name} (its optimizer "
            "keeps the gradients in its own buffers); set it false, or train with DDP or on one process"
        )
    if fp16 and not max_grad_norm:
        return (
            "skip_zero_gradient_steps: fp16 without gradient clipping (max_grad_norm 0) would leave the gradient "
            "scaler nothing to unscale; set max_grad_norm > 0, use bf16, or set it false"
        )
    return None


class SkipZeroGradientSteps(TrainerCallback):
    """Skip the optimizer steps whose gradient is exactly zero (see the module docstring).

    Args:
        trainer: The trainer it is added to (`trainer.add_callback(SkipZeroGradientSteps(trainer))`); its TRL
            metrics (`_metrics["train"]`, where they exist) receive `optimizer/zero_gradient_skipped` per step.

    Raises:
        ValueError: under DeepSpeed or FSDP, or with fp16 and `max_grad_norm` 0; the message says what to change.
    """

    def __init__(self, trainer: Any) -> None:
        problem = unsupported_setup(
            trainer.accelerator.distributed_type,
            getattr(trainer.args, "fp16", False),
            trainer.args.max_grad_norm,
        )
        if problem:
            raise ValueError(problem)
        self._metrics = getattr(trainer, "_metrics", None)
        self.skipped_steps: list[int] = []  # the global step each skipped optimizer step would have made

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        skip = optimizer is not None and gradient_is_zero(optimizer)
        if skip:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self.skipped_steps.append(state.global_step + 1)
        if self._metrics is not None:
            self._metrics["train"][ZERO_GRADIENT_METRIC].append(float(skip))
        return control
