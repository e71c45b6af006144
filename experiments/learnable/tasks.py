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
`experiments.evaluation.evaluate` take them unchanged.

This module is the task's data only (problems, rows, the split, the text the task model's tokenizer is trained
on, the warm start's prompt-completion rows) and imports nothing of passk. The task model and its supervised warm
start are `experiments.learnable.warm_start`; the RL recipe and the measurement of learning are `experiments.learnable.recipe`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OPS",
    "Op",
    "Problem",
    "all_problems",
    "build_row",
    "build_rows",
    "family",
    "heldout_rows",
    "is_heldout",
    "sft_rows",
    "tokenizer_corpus",
    "train_problems",
    "train_rows",
    "tuning_problems",
    "tuning_rows",
]

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
    Op(
        "min", "int", "Return the smaller of {a} and {c}.", "min({a}, {c})", lambda x, c: min(x, c), (-20, 99)
    ),
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
        f"    assert candidate({value!r}) == {op.ref(value, problem.c)!r}\n"
        for value in _test_inputs(problem, rng)
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


def train_problems(n: int | None = 3000, seed: int = 0) -> list[Problem]:
    """`n` training-split problems (none of them held out), shuffled by `seed`; None: all of them."""
    return _select(False, n, seed)


def train_rows(n: int | None = 3000, seed: int = 0):
    """The rows of `train_problems(n, seed)`."""
    return build_rows(train_problems(n, seed))


def heldout_rows(n: int | None = 500, seed: int = 0):
    """`n` held-out problems, shuffled by `seed`; the same `n` and `seed` always give the same rows."""
    return build_rows(_select(True, n, seed))


def tuning_problems(n: int = 200, seed: int = 7, exclude: Sequence[Problem] = ()) -> list[Problem]:
    """`n` training-split problems for choosing hyperparameters (the learning-rate search): drawn from the
    training families only, never from the held-out ones, and none of `exclude` (the RL prompts and the warm
    start's rows: `tuning_rows` passes them), so the criterion is measured on problems no run trained on."""
    skip = {p.identity for p in exclude}
    return [p for p in _select(False, None, seed) if p.identity not in skip][:n]


def tuning_rows(n: int = 200, seed: int = 7, n_train: int = 3000, n_sft: int = 400):
    """The rows of `tuning_problems`, excluding `train_problems(n_train)` (the RL rows, `train_rows`' defaults)
    and the warm start's `sft_rows(n_sft)` problems."""
    exclude = [*train_problems(n_train, seed=0), *train_problems(n_sft, seed=1)]
    return build_rows(tuning_problems(n, seed, exclude))


def sft_rows(n: int = 400, seed: int = 1):
    """Prompt-completion rows for the warm start (completion = the canonical one-line body).

    Drawn from the training split with a different seed from the RL rows by default, so that RL prompts are
    mostly new to the model; no held-out problem ever appears.
    """
    rows = train_rows(n, seed=seed)
    return rows.map(lambda r: {"completion": r["canonical_solution"]}).select_columns(
        ["prompt", "completion"]
    )


def tokenizer_corpus(n: int = 20000, seed: int = 0) -> list[str]:
    """Training-split texts (prompt + canonical body) to train the task model's BPE tokenizer on."""
    rows = [build_row(p) for p in _select(False, n, seed)]
    return [r["prompt"] + r["canonical_solution"] for r in rows]
