"""A synthetic, unit-test-verified code task that a ~1M-parameter model learns on two CPU cores.

Every problem is a one-line Python function with a docstring, checked by four asserts:

    def calc(n):
        \"\"\"Return n plus 27.\"\"\"
        return n + 27

There are 17 operations (arithmetic with a constant, max/min, string and list built-ins), 8 int, 5 str and 5 list
argument names and 6 function names: 35,940 distinct problems, each identified by (op, arg, fn, C). The split is by
*family*, the expected body with the argument name left open (`{a} + 27`): a family is held out when the sha256
of its name is 0 mod 5 (157 of 749 families, 7,584 problems), so no held-out body appears in the warm start or
in RL, not even under another function or argument name. Rows have the columns of HumanEval rows (`task_id`,
`prompt`, `code_prompt`, `canonical_solution`, `test`, `entry_point`), so `rewards.unit_test_reward` and
`experiments.evaluation` take them unchanged.

`warm_start` is a short supervised fine-tune with TRL's `SFTTrainer` (prompt-completion data, loss on the
completion only) that stops while the model is only partly right: after 95 steps (about 12 s) the task model
(`task_model_path`, 0.9M parameters, a BPE trained on the training split) passes 215 of 1000 held-out samples at
T=1 and 338 of 500 greedily. Most of its errors are miscopied constants, which a unit-test reward can fix; that
leaves room for RL to show a gain far beyond sampling noise in a few minutes. `RL_DEFAULTS`, `rl_config`,
`heldout_score` and `two_proportion_z` are the RL recipe and the measurement shared by tests/test_learning.py and
benchmarks/bench_learning.py.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "OPS",
    "Op",
    "Problem",
    "HELDOUT_EVAL",
    "HeldoutScore",
    "RL_DEFAULTS",
    "RL_METHOD_OVERRIDES",
    "all_problems",
    "build_row",
    "build_rows",
    "family",
    "greedy_sign_test",
    "heldout_rows",
    "is_heldout",
    "rl_config",
    "sft_rows",
    "task_model_path",
    "tokenizer_corpus",
    "train_rows",
    "two_proportion_z",
    "warm_start",
    "WARM_START_STEPS",
]

# The model of learnable-task.md: 4 layers, hidden 128, MLP 384, tied embeddings, 512-token BPE: ~0.92M params.
TASK_MODEL_KWARGS: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 128,
    "num_layers": 4,
    "num_heads": 4,
    "num_kv_heads": 4,
    "intermediate_size": 384,
    "max_position_embeddings": 256,
}

INT_ARGS = ("x", "n", "a", "b", "k", "m", "v", "y")
STR_ARGS = ("s", "t", "w", "text", "word")
LIST_ARGS = ("xs", "nums", "vals", "items", "arr")
FN_NAMES = ("f", "g", "h", "fn", "calc", "solve")


@dataclass(frozen=True)
class Op:
    """One operation of the family: its docstring and body templates, argument kind and constant range."""

    name: str
    kind: str  # "int" | "str" | "list"
    doc: str  # format fields: {a} (argument name), {c} (constant)
    expr: str
    ref: Callable[..., Any]  # reference implementation, ref(value, c)
    consts: tuple[int, int] | None = None  # inclusive range of C, or None when the op takes no constant


OPS: tuple[Op, ...] = (
    Op("plus", "int", "Return {a} plus {c}.", "{a} + {c}", lambda x, c: x + c, (1, 99)),
    Op("minus", "int", "Return {a} minus {c}.", "{a} - {c}", lambda x, c: x - c, (1, 99)),
    Op("times", "int", "Return {a} times {c}.", "{a} * {c}", lambda x, c: x * c, (2, 99)),
    Op("mod", "int", "Return {a} modulo {c}.", "{a} % {c}", lambda x, c: x % c, (2, 99)),
    Op("fdiv", "int", "Return {a} divided by {c}, rounded down.", "{a} // {c}", lambda x, c: x // c, (2, 99)),
    Op("max", "int", "Return the larger of {a} and {c}.", "max({a}, {c})", lambda x, c: max(x, c), (-20, 99)),
    Op("min", "int", "Return the smaller of {a} and {c}.", "min({a}, {c})", lambda x, c: min(x, c), (-20, 99)),
    Op("square", "int", "Return the square of {a}.", "{a} * {a}", lambda x, c: x * x),
    Op("abs", "int", "Return the absolute value of {a}.", "abs({a})", lambda x, c: abs(x)),
    Op("neg", "int", "Return {a} negated.", "-{a}", lambda x, c: -x),
    Op("rev", "str", "Return the string {a} reversed.", "{a}[::-1]", lambda s, c: s[::-1]),
    Op("upper", "str", "Return the string {a} in upper case.", "{a}.upper()", lambda s, c: s.upper()),
    Op("repeat", "str", "Return the string {a} repeated {c} times.", "{a} * {c}", lambda s, c: s * c, (2, 9)),
    Op("prefix", "str", "Return the first {c} characters of {a}.", "{a}[:{c}]", lambda s, c: s[:c], (1, 9)),
    Op("len", "list", "Return the length of the list {a}.", "len({a})", lambda xs, c: len(xs)),
    Op("sum", "list", "Return the sum of the list {a}.", "sum({a})", lambda xs, c: sum(xs)),
    Op("lmax", "list", "Return the largest element of the list {a}.", "max({a})", lambda xs, c: max(xs)),
)
_OPS_BY_NAME = {op.name: op for op in OPS}
_ARGS = {"int": INT_ARGS, "str": STR_ARGS, "list": LIST_ARGS}


@dataclass(frozen=True)
class Problem:
    """A problem identity: operation, argument name, function name and constant (None if the op has none)."""

    op: str
    arg: str
    fn: str
    c: int | None

    @property
    def identity(self) -> str:
        return f"{self.op}/{self.fn}/{self.arg}/{self.c}"


def family(problem: Problem) -> str:
    """The problem's family: its expected body with the argument name left open, e.g. `{a} + 27`.

    Problems of one family differ only in names, so they share the split. `times` and `repeat` with the same C
    share a family (`{a} * 3`), as their bodies are the same up to the argument name.
    """
    return _OPS_BY_NAME[problem.op].expr.format(a="{a}", c=problem.c)


def is_heldout(problem: Problem) -> bool:
    """The split, by family: a family is held out when sha256 of its name is 0 mod 5 (157 of 749 families, 21% of
    the problems). The digest, unlike Python's salted `hash`, is the same in every process.

    Only ops with a constant are split. An op without one is a single family (`abs({a})`); holding it out would
    hide the operation itself, which no amount of RL on the other ops can teach, so those 294 problems always
    train.
    """
    if _OPS_BY_NAME[problem.op].consts is None:
        return False
    return int(hashlib.sha256(family(problem).encode()).hexdigest(), 16) % 5 == 0


def all_problems() -> list[Problem]:
    """Every problem of the family (35,940), in a fixed order."""
    problems = []
    for op in OPS:
        consts = range(op.consts[0], op.consts[1] + 1) if op.consts else (None,)
        for arg in _ARGS[op.kind]:
            for fn in FN_NAMES:
                problems.extend(Problem(op.name, arg, fn, c) for c in consts)
    return problems


def _test_inputs(problem: Problem, rng: random.Random) -> list[Any]:
    op = _OPS_BY_NAME[problem.op]
    if op.kind == "int":
        if op.consts is None:
            return [rng.randint(-50, -1), rng.randint(1, 50), rng.randint(-50, 50), rng.randint(-50, 50)]
        # One input within 15 below C and one above, so max(x, C), x and C are told apart, and a multiple of C,
        # so that x // C and x % C tell C from C +- 1 (a miscopied constant must fail).
        near = [problem.c - rng.randint(1, 15), problem.c + rng.randint(1, 15)]
        return [rng.randint(-100, 100), *near, problem.c * rng.randint(2, 9)]
    if op.kind == "str":
        letters = "abcdefghijklmnopqrstuvwxyz"
        # The last string is longer than any C + 1, so s[:C] tells C from C + 1.
        lengths = [rng.randint(2, 10) for _ in range(3)] + [rng.randint(11, 12)]
        return ["".join(rng.choice(letters) for _ in range(n)) for n in lengths]
    return [[rng.randint(-20, 50) for _ in range(rng.randint(1, 6))] for _ in range(4)]


def build_row(problem: Problem) -> dict[str, str]:
    """The HumanEval-style row of a problem; its four asserts are computed from the reference implementation."""
    op = _OPS_BY_NAME[problem.op]
    fields = {"a": problem.arg, "c": problem.c}
    prompt = f'def {problem.fn}({problem.arg}):\n    """{op.doc.format(**fields)}"""\n'
    rng = random.Random(problem.identity)
    asserts = "".join(
        f"    assert candidate({value!r}) == {op.ref(value, problem.c)!r}\n" for value in _test_inputs(problem, rng)
    )
    return {
        "task_id": f"synth/{problem.identity}",
        "prompt": prompt,
        "code_prompt": prompt,
        "canonical_solution": f"    return {op.expr.format(**fields)}\n",
        "test": "def check(candidate):\n" + asserts,
        "entry_point": problem.fn,
    }


def _select(heldout: bool, n: int | None, seed: int) -> list[Problem]:
    problems = [p for p in all_problems() if is_heldout(p) == heldout]
    random.Random(seed).shuffle(problems)
    return problems if n is None else problems[:n]


def build_rows(problems: Sequence[Problem]):
    """A `datasets.Dataset` of the rows of `problems`."""
    from datasets import Dataset

    return Dataset.from_list([build_row(p) for p in problems])


def train_rows(n: int | None = 3000, seed: int = 0):
    """`n` training-split problems (none of them held out), shuffled by `seed`."""
    return build_rows(_select(False, n, seed))


def heldout_rows(n: int | None = 500, seed: int = 0):
    """`n` held-out problems, shuffled by `seed`; the same `n` and `seed` always give the same rows."""
    return build_rows(_select(True, n, seed))


def sft_rows(n: int = 400, seed: int = 1):
    """Prompt-completion rows for the warm start (completion = the canonical one-line body).

    Drawn from the training split with a different seed from the RL rows by default, so that RL prompts are
    mostly new to the model; no held-out problem ever appears.
    """
    rows = train_rows(n, seed=seed)
    return rows.map(lambda r: {"completion": r["canonical_solution"]}).select_columns(["prompt", "completion"])


def tokenizer_corpus(n: int = 20000, seed: int = 0) -> list[str]:
    """Training-split texts (prompt + canonical body) to train the task model's BPE tokenizer on."""
    rows = [build_row(p) for p in _select(False, n, seed)]
    return [r["prompt"] + r["canonical_solution"] for r in rows]


def task_model_path(cache_dir: str | Path | None = None, *, seed: int = 0, **overrides: Any) -> Path:
    """A randomly initialised task-sized Qwen2 with a BPE trained on this task, built once and cached.

    Built with `experiments.models.tiny_model_path` (same offline recipe and cache as the default tiny model),
    with `TASK_MODEL_KWARGS` unless overridden.
    """
    from experiments.models import tiny_model_path

    return tiny_model_path(cache_dir=cache_dir, seed=seed, corpus=tokenizer_corpus(), **(TASK_MODEL_KWARGS | overrides))


# Where the warm start is partly right on the family split: 215/1000 sampled (T=1) and 338/500 greedy held-out
# pass. The SFT curve is steep (sampled 22/1000 at step 80, 90/1000 at 90, 414/1000 at 100; greedy 39, 320 and 396
# of 500), so this is a step-level choice, made for the same ~20% sampled pass as learnable-task.md.
WARM_START_STEPS = 95


def warm_start(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    steps: int = WARM_START_STEPS,
    seed: int = 0,
    n_examples: int = 400,
    batch_size: int = 32,
    learning_rate: float = 2e-3,
    warmup_steps: int = 30,
    callbacks: Sequence[Any] = (),
    **sft_overrides: Any,
) -> Path:
    """Supervised warm start with TRL's `SFTTrainer`; returns `out_dir` holding the model and its tokenizer.

    The defaults are those of learnable-task.md (400 examples, batch 32, AdamW at 2e-3 with 30 warmup steps,
    gradient clip 1.0), except the number of steps: with our tokenizer, model and family split the same ~20%
    sampled (T=1) held-out pass is reached at step 95 (learnable-task.md needed 120). The loss is on the
    completion only; SFTTrainer appends EOS to each completion, so the model learns to stop. `callbacks` go to
    the SFTTrainer (e.g. to measure the held-out curve while sizing the warm start).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    if steps < 1:
        raise ValueError(f"warm_start: steps must be >= 1; got {steps}")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config_kwargs: dict[str, Any] = {
        "output_dir": str(out_dir / "sft"),
        "max_steps": steps,
        "per_device_train_batch_size": batch_size,
        "learning_rate": learning_rate,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": warmup_steps,
        "max_grad_norm": 1.0,
        "completion_only_loss": True,
        "seed": seed,
        "data_seed": seed,
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 10,
        "disable_tqdm": True,
    }
    config = SFTConfig(**(config_kwargs | sft_overrides))
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=sft_rows(n_examples, seed=seed + 1),
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )
    trainer.train()
    trainer.save_model(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


# ---------------------------------------------------------------------------------------------------------------
# The RL recipe on this task, shared by tests/test_learning.py and benchmarks/bench_learning.py
# ---------------------------------------------------------------------------------------------------------------

# learnable-task.md's GRPO settings (8 prompts x 8 completions per step, lr 3e-4 constant after 5 warmup steps),
# with completions capped at 16 tokens (the longest canonical body is 10).
RL_DEFAULTS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "activation_checkpointing": False,
    "report_to": "none",
    "logging_steps": 1,
    "save_strategy": "no",
    "disable_tqdm": True,
    "per_device_train_batch_size": 64,
    "num_generations": 8,
    "max_completion_length": 16,
    "temperature": 1.0,
    "learning_rate": 3e-4,
    "lr_scheduler_type": "constant_with_warmup",
    "warmup_steps": 5,
    "max_grad_norm": 1.0,
}

# Per-method departures from RL_DEFAULTS on this task (the methods' own defaults live in METHODS).
RL_METHOD_OVERRIDES: dict[str, dict[str, Any]] = {}


def rl_config(
    method: str,
    output_dir: str | Path,
    *,
    budget_prompts: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    **overrides: Any,
):
    """The config of `method` for this task: METHODS defaults, then RL_DEFAULTS, the method's overrides, and
    `overrides`. Give `budget_prompts` (the fresh prompts to sample, each with `num_generations` completions)
    for a fair comparison: `experiments.budget.derive_max_steps` turns it into this method's optimizer steps
    (PPO's epochs over each batch take more steps for the same samples). `max_steps` sets the steps instead."""
    from experiments.budget import derive_max_steps
    from experiments.trainers import build_config

    if (budget_prompts is None) == (max_steps is None):
        raise ValueError("rl_config: give exactly one of budget_prompts and max_steps")
    kwargs = RL_DEFAULTS | RL_METHOD_OVERRIDES.get(method, {}) | overrides
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
    """Score `model` on `rows` with `experiments.evaluation.evaluate_model` and the HELDOUT_EVAL settings."""
    from experiments.evaluation import evaluate_model

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
