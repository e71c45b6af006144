"""RLEF's repair loop on GRPOTrainer's `rollout_func` seam: every answer the model writes runs on the visible tests
and the report comes back as the next user turn, without waiting for a tool call.

RLEF (Gehring et al. 2024, arXiv:2410.02089) runs each attempt on the public tests and returns the failures as the
next user message; the episode ends when the public tests pass or the turn limit is reached, and the reward is the
last attempt's verdict on the private tests. TRL's `environment_factory` runs feedback only when the model calls a
tool, and the CPU-sized models never did (docs/repair.md's signal checks), so this loop drives passk's
`RepairEnvironment` with `submit="answer"` itself:

    rollout = AnswerFeedbackRollout(rows, max_turns=3, visible="split:1")
    GRPOTrainer(..., reward_funcs=[rewards.repair.RepairReward()], rollout_func=rollout, train_dataset=rows)

Per rollout: the row's environment is reset (its instructions and visible tests join the user message), then each
turn generates with the trainer's own engine (`_generate_single_turn`: vLLM or transformers, the call TRL's tool
loop makes), `rewards.repair.answer_feedback` records the answer and runs it, and a report becomes a user turn
rendered by the chat template. Returned to TRL: the completion is every turn after the prompt, `env_mask` is 1 on
the model's tokens and 0 on the feedback's (TRL multiplies it into the loss mask and counts only the model's tokens
in `completions/mean_length`), the sampling log-probs are 0 on the feedback, and `environments` reaches the reward.
The whole completion stays within `max_completion_length`: a turn is cut to what is left, and a cut answer or one
whose report no longer fits ends the rollout.

TRL hands `rollout_func` the prompts, not the rows, so the rollout finds each prompt's row (its tests) in the rows it
was built with: give it every dataset the trainer samples.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rewards.repair import answer_feedback, repair_environment

__all__ = ["AnswerFeedbackRollout"]


def _key(value: Any) -> str:
    """A prompt's (or row's) identity, blind to the None-valued keys a `datasets.Dataset` adds to rows and messages."""

    def plain(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: plain(x) for k, x in v.items() if x is not None}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), sort_keys=True, default=str)


class AnswerFeedbackRollout:
    """A `rollout_func` for GRPOTrainer that runs RLEF's loop (see the module docstring).

    Args:
        rows: the dataset rows whose prompts the trainer will sample (train and eval): chat `prompt`s with the
            repair environment's columns (`test`, `entry_point`, ... or the stdin/stdout ones).
        sandbox: the sandbox the visible tests run in (default: passk's).
        options: `rewards.repair.RepairOptions` fields (`max_turns`, `visible`, `feedback`, ...); `submit` is
            `"answer"`.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]], sandbox: Any | None = None, **options: Any) -> None:
        if options.setdefault("submit", "answer") != "answer":
            raise ValueError(
                f'AnswerFeedbackRollout runs submit="answer" rollouts, got submit={options["submit"]!r}'
            )
        self.environment_factory = repair_environment(sandbox, **options)
        self.options = self.environment_factory.options
        self._rows: dict[str, dict[str, Any]] = {}
        self.add_rows(rows)

    def add_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Index more rows by their prompt (an evaluation set, say). Two rows with one prompt and different tests
        are refused: the rollout could not tell which tests a sampled prompt has."""
        for row in rows:
            prompt = row.get("prompt")
            if not isinstance(prompt, list):
                raise ValueError(
                    "AnswerFeedbackRollout needs chat prompts (a list of messages in `prompt`); got "
                    f"{type(prompt).__name__}: the feedback is a user turn"
                )
            key, row = _key(prompt), dict(row)
            if key in self._rows and _key(self._rows[key]) != _key(row):
                raise ValueError(
                    f"two rows share a prompt but not their tests (task {row.get('task_id', '?')}): the rollout "
                    "finds a row by its prompt"
                )
            self._rows[key] = row

    # ---- the chat template's pieces -------------------------------------------------------------------------------
    @staticmethod
    def _render(trainer: Any, messages: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
        ids = trainer.processing_class.apply_chat_template(
            messages,
            add_generation_prompt=generation_prompt,
            tokenize=True,
            chat_template=trainer.chat_template,
            return_dict=False,
            **trainer.chat_template_kwargs,
        )
        return list(ids)

    def _feedback_ids(self, trainer: Any, report: str) -> list[int]:
        """The tokens after an assistant turn's end-of-turn token that open a user turn holding `report` and the
        next assistant turn (a difference of two renderings, as TRL's `_get_tool_suffix_ids` takes a tool turn's)."""
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
        prefix = self._render(trainer, dummy, False)
        full = self._render(trainer, [*dummy, {"role": "user", "content": report}], True)
        ends = [i for i, t in enumerate(prefix) if t in trainer.eos_token_ids]
        if ends:  # "<|im_end|>\n": the model's turn stops at <|im_end|>, the newline is the template's
            prefix = prefix[: ends[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError(
                "the chat template renders a conversation's start differently once a turn follows"
            )
        return full[len(prefix) :]

    # ---- the loop -------------------------------------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        environments, prompt_ids = [], []
        for prompt in prompts:
            row = self._rows.get(_key(prompt))
            if row is None:
                raise ValueError(
                    "a sampled prompt is not among AnswerFeedbackRollout's rows: build it with (or add_rows) every "
                    "dataset the trainer samples"
                )
            env = self.environment_factory()
            note = env.reset(**row)
            messages = [*prompt[:-1], {**prompt[-1], "content": prompt[-1]["content"] + note}]
            environments.append(env)
            prompt_ids.append(self._render(trainer, messages, True))

        budget = trainer.max_completion_length
        eos = set(trainer.eos_token_ids)
        completion: list[list[int]] = [[] for _ in prompts]
        env_mask: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] | None = [[] for _ in prompts]
        active = list(range(len(prompts)))
        while active:
            turn_ids, turn_logprobs = trainer._generate_single_turn(
                [prompt_ids[i] + completion[i] for i in active], None, {}, num_generations=1
            )
            if turn_logprobs is None:  # transformers' generate records none; then no turn has them
                logprobs = None
            still = []
            for k, i in enumerate(active):
                ids = list(turn_ids[k])[: budget - len(completion[i])]
                completion[i] += ids
                env_mask[i] += [1] * len(ids)
                if logprobs is not None:
                    logprobs[i] += list(turn_logprobs[k])[: len(ids)]
                cut = not ids or ids[-1] not in eos
                text = trainer.processing_class.decode(ids, skip_special_tokens=True)
                report = answer_feedback(environments[i], text, last=cut)
                if report is None:
                    continue
                feedback = self._feedback_ids(trainer, report)
                if len(completion[i]) + len(feedback) >= budget:  # no room left for an answer
                    continue
                completion[i] += feedback
                env_mask[i] += [0] * len(feedback)
                if logprobs is not None:
                    logprobs[i] += [0.0] * len(feedback)
                still.append(i)
            active = still
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion,
            "logprobs": logprobs,
            "env_mask": env_mask,
            "environments": environments,
        }
