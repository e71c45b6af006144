"""What a repair evaluation costs on vLLM's CPU engine with TRL's importance-sampling correction (TRL's default, the
baseline) and without it (what `evaluate_repair` asks for), same rows, rollouts and sampling settings.

    VENV/bin/python benchmarks/bench_repair_eval.py --out benchmarks/results/repair_eval_cpu.json   (vLLM's venv)

With `vllm_importance_sampling_correction`, GRPOTrainer scores every completion with the policy (a forward pass of
the transformers model) to weigh a training step; an evaluation trains on nothing, so `evaluate_repair` turns it
off. Each arm runs in a fresh subprocess (a colocated engine outlives its trainer), in the order given by
`--arms`, and times TRL's rollout and scoring call (`_generate_and_score_completions`) over the same batches;
engine start-up is timed apart. Printed: seconds, generated tokens and tokens/s per arm, and the ratio of each arm's
time to the baseline's, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "trl_default"
ARMS = {BASELINE: True, "passk_eval": False}  # arm -> importance-sampling correction on


def run_arm(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experiments.evaluation.repair import repair_trainer
    from experiments.inputs.data import chat_messages
    from experiments.inputs.models import resolve_model
    from experiments.learnable.tasks import heldout_rows

    torch.set_num_threads(args.threads)
    path = str(resolve_model(args.model))
    rows = [{**r, "prompt": chat_messages(r["code_prompt"])} for r in heldout_rows(args.problems)]
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path)
    trainer, _ = repair_trainer(
        model,
        AutoTokenizer.from_pretrained(path),
        rows,
        turns=args.turns,
        n_samples=args.samples,
        prompts_per_batch=args.problems,
        max_new_tokens=args.max_new_tokens,
        visible="split:1",
        submit=args.submit,
        use_vllm=True,
    )
    trainer.vllm_importance_sampling_correction = ARMS[args.arm]
    setup = time.perf_counter() - t0
    inputs = [dict(row) for row in trainer.train_dataset for _ in range(args.samples)]  # one per rollout
    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        trainer._generate_and_score_completions(inputs)
    seconds = time.perf_counter() - t0
    tokens = trainer._metrics["eval"]["completions/mean_length"][-1] * len(inputs)
    return {
        "arm": args.arm,
        "setup_seconds": setup,
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/repair_eval_cpu.json")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--problems", type=int, default=8, help="learnable held-out problems, one batch")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--submit", default="tool", choices=("tool", "answer"))
    parser.add_argument("--max_new_tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--arms", default=f"{BASELINE},passk_eval")
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # set for the child process of one arm
    args = parser.parse_args(argv)
    if args.arm:
        print(json.dumps(run_arm(args)), flush=True)
        return 0
    runs = {}
    for arm in args.arms.split(","):
        child = [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv), "--arm", arm]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(child, check=True, capture_output=True, text=True, env=env)
        runs[arm] = json.loads(done.stdout.strip().splitlines()[-1])
        print(arm, json.dumps(runs[arm]), flush=True)
    base = runs[BASELINE]["seconds"]
    result = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("arm", "out")},
        "host": {"cpus": os.cpu_count(), "load_avg_end": os.getloadavg()},
        "baseline": BASELINE,
        "runs": runs,
        "time_ratio_to_baseline": {arm: r["seconds"] / base for arm, r in runs.items()},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["time_ratio_to_baseline"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
