"""Step time and peak memory of each method relative to TRL's GRPOTrainer, same model, batch and seed.

    python benchmarks/bench_trainers.py                       # 7 methods + grpo(beta) baseline, 3 rounds
    python benchmarks/bench_trainers.py --rounds 1 --steps 6 --methods grpo ppo
    python benchmarks/bench_trainers.py --hidden 256 --layers 4 --out runs/bench_trainers.json
    python benchmarks/bench_trainers.py --model-name qwen2.5-coder-1.5b --lora 16 --data humaneval --dtype bfloat16 \
        --batch 2 --generations 2 --completion 40 --rounds 1 --steps 3 --ppo-steps 10 --threads 2   # the seed shape

Every (round, method) runs in a fresh subprocess, so peak memory is that method's alone; rounds interleave the
methods, so a change in machine load hits all of them alike, and each ratio is taken against GRPO *of the same
round* before the median over rounds. Step time is the mean wall time of an optimizer step (generation, reward,
forward/backward, optimizer) after `--warmup` steps; it is a mean, not a median, because PPO generates only every
`num_iterations` steps. Peak memory is the CUDA peak allocation on a GPU; on CPU it is the peak resident set size
of the process minus its size just before the trainer is built (model, reference, critic, optimizer states,
activations), sampled every 2 ms.

`--model-name` times a real model instead (a passk model name or folder, e.g. the seed's model, with `--lora R`
on every linear layer, `--data humaneval` the seed split's 50 training problems as raw code prompts); its
completions stop at EOS, so each run also reports its mean completion length.

By default the model is a randomly initialised task-sized Qwen2 (its completions never stop early, so every method generates
exactly `--completion` tokens) rewarded by `rewards.unit_test_reward`. Targets: the REINFORCE family within 1.05x
of GRPO in time and memory; PPO within 1.8x in time and 2.2x in memory. Methods that load a reference model
(`reinforce_kl`, `ppo`, `rloo`) are also compared with GRPO at beta = 0.05, which loads one too ("GRPO(b)"), and
judged against it: a reference forward pass is the price of any KL penalty, not of the method.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name -> (method in METHODS, config overrides)
VARIANTS: dict[str, tuple[str, dict]] = {
    "grpo": (
        "grpo",
        {"beta": 0.0},
    ),  # the baseline without a reference model (the grpo row's default is 0.04)
    "grpo_beta": ("grpo", {"beta": 0.05}),
    "vanilla_pg": ("vanilla_pg", {}),
    "reinforce": ("reinforce", {}),
    "reinforce_kl": ("reinforce_kl", {}),
    "reinforce_rloo": ("reinforce_rloo", {}),
    "ppo": ("ppo", {}),
    "rloo": ("rloo", {}),
}
TARGETS = {  # (time, memory) ceilings relative to GRPO
    "vanilla_pg": (1.05, 1.05),
    "reinforce": (1.05, 1.05),
    "reinforce_kl": (1.05, 1.05),
    "reinforce_rloo": (1.05, 1.05),
    "ppo": (1.8, 2.2),
}
WITH_REFERENCE = {"reinforce_kl", "ppo", "rloo"}
RATIO_KEYS = [f"{kind}_vs_grpo{suffix}" for suffix in ("", "_beta") for kind in ("time", "cpu", "memory")]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _PeakSampler(threading.Thread):
    def __init__(self, interval: float = 0.002):
        super().__init__(daemon=True)
        self.interval, self.peak, self._stop_flag = interval, _rss_bytes(), threading.Event()

    def run(self) -> None:
        while not self._stop_flag.is_set():
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(self.interval)

    def stop(self) -> int:
        self._stop_flag.set()
        self.join()
        return max(self.peak, _rss_bytes())


def worker(args: argparse.Namespace) -> dict:
    """Train one variant for `args.steps` steps and return its step times and peak memory."""
    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    import rewards
    from experiments.learnable.tasks import train_rows
    from experiments.trainers import METHODS, build_config

    method, overrides = VARIANTS[args.worker]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if args.data == "humaneval":
        from experiments.inputs.data import load_humaneval, split_dataset, to_rl_rows

        dataset = to_rl_rows(split_dataset(load_humaneval(), 50, 30, seed=0)["train"], style="completion")
    else:
        dataset = train_rows(2000)
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora, lora_alpha=2 * args.lora, lora_dropout=0.05, target_modules="all-linear"
        )
    config = build_config(
        method,
        output_dir=tempfile.mkdtemp(prefix=f"bench-{args.worker}-"),
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),
        activation_checkpointing=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        per_device_train_batch_size=args.batch,
        num_generations=args.generations,
        max_completion_length=args.completion,
        learning_rate=1e-5,
        max_steps=args.ppo_steps if method == "ppo" and args.ppo_steps else args.steps,
        seed=args.seed,
        model_init_kwargs={"dtype": getattr(torch, args.dtype)},
        **overrides,
    )

    step_times: list[float] = []
    cpu_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.t0)
            cpu_times.append(time.process_time() - self.c0)

    # Warm up everything the trainer touches lazily (sandbox client, reward module, TRL internals), so that the
    # memory baseline below does not charge imports to whichever method happens to trigger them.
    row = train_rows(1)[0]
    rewards.unit_test_reward.score(
        prompts=[row["prompt"]],
        completions=[row["canonical_solution"]],
        test=[row["test"]],
        entry_point=[row["entry_point"]],
    )
    gc.collect()

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
        sampler = _PeakSampler()
        sampler.start()
    trainer = METHODS[method].trainer_cls(
        model=args.model,
        reward_funcs=[rewards.unit_test_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
        **({"peft_config": peft_config} if peft_config else {}),
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    peak = torch.cuda.max_memory_allocated() if cuda else sampler.stop()
    lengths = [
        h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h
    ]
    return {
        "variant": args.worker,
        "step_times": step_times,
        "cpu_times": cpu_times,
        "peak_bytes": peak - base,
        "memory_kind": "cuda_peak_allocated" if cuda else "rss_peak_minus_start",
        "mean_completion_length": statistics.fmean(lengths) if lengths else None,
    }


def run_variant(args: argparse.Namespace, variant: str, model: str) -> dict:
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
            "--steps",
            str(args.steps),
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
            "--lora",
            str(args.lora),
            "--data",
            args.data,
            "--dtype",
            args.dtype,
            "--ppo-steps",
            str(args.ppo_steps),
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT))
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{variant} failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(out.name).read_text())


def summarize(runs: list[dict], warmup: int) -> dict:
    """Per variant: median over rounds of the mean step time, of the peak memory, and of the ratios to GRPO."""
    rounds = sorted({r["round"] for r in runs})
    by = {(r["round"], r["variant"]): r for r in runs}
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    summary = {}
    for v in variants:
        ratios: dict[str, list[float]] = {k: [] for k in RATIO_KEYS}
        times, cpus, mems = [], [], []
        for rd in rounds:
            run = by.get((rd, v))
            if run is None:
                continue
            t, c = statistics.fmean(run["step_times"][warmup:]), statistics.fmean(run["cpu_times"][warmup:])
            times.append(t)
            cpus.append(c)
            mems.append(run["peak_bytes"])
            for suffix, base_name in (("", "grpo"), ("_beta", "grpo_beta")):
                base = by.get((rd, base_name))
                if base is None or (suffix and v not in WITH_REFERENCE):
                    continue
                ratios[f"time_vs_grpo{suffix}"].append(t / statistics.fmean(base["step_times"][warmup:]))
                ratios[f"cpu_vs_grpo{suffix}"].append(c / statistics.fmean(base["cpu_times"][warmup:]))
                ratios[f"memory_vs_grpo{suffix}"].append(run["peak_bytes"] / base["peak_bytes"])
        med = statistics.median
        summary[v] = {
            "step_time_s": med(times),
            "cpu_time_s": med(cpus),
            "peak_mib": med(mems) / 2**20,
            **{k: (med(x) if x else None) for k, x in ratios.items()},
            "rounds": len(times),
            "mean_completion_length": med(
                [by[(rd, v)]["mean_completion_length"] or 0.0 for rd in rounds if (rd, v) in by]
            ),
        }
    return summary


def print_table(summary: dict) -> None:
    def f(x):
        return "-" if x is None else f"{x:.3f}"

    print(
        f"{'method':<16}{'s/step':>8}{'cpu s':>7}{'MiB':>7}  {'vs GRPO: wall  cpu   mem':<26}"
        f"{'vs GRPO(b): wall  cpu   mem':<29}target (on cpu time and memory)"
    )
    for v, s in summary.items():
        target = TARGETS.get(v)
        verdict = ""
        # A method with a reference model is judged against GRPO with one (beta > 0) when that was measured.
        like = "_beta" if v in WITH_REFERENCE and s["cpu_vs_grpo_beta"] is not None else ""
        if target and s[f"cpu_vs_grpo{like}"] is not None:
            ok = s[f"cpu_vs_grpo{like}"] <= target[0] and s[f"memory_vs_grpo{like}"] <= target[1]
            against = "GRPO(b)" if like else "GRPO"
            verdict = f"{'met' if ok else 'MISSED'} vs {against} (<= {target[0]}x time, {target[1]}x mem)"
        print(
            f"{v:<16}{s['step_time_s']:>8.3f}{s['cpu_time_s']:>7.3f}{s['peak_mib']:>7.0f}  "
            f"{f(s['time_vs_grpo']):>14}{f(s['cpu_vs_grpo']):>6}{f(s['memory_vs_grpo']):>6}  "
            f"{f(s['time_vs_grpo_beta']):>17}{f(s['cpu_vs_grpo_beta']):>6}{f(s['memory_vs_grpo_beta']):>6}  {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument(
        "--warmup", type=int, default=2, help="steps left out of the mean (must be even for PPO)"
    )
    parser.add_argument("--batch", type=int, default=64, help="completions per step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion", type=int, default=32, help="tokens per completion")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write runs and summary as JSON here")
    parser.add_argument(
        "--model-name", default=None, help="a passk model name or folder (default: a random one)"
    )
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank on every linear layer (0: train all)")
    parser.add_argument("--data", choices=["task", "humaneval"], default="task")
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32", help="the model's weights"
    )
    parser.add_argument(
        "--ppo-steps",
        type=int,
        default=0,
        help="PPO's steps (0: --steps); whole rollouts after --warmup, as it generates once a rollout",
    )
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        Path(args.json_out).write_text(json.dumps(worker(args)))
        return

    if args.model_name:
        from experiments.inputs.models import resolve_model

        model = resolve_model(args.model_name)
    else:
        from experiments.learnable.warm_start import task_model_path

        model = str(task_model_path(seed=args.seed, hidden_size=args.hidden, num_layers=args.layers))
    methods = ["grpo", *[m for m in args.methods if m != "grpo"]]
    runs = []
    for rd in range(args.rounds):
        for variant in methods:
            result = run_variant(args, variant, model)
            result["round"] = rd
            runs.append(result)
            mean = statistics.fmean(result["step_times"][args.warmup :])
            print(
                f"round {rd} {variant:<16} {mean:.3f} s/step  peak +{result['peak_bytes'] / 2**20:.1f} MiB  "
                f"{result['mean_completion_length'] or 0:.1f} tokens/completion",
                flush=True,
            )
    summary = summarize(runs, args.warmup)
    print()
    print_table(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in vars(args).items() if k not in ("worker", "json_out", "out", "model")}
        args.out.write_text(
            json.dumps({"settings": settings, "summary": summary, "runs": runs}, indent=1, default=str)
        )


if __name__ == "__main__":
    main()
