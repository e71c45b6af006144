"""Greedy tokens of the GGUF-loaded model (transformers' dequantized float32) against the converted folder in
float32 and bfloat16, one prompt at a time (no padding), on the first N of the seed's eval problems.

    python benchmarks/seed_model_gguf_equality.py qwen2.5-coder-1.5b 3 32 OUT.json

Joins the parts again into a temporary folder (deleted at the end); also records the GGUF's tensor types.
"""

from __future__ import annotations

import collections
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import gguf as gguf_lib
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from experiments.inputs.data import load_humaneval, split_dataset
from experiments.inputs.gguf_parts import PARTED_MODELS, assemble_gguf
from experiments.inputs.models import parted_model_path


def main(name: str, n_prompts: int, max_new: int, out: str) -> None:
    torch.set_num_threads(1)
    spec = PARTED_MODELS[name]
    folder = parted_model_path(name)
    with tempfile.TemporaryDirectory() as scratch:
        gguf = assemble_gguf(spec, Path(scratch) / spec.gguf_name)
        reader = gguf_lib.GGUFReader(str(gguf))
        kinds = collections.Counter(t.tensor_type.name for t in reader.tensors)
        bits = {
            k: round(
                8
                * sum(t.n_bytes for t in reader.tensors if t.tensor_type.name == k)
                / sum(t.n_elements for t in reader.tensors if t.tensor_type.name == k),
                3,
            )
            for k in kinds
        }
        del reader
        rows = split_dataset(load_humaneval(), 50, 30, seed=0)["eval"].select(range(n_prompts))
        tok = AutoTokenizer.from_pretrained(folder)
        res: dict = {
            "command": f"python benchmarks/seed_model_gguf_equality.py {name} {n_prompts} {max_new} {out}",
            "gguf_tensor_types": dict(kinds),
            "gguf_bits_per_weight": bits,
            "prompts": list(rows["task_id"]),
            "max_new_tokens": max_new,
        }
        loads = {
            "gguf_fp32": {"pretrained_model_name_or_path": str(gguf.parent), "gguf_file": gguf.name},
            "folder_fp32": {"pretrained_model_name_or_path": str(folder), "dtype": torch.float32},
            "folder_bf16": {"pretrained_model_name_or_path": str(folder), "dtype": torch.bfloat16},
        }
        outs = {}
        for label, kw in loads.items():
            t = time.perf_counter()
            model = AutoModelForCausalLM.from_pretrained(**kw).eval()
            load_s = time.perf_counter() - t
            ids_all = []
            t = time.perf_counter()
            with torch.no_grad():
                for prompt in rows["prompt"]:
                    ids = tok(prompt, return_tensors="pt")
                    g = model.generate(
                        **ids, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id
                    )
                    ids_all.append(g[0, ids["input_ids"].shape[1] :].tolist())
                logits = model(**tok(rows["prompt"][0], return_tensors="pt")).logits[0, -1].float()
            outs[label] = (ids_all, logits)
            res[label] = {"load_s": round(load_s, 1), "generate_s": round(time.perf_counter() - t, 1)}
            del model
            gc.collect()
    ref_ids, ref_logits = outs["gguf_fp32"]
    for label in ("folder_fp32", "folder_bf16"):
        ids_all, logits = outs[label]
        res[label].update(
            identical=sum(a == b for a, b in zip(ids_all, ref_ids)),
            of=len(ref_ids),
            first_divergence=[
                next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
                for a, b in zip(ids_all, ref_ids)
            ],
            last_logits_max_abs_diff=float((logits - ref_logits).abs().max()),
        )
    res["texts"] = {label: [tok.decode(x) for x in outs[label][0]] for label in outs}
    Path(out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
