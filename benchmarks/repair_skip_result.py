"""The pre-registered result of the single-turn arm rerun with `--skip_zero_gradient_steps`
(benchmarks/results/repair/skip_zero_gradient/README.md): its 1-turn evaluation against the no-skip arm's and the
start's, paired over the 35 problems, and what its training did step by step.

    python benchmarks/repair_skip_result.py --run RUNS/repair_skip_1536 \
        --records benchmarks/results/repair/skip_zero_gradient --against benchmarks/results/repair/screened35

copies the run's `single/train.json` and `single/eval_turns_1.json` into `--records` (the model stays in the run)
and writes `result.json` there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repair_compare import _difference  # noqa: E402  (the comparison's own paired difference)

from experiments.trainers.zero_gradient import ZERO_GRADIENT_METRIC  # noqa: E402

N_TRAINED = 20  # the screened-35 design: the 20 trained problems are scored first, then the 15 held out


def _steps(train: dict[str, Any]) -> list[dict[str, Any]]:
    """Every optimizer step's log row (logging_steps 1): its reward spread, gradient and completion length."""
    keys = (
        "reward",
        "reward_std",
        "grad_norm",
        "loss",
        "completions/mean_length",
        ZERO_GRADIENT_METRIC,
    )
    return [{"step": h["step"], **{k: h.get(k) for k in keys}} for h in train["log_history"] if "loss" in h]


def _per_rollout(record: dict[str, Any]) -> dict[str, Any]:
    n = sum(p["n"] for p in record["problems"])
    return {
        "tokens_per_rollout": record["tokens_generated"] / n,
        "cut_by_cap": record["cut_by_cap"],
        "rollouts": n,
        "first_pass@1": record["metrics"]["first_pass@1"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="the run folder of the rerun (its --out)")
    parser.add_argument("--records", required=True, help="where the rerun's records and result go")
    parser.add_argument("--against", required=True, help="the screened-35 comparison's records")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    run, records, against = Path(args.run), Path(args.records), Path(args.against)
    (records / "single").mkdir(parents=True, exist_ok=True)
    for name in ("train.json", "eval_turns_1.json"):
        shutil.copyfile(run / "single" / name, records / "single" / name)
    skip = json.loads((records / "single/eval_turns_1.json").read_text())
    no_skip = json.loads((against / "single/eval_turns_1.json").read_text())
    start = json.loads((against / "start/eval_turns_1.json").read_text())
    train = json.loads((records / "single/train.json").read_text())
    parts = {"all": slice(None), "trained": slice(None, N_TRAINED), "heldout": slice(N_TRAINED, None)}
    ids = [[p["task_id"] for p in r["problems"]] for r in (skip, no_skip, start)]
    if not ids[0] == ids[1] == ids[2]:
        raise SystemExit("the three records do not score the same problems in the same order")
    steps = _steps(train)
    result = {
        "primary": {
            "endpoint": "first_pass@1 at 1 turn, skip arm minus no-skip single-turn arm, 35 problems",
            **_difference(skip, no_skip, "first_pass@1", args.seed),
        },
        "skip_minus_no_skip": {
            k: _difference(skip, no_skip, "first_pass@1", args.seed, s) for k, s in parts.items()
        },
        "skip_minus_start": {
            k: _difference(skip, start, "first_pass@1", args.seed, s) for k, s in parts.items()
        },
        "at_1_turn": {
            "skip": _per_rollout(skip),
            "no_skip": _per_rollout(no_skip),
            "start": _per_rollout(start),
        },
        "training": {
            "steps": train["steps"],
            "skipped": train["skipped_zero_gradient_steps"],
            "generated_tokens": train["generated_tokens"],
            "train_seconds": train["train_seconds"],
            "per_step": steps,
            "no_skip_per_step": _steps(json.loads((against / "single/train.json").read_text())),
        },
    }
    (records / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["primary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
