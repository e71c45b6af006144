"""Rescore the answers a run directory's evaluation records store, with today's scorer (the extraction rules and
the sandbox of this checkout), and say which verdicts change.

    python benchmarks/rescore_records.py RUN_DIR [RUN_DIR ...] --out FILE

An eval record (eval_before.json, eval_after.json) stores each problem's first sampled answer
(`first_completion`, at most 400 characters) and only the verdicts of the others and of the greedy answer, so
what can be rescored is the first-sample verdict: first-sample pass@1. pass@k and greedy pass@1 cannot be, and
the output says so. An answer stored at the 400-character cap may have been cut, and is left out
(`not_rescored`). The problems are rebuilt from the run's run.json (`config`: dataset, n_train, n_eval,
split_seed, style, system_prompt), as the run built them; no model is loaded and nothing is generated.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

MAX_STORED_CHARS = 400  # experiments.evaluation.evaluate.MAX_COMPLETION_CHARS when the records were written


def _recorded_scorer(run_dir: Path, ev: dict[str, Any]) -> dict[str, Any] | None:
    if ev.get("scorer"):
        return ev["scorer"]
    declared = run_dir / "scorer.json"
    return json.loads(declared.read_text()) if declared.is_file() else None


def _read_apart_from_rules_off(kept: list[dict[str, Any]], chosen: list[Any]) -> list[str]:
    """The answers whose program today's extraction builds differently from the extraction with
    `rewards.EXTRACT_RULES` switched off (extraction v1's reading, as benchmarks/seed_model_rescore.py switches
    them off): what the rules changed, whether or not the verdict moved."""
    import importlib.util

    from rewards.extraction import extract_code

    spec = importlib.util.spec_from_file_location(
        "seed_model_rescore", Path(__file__).with_name("seed_model_rescore.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def programs() -> list[str]:
        return [
            extract_code(r.code_prompt, p["first_completion"], r.columns["entry_point"]).code or ""
            for p, r in zip(kept, chosen)
        ]

    today = programs()
    with module._without(list(module.EXTRACT_RULES)):
        before = programs()
    return [p["task_id"] for p, a, b in zip(kept, today, before) if a != b]


def rescore_run(run_dir: Path, rel_to: Path) -> list[dict[str, Any]]:
    """One entry per eval record of `run_dir`: the first-sample verdicts as recorded and as rescored."""
    from experiments.evaluation.evaluate import _as_completion, _make_reward, _row_fields
    from experiments.evaluation.scorer import scorer_stamp
    from experiments.inputs.data import DataSpec, build_datasets

    meta = json.loads((run_dir / "run.json").read_text())
    config = meta.get("config") or {}
    if not config.get("dataset"):
        raise SystemExit(f"{run_dir}/run.json: no config.dataset, so its problems cannot be rebuilt")
    spec = DataSpec(**{k: config[k] for k in DataSpec.__dataclass_fields__ if k in config})
    _, eval_rows = build_datasets(spec)
    rows = {r.task_id: r for r in (_row_fields(row, spec.style) for row in eval_rows)}
    sandbox = {"timeout": config.get("reward_timeout"), "memory_mb": config.get("reward_memory_mb")}
    reward = _make_reward({k: v for k, v in sandbox.items() if v is not None})
    out = []
    for phase in ("before", "after"):
        path = run_dir / f"eval_{phase}.json"
        if not path.is_file():
            continue
        ev = json.loads(path.read_text())
        problems = ev["problems"]
        missing = [p["task_id"] for p in problems if p["task_id"] not in rows]
        if missing:
            raise SystemExit(
                f"{path}: {len(missing)} task ids not in the rebuilt problems (first {missing[0]!r})"
            )
        cut = [p["task_id"] for p in problems if len(p["first_completion"]) >= MAX_STORED_CHARS]
        kept = [p for p in problems if p["task_id"] not in cut]
        chosen = [rows[p["task_id"]] for p in kept]
        scores = reward.score(
            [r.prompt for r in chosen],
            [
                _as_completion(p["first_completion"], not isinstance(r.prompt, str))
                for p, r in zip(kept, chosen)
            ],
            code_prompt=[r.code_prompt for r in chosen],
            task_id=[r.task_id for r in chosen],
            **{name: [r.columns[name] for r in chosen] for name in ("test", "entry_point")},
        )
        recorded = [bool(p["rewards"][0] >= 1.0) for p in kept]
        read_apart = _read_apart_from_rules_off(kept, chosen)
        rescored = [bool(s is not None and s >= 1.0) for s in scores]
        changed = [
            {"task_id": p["task_id"], "recorded": a, "rescored": b}
            for p, a, b in zip(kept, recorded, rescored)
            if a != b
        ]
        out.append(
            {
                "run": os.path.relpath(run_dir, rel_to),
                "method": meta.get("method"),
                "phase": phase,
                "recorded_scorer": _recorded_scorer(run_dir, ev),
                "rescored_with": scorer_stamp(),
                "problems": len(problems),
                "rescored_problems": len(kept),
                "not_rescored": cut,
                "first_sample_passed": {"recorded": sum(recorded), "rescored": sum(rescored)},
                "changed": changed,
                "read_differently_with_the_rules_off": read_apart,
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rel_to = args.out.parent
    entries = [e for d in args.run_dirs for e in rescore_run(d, rel_to)]
    result = {
        "what": (
            "each record's stored first answers rescored with this checkout's scorer: first-sample pass@1 only. "
            "pass@k and greedy pass@1 cannot be rescored: the other samples and the greedy answer are not stored."
        ),
        "records": entries,
    }
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    for e in entries:
        fs = e["first_sample_passed"]
        print(
            f"{e['run']} {e['phase']}: first-sample passes {fs['recorded']} -> {fs['rescored']} of "
            f"{e['rescored_problems']} ({len(e['changed'])} verdicts changed, {len(e['not_rescored'])} not rescored; "
            f"{len(e['read_differently_with_the_rules_off'])} read differently with the rules off)"
        )


if __name__ == "__main__":
    main()
