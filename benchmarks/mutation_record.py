"""Record one `mutation.py` run (a first run and its rerun of the survivors) in
`benchmarks/results/mutation.json` under `issue_32`, and recompute that module's totals.

    python benchmarks/mutation_record.py MODULE FIRST.json AFTER.json --why WHY.json --command "..." \
        [--part K/N] [--tests FILE ...]

WHY.json maps each surviving mutant's key of FIRST.json to {"kind": "test gap" | "equivalent", "why": "..."}:
a test gap must be killed in AFTER.json (the rerun with the tests written for it), an equivalent must survive
there; the script refuses a survivor without a reason, a gap still alive, or an "equivalent" a test killed.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "mutation.json"


def _change(diff: str) -> str:
    """The mutated line, before and after, from a mutant's diff."""
    lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("---", "+++"))]
    return "; ".join(lines)


def record(args: argparse.Namespace) -> dict:
    first = json.loads(args.first.read_text())
    after = json.loads(args.after.read_text())
    why = json.loads(args.why.read_text())
    m1, m2 = first["modules"][args.module], after["modules"][args.module]
    alive = {s["key"] for s in m2["survivors"]}
    survivors = []
    for s in m1["survivors"]:
        if s["key"] not in why:
            raise SystemExit(f"{s['key']}: no reason given in {args.why}")
        kind, reason = why[s["key"]]["kind"], why[s["key"]]["why"]
        if kind == "test gap" and s["key"] in alive:
            raise SystemExit(f"{s['key']}: a test gap the rerun did not kill")
        if kind == "equivalent" and s["key"] not in alive:
            raise SystemExit(f"{s['key']}: marked equivalent but killed by the rerun's tests")
        survivors.append(
            {
                "key": s["key"],
                "definition": s.get("definition"),
                "change": _change(s["diff"]),
                "killed_after": s["key"] not in alive,
                "kind": kind,
                "why": reason,
            }
        )
    equivalent = sum(s["kind"] == "equivalent" for s in survivors)
    run = m1["sampled"]
    killed_after = run - equivalent
    entry = {
        "tool": "cosmic-ray 8.7.0, benchmarks/mutation.py --fork",
        "date": datetime.date.today().isoformat(),
        "ref": first["ref"],
        "command": args.command,
        "part": args.part,
        "candidates": m1["candidates"],
        "run": run,
        "tests": args.tests or m1.get("tests", []),
        "killed_first_run": m1["killed"],
        "timeouts": m1.get("timeouts", 0),
        "timed_out": m1.get("timed_out", []),  # their keys (runs before 2026-12-05 did not list them)
        "incompetent": m1.get("incompetent", []),  # mutants cosmic-ray's operator could not apply: not run
        "killed_after_rerun": killed_after,
        "equivalent": equivalent,
        "score_non_equivalent": round(killed_after / (run - equivalent), 4) if run > equivalent else None,
        "survivors": survivors,
    }
    data = json.loads(RESULTS.read_text())
    section = data.setdefault("issue_32", {})
    name = args.module if args.part == "1/1" else f"{args.module} part {args.part}"
    section[name] = entry
    parts = [v for k, v in section.items() if k == args.module or k.startswith(args.module + " part ")]
    totals = section.setdefault("about", {}).setdefault("totals", {})
    run_all = sum(p["run"] for p in parts)
    eq_all = sum(p["equivalent"] for p in parts)
    killed_all = sum(p["killed_after_rerun"] for p in parts)
    totals[args.module] = {
        "candidates": entry["candidates"],
        "run": run_all,
        "killed": killed_all,
        "equivalent": eq_all,
        "score_non_equivalent": round(killed_all / (run_all - eq_all), 4) if run_all > eq_all else None,
    }
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    return totals[args.module]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module")
    ap.add_argument("first", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--why", type=Path, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--part", default="1/1")
    ap.add_argument("--tests", nargs="*")
    args = ap.parse_args()
    print(args.module, record(args))


if __name__ == "__main__":
    main()
