#!/usr/bin/env bash
# GPU check: every method for a few steps on a Qwen2.5-Coder-1.5B-shaped model, one GPU, bf16, nothing downloaded.
#
# The model is Qwen2.5-Coder-1.5B-Instruct's architecture (Qwen2: hidden 1536, 28 layers, 12 heads, 2 KV heads,
# MLP 8960, vocab 151936, tied embeddings, rope theta 1e6; 1.54B parameters) with random weights, built from its
# config; the tokenizer is passk's offline 512-token BPE, so nothing comes from a hub. Random weights never emit
# EOS: every completion runs to max_completion_length, which makes the throughput numbers a worst case and
# comparable across methods. Each method goes through the real runner (experiments.train.run) with its GPU
# config (experiments/configs/<method>.yaml) and a larger batch than the seed's, no evaluation, no saving.
#
# Printed per method: generation tokens/s (completion tokens generated / seconds inside generate()), median step
# time (optimizer step incl. generation, rewards and backward; first step excluded as warm-up), peak GPU memory.
# Then the sandbox's rate (HumanEval canonical solutions through rewards.unit_test_reward) measured before CUDA
# is initialised and again inside this process after it has been: a sandbox that forks workers from a CUDA
# process must keep its rate.
#
#   bash benchmarks/gpu_check.sh                        # one GPU; about 4-6 minutes on an H200 (limit 8)
#   bash benchmarks/gpu_check.sh --methods grpo,ppo --steps 4
#   bash benchmarks/gpu_check.sh --cpu --tiny           # smoke test of the script itself on CPU (~1-2 minutes)
# Results also go to $OUT/gpu_check.json when OUT is set (else to the working directory's gpu_check.json).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LIMIT_S="${GPU_CHECK_LIMIT_S:-480}"

exec timeout --signal=INT "$LIMIT_S" python - "$@" <<'PY'
"""The python part of benchmarks/gpu_check.sh (see the header there)."""

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", category=FutureWarning)

# Qwen2.5-Coder-1.5B-Instruct's config.json, the numbers that shape compute and memory.
QWEN_1_5B = dict(
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, use_sliding_window=False, sliding_window=32768, max_window_layers=21,
)  # fmt: skip


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check.sh")
    p.add_argument("--cpu", action="store_true", help="run on CPU (smoke test of this script)")
    p.add_argument("--tiny", action="store_true", help="the 2-layer tiny model instead of the 1.5B shape")
    p.add_argument("--methods", default=None, help="comma-separated subset of METHODS (default: all)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per method (default 3; 2 with --tiny)")
    p.add_argument("--batch", type=int, default=None, help="completions per step (default 32; 4 with --tiny)")
    p.add_argument("--generations", type=int, default=None, help="completions per prompt (default 8; 2 with --tiny)")
    p.add_argument("--max_completion_length", type=int, default=None, help="default 128; 8 with --tiny")
    p.add_argument("--sandbox_programs", type=int, default=None, help="default 656 (164 x 4); 64 with --tiny")
    p.add_argument("--layers", type=int, default=None, help="override the 1.5B shape's 28 layers (quick checks)")
    return p.parse_args()


def sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class GenerationTimer:
    """Wraps GenerationMixin.generate: completion tokens generated and seconds spent, all calls summed."""

    def __init__(self) -> None:
        from transformers.generation.utils import GenerationMixin

        self.cls, self.original = GenerationMixin, GenerationMixin.generate
        self.tokens, self.seconds = 0, 0.0
        timer = self

        def timed(model, *args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            sync()
            t0 = time.perf_counter()
            out = timer.original(model, *args, **kwargs)
            sync()
            timer.seconds += time.perf_counter() - t0
            seqs = getattr(out, "sequences", out)
            if ids is not None and hasattr(seqs, "shape"):
                timer.tokens += int(seqs.shape[0]) * max(int(seqs.shape[1]) - int(ids.shape[1]), 0)
            return out

        GenerationMixin.generate = timed

    def reset(self) -> None:
        self.tokens, self.seconds = 0, 0.0

    def close(self) -> None:
        self.cls.generate = self.original


def step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall time of each optimizer step (generation + rewards + forward/backward + update)."""

        def __init__(self) -> None:
            self.times: list[float] = []
            self._t0 = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            sync()
            self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            self.times.append(time.perf_counter() - self._t0)

    return StepTimer()


def build_model(root: Path, tiny: bool, cpu: bool, layers: int | None = None) -> str:
    """A model folder: the tiny model, or the 1.5B shape with random weights and the tiny tokenizer."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from experiments.models import build_tiny_model

    tiny_dir = build_tiny_model(root / "tiny")
    if tiny:
        return str(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = {"bos_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    shape = QWEN_1_5B | ({"num_hidden_layers": layers, "max_window_layers": layers} if layers else {})
    config = Qwen2Config(**shape, **ids)
    device = "cpu" if cpu else "cuda"
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.float32 if cpu else torch.bfloat16)
    model.generation_config = GenerationConfig(**ids)
    out = root / "qwen2.5-coder-1.5b-shape"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    if not cpu:
        torch.cuda.empty_cache()
    print(f"model: Qwen2 1.5B shape, {n / 1e9:.3f}B parameters, random weights, built in "
          f"{time.perf_counter() - t0:.0f}s -> {out}", flush=True)  # fmt: skip
    return str(out)


def sandbox_rate(n_programs: int) -> dict:
    """Programs/s of the unit-test reward on HumanEval canonical solutions (all should pass)."""
    import rewards
    from experiments.data import load_humaneval

    ds = load_humaneval()
    rows = [ds[i % len(ds)] for i in range(n_programs)]
    reward = rewards.make_unit_test_reward()
    kw = {
        "test": [r["test"] for r in rows],
        "entry_point": [r["entry_point"] for r in rows],
        "code_prompt": [r["prompt"] for r in rows],
    }
    prompts, completions = [r["prompt"] for r in rows], [r["canonical_solution"] for r in rows]
    reward.score(prompts[:8], completions[:8], **{k: v[:8] for k, v in kw.items()})  # start the pool
    t0 = time.perf_counter()
    scores = reward.score(prompts, completions, **kw)
    seconds = time.perf_counter() - t0
    passed = sum(1 for s in scores if s == 1.0)
    return {"programs": n_programs, "seconds": seconds, "programs_per_s": n_programs / seconds, "passed": passed}


def main() -> int:
    a = parse()
    steps = a.steps or (2 if a.tiny else 3)
    # 32 completions of up to ~740 prompt + 128 new tokens: activations without checkpointing stay well under
    # the H200's memory (~2.3 MB per token for this shape), with the reference model and PPO's critic loaded.
    batch = a.batch or (4 if a.tiny else 32)
    gens = a.generations or (2 if a.tiny else 8)
    max_len = a.max_completion_length or (8 if a.tiny else 128)
    n_programs = a.sandbox_programs or (64 if a.tiny else 656)
    if batch % gens:
        print(f"--batch {batch} is not a multiple of --generations {gens}", file=sys.stderr)
        return 2

    results: dict = {"device": "cpu" if a.cpu else "cuda", "tiny": a.tiny, "steps": steps, "batch": batch,
                     "generations": gens, "max_completion_length": max_len, "methods": {}}  # fmt: skip
    # Before anything touches CUDA: the reference rate of the sandbox.
    results["sandbox_before_cuda"] = sandbox_rate(n_programs)
    print(f"sandbox before CUDA init: {results['sandbox_before_cuda']['programs_per_s']:.0f} programs/s", flush=True)

    import torch

    if a.cpu:
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    elif not torch.cuda.is_available():
        print("no CUDA device: run with --cpu --tiny for the smoke test", file=sys.stderr)
        return 2
    else:
        torch.cuda.init()
        results["gpu"] = torch.cuda.get_device_name(0)
        print(f"gpu: {results['gpu']}, torch {torch.__version__}", flush=True)

    from experiments.config import parse_config
    from experiments.train import run
    from experiments.trainers import METHODS

    methods = a.methods.split(",") if a.methods else list(METHODS)
    root = Path(tempfile.mkdtemp(prefix="passk-gpu-check-"))
    model = build_model(root, a.tiny, a.cpu, a.layers)
    timer = GenerationTimer()
    device = ["--use_cpu", "true", "--bf16", "false", "--model_init_kwargs", '{"dtype": "float32"}'] if a.cpu else []
    for method in methods:
        argv = [
            f"experiments/configs/{method}.yaml", "--model", model, *device,
            "--max_steps", str(steps), "--per_device_train_batch_size", str(batch), "--num_generations", str(gens),
            "--max_completion_length", str(max_len), "--eval_before", "false", "--eval_after", "false",
            "--eval_every_n_steps", "0", "--save_strategy", "no", "--save_model", "false", "--report_to", "none",
            "--disable_tqdm", "true", "--logging_steps", "1", "--output_dir", str(root / "runs" / method),
        ]  # fmt: skip
        timer.reset()
        steps_cb = step_timer()
        if not a.cpu:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        try:
            run(*parse_config(argv), callbacks=[steps_cb])
        except Exception as e:  # one method failing must not hide the others' numbers
            results["methods"][method] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            print(f"{method:>15}: FAILED {results['methods'][method]['error']}", flush=True)
            continue
        timed = steps_cb.times[1:] or steps_cb.times
        row = {
            "wall_s": time.perf_counter() - t0,
            "generation_tokens_per_s": timer.tokens / timer.seconds if timer.seconds else None,
            "generation_tokens": timer.tokens,
            "step_time_s": statistics.median(timed) if timed else None,
            "step_times_s": steps_cb.times,
            "peak_gpu_memory_gib": None if a.cpu else torch.cuda.max_memory_allocated() / 2**30,
        }
        results["methods"][method] = row
        mem = "-" if row["peak_gpu_memory_gib"] is None else f"{row['peak_gpu_memory_gib']:.1f} GiB"
        print(f"{method:>15}: generation {row['generation_tokens_per_s'] or 0:8.0f} tok/s | step "
              f"{row['step_time_s'] or 0:6.2f} s | peak memory {mem} | {row['wall_s']:.0f}s", flush=True)  # fmt: skip
        gc.collect()
        if not a.cpu:
            torch.cuda.empty_cache()
    timer.close()

    results["sandbox_after_cuda"] = sandbox_rate(n_programs)
    before, after = results["sandbox_before_cuda"], results["sandbox_after_cuda"]
    where = "after CUDA init" if not a.cpu else "again (CPU run: no CUDA)"
    print(f"sandbox {where}: {after['programs_per_s']:.0f} programs/s "
          f"({after['passed']}/{after['programs']} passed; before: {before['programs_per_s']:.0f}/s, "
          f"{before['passed']}/{before['programs']} passed)", flush=True)  # fmt: skip
    out = Path(os.environ.get("OUT") or ".") / "gpu_check.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {out}")
    failed = [m for m, r in results["methods"].items() if "error" in r]
    return 1 if failed or after["passed"] < after["programs"] else 0


if __name__ == "__main__":
    sys.exit(main())
PY
