"""Score saved answers (benchmarks/seed_model_greedy.py) with `rewards.unit_test_reward`, with the extraction
rules of `rewards.EXTRACT_RULES` switched off all together, one at a time, and alone.

    python benchmarks/seed_model_rescore.py benchmarks/results/seed_model/greedy30_completion_style.jsonl

"before" is the reading with every rule off, which is the extraction before the rules existed; each rule's
"alone" figures are that reading plus the one rule; "without_it" is every rule but that one.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import rewards.extraction as X
from experiments.inputs.data import load_humaneval, split_dataset
from rewards import EXTRACT_RULES, unit_test_reward

_FENCED = X._fenced_blocks


def _paired_fences_only(text: str) -> Any:
    return None if len(text.split(X._FENCE)) % 2 == 0 else _FENCED(text)


# What each rule's function is without the rule (the module reads them at call time).
_OFF = {
    "closing_fence": ("_before_closing_fence", lambda text, prompt: None),
    "open_fence": ("_fenced_blocks", _paired_fences_only),
    "own_tests": ("_drop_own_tests", lambda code: code),
}


@contextlib.contextmanager
def _without(rules: list[str]) -> Iterator[None]:
    saved = {}
    for rule in rules:
        name, replacement = _OFF[rule]
        saved[name] = getattr(X, name)
        setattr(X, name, replacement)
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(X, name, original)


def rescore(path: str) -> dict[str, Any]:
    """The pass counts and extraction reasons of the answers in `path` under each set of rules."""
    rows = {r["task_id"]: r for r in split_dataset(load_humaneval(), 50, 30, seed=0)["eval"]}
    answers = [json.loads(line) for line in open(path)]
    probs = [rows[a["task_id"]] for a in answers]
    comps = [a["completion"] for a in answers]

    def run(off: list[str]) -> tuple[list[X.Extraction], list[float]]:
        with _without(off):
            exs = [X.extract_code(p["prompt"], c, p["entry_point"]) for p, c in zip(probs, comps)]
            rew = unit_test_reward.score(
                prompts=[p["prompt"] for p in probs],
                completions=comps,
                test=[p["test"] for p in probs],
                entry_point=[p["entry_point"] for p in probs],
                code_prompt=[p["prompt"] for p in probs],
            )
        return exs, rew

    rules = list(EXTRACT_RULES)
    base_ex, base = run(rules)
    full_ex, full = run([])
    out: dict[str, Any] = {
        "command": f"python benchmarks/seed_model_rescore.py {path}",
        "n": len(comps),
        "before": {"pass": int(sum(base)), "reasons": dict(collections.Counter(e.reason for e in base_ex))},
        "after": {"pass": int(sum(full)), "reasons": dict(collections.Counter(e.reason for e in full_ex))},
        "per_rule": {},
    }
    for rule in rules:
        alone_ex, alone = run([r for r in rules if r != rule])
        _, without = run([rule])
        out["per_rule"][rule] = {
            "fires": sum(rule in e.rules for e in full_ex),
            "alone_changes_program": sum(a.code != b.code for a, b in zip(alone_ex, base_ex)),
            "alone_flips_verdict": sum(a != b for a, b in zip(alone, base)),
            "alone_pass": int(sum(alone)),
            "without_it_pass": int(sum(without)),
        }
    out["per_task"] = [
        {
            "task_id": p["task_id"],
            "before": b,
            "after": f,
            "reason_before": be.reason,
            "rules": list(fe.rules),
        }
        for p, b, f, be, fe in zip(probs, base, full, base_ex, full_ex)
    ]
    return out


if __name__ == "__main__":
    print(json.dumps(rescore(sys.argv[1]), indent=1))
