"""GPU check: every method for one generation cycle on a Qwen2.5-Coder-1.5B-shaped model, one GPU, nothing downloaded.

    python benchmarks/gpu_check.py                          # one H200, the throughput config (see below)
    python benchmarks/gpu_check.py --methods grpo,ppo --spg 8
    python benchmarks/gpu_check.py --continuous-batching    # transformers' paged continuous batching instead
    python benchmarks/gpu_check.py --cpu --tiny             # smoke test of this program on CPU (CI runs it)

The model is Qwen2.5-Coder-1.5B-Instruct's architecture (Qwen2: hidden 1536, 28 layers, 12 heads, 2 KV heads,
MLP 8960, vocab 151936, tied embeddings; 1.54B parameters) with random weights, built from its config in bf16;
the tokenizer is passk's offline 512-token BPE. Random weights never emit EOS, so every completion runs to
max_completion_length: the throughput is a worst case and the same for every method. Each method goes through
the real runner (`experiments.run.train.run`) with the GPU throughput config (`experiments/configs/throughput.yaml`:
bf16, 32 completions of 128 tokens per optimizer step, 16 steps per generation, so one `generate` samples 512),
no evaluation and no saving.

Timing. A short GRPO run first warms up CUDA, cuBLAS and the generation path (untimed; without it the first
method paid ~19 s). Then each method trains exactly one generation cycle (`steps_per_generation` optimizer
steps, times PPO's `num_iterations` epochs), all timed, so the mean step time carries its share of generation:

- step time: mean wall time of an optimizer step over the cycle (generation, rewards, forward/backward, update);
- generation: completion token slots produced per second inside `generate` (`generate_batch` with continuous
  batching), i.e. batch x new tokens over the seconds spent there;
- peak memory: `torch.cuda.max_memory_allocated` over the method's run (reset before it);
- ratios to GRPO's numbers in the same invocation, against the targets of issue 11: every method's step time
  <= 1.3x GRPO's, PPO's peak memory <= 1.5x GRPO's, generation >= 10,000 tok/s.

Then the sandbox's rate (HumanEval canonical solutions through the unit-test reward), measured before CUDA is
initialised and again after: a sandbox that forks workers from a CUDA process must keep its rate.

Results are printed and written to `$OUT/gpu_check.json` (else `./gpu_check.json`), also when the time limit
(`--limit_s`, default 480) stops the run early: what finished is kept, and the exit code is 124.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)
warnings.filterwarnings("ignore", category=FutureWarning)

THROUGHPUT_CONFIG = REPO / "experiments" / "configs" / "throughput.yaml"
# Qwen2.5-Coder-1.5B-Instruct's config.json: the numbers that shape compute and memory.
QWEN_1_5B = dict(
    vocab_size=151936,
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    use_sliding_window=False,
    sliding_window=32768,
    max_window_layers=21,
)
TARGETS = {"step_time_vs_grpo": 1.3, "ppo_memory_vs_grpo": 1.5, "generation_tokens_per_s": 10_000}
BASELINE = "grpo"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="run on CPU (smoke test of this program)")
    p.add_argument("--tiny", action="store_true", help="the 2-layer tiny model instead of the 1.5B shape")
    p.add_argument(
        "--methods", default=None, help="comma-separated subset of METHODS (default: all; GRPO first)"
    )
    p.add_argument(
        "--config", default=str(THROUGHPUT_CONFIG), help="the run config (default: throughput.yaml)"
    )
    p.add_argument(
        "--spg", type=int, default=None, help="steps_per_generation (default: the config's; 2 --tiny)"
    )
    p.add_argument(
        "--batch", type=int, default=None, help="completions per optimizer step (default: the config's)"
    )
    p.add_argument(
        "--generations", type=int, default=None, help="completions per prompt (default: the config's)"
    )
    p.add_argument("--max_completion_length", type=int, default=None, help="default: the config's; 8 --tiny")
    p.add_argument("--cycles", type=int, default=1, help="generation cycles timed per method")
    p.add_argument(
        "--continuous-batching",
        dest="continuous_batching",
        action="store_true",
        help="use_transformers_continuous_batching (paged attention) instead of generate",
    )
    p.add_argument("--sandbox_programs", type=int, default=None, help="default 656 (164 x 4); 32 with --tiny")
    p.add_argument(
        "--layers", type=int, default=None, help="override the 1.5B shape's 28 layers (quick checks)"
    )
    p.add_argument("--limit_s", type=float, default=480, help="stop and write what finished after this long")
    return p.parse_args(argv)


def sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class GenerationTimer:
    """Completion token slots and seconds inside `generate` / `generate_batch`, summed while `active`."""

    def __init__(self) -> None:
        from transformers.generation.continuous_batching.continuous_api import ContinuousMixin
        from transformers.generation.utils import GenerationMixin

        self.active, self.tokens, self.seconds = False, 0, 0.0
        self._restore = [
            (GenerationMixin, "generate", GenerationMixin.generate),
            (ContinuousMixin, "generate_batch", ContinuousMixin.generate_batch),
        ]
        timer = self

        def timed_generate(model, *args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            t0 = timer._start()
            out = GenerationMixin_generate(model, *args, **kwargs)
            seqs = getattr(out, "sequences", out)
            new = (
                int(seqs.shape[0]) * max(int(seqs.shape[1]) - int(ids.shape[1]), 0) if ids is not None else 0
            )
            timer._stop(t0, new)
            return out

        def timed_generate_batch(model, *args, **kwargs):
            t0 = timer._start()
            out = ContinuousMixin_generate_batch(model, *args, **kwargs)
            timer._stop(t0, sum(len(o.generated_tokens) for o in out.values()))
            return out

        GenerationMixin_generate, ContinuousMixin_generate_batch = (
            GenerationMixin.generate,
            ContinuousMixin.generate_batch,
        )
        GenerationMixin.generate, ContinuousMixin.generate_batch = timed_generate, timed_generate_batch

    def _start(self) -> float:
        sync()
        return time.perf_counter()

    def _stop(self, t0: float, tokens: int) -> None:
        sync()
        if self.active:
            self.seconds += time.perf_counter() - t0
            self.tokens += tokens

    def reset(self) -> None:
        self.active, self.tokens, self.seconds = False, 0, 0.0

    def close(self) -> None:
        for cls, name, original in self._restore:
            setattr(cls, name, original)


def step_timer(timer: GenerationTimer):
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall time of each optimizer step (generation + rewards + forward/backward + update)."""

        def __init__(self) -> None:
            self.times: list[float] = []
            self._t0 = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            timer.active = True

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

    from experiments.inputs.models import tiny_model_path

    tiny_dir = tiny_model_path()
    if tiny:
        return str(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = {
        "bos_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    shape = QWEN_1_5B | ({"num_hidden_layers": layers, "max_window_layers": layers} if layers else {})
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device("cpu" if cpu else "cuda"):
        model = Qwen2ForCausalLM(Qwen2Config(**shape, **ids)).to(torch.float32 if cpu else torch.bfloat16)
    model.generation_config = GenerationConfig(**ids)
    out = root / "qwen2.5-coder-1.5b-shape"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    if not cpu:
        torch.cuda.empty_cache()
    print(
        f"model: Qwen2 1.5B shape, {n / 1e9:.3f}B parameters, random weights, built in "
        f"{time.perf_counter() - t0:.0f}s",
        flush=True,
    )
    return str(out)


def sandbox_rate(n_programs: int) -> dict:
    """Programs/s of the unit-test reward on HumanEval canonical solutions (all should pass)."""
    import rewards
    from experiments.inputs.data import load_humaneval

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
    return {
        "programs": n_programs,
        "seconds": seconds,
        "programs_per_s": n_programs / seconds,
        "passed": passed,
    }


def run_argv(a: argparse.Namespace, method: str, model: str, out_dir: Path, **overrides: Any) -> list[str]:
    """The runner's command line for one method: the config, the check's shape, nothing evaluated or saved."""
    keys: dict[str, Any] = {
        "method": method,
        "model": model,
        "eval_before": "false",
        "eval_after": "false",
        "eval_every_n_steps": 0,
        "save_strategy": "no",
        "save_model": "false",
        "report_to": "none",
        "disable_tqdm": "true",
        "logging_steps": 1000,
        "output_dir": out_dir,
        "budget_prompts": 0,  # optimizer steps given here (one generation cycle), not derived from the budget
    }
    if a.cpu:
        keys |= {
            "use_cpu": "true",
            "bf16": "false",
            "activation_checkpointing": "false",
            "model_init_kwargs": '{"dtype": "float32"}',
        }
    if a.tiny:
        keys |= {
            "per_device_train_batch_size": 4,
            "num_generations": 2,
            "max_completion_length": 8,
            "steps_per_generation": 2,
            "n_train": 16,
        }
    for key, value in (
        ("steps_per_generation", a.spg),
        ("per_device_train_batch_size", a.batch),
        ("num_generations", a.generations),
        ("max_completion_length", a.max_completion_length),
    ):
        if value is not None:
            keys[key] = value
    if a.continuous_batching:
        keys["use_transformers_continuous_batching"] = "true"
    if (
        method == BASELINE
    ):  # the targets' baseline is GRPO without a reference model (the grpo row's beta is 0.04)
        keys["beta"] = 0.0
    keys |= overrides
    return [a.config, *[x for k, v in keys.items() for x in (f"--{k}", str(v))]]


def measure(a: argparse.Namespace, method: str, model: str, root: Path, timer: GenerationTimer) -> dict:
    """Train `method` for `--cycles` generation cycles; its step times, generation rate and peak memory."""
    import torch

    from experiments.run.argv import parse_config
    from experiments.run.train import run

    out_dir = root / "runs" / method
    _, cfg = parse_config(run_argv(a, method, model, out_dir))
    cycle = cfg.steps_per_generation * getattr(cfg, "num_iterations", 1)
    steps = a.cycles * cycle
    timer.reset()
    steps_cb = step_timer(timer)
    if not a.cpu:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = 0.0 if a.cpu else torch.cuda.memory_allocated() / 2**30
    t0 = time.perf_counter()
    run(*parse_config(run_argv(a, method, model, out_dir, max_steps=steps)), callbacks=[steps_cb])
    return {
        "wall_s": time.perf_counter() - t0,
        "steps": steps,
        "steps_per_generation": cfg.steps_per_generation,
        "completions_per_step": cfg.per_device_train_batch_size,
        "completions_per_generate": cfg.generation_batch_size,
        "step_time_s": statistics.fmean(steps_cb.times) if steps_cb.times else None,
        "step_times_s": steps_cb.times,
        "generation_tokens": timer.tokens,
        "generation_s": timer.seconds,
        "generation_tokens_per_s": timer.tokens / timer.seconds if timer.seconds else None,
        "peak_gpu_memory_gib": None if a.cpu else torch.cuda.max_memory_allocated() / 2**30,
        "gpu_memory_at_start_gib": None if a.cpu else before,
    }


def add_ratios(results: dict) -> None:
    """Each method's step time, generation rate and peak memory over GRPO's (in place)."""
    base = results["methods"].get(BASELINE, {})
    for row in results["methods"].values():
        if "error" in row:
            continue
        for key, name in (
            ("step_time_s", "step_time"),
            ("generation_tokens_per_s", "generation"),
            ("peak_gpu_memory_gib", "peak_memory"),
        ):
            row[f"{name}_vs_grpo"] = row[key] / base[key] if row.get(key) and base.get(key) else None


def verdicts(results: dict, full_scale: bool) -> list[str]:
    """One line per target of issue 11 that these results can judge (generation only at the full shape)."""
    lines = []
    for method, row in results["methods"].items():
        ratio = row.get("step_time_vs_grpo")
        if method != BASELINE and ratio is not None:
            ok = ratio <= TARGETS["step_time_vs_grpo"]
            lines.append(
                f"{method} step time {ratio:.2f}x GRPO (target <= {TARGETS['step_time_vs_grpo']}x): "
                f"{'met' if ok else 'MISSED'}"
            )
    memory = results["methods"].get("ppo", {}).get("peak_memory_vs_grpo")
    if memory is not None:
        ok = memory <= TARGETS["ppo_memory_vs_grpo"]
        lines.append(
            f"ppo peak memory {memory:.2f}x GRPO (target <= {TARGETS['ppo_memory_vs_grpo']}x): "
            f"{'met' if ok else 'MISSED'}"
        )
    if full_scale:
        for method, row in results["methods"].items():
            rate = row.get("generation_tokens_per_s")
            if rate is not None:
                ok = rate >= TARGETS["generation_tokens_per_s"]
                lines.append(
                    f"{method} generation {rate:,.0f} tok/s (target >= 10,000): {'met' if ok else 'MISSED'}"
                )
    return lines


def print_row(method: str, row: dict) -> None:
    if "error" in row:
        print(f"{method:>15}: FAILED {row['error']}", flush=True)
        return
    mem = "-" if row["peak_gpu_memory_gib"] is None else f"{row['peak_gpu_memory_gib']:.1f} GiB"
    ratio = "" if row.get("step_time_vs_grpo") is None else f" ({row['step_time_vs_grpo']:.2f}x)"
    mem_ratio = "" if row.get("peak_memory_vs_grpo") is None else f" ({row['peak_memory_vs_grpo']:.2f}x)"
    gen_ratio = "" if row.get("generation_vs_grpo") is None else f" ({row['generation_vs_grpo']:.2f}x)"
    print(
        f"{method:>15}: step {row['step_time_s'] or 0:6.2f} s{ratio} | generation "
        f"{row['generation_tokens_per_s'] or 0:8,.0f} tok/s{gen_ratio} | peak {mem}{mem_ratio} | "
        f"{row['steps']} steps in {row['wall_s']:.0f}s",
        flush=True,
    )


class TimeLimit(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    t_start = time.perf_counter()
    n_programs = a.sandbox_programs or (32 if a.tiny else 656)
    results: dict = {
        "device": "cpu" if a.cpu else "cuda",
        "tiny": a.tiny,
        "config": a.config,
        "continuous_batching": a.continuous_batching,
        "targets": TARGETS,
        "methods": {},
    }
    out = Path(os.environ.get("OUT") or ".") / "gpu_check.json"

    def on_alarm(signum, frame):
        raise TimeLimit(f"time limit of {a.limit_s:.0f}s reached")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, a.limit_s)
    timer = None
    status = 0
    try:
        # Before anything touches CUDA: the reference rate of the sandbox.
        results["sandbox_before_cuda"] = sandbox_rate(n_programs)
        print(
            f"sandbox before CUDA init: {results['sandbox_before_cuda']['programs_per_s']:.0f} programs/s",
            flush=True,
        )
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

        from experiments.run.argv import parse_config
        from experiments.run.train import run
        from experiments.trainers import METHODS

        methods = a.methods.split(",") if a.methods else list(METHODS)
        methods = sorted(methods, key=lambda m: m != BASELINE)  # the baseline first: ratios as rows print
        root = Path(tempfile.mkdtemp(prefix="passk-gpu-check-"))
        model = build_model(root, a.tiny, a.cpu, a.layers)
        timer = GenerationTimer()

        # Warm-up, untimed: CUDA context, cuBLAS handles, kernels of generate / forward / backward / AdamW.
        t0 = time.perf_counter()
        warm = run_argv(
            a,
            BASELINE,
            model,
            root / "runs" / "warmup",
            max_steps=1,
            steps_per_generation=1,
            per_device_train_batch_size=8,
            num_generations=2,
            max_completion_length=16,
        )
        run(*parse_config(warm))
        results["warmup_s"] = time.perf_counter() - t0
        print(f"warm-up: {results['warmup_s']:.0f}s", flush=True)

        for method in methods:
            try:
                row = measure(a, method, model, root, timer)
            except TimeLimit:
                raise
            except Exception as e:  # one method failing must not hide the others' numbers
                row = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
                if not a.cpu:
                    torch.cuda.empty_cache()
            results["methods"][method] = row
            add_ratios(results)
            print_row(method, row)

        results["sandbox_after_cuda"] = sandbox_rate(n_programs)
        before, after = results["sandbox_before_cuda"], results["sandbox_after_cuda"]
        where = "after CUDA init" if not a.cpu else "again (CPU run: no CUDA)"
        print(
            f"sandbox {where}: {after['programs_per_s']:.0f} programs/s ({after['passed']}/{after['programs']} "
            f"passed; before: {before['programs_per_s']:.0f}/s, {before['passed']}/{before['programs']} passed)"
        )
        failed = [m for m, r in results["methods"].items() if "error" in r]
        status = 1 if failed or after["passed"] < after["programs"] else 0
    except TimeLimit as e:
        results["stopped"] = str(e)
        print(f"stopped: {e}; writing what finished", file=sys.stderr, flush=True)
        status = 124
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if timer is not None:
            timer.close()
        results["total_s"] = time.perf_counter() - t_start
        results["verdicts"] = verdicts(results, full_scale=not (a.cpu or a.tiny or a.layers))
        for line in results["verdicts"]:
            print(line)
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"total {results['total_s']:.0f}s; results: {out}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
