"""The synthetic task: the problem family, the held-out split, test quality, the tokenizer and the warm start."""

from __future__ import annotations

import collections
import random

import pytest

import rewards
from experiments.tasks import (
    OPS,
    Problem,
    all_problems,
    build_row,
    heldout_rows,
    is_heldout,
    sft_rows,
    task_model_path,
    train_rows,
    warm_start,
)

HUMANEVAL_COLUMNS = {"task_id", "prompt", "code_prompt", "canonical_solution", "test", "entry_point"}


def test_problem_family_size_and_identities():
    problems = all_problems()
    assert len(problems) == 35940
    assert len({p.identity for p in problems}) == len(problems)
    assert {p.op for p in problems} == {op.name for op in OPS}


def test_heldout_split_is_deterministic_disjoint_and_about_a_fifth():
    problems = all_problems()
    share = sum(map(is_heldout, problems)) / len(problems)
    assert 0.18 < share < 0.22
    held, train = heldout_rows(300, seed=3), train_rows(3000, seed=3)
    assert held["task_id"] == heldout_rows(300, seed=3)["task_id"]
    assert held["task_id"] != heldout_rows(300, seed=4)["task_id"]
    assert not set(held["task_id"]) & set(train["task_id"])
    sft_prompts = set(sft_rows(400)["prompt"])
    assert not sft_prompts & set(heldout_rows(None)["prompt"])


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
