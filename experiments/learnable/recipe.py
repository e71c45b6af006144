"""The RL recipe on the learnable task and the measurement of learning, shared by tests/learnable/test_learning.py and
benchmarks/bench_learning.py.

- `RL_DEFAULTS` / `rl_config(method, ...)`: every method's trainer config for the task (the method's own values from
  `experiments.trainers.METHODS` underneath), with the steps derived from a fresh-prompt budget.
- `HELDOUT_EVAL` / `heldout_score(...)`: the held-out evaluation (`experiments.evaluation.evaluate.evaluate_model`), sampled
  at the training temperature and greedy.
- `two_proportion_z`, `greedy_sign_test`: the statistics a gain is judged by.

The task's data (problems, rows, the split, the task model) is `experiments.learnable.tasks`; its warm start is
`experiments.learnable.warm_start`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.trainers import CPU_ARGS

__all__ = [
    "HELDOUT_EVAL",
    "RL_DEFAULTS",
    "HeldoutScore",
    "greedy_sign_test",
    "heldout_score",
    "rl_config",
    "two_proportion_z",
]

# The GRPO settings of the prototype the task was sized from (docs/provenance.md): 8 prompts x 8 completions per
# step, lr 3e-4 constant after 5 warmup steps; completions capped at 16 tokens (the longest canonical body is 10).
RL_DEFAULTS: dict[str, Any] = CPU_ARGS | {
    "logging_steps": 1,
    "per_device_train_batch_size": 64,
    "num_generations": 8,
    "max_completion_length": 16,
    "temperature": 1.0,
    "learning_rate": 3e-4,
    "lr_scheduler_type": "constant_with_warmup",
    "warmup_steps": 5,
    "max_grad_norm": 1.0,
}


def rl_config(
    method: str,
    output_dir: str | Path,
    *,
    budget_prompts: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    **overrides: Any,
):
    """The config of `method` for this task: METHODS defaults, then RL_DEFAULTS, then `overrides`. Give `budget_prompts` (the fresh prompts to sample, each with `num_generations` completions)
    for a fair comparison: `experiments.run.budget.derive_max_steps` turns it into this method's optimizer steps
    (PPO's epochs over each batch take more steps for the same samples). `max_steps` sets the steps instead."""
    from experiments.run.budget import derive_max_steps
    from experiments.trainers import build_config

    if (budget_prompts is None) == (max_steps is None):
        raise ValueError("rl_config: give exactly one of budget_prompts and max_steps")
    kwargs = RL_DEFAULTS | overrides
    config = build_config(method, output_dir=str(output_dir), max_steps=max_steps or 1, seed=seed, **kwargs)
    if budget_prompts is not None:
        config.max_steps = derive_max_steps(budget_prompts, config)
    return config


# Held-out evaluation of the proof of learning: 2 samples at the training temperature per problem, plus greedy.
HELDOUT_EVAL: dict[str, Any] = {
    "n_samples": 2,
    "ks": (1,),
    "temperature": 1.0,
    "top_p": 1.0,
    "max_new_tokens": 16,
    "greedy": True,
    "seed": 0,
    "batch_size": 250,
    "progress": False,
}


@dataclass(frozen=True)
class HeldoutScore:
    """Passing samples out of all samples (`passed`/`n`, at T=1) and greedy passes out of problems; `greedy`
    holds each problem's greedy verdict (in row order) and `result` the full `EvalResult.to_dict()`."""

    passed: int
    n: int
    greedy_passed: int
    problems: int
    greedy: tuple[bool, ...] = ()
    result: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def rate(self) -> float:
        return self.passed / self.n

    @property
    def greedy_rate(self) -> float:
        return self.greedy_passed / self.problems


def heldout_score(model: Any, tokenizer: Any, rows: Any, **overrides: Any) -> HeldoutScore:
    """Score `model` on `rows` with `experiments.evaluation.evaluate.evaluate_model` and the HELDOUT_EVAL settings."""
    from experiments.evaluation.evaluate import evaluate_model

    settings = HELDOUT_EVAL | overrides
    result = evaluate_model(model, tokenizer, rows, **settings)
    greedy = tuple(bool(p.greedy_passed) for p in result.problems) if settings["greedy"] else ()
    return HeldoutScore(
        passed=sum(p.correct for p in result.problems),
        n=settings["n_samples"] * len(result.problems),
        greedy_passed=sum(greedy),
        problems=len(result.problems),
        greedy=greedy,
        result=result.to_dict(),
    )


def two_proportion_z(passed_before: int, n_before: int, passed_after: int, n_after: int) -> float:
    """One-sided two-proportion z statistic of after > before, with the pooled standard error."""
    pooled = (passed_before + passed_after) / (n_before + n_after)
    se = (pooled * (1 - pooled) * (1 / n_before + 1 / n_after)) ** 0.5
    return (passed_after / n_after - passed_before / n_before) / se if se > 0 else 0.0


def greedy_sign_test(before: HeldoutScore, after: HeldoutScore) -> tuple[int, int, float]:
    """(problems greedy gained, problems greedy lost, one-sided p) of an exact sign test (McNemar's) that the
    greedy pass rate rose: both scores cover the same problems, so only the problems whose verdict changed
    count, and under "no change" a gain and a loss are equally likely."""
    if len(before.greedy) != len(after.greedy) or not before.greedy:
        raise ValueError("greedy_sign_test needs per-problem greedy verdicts of the same problems")
    gained = sum(a and not b for b, a in zip(before.greedy, after.greedy))
    lost = sum(b and not a for b, a in zip(before.greedy, after.greedy))
    changed = gained + lost
    p = sum(math.comb(changed, i) for i in range(gained, changed + 1)) / 2**changed
    return gained, lost, p
