"""The synthetic task: the problem family, the held-out split, test quality, the tokenizer and the warm start."""

from __future__ import annotations

import collections
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import rewards
from experiments.learnable.tasks import (
    OPS,
    Problem,
    all_problems,
    build_row,
    family,
    heldout_rows,
    is_heldout,
    sft_rows,
    train_problems,
    train_rows,
)
from experiments.learnable.warm_start import task_model_path, warm_start

ROOT = Path(__file__).resolve().parents[2]
HUMANEVAL_COLUMNS = {"task_id", "prompt", "code_prompt", "canonical_solution", "test", "entry_point"}


def test_problem_family_size_and_identities():
    problems = all_problems()
    assert len(problems) == 35940
    assert len({p.identity for p in problems}) == len(problems)
    assert {p.op for p in problems} == {op.name for op in OPS}


def test_heldout_split_is_deterministic_disjoint_and_about_a_fifth():
    problems = all_problems()
    held = [p for p in problems if is_heldout(p)]
    # Pinned counts: the split is a digest of the family name, the same on every machine and in every process.
    assert (len({family(p) for p in held}), len(held)) == (157, 7584)
    rows, train = heldout_rows(300, seed=3), train_rows(3000, seed=3)
    assert rows["task_id"] == heldout_rows(300, seed=3)["task_id"]
    assert rows["task_id"] != heldout_rows(300, seed=4)["task_id"]
    assert not set(rows["task_id"]) & set(train["task_id"])
    # train_rows are the rows of train_problems, in the same order; None takes the whole training split.
    assert train["task_id"] == [f"synth/{p.identity}" for p in train_problems(3000, seed=3)]
    assert len(train_problems(None)) == len(problems) - len(held)


def test_no_heldout_body_appears_in_training():
    """The family split: no held-out expected body appears in the warm start's or RL's rows, under any function
    name, and not under another argument name either."""
    held = heldout_rows(None)
    held_bodies = set(held["canonical_solution"])
    trained = set(sft_rows(400)["completion"]) | set(train_rows(None)["canonical_solution"])
    assert held_bodies and not held_bodies & trained
    held_families = {family(p) for p in all_problems() if is_heldout(p)}
    train_families = {family(p) for p in all_problems() if not is_heldout(p)}
    assert not held_families & train_families
    # Twins differing only in a name would share the family, hence the split.
    for p in all_problems()[::97]:
        for twin in (Problem(p.op, p.arg, "solve", p.c), Problem(p.op, p.arg, "f", p.c)):
            assert is_heldout(twin) == is_heldout(p)
    # times/3 and repeat/3 have the same body up to the argument name: one family.
    assert family(Problem("times", "x", "f", 3)) == family(Problem("repeat", "s", "g", 3)) == "{a} * 3"
    # An op without a constant is one family; holding it out would hide the op, so it always trains.
    assert not any(is_heldout(p) for p in all_problems() if p.c is None)


def test_split_is_the_same_in_other_processes():
    """A digest, not Python's salted hash: a fresh interpreter with another hash seed draws the same split."""
    code = (
        "from experiments.learnable.tasks import all_problems, is_heldout;"
        "print(sum(i for i, p in enumerate(all_problems()) if is_heldout(p)))"
    )
    here = sum(i for i, p in enumerate(all_problems()) if is_heldout(p))
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert int(out.stdout) == here


def test_rows_have_humaneval_columns():
    row = build_row(Problem("plus", "n", "calc", 27))
    assert set(row) == HUMANEVAL_COLUMNS
    assert row["prompt"] == 'def calc(n):\n    """Return n plus 27."""\n' == row["code_prompt"]
    assert row["canonical_solution"] == "    return n + 27\n"
    assert row["test"].startswith("def check(candidate):\n") and row["test"].count("assert candidate(") == 4
    assert row["entry_point"] == "calc"


def _sample_per_op(k: int, seed: int = 0) -> list[Problem]:
    by_op = collections.defaultdict(list)
    for p in all_problems():
        by_op[p.op].append(p)
    rng = random.Random(seed)
    return [p for op in by_op for p in rng.sample(by_op[op], min(k, len(by_op[op])))]


def _score(rows: list[dict], completions: list[str]) -> list[float]:
    return rewards.unit_test_reward.score(
        prompts=[r["prompt"] for r in rows],
        completions=completions,
        test=[r["test"] for r in rows],
        entry_point=[r["entry_point"] for r in rows],
        code_prompt=[r["code_prompt"] for r in rows],
    )


def test_canonical_solutions_pass_and_near_misses_fail():
    problems = _sample_per_op(40)
    rows = [build_row(p) for p in problems]
    assert _score(rows, [r["canonical_solution"] for r in rows]) == [1.0] * len(rows)
    # The mistakes a partly trained model makes: a miscopied constant, the bare argument, the bare constant.
    near_misses, near_rows = [], []
    for p, r in zip(problems, rows):
        if p.c is not None:
            near_misses += [r["canonical_solution"].replace(str(p.c), str(p.c + 1)), f"    return {p.c}\n"]
            near_rows += [r, r]
        if p.op in ("max", "min", "abs", "plus", "minus"):
            near_misses.append(f"    return {p.arg}\n")
            near_rows.append(r)
    assert _score(near_rows, near_misses) == [0.0] * len(near_rows)


def test_task_tokenizer_loads_faithfully_and_prompts_end_on_a_token_boundary(passk_cache):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    path = task_model_path(passk_cache)
    tok = AutoTokenizer.from_pretrained(path)
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    for row in heldout_rows(50):
        text = row["prompt"] + row["canonical_solution"]
        assert tok(text)["input_ids"] == raw.encode(text).ids  # what AutoTokenizer loads is what was trained
        # GRPO tokenizes the prompt alone and appends generated ids; SFT tokenizes prompt + completion.
        prompt_ids = tok(row["prompt"])["input_ids"]
        assert tok(text)["input_ids"][: len(prompt_ids)] == prompt_ids


def test_warm_start_trains_on_completions_and_saves_model_and_tokenizer(passk_cache, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = task_model_path(passk_cache)
    out = warm_start(base, tmp_path / "warm", steps=3, n_examples=16, batch_size=8, warmup_steps=0)
    model = AutoModelForCausalLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)
    before = AutoModelForCausalLM.from_pretrained(base).state_dict()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("bad", [{"steps": 0}])
def test_warm_start_rejects_no_steps(bad, passk_cache, tmp_path):
    with pytest.raises(ValueError, match="steps must be >= 1"):
        warm_start(task_model_path(passk_cache), tmp_path / "w", **bad)
