"""Multi-turn repair in passk's runs: its evaluation, the token budget that keeps it fair against single-turn, and a
tool-capable chat template for ChatML models.

- `evaluate_repair(model, tokenizer, rows, turns=N)`: samples `n_samples` rollouts per problem through the repair
  environment (`rewards.repair`) exactly as GRPOTrainer runs them in training (its own generation, tool loop and
  tool mask: `GRPOTrainer._generate_and_score_completions` in eval mode, the seam passk's trainers override and
  tests/trainers/test_trl_seams.py pins) and reports pass@1 of the final answer, pass@1 of the first attempt and
  the repair rate (failed first, passed final), each with a bootstrap interval over problems, with the generated
  tokens (the model's own, TRL's tool mask) and the sandbox runs the visible tests took. `turns=1` scores a model
  as single-turn (one attempt, through the same environment and the same hidden tests), so a single-turn-trained
  model's repair ability and its plain pass@1 come from one definition.
- `GeneratedTokenBudget`: a callback that stops training once the model has generated a number of tokens (TRL's
  `completions/mean_length` counts the model's own tokens only), so that single-turn GRPO at k samples and
  multi-turn GRPO at N turns spend the same generation budget.
- `use_tool_template(tokenizer)`: TRL's Qwen2.5 chat template on a ChatML tokenizer (the tiny model, SmolLM2), whose
  own template drops tool calls; TRL knows how to parse that template's tool calls.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback

from experiments.evaluation.scorer import scorer_stamp
from experiments.evaluation.stats import bootstrap_ci

__all__ = ["GeneratedTokenBudget", "evaluate_repair", "repair_loop", "repair_trainer", "use_tool_template"]


def use_tool_template(tokenizer: Any) -> Any:
    """Give a ChatML tokenizer TRL's Qwen2.5 chat template (tools in the system message, `<tool_call>` JSON, tool
    results as `<tool_response>`), which `trl.chat_template_utils.add_response_schema` parses; the same tokens
    the model's own ChatML template uses, plus a default system message. Returns the tokenizer."""
    from trl.chat_template_utils import qwen2_5_chat_template

    inner = getattr(tokenizer, "tokenizer", tokenizer)
    if "<|im_start|>" not in inner.get_vocab():
        raise ValueError(
            f"use_tool_template is for ChatML tokenizers (<|im_start|>); {inner.name_or_path or 'this one'} is not: "
            "give it a tool-capable chat_template of its own family"
        )
    inner.chat_template = qwen2_5_chat_template
    return tokenizer


class GeneratedTokenBudget(TrainerCallback):
    """Stops training after the optimizer step at which the model's generated tokens reach `max_tokens`.

    Reads TRL's logged `completions/mean_length` (tool-result tokens excluded) times the completions of the step
    (`completions_per_step`), so it needs `logging_steps=1`. `tokens` holds the running total; a run resumed from a
    checkpoint starts it from the restored log history, so the budget spans the stop."""

    def __init__(self, max_tokens: int, completions_per_step: int) -> None:
        if max_tokens < 1 or completions_per_step < 1:
            raise ValueError("max_tokens and completions_per_step must be >= 1")
        self.max_tokens, self.completions_per_step = int(max_tokens), int(completions_per_step)
        self.tokens = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.logging_steps != 1:
            raise ValueError(
                f"GeneratedTokenBudget reads every step's log: set logging_steps=1 (got {args.logging_steps})"
            )
        self.tokens = 0.0
        for logs in state.log_history:  # empty on a fresh start; the checkpoint's steps on a resume
            self._count(logs, control)

    def _count(self, logs: Mapping[str, Any], control: Any) -> None:
        if "completions/mean_length" in logs:
            self.tokens += float(logs["completions/mean_length"]) * self.completions_per_step
            if self.tokens >= self.max_tokens:
                control.should_training_stop = True

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs:
            self._count(logs, control)


def repair_loop(rows: Any, *, turns: int, **options: Any) -> dict[str, Any]:
    """GRPOTrainer's keyword for a repair rollout of `rows`: `rollout_func`, RLEF's loop, when `submit="answer"`
    (`experiments.trainers.answer_feedback`), else `environment_factory` (the model calls `run_tests`). `options`
    are `RepairOptions` fields besides `max_turns`."""
    from experiments.trainers.answer_feedback import AnswerFeedbackRollout
    from rewards.repair import repair_environment

    if options.get("submit", "tool") == "answer":
        return {"rollout_func": AnswerFeedbackRollout(rows, max_turns=turns, **options)}
    return {"environment_factory": repair_environment(max_turns=turns, **options)}


def _chat_prompt(row: Mapping[str, Any]) -> list[dict[str, str]]:
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        return prompt
    from experiments.inputs.data import chat_messages

    return chat_messages(row.get("code_prompt") or prompt or "")


def repair_trainer(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    turns: int,
    n_samples: int,
    prompts_per_batch: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 0.9,
    seed: int = 0,
    output_dir: str | None = None,
    use_vllm: bool = False,
    vllm_max_model_length: int = 2048,
    **options: Any,
) -> tuple[Any, Any]:
    """A GRPOTrainer (beta 0, no reference model) that runs repair rollouts of `rows`, and its `RepairReward`.
    `options` are `rewards.repair.RepairOptions` fields besides `max_turns`; with `submit="answer"` every answer is
    run and its report is the next user turn (`experiments.trainers.answer_feedback`), else the model runs its code
    with the `run_tests` tool (TRL's `environment_factory`).

    `use_vllm`: TRL's colocated vLLM engine generates every turn (built from `model.name_or_path`, then synced
    from `model` before the first generation; on vLLM's CPU backend through `experiments.trainers.vllm_cpu`, in
    float32 on a host without AVX512-BF16). TRL seeds that engine with the process index, not `seed`."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from experiments.trainers.vllm_cpu import (
        check_cpu_attention,
        engine_dtype,
        host_dtype,
        install_cpu_vllm_sync,
    )
    from rewards.repair import RepairReward, check_tool_template

    dataset = Dataset.from_list([{**dict(r), "prompt": _chat_prompt(r)} for r in rows])
    rollout = repair_loop(dataset, turns=turns, **options)
    if "environment_factory" in rollout:  # the tool loop needs a template that renders tool calls
        check_tool_template(tokenizer)
    reward = RepairReward()
    cpu = next(model.parameters()).device.type == "cpu"
    engine: dict[str, Any] = {}
    if use_vllm:
        check_cpu_attention(model.name_or_path)
        # No importance-sampling correction: these rollouts are scored, not trained on, and the correction would
        # cost a forward pass of the policy over every completion.
        engine = {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_max_model_length": vllm_max_model_length,
            "vllm_importance_sampling_correction": False,
        }
    args = GRPOConfig(
        output_dir=output_dir or tempfile.mkdtemp(prefix="passk-repair-"),
        per_device_train_batch_size=n_samples * prompts_per_batch,
        per_device_eval_batch_size=n_samples * prompts_per_batch,
        num_generations=max(n_samples, 2),
        num_generations_eval=n_samples,
        max_completion_length=max_new_tokens,
        max_tool_calling_iterations=turns,
        temperature=temperature,
        top_p=top_p,
        beta=0.0,
        use_cpu=cpu,
        bf16=False,
        report_to="none",
        save_strategy="no",
        seed=seed,
        **engine,
    )
    with engine_dtype(host_dtype() if use_vllm else None):
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            **rollout,
        )
    install_cpu_vllm_sync(trainer)  # no-op unless the engine is colocated on vLLM's CPU backend
    return trainer, reward


def _distinct_share(problems: Sequence[Mapping[str, Any]]) -> float:
    """Over problems with more than one sample: the share of extra samples that differ from the problem's others
    ((distinct - 1) / (n - 1), averaged); 1.0 when every sample differs, 0.0 when each problem's are copies."""
    shares = [(p["distinct_rollouts"] - 1) / (p["n"] - 1) for p in problems if p["n"] > 1]
    return float(np.mean(shares)) if shares else float("nan")


def evaluate_repair(
    model: Any,
    tokenizer: Any,
    dataset: Iterable[Mapping[str, Any]],
    *,
    turns: int = 3,
    n_samples: int = 4,
    temperature: float = 0.7,
    top_p: float = 0.9,
    max_new_tokens: int = 256,
    seed: int = 0,
    batch_size: int = 4,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    use_vllm: bool = False,
    progress: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """Repair rollouts of every problem (`n_samples` each, up to `turns` submissions) and their summary.

    `batch_size` counts problems per generation batch (a progress bar counts the batches unless `progress` is
    False); `options` are `RepairOptions` fields (`visible`, `feedback`, `submit`, `timeout`, ...). Returns a
    JSON-ready dict: `metrics` (`final_pass@1`, `first_pass@1`, `repair_rate`, each `{"value", "ci"}`),
    `cut_by_cap` (rollouts), `tokens_generated` (the model's own), `sandbox_runs` (visible tests),
    `submissions_mean`, `problems` (per problem: n, first and final passes, `distinct_rollouts`: how many of its
    samples differ token for token), `distinct_rollouts_share` (0.0 when every problem's samples are copies) and
    the settings. `use_vllm`: TRL's colocated vLLM engine generates (`repair_trainer`); the engine and its
    torch.distributed setup are not torn down when the call returns, so run one such evaluation per process, as
    benchmarks/repair_compare.py does."""
    rows = [dict(r) for r in dataset]
    if not rows:
        raise ValueError("the evaluation dataset is empty")
    if turns < 1 or n_samples < 1:
        raise ValueError(f"turns and n_samples must be >= 1, got {turns} and {n_samples}")
    trainer, reward = repair_trainer(
        model,
        tokenizer,
        rows,
        turns=turns,
        n_samples=n_samples,
        prompts_per_batch=batch_size,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        use_vllm=use_vllm,
        **options,
    )
    prompts = list(trainer.train_dataset)
    records: list[Any] = []
    rollouts: list[tuple[int, ...]] = []  # each rollout's tokens, the feedback's too: to count copies
    tokens, cut = 0.0, 0.0
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    t0 = time.perf_counter()
    try:
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []),
        ):
            torch.manual_seed(seed)
            starts = range(0, len(prompts), batch_size)
            desc = f"repair eval, {turns} turn{'s' * (turns > 1)}, batches of {batch_size} problems"
            for start in tqdm(starts, desc=desc, disable=not progress, leave=False):
                # A dict per rollout: TRL writes a rollout_func's per-rollout fields (its environments) into the
                # input dicts, so a dict shared by a problem's samples would give all of them the last one's.
                inputs = [dict(row) for row in prompts[start : start + batch_size] for _ in range(n_samples)]
                output = trainer._generate_and_score_completions(inputs)
                records += reward.last_records
                for ids, mask in zip(output["completion_ids"].tolist(), output["completion_mask"].tolist()):
                    rollouts.append(tuple(t for t, m in zip(ids, mask) if m))
                tokens += trainer._metrics["eval"]["completions/mean_length"][-1] * len(inputs)
                # TRL's share of rollouts whose last token is not EOS: here, cut by the cap (no stop strings)
                cut += trainer._metrics["eval"]["completions/clipped_ratio"][-1] * len(inputs)
    finally:
        model.train(was_training)
    seconds = time.perf_counter() - t0

    by_task: dict[str, list[Any]] = {}
    distinct: dict[str, set[tuple[int, ...]]] = {}
    for i, rec in enumerate(records):
        task = prompts[i // n_samples].get("task_id") or str(i // n_samples)
        by_task.setdefault(task, []).append(rec)
        distinct.setdefault(task, set()).add(rollouts[i])
    problems = [
        {
            "task_id": task,
            "n": len(recs),
            "first_passed": sum(r.first_passed for r in recs),
            "final_passed": sum(r.final_passed for r in recs),
            "submissions": sum(r.submissions for r in recs),
            "distinct_rollouts": len(distinct[task]),
        }
        for task, recs in by_task.items()
    ]
    final = np.array([p["final_passed"] / p["n"] for p in problems])
    first = np.array([p["first_passed"] / p["n"] for p in problems])

    def estimate(values: np.ndarray) -> dict[str, Any]:
        lo, hi = bootstrap_ci(values, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed)
        return {"value": float(values.mean()) if values.size else float("nan"), "ci": [lo, hi]}

    failed_first = [r for r in records if not r.first_passed]
    # The repair rate over problems: per problem, the share of its failed first attempts whose final passed.
    rates = np.array(
        [
            sum(r.final_passed for r in recs if not r.first_passed) / sum(not r.first_passed for r in recs)
            for recs in by_task.values()
            if any(not r.first_passed for r in recs)
        ]
    )
    return {
        "metrics": {
            "final_pass@1": estimate(final),
            "first_pass@1": estimate(first),
            "repair_rate": estimate(rates),
        },
        "repairs": sum(r.final_passed for r in failed_first),
        "failed_first": len(failed_first),
        "tokens_generated": int(round(tokens)),
        "cut_by_cap": int(round(cut)),  # rollouts whose last turn the cap cut (that answer got no report)
        "sandbox_runs": sum(r.sandbox_runs for r in records),
        "submissions_mean": sum(r.submissions for r in records) / len(records),
        # Samples of one problem that are token-for-token copies: 1.0 means every problem's samples differ.
        "distinct_rollouts_share": _distinct_share(problems),
        "generation_seconds": seconds,
        "num_problems": len(problems),
        "problems": problems,
        "settings": {
            "turns": turns,
            "n_samples": n_samples,
            "temperature": temperature,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "seed": seed,
            "batch_size": batch_size,
            "generator": "vllm" if use_vllm else "transformers",
            **options,
        },
        "confidence": confidence,
        "scorer": scorer_stamp(),
    }
