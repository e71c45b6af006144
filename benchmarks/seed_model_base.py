"""The seed's base-model row measured on its own model (issue 28 item 3): the seed split's 30 eval problems with
n samples each (T 0.7, top-p 0.9, 256 new tokens, raw code prompts: the seed's protocol) plus greedy, and greedy
pass@1 on the rest of HumanEval, so that greedy covers all 164 problems.

    python benchmarks/seed_model_base.py qwen2.5-coder-1.5b benchmarks/results/seed_model/base_1.5b --n 20
    python benchmarks/seed_model_base.py qwen2.5-coder-1.5b benchmarks/results/seed_model/base_1.5b --summary

A trained run is scored the same way (MODEL is its output_dir, a LoRA adapter over the converted model), on the 30
eval problems only, and compared problem by problem with the base row:

    python benchmarks/seed_model_base.py runs/seed_1.5b/reinforce OUT --n 20 --chunk 2 --batch-size 2 \
        --eval-only --compare benchmarks/results/seed_model/base_1.5b

Resumable: each chunk of problems is written to OUT/chunks/ as it finishes and skipped when the command runs again
(chunk i samples from seed + i). The dtype is the faster of bfloat16 and float32 in a timed decode step of this
model on this host (`OUT/probe.json`). `--summary` merges the chunks into OUT/summary.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

SEED_SPLIT = {"n_train": 50, "n_eval": 30, "seed": 0}  # seed.yaml: n_train, n_eval, split_seed
SEED_PROTOCOL_N = 5  # the seed's evaluate_model(num_samples=5)
HUMANEVAL_PROBLEMS = 164


def probe_dtype(path: str, threads: int) -> dict[str, Any]:
    """Seconds per decode step (batch 21, after a 16-token prefill) in bfloat16 and float32; the faster wins."""
    import torch

    from experiments.inputs.models import load_model_and_tokenizer

    torch.set_num_threads(threads)
    seconds: dict[str, float] = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        model, tok = load_model_and_tokenizer(path, dtype=dtype)
        batch = tok(['def add(a, b):\n    """Add two numbers."""\n'] * 21, return_tensors="pt")
        with torch.no_grad():
            out = model(**batch, use_cache=True)
            t0 = time.perf_counter()
            for _ in range(6):
                nxt = out.logits[:, -1:].argmax(-1)
                out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
            seconds[name] = (time.perf_counter() - t0) / 6
        del model
    return {"decode_step_s": seconds, "dtype": min(seconds, key=seconds.get), "threads": threads}


def run_chunks(args: argparse.Namespace, out: Path) -> None:
    import torch

    from experiments.evaluation.evaluate import evaluate_model
    from experiments.inputs.data import load_humaneval, split_dataset, to_rl_rows
    from experiments.inputs.models import load_model_and_tokenizer, model_source, resolve_model

    adapter = Path(args.model) / "adapter_config.json"
    path = args.model if adapter.is_file() else resolve_model(args.model)
    probe_file = out / "probe.json"
    if not probe_file.exists():
        probe_file.write_text(json.dumps(probe_dtype(path, args.threads), indent=2) + "\n")
    probe = json.loads(probe_file.read_text())
    torch.set_num_threads(args.threads)
    model, tok = load_model_and_tokenizer(path, dtype=getattr(torch, probe["dtype"]))
    source: dict[str, Any] = {"model": args.model, "source": model_source(path)}
    if adapter.is_file():  # a trained run: the base it adapts, and what trained it
        source["source"] = model_source(json.loads(adapter.read_text())["base_model_name_or_path"])
        run = json.loads((Path(path) / "run.json").read_text())
        source["run"] = {k: run.get(k) for k in ("method", "seed", "method_hparams", "budget", "wall_time_s")}
    (out / "source.json").write_text(json.dumps(source, indent=2) + "\n")

    full = load_humaneval()
    split = split_dataset(full, SEED_SPLIT["n_train"], SEED_SPLIT["n_eval"], seed=SEED_SPLIT["seed"])
    eval_ids = set(split["eval"]["task_id"])
    rest = full.filter(lambda r: r["task_id"] not in eval_ids)
    jobs = [
        ("eval", to_rl_rows(split["eval"], style="completion"), args.n, args.chunk, args.batch_size),
        ("rest", to_rl_rows(rest, style="completion"), 1, args.greedy_chunk, args.greedy_chunk),
    ][: 1 if args.eval_only else 2]
    for part, rows, n, chunk, batch_size in jobs:
        for i, start in enumerate(range(0, len(rows), chunk)):
            file = out / "chunks" / f"{part}_{i:03d}.json"
            if file.exists():
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            res = evaluate_model(
                model,
                tok,
                rows.select(range(start, min(start + chunk, len(rows)))),
                n_samples=n,
                ks=(1,),
                temperature=0.7,
                top_p=0.9,
                max_new_tokens=256,
                greedy=True,
                seed=args.seed + i,
                batch_size=batch_size,
                style="completion",
                progress=False,
            )
            data = res.to_dict()
            data["timing"].update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(data, indent=1) + "\n")
            print(
                f"{part} chunk {i}: {res.num_problems} problems, {data['timing']['wall_s']:.0f} s wall, "
                f"{res.tokens_generated} tokens",
                flush=True,
            )


def summarize(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from experiments.evaluation.stats import Estimate, pass_at_k_per_problem

    def load(part: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        chunks = [json.loads(f.read_text()) for f in sorted((out / "chunks").glob(f"{part}_*.json"))]
        return [p for c in chunks for p in c["problems"]], chunks

    kw = {"n_bootstrap": 10_000, "confidence": 0.95, "seed": 0}
    est = lambda v: Estimate.from_values(np.asarray(v, dtype=float), **kw).to_dict()  # noqa: E731
    evals, eval_chunks = load("eval")
    rest, rest_chunks = load("rest")
    n = min(p["n"] for p in evals)
    correct = [sum(r >= 1.0 for r in p["rewards"]) for p in evals]
    first5 = [sum(r >= 1.0 for r in p["rewards"][:SEED_PROTOCOL_N]) for p in evals]
    rows: dict[str, Any] = {
        "seed_protocol": {  # the first 5 samples, scored as the seed scored them
            "first_sample_pass@1": est([p["rewards"][0] >= 1.0 for p in evals]),
            "pass@5_any_of_5": est([c > 0 for c in first5]),
            "unbiased_pass@1_n5": est(pass_at_k_per_problem([5] * len(evals), first5, 1)),
        },
        f"n{n}": {
            f"pass@{k}": est(pass_at_k_per_problem([n] * len(evals), correct, k))
            for k in (1, 5, 10, n)
            if k <= n
        },
        # Named by the problems counted, so that a summary of unfinished chunks cannot pass for the full row.
        f"greedy_pass@1_eval{len(evals)}": est([p["greedy_passed"] for p in evals]),
    }
    if rest:
        rows[f"greedy_pass@1_all{len(evals) + len(rest)}"] = est([p["greedy_passed"] for p in evals + rest])
    timing = {
        part: {
            "wall_s": sum(c["timing"]["wall_s"] for c in cs),
            "cpu_s": sum(c["timing"]["cpu_s"] for c in cs),
            "tokens": sum(c["tokens_generated"] for c in cs),
        }
        for part, cs in (("eval", eval_chunks), ("rest", rest_chunks))
    }
    summary = {
        "model": args.model,
        "source": json.loads((out / "source.json").read_text()),
        "probe": json.loads((out / "probe.json").read_text()),
        "problems": {"eval": len(evals), "rest": len(rest)},
        "complete": len(evals) == SEED_SPLIT["n_eval"]
        and (args.eval_only or len(evals) + len(rest) == HUMANEVAL_PROBLEMS),
        "n": n,
        "metrics": rows,
        "timing": timing,
        "truncated_samples_eval": sum(p["n_truncated"] for p in evals),
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    if args.compare:
        summary["paired_vs"] = {"base": args.compare, **paired(evals, Path(args.compare), kw)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def paired(evals: list[dict[str, Any]], base_dir: Path, kw: dict[str, Any]) -> dict[str, Any]:
    """This row minus the base row, problem by problem over the same eval problems: the seed's protocol read from
    each row's first 5 samples, unbiased pass@1 from all of each row's samples, and greedy (bootstrap over
    problems of the per-problem differences)."""
    from experiments.evaluation.stats import paired_interval, pass_at_k_per_problem

    base = {
        p["task_id"]: p
        for f in sorted((base_dir / "chunks").glob("eval_*.json"))
        for p in json.loads(f.read_text())["problems"]
    }
    missing = [p["task_id"] for p in evals if p["task_id"] not in base]
    if missing:
        raise SystemExit(
            f"--compare {base_dir}: no base result for {', '.join(missing)}; finish that row first"
        )
    pairs = [(p, base[p["task_id"]]) for p in evals]

    def per_problem(p: dict[str, Any]) -> dict[str, float]:
        passed = [r >= 1.0 for r in p["rewards"]]
        first5 = passed[:SEED_PROTOCOL_N]
        return {
            "first_sample_pass@1": float(passed[0]),
            "pass@5_any_of_5": float(any(first5)),
            "unbiased_pass@1_n5": sum(first5) / len(first5),
            "unbiased_pass@1_all_samples": float(pass_at_k_per_problem([len(passed)], [sum(passed)], 1)[0]),
            "greedy_pass@1": float(p["greedy_passed"]),
        }

    rows = [(per_problem(a), per_problem(b)) for a, b in pairs]
    result: dict[str, Any] = {"problems": len(rows), "n_this": min(len(a["rewards"]) for a, _ in pairs)}
    result["n_base"] = min(len(b["rewards"]) for _, b in pairs)
    for key in rows[0][0]:
        a = np.array([[r[0][key] for r in rows]])
        b = np.array([[r[1][key] for r in rows]])
        result[key] = {
            "this": float(a.mean()),
            "base": float(b.mean()),
            "diff": float(a.mean() - b.mean()),
            "ci": paired_interval(a, b, n_bootstrap=kw["n_bootstrap"], seed=kw["seed"]),
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=20, help="samples per eval problem (the first 5 are the seed's)")
    ap.add_argument("--chunk", type=int, default=3, help="eval problems per saved chunk")
    ap.add_argument(
        "--greedy-chunk",
        type=int,
        default=16,
        help="other problems per saved chunk and generate call (greedy + 1 sample)",
    )
    ap.add_argument("--batch-size", type=int, default=1, help="prompts per generate call")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--summary", action="store_true", help="only merge the chunks and print the table")
    ap.add_argument(
        "--eval-only", action="store_true", help="the 30 eval problems only (no greedy on the rest)"
    )
    ap.add_argument("--compare", help="a base row's OUT folder: add paired differences to summary.json")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.summary:
        run_chunks(args, out)
    summary = summarize(out, args)
    print(json.dumps({k: summary[k] for k in ("metrics", "paired_vs") if k in summary}, indent=1))


if __name__ == "__main__":
    main()
