"""The train / eval / held-out splits are the same in every process: pinned assignments, and the whole split
computed in two fresh interpreters with different PYTHONHASHSEED (a split keyed on Python's salted `hash()`
passes any test that stays in one process, and fails these).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.inputs.data import split_dataset
from experiments.learnable.tasks import Problem, all_problems, family, heldout_rows, is_heldout, train_rows

ROOT = Path(__file__).resolve().parents[2]

# HumanEval, the default split (50 train / 30 eval / the rest held out, split_seed 0).
HUMANEVAL_PINNED = {
    "HumanEval/1": "train",
    "HumanEval/2": "train",
    "HumanEval/14": "train",
    "HumanEval/26": "eval",
    "HumanEval/39": "eval",
    "HumanEval/54": "eval",
    "HumanEval/0": "heldout",
    "HumanEval/3": "heldout",
    "HumanEval/5": "heldout",
}
# The learnable task's family split: problem -> held out?
TASK_PINNED = [
    (Problem("min", "m", "f", 10), "min({a}, 10)", True),
    (Problem("times", "y", "solve", 32), "{a} * 32", True),
    (Problem("min", "x", "f", 75), "min({a}, 75)", True),
    (Problem("plus", "n", "calc", 11), "{a} + 11", True),
    (Problem("mod", "m", "fn", 84), "{a} % 84", False),
    (Problem("plus", "a", "solve", 1), "{a} + 1", False),
    (Problem("times", "a", "g", 50), "{a} * 50", False),
]
TASK_ROWS_PINNED = {
    "heldout": ["synth/plus/calc/x/96", "synth/minus/fn/y/12", "synth/minus/g/k/5"],
    "train": ["synth/min/calc/y/13", "synth/mod/f/y/85", "synth/minus/f/a/47"],
}

SNAPSHOT = """
import json
from experiments.inputs.data import load_humaneval, split_dataset
from experiments.learnable.tasks import all_problems, heldout_rows, is_heldout, train_rows
split = split_dataset(load_humaneval(), seed=0)
other = split_dataset(load_humaneval(), n_train=20, n_eval=10, seed=7)
print(json.dumps({
    "humaneval": {name: list(part["task_id"]) for name, part in split.items()},
    "humaneval_seed7": {name: list(part["task_id"]) for name, part in other.items()},
    "families": "".join("1" if is_heldout(p) else "0" for p in all_problems()),
    "heldout_rows": list(heldout_rows(40, seed=3)["task_id"]),
    "train_rows": list(train_rows(40, seed=3)["task_id"]),
}))
"""


def _snapshot_here(humaneval) -> dict:
    split = split_dataset(humaneval, seed=0)
    other = split_dataset(humaneval, n_train=20, n_eval=10, seed=7)
    return {
        "humaneval": {name: list(part["task_id"]) for name, part in split.items()},
        "humaneval_seed7": {name: list(part["task_id"]) for name, part in other.items()},
        "families": "".join("1" if is_heldout(p) else "0" for p in all_problems()),
        "heldout_rows": list(heldout_rows(40, seed=3)["task_id"]),
        "train_rows": list(train_rows(40, seed=3)["task_id"]),
    }


def test_known_humaneval_assignments(humaneval) -> None:
    split = split_dataset(humaneval, seed=0)
    where = {t: name for name, part in split.items() for t in part["task_id"]}
    assert {t: where[t] for t in HUMANEVAL_PINNED} == HUMANEVAL_PINNED


def test_known_family_assignments() -> None:
    for problem, fam, held in TASK_PINNED:
        assert (family(problem), is_heldout(problem)) == (fam, held), problem
    assert list(heldout_rows(3, seed=3)["task_id"]) == TASK_ROWS_PINNED["heldout"]
    assert list(train_rows(3, seed=3)["task_id"]) == TASK_ROWS_PINNED["train"]


@pytest.mark.parametrize("hash_seeds", [("0", "12345")])
def test_splits_agree_across_processes_with_different_hash_seeds(humaneval, hash_seeds) -> None:
    here = _snapshot_here(humaneval)
    outs = []
    for hash_seed in hash_seeds:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run(
            [sys.executable, "-c", SNAPSHOT], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1] == here
    assert "1" in here["families"] and "0" in here["families"]
