"""Peak memory of PPO relative to TRL's GRPOTrainer, same model and batch, one generation per step and eight.

    python benchmarks/bench_memory.py                                  # grpo, grpo_beta, ppo x spg 1 and 8
    python benchmarks/bench_memory.py --spg 8 --variants grpo ppo --hidden 256 --layers 4
    python benchmarks/bench_memory.py --out benchmarks/results/bench_memory.json

The GPU check (benchmarks/gpu_check.py) measures this with CUDA's allocator on the 1.5B shape. Here it is
measured on CPU, on a model shaped so that one micro-batch's activations outweigh the training state (hidden 256,
8 layers, 16 completions of ~30 prompt + 96 new tokens: ~200 MiB of activations against ~140 MiB of weights,
gradients and AdamW states, read off the before/after runs in benchmarks/results/bench_memory.json), as they do
for the 1.5B model at 32 x ~870 tokens (~40 GB against ~12 GB of bf16 training state), so that a second set of
activations shows up as it would on a GPU. The vocabulary (512) is tiny, so full-vocabulary tensors do not.

What is measured: every (variant, steps_per_generation) runs in a fresh subprocess. Just before the trainer is
built, the process's peak resident set size is reset (`/proc/self/clear_refs` = 5) and its current size taken as
the baseline; after training, the peak (`VmHWM`) minus that baseline is the memory the run added: policy,
reference model, critic, optimizer states, generation and activations. It is exact (the kernel's own high-water
mark, not a sampler). glibc's malloc keeps freed memory in its arenas, which would hide a later drop and turn
fragmentation into "peak"; every worker therefore runs with `MALLOC_MMAP_THRESHOLD_=65536`, so that every
tensor above 64 KiB is its own mapping and goes back to the kernel when freed, as a CUDA caching allocator's
blocks would be reused rather than counted twice. torch's own CPU allocator statistics are not used: they do not
cover everything (the profiler's view misses allocations outside its window).

Each run trains `steps_per_generation + 1` optimizer steps (at least 3), so that a second generation happens
while AdamW's states exist, PPO's two epochs included. The printed ratios are PPO's peak over GRPO's in the same
invocation at the same steps_per_generation: "vs grpo" (beta = 0, no reference model: the issue's baseline) and
"vs grpo_beta" (beta = 0.05, which loads a reference model as PPO's KL penalty does).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# --code: the trainers of another checkout (e.g. main, for a before/after comparison) are imported instead.
sys.path.insert(0, os.environ.get("PASSK_BENCH_CODE") or str(ROOT))

# name -> (method in METHODS, config overrides)
VARIANTS: dict[str, tuple[str, dict]] = {
    "grpo": ("grpo", {"beta": 0.0}),  # the baseline; the grpo row's own default is beta 0.04
    "grpo_beta": ("grpo", {"beta": 0.05}),
    "ppo": ("ppo", {}),
}
TARGET = 1.5  # PPO's peak <= 1.5 x GRPO's at the same batch (issue 11)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def worker(args: argparse.Namespace) -> dict:
    """Train one variant and return the peak memory it added, with its step times."""
    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    import rewards
    from experiments.learnable.tasks import train_rows
    from experiments.trainers import METHODS, build_config

    method, overrides = VARIANTS[args.worker]
    spg = args.spg[0]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    dataset = train_rows(2000)
    steps = max(3, spg + 1)
    config = build_config(
        method,
        output_dir=tempfile.mkdtemp(prefix=f"bench-memory-{args.worker}-"),
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        per_device_train_batch_size=args.batch,
        steps_per_generation=spg,
        num_generations=args.generations,
        max_completion_length=args.completion,
        learning_rate=1e-5,
        max_steps=steps,
        seed=args.seed,
        **overrides,
    )
    step_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.t0)

    # The reward's sandbox client and TRL's lazy imports start here, not inside the measured window.
    row = dataset[0]
    rewards.unit_test_reward.score(
        prompts=[row["prompt"]],
        completions=[row["canonical_solution"]],
        test=[row["test"]],
        entry_point=[row["entry_point"]],
    )
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base_kib = _status_kib("VmRSS")
    trainer = METHODS[method].trainer_cls(
        model=args.model,
        reward_funcs=[rewards.unit_test_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.remove_callback(PrinterCallback)
    built_kib = _status_kib("VmRSS")
    trainer.train()
    peak_kib = _status_kib("VmHWM")
    return {
        "variant": args.worker,
        "steps_per_generation": spg,
        "steps": steps,
        "step_times": step_times,
        "built_mib": (built_kib - base_kib) / 1024,
        "peak_mib": (peak_kib - base_kib) / 1024,
    }


def run_variant(args: argparse.Namespace, variant: str, spg: int, model: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            variant,
            "--json-out",
            out.name,
            "--model",
            model,
            "--spg",
            str(spg),
            "--batch",
            str(args.batch),
            "--generations",
            str(args.generations),
            "--completion",
            str(args.completion),
            "--seed",
            str(args.seed),
            "--threads",
            str(args.threads),
        ]
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            PASSK_BENCH_CODE=args.code or "",
            OMP_NUM_THREADS=str(args.threads),
            MALLOC_MMAP_THRESHOLD_="65536",
        )
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{variant} (spg {spg}) failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--spg", nargs="*", type=int, default=[1, 8], help="steps_per_generation values")
    parser.add_argument("--batch", type=int, default=16, help="completions per optimizer step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion", type=int, default=96, help="tokens per completion")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--code", default=None, help="measure the trainers of another checkout (first on PYTHONPATH)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the runs and ratios as JSON here")
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        Path(args.json_out).write_text(json.dumps(worker(args)))
        return

    from experiments.learnable.warm_start import task_model_path

    model = str(
        task_model_path(
            seed=args.seed, hidden_size=args.hidden, num_layers=args.layers, num_heads=4, num_kv_heads=2
        )
    )
    variants = ["grpo", *[v for v in args.variants if v != "grpo"]]
    runs, ratios = [], {}
    for spg in args.spg:
        by = {}
        for variant in variants:
            t0 = time.perf_counter()
            result = run_variant(args, variant, spg, model)
            by[variant] = result
            runs.append(result)
            print(
                f"spg {spg} {variant:<10} peak +{result['peak_mib']:7.0f} MiB (built +{result['built_mib']:5.0f} MiB)"
                f"  {time.perf_counter() - t0:5.0f}s",
                flush=True,
            )
        for variant in variants:
            if variant == "grpo":
                continue
            ratios[f"{variant}_spg{spg}"] = {
                f"vs_{base}": by[variant]["peak_mib"] / by[base]["peak_mib"]
                for base in ("grpo", "grpo_beta")
                if base in by and base != variant
            }
    print()
    for key, r in ratios.items():
        verdict = ""
        if key.startswith("ppo_"):
            verdict = "met" if r["vs_grpo"] <= TARGET else "MISSED"
            verdict = f"  target <= {TARGET}x vs grpo: {verdict}"
        print(f"{key:<16}" + "  ".join(f"{k} {v:.2f}x" for k, v in r.items()) + verdict)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in vars(args).items() if k not in ("worker", "json_out", "out", "model")}
        args.out.write_text(
            json.dumps({"settings": settings, "ratios": ratios, "runs": runs}, indent=1, default=str) + "\n"
        )


if __name__ == "__main__":
    main()
