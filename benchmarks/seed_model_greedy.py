"""Greedy answers of a passk model name to the seed's 30 eval problems (split seed 0), saved with their ids so
that extraction rules can be re-scored without generating again (benchmarks/seed_model_rescore.py).

    python benchmarks/seed_model_greedy.py qwen2.5-coder-1.5b OUT.jsonl 256 15              # raw code prompts
    python benchmarks/seed_model_greedy.py qwen2.5-coder-1.5b OUT.jsonl 256 6 --chat 6      # chat, first 6

One torch thread, bfloat16 (this host's bf16 matmul ran at twice fp32's rate), prompts sorted by length and
batched. Writes OUT.jsonl (task_id, completion, new_tokens, finish, completion_ids) and OUT.meta.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from experiments.inputs.data import chat_messages, load_humaneval, split_dataset
from experiments.inputs.models import load_model_and_tokenizer, model_source, resolve_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("max_new_tokens", type=int)
    ap.add_argument("batch_size", type=int)
    ap.add_argument("--chat", type=int, default=0, help="chat template on the first N problems instead")
    ap.add_argument("--instruction", default=None, help="chat request text (default: passk's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    path = resolve_model(args.model)
    model, tok = load_model_and_tokenizer(path, dtype=torch.bfloat16)
    t_load = time.perf_counter() - t0
    rows = split_dataset(load_humaneval(), 50, 30, seed=0)["eval"]
    if args.chat:
        rows = rows.select(range(args.chat))
        texts = [
            tok.apply_chat_template(
                chat_messages(p, instruction=args.instruction), tokenize=False, add_generation_prompt=True
            )
            for p in rows["prompt"]
        ]
    else:
        texts = list(rows["prompt"])
    order = sorted(range(len(rows)), key=lambda i: len(tok(texts[i])["input_ids"]))
    eos_ids = model.generation_config.eos_token_id
    eos = set(eos_ids if isinstance(eos_ids, list) else [eos_ids]) | {tok.eos_token_id}
    results: dict[int, dict] = {}
    t_gen = time.perf_counter()
    for b in range(0, len(order), args.batch_size):
        idx = order[b : b + args.batch_size]
        batch = tok([texts[i] for i in idx], return_tensors="pt", padding=True)
        tb = time.perf_counter()
        with torch.no_grad():
            gen = model.generate(
                **batch, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id
            )
        new = gen[:, batch["input_ids"].shape[1] :]
        for k, i in enumerate(idx):
            ids = new[k].tolist()
            n = next((j + 1 for j, t in enumerate(ids) if t in eos), len(ids))
            stop = ids[n - 1] if ids[n - 1] in eos else None
            results[i] = {
                "task_id": rows[i]["task_id"],
                "completion": tok.decode(ids[: n - 1] if stop is not None else ids[:n]),
                "new_tokens": n,
                "finish": "length" if stop is None else tok.convert_ids_to_tokens(stop),
                "completion_ids": ids[:n],
            }
        print(
            f"batch {b // args.batch_size}: {len(idx)} prompts, {time.perf_counter() - tb:.0f} s", flush=True
        )
    wall = time.perf_counter() - t_gen
    with open(args.out, "w") as f:
        for i in range(len(rows)):
            f.write(json.dumps(results[i]) + "\n")
    meta = {
        "command": "python benchmarks/seed_model_greedy.py "
        + " ".join(
            [args.model, args.out, str(args.max_new_tokens), str(args.batch_size)]
            + ([f"--chat {args.chat}"] if args.chat else [])
            + ([f"--instruction {json.dumps(args.instruction)}"] if args.instruction else [])
        ),
        "model": args.model,
        "model_source": model_source(path),
        "dtype": "bfloat16",
        "torch_threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "do_sample": False,
        "prompts": "experiments.inputs.data.chat_messages through the chat template"
        if args.chat
        else "raw code prompts",
        "split": "split_dataset(load_humaneval(), 50, 30, seed=0)['eval']",
        "load_s": round(t_load, 1),
        "generate_wall_s": round(wall, 1),
        "new_tokens": sum(r["new_tokens"] for r in results.values()),
        "eos_token_ids": sorted(eos),
        "completion": "decoded with special tokens kept, without the stop token",
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
    }
    with open(args.out.replace(".jsonl", ".meta.json"), "w") as f:
        json.dump(meta, f, indent=2)


if __name__ == "__main__":
    main()
