"""Issue 28 item 5's report: the side-by-side runs of `seed_model_side_by_side.sh`, split into the seed's 30 eval
problems and the 84 held out, each reported by `experiments.report.write_report`.

    python benchmarks/seed_side_by_side_report.py RUNS OUT

RUNS is the driver's folder (base_eval114.json, and per method run.json, trainer_state.json,
sampled_prompts.jsonl, eval114.json, and probe.json: the dtype probe of the host it was evaluated on). Each eval
scored the 114 problems outside the training split in one pass; here its per-problem rows are cut by task id into the split's `eval` and `heldout` parts (split seed 0: 50 train,
30 eval, 84 held out) and every metric is recomputed on each part with `stats.summarize`, so the intervals are
over that part's problems only. OUT gets a copy of the small files of every run (not the adapters), then
`eval30/` and `heldout84/`: each a report (report.md, report.json, plots) over run folders whose eval_before.json
is the base model's part (LoRA starts at B = 0: every run starts from the base) and eval_after.json the run's.
A method without its eval114.json yet is left out and named.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

RUN_FILES = (
    "run.json",
    "trainer_state.json",
    "sampled_prompts.jsonl",
    "train.log",
    "eval114.json",
    "probe.json",
)
SPLIT = {"n_train": 50, "n_eval": 30, "seed": 0}  # the budget file's n_train, n_eval, split_seed


def copy_portable(src: Path, dest: Path) -> None:
    """Copy a text record with this machine's home directory written as ~ (run.json's model_path, log lines)."""
    dest.write_text(src.read_text().replace(str(Path.home()), "~"))


def split_ids() -> dict[str, set[str]]:
    """{"eval30": the seed's 30 eval task ids, "heldout84": the other 84 outside training}."""
    from experiments.inputs.data import load_problems, split_dataset

    parts = split_dataset(load_problems(None), SPLIT["n_train"], SPLIT["n_eval"], SPLIT["seed"])
    return {"eval30": set(parts["eval"]["task_id"]), "heldout84": set(parts["heldout"]["task_id"])}


def subset(ev: dict[str, Any], ids: set[str], name: str) -> dict[str, Any]:
    """`ev` (an EvalResult dict) restricted to the problems in `ids`, its metrics recomputed on them."""
    from experiments.evaluation.stats import EvalResult, ProblemResult, summarize

    fields = (
        "task_id",
        "n",
        "correct",
        "rewards",
        "greedy_passed",
        "first_completion",
        "n_truncated",
        "entropy",
    )
    rows = [ProblemResult(**{f: p.get(f) for f in fields}) for p in ev["problems"] if p["task_id"] in ids]
    if len(rows) != len(ids):
        raise SystemExit(f"{name}: the eval holds {len(rows)} of the part's {len(ids)} problems")
    seed = int(ev["settings"].get("seed", 0))
    passk, greedy, avg = summarize(
        rows, ev["ks"], n_bootstrap=ev["n_bootstrap"], confidence=ev["confidence"], seed=seed
    )
    part = EvalResult(
        pass_at_k=passk,
        greedy_pass_at_1=greedy,
        avg_reward=avg,
        num_problems=len(rows),
        n_samples=ev["n"],
        ks=ev["ks"],
        tokens_generated=ev["tokens_generated"],
        generation_seconds=ev["timing"]["generation_s"],
        scoring_seconds=ev["timing"]["scoring_s"],
        problems=rows,
        settings=ev["settings"],
        confidence=ev["confidence"],
        n_bootstrap=ev["n_bootstrap"],
    ).to_dict()
    # Tokens and timing are the whole 114-problem pass's, not this part's.
    part["subset"] = {"part": name, "of_problems": ev["num_problems"], "tokens_and_timing": "whole pass"}
    for key in ("model", "model_source", "dtype", "device"):
        if key in ev:
            part[key] = ev[key]
    return part


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    from experiments.report import write_report

    parts = split_ids()
    base = json.loads((args.runs / "base_eval114.json").read_text())
    ids = {p["task_id"] for p in base["problems"]}
    if ids != parts["eval30"] | parts["heldout84"]:
        raise SystemExit(
            "base_eval114.json does not score exactly the split's 30 eval and 84 held-out problems"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    # OUT's probe.json is the base evaluation's host's, committed with it; each run carries its own host's.
    copy_portable(args.runs / "base_eval114.json", args.out / "base_eval114.json")
    done, missing = [], []
    for run in sorted(p for p in args.runs.iterdir() if (p / "run.json").is_file()):
        if not (run / "eval114.json").is_file():
            missing.append(run.name)
            continue
        (args.out / run.name).mkdir(exist_ok=True)
        for name in RUN_FILES:
            if (run / name).is_file():
                copy_portable(run / name, args.out / run.name / name)
        done.append(run.name)
    for name, part_ids in parts.items():
        folders = []
        for method in done:
            folder = args.out / name / "runs" / method
            folder.mkdir(parents=True, exist_ok=True)
            for f in ("run.json", "trainer_state.json", "sampled_prompts.jsonl"):
                if (args.out / method / f).is_file():
                    shutil.copy2(args.out / method / f, folder / f)
            after = json.loads((args.out / method / "eval114.json").read_text())
            (folder / "eval_before.json").write_text(
                json.dumps(subset(base, part_ids, name), indent=2) + "\n"
            )
            (folder / "eval_after.json").write_text(
                json.dumps(subset(after, part_ids, name), indent=2) + "\n"
            )
            folders.append(folder)
        title = f"Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, LoRA) on HumanEval: {name}"
        md = write_report(folders, args.out / name, title)
        print(f"{name}: {md}")
    print(
        "methods reported: "
        + ", ".join(done)
        + (f"; without eval114.json yet: {', '.join(missing)}" if missing else "")
    )


if __name__ == "__main__":
    main()
