"""Are `evaluate_repair`'s n samples of one prompt n independent draws on vLLM's CPU engine?

Runs `evaluate_repair` (answer loop, 1 turn, T 0.7, top-p 0.9, seed 42, vLLM) on some screened HumanEval problems and
watches vLLM's CPU sampler (`TopKTopPSampler.forward_cpu`) at every step: wherever rows of one prompt still hold
the same logits (their samples have not diverged yet), it adds up the chance that independent draws all pick one
token (sum over tokens of p^g, p the processed distribution the engine samples from, g the rows) and counts the
steps where they did. Independent draws agree about as often as expected; shared noise agrees at every step and
leaves each problem's samples copies. Prints a JSON record: distinct rollouts per problem, expected and observed
agreements, the noise generators the requests carried (0: all drew from the global generator).

    VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=2 .venv-vllm/bin/python benchmarks/sample_independence.py \\
        --problems 10 --max_new_tokens 1536 --out RECORD.json

It measures; it asserts nothing (a test on the tiny model, tests/evaluation/test_repair_trainer.py, pins that the
transformers path samples a prompt's rollouts apart; this runs only where vLLM's CPU build is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCREENED = Path(__file__).resolve().parent / "results" / "sized_0.5b" / "records" / "screened35.jsonl"


def watch_sampler(stats: dict[str, Any]) -> None:
    """Wraps vLLM's CPU sampler (before the engine is built, which binds it) to count agreements of equal rows."""
    import torch
    from vllm.v1.sample.ops import topk_topp_sampler

    sample = topk_topp_sampler.TopKTopPSampler.forward_cpu

    def forward_cpu(self: Any, logits: torch.Tensor, generators: dict, k: Any, p: Any) -> Any:
        rows = logits.shape[0]
        tokens, logprobs = sample(self, logits, generators, k, p)  # logprobs: the processed distribution
        stats["generators"] = max(stats["generators"], len(generators))
        if rows > 1 and logprobs is not None:
            _, group_of = torch.unique(logits.float(), dim=0, return_inverse=True)
            for group in group_of.unique():
                members = (group_of == group).nonzero().flatten().tolist()
                if len(members) < 2:
                    continue
                probs = logprobs[members[0]].float().exp()
                stats["steps"] += 1
                stats["expected_agreements"] += float((probs ** len(members)).sum())
                stats["observed_agreements"] += int(len(set(tokens[members].tolist())) == 1)
        return tokens, logprobs

    topk_topp_sampler.TopKTopPSampler.forward_cpu = forward_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=10, help="the first N of the 35 screened problems")
    parser.add_argument("--n_samples", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=1536)
    parser.add_argument("--out", default=None, help="also write the record here")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    stats = {"steps": 0, "expected_agreements": 0.0, "observed_agreements": 0, "generators": 0}
    watch_sampler(stats)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experiments.evaluation.repair import evaluate_repair
    from experiments.inputs.data import chat_messages, load_humaneval
    from experiments.inputs.models import parted_model_path

    rows = [
        {**{k: r[k] for k in ("task_id", "test", "entry_point")}, "code_prompt": r["prompt"]}
        for r in load_humaneval(str(SCREENED))[: args.problems]
    ]
    rows = [
        {**r, "prompt": chat_messages(r["code_prompt"])} for r in rows
    ]  # as repair_compare.py builds them
    path = str(parted_model_path("qwen2.5-coder-0.5b"))
    record = evaluate_repair(
        AutoModelForCausalLM.from_pretrained(path),
        AutoTokenizer.from_pretrained(path),
        rows,
        turns=1,
        n_samples=args.n_samples,
        max_new_tokens=args.max_new_tokens,
        batch_size=len(rows),
        seed=42,
        visible="split:2",
        submit="answer",
        use_vllm=True,
    )
    summary = {
        "distinct_rollouts": {p["task_id"]: p["distinct_rollouts"] for p in record["problems"]},
        "distinct_rollouts_share": record["distinct_rollouts_share"],
        **stats,
        "settings": record["settings"],
    }
    text = json.dumps(summary, indent=2)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    os._exit(0)  # the colocated engine's threads would hold the process open (evaluate_repair's docstring)


if __name__ == "__main__":
    main()
