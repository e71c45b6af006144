"""CPU profile of SmolLM2-135M-Instruct on the learnable task: one training step and one evaluation, by phase.

    python benchmarks/bench_smollm2_cpu.py                                   # this checkout, step + eval, 2 rounds
    python benchmarks/bench_smollm2_cpu.py --code /tmp/passk-main --label before --out before.json
    python benchmarks/bench_smollm2_cpu.py --what step --method ppo --rounds 1

A training step is one generation batch of 16 completions (4 prompts x 4, at most 48 new tokens) followed by one
optimizer step, with the budget file `smollm2_learnable` (chat prompts, T = 0.8 / top_p 0.9) and the method's own
settings (GRPO: a reference model, beta 0.04). It is timed by phase, by wrapping the trainer's own seams:
generation (`_generate_single_turn`), rewards (`_calculate_rewards`: the sandboxed unit tests), the reference
forward and the policy's log-probabilities (`_get_per_token_logps_and_entropies` on the reference model, inside the
loss, or without gradient), PPO's critic (`_critic_values`), the backward pass (`accelerator.backward`) and the
optimizer step. The first step warms up (allocator, oneDNN primitives) and is reported apart; the figures are the
mean of the later steps. An evaluation is `experiments.evaluation.evaluate.evaluate_model` on 100 held-out problems of the
learnable task x 4 samples + 1 greedy, 64 new tokens, with the budget's evaluation settings.

What is measured: wall time and the process's CPU time (user + sys of all its threads, from `resource`); the
sandbox's workers are other processes, so the rewards' CPU is not in the process figure (their wall is). Every
(what, round) runs in a fresh subprocess, rounds interleaved, and records the load average before and after: on a
shared machine wall time depends on the neighbours, CPU time much less (it still grows when a descheduled OpenMP
thread makes its partner spin at a barrier). `--code DIR` imports another checkout's `experiments` (e.g. main, for
a before/after table in one session); the budget values that the other checkout's file lacks are passed on the
command line (`--set key=value`).

`--what kernels` times the choices behind the settings on SmolLM2 itself: float32 vs bfloat16 matmuls (this
CPU has no bfloat16 instructions), decoding cost per row by batch size, the dynamic vs the static KV cache, and
top-p by sorting the vocabulary (transformers' warper) vs `experiments.evaluation.evaluate._TopP`.

Writes `--out` (JSON: every round, every phase, the settings and the machine) and prints a line per round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("PASSK_BENCH_CODE") or str(ROOT))

BUDGET = "smollm2_learnable"
STEP_SHAPE = [
    "--per_device_train_batch_size",
    "16",
    "--num_generations",
    "4",
    "--max_completion_length",
    "48",
]
EVAL_PROBLEMS = 100


def _cpu() -> float:
    # Children too: an evaluation with eval_processes > 1 decodes in forked processes, reaped before it returns.
    return sum(
        u.ru_utime + u.ru_stime
        for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


class Phases:
    """Wall and CPU seconds per named phase; nested phases are charged to the innermost one only."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._stack: list[list[Any]] = []  # [name, wall start, cpu start, child wall, child cpu]

    def wrap(self, owner: Any, attr: str, name: str | Callable[..., str]) -> None:
        original = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            label = name(*args, **kwargs) if callable(name) else name
            self._stack.append([label, time.perf_counter(), _cpu(), 0.0, 0.0])
            try:
                return original(*args, **kwargs)
            finally:
                label, w0, c0, cw, cc = self._stack.pop()
                wall, cpu = time.perf_counter() - w0, _cpu() - c0
                self.wall[label] += wall - cw
                self.cpu[label] += cpu - cc
                if self._stack:
                    self._stack[-1][3] += wall
                    self._stack[-1][4] += cpu

        setattr(owner, attr, timed)

    def take(self) -> dict[str, dict[str, float]]:
        out = {k: {"wall_s": self.wall[k], "cpu_s": self.cpu[k]} for k in sorted(self.wall)}
        self.wall.clear()
        self.cpu.clear()
        return out


def _parse(method: str, extra: list[str]) -> tuple[Any, Any]:
    from experiments.run.argv import parse_config
    from experiments.run.config import config_path

    return parse_config([str(config_path(BUDGET)), "--method", method, *extra])


def worker_step(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """Build the trainer as experiments.run.train.run does and time `args.steps` optimizer steps by phase."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from experiments.inputs.data import DataSpec
    from experiments.inputs.reward_funcs import RewardSpec
    from experiments.run import train as runner

    out_dir = tempfile.mkdtemp(prefix="bench-smollm2-")
    exp, cfg = _parse(
        args.method,
        [
            *STEP_SHAPE,
            "--budget_prompts",
            "0",
            "--max_steps",
            str(args.steps),
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--output_dir",
            out_dir,
            "--eval_every_n_steps",
            "0",
            *extra,
        ],
    )
    runner.setup_torch(exp, cfg)
    train_rows, _ = runner.build_datasets(DataSpec.from_config(exp))
    model_path = runner.starting_model(exp.model, exp.warm_start_steps, seed=exp.split_seed)
    runner.apply_model_sampling(exp, cfg, model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    from experiments.run.config import method_spec

    t_build = time.perf_counter()
    trainer = method_spec(exp.method).trainer_cls(
        model=model_path,
        reward_funcs=runner.build_reward_funcs(
            RewardSpec.from_config(exp), runner.problem_kind(train_rows.column_names)
        ),
        args=cfg,
        train_dataset=train_rows,
        processing_class=tokenizer,
    )
    build_s = time.perf_counter() - t_build

    phases = Phases()
    in_loss = {"depth": 0}
    ref = trainer.ref_model

    def logps_label(model: Any, *a: Any, **k: Any) -> str:
        if ref is not None and model is ref:
            return "reference_forward"
        return "policy_forward" if in_loss["depth"] else "policy_logps_no_grad"

    phases.wrap(trainer, "_generate_single_turn", "generation")
    phases.wrap(trainer, "_calculate_rewards", "rewards")
    phases.wrap(trainer, "_get_per_token_logps_and_entropies", logps_label)
    if hasattr(trainer, "_critic_values"):
        phases.wrap(trainer, "_critic_values", "critic_forward")
    phases.wrap(trainer.accelerator, "backward", "backward")
    original_loss = trainer._compute_loss

    def loss(*a: Any, **k: Any) -> Any:
        in_loss["depth"] += 1
        try:
            return original_loss(*a, **k)
        finally:
            in_loss["depth"] -= 1

    trainer._compute_loss = loss
    phases.wrap(trainer, "_compute_loss", "loss_other")  # the loss's own arithmetic, outside the passes above

    steps: list[dict[str, Any]] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.t0, self.c0 = time.perf_counter(), _cpu()

        def on_pre_optimizer_step(self, *a: Any, **k: Any) -> None:
            self.o0, self.oc0 = time.perf_counter(), _cpu()

        def on_optimizer_step(self, *a: Any, **k: Any) -> None:
            self.opt = (time.perf_counter() - self.o0, _cpu() - self.oc0)

        def on_step_end(self, *a: Any, **k: Any) -> None:
            by_phase = phases.take()
            by_phase["optimizer"] = {"wall_s": self.opt[0], "cpu_s": self.opt[1]}
            wall, cpu = time.perf_counter() - self.t0, _cpu() - self.c0
            known = sum(p["wall_s"] for p in by_phase.values()), sum(p["cpu_s"] for p in by_phase.values())
            by_phase["other"] = {"wall_s": wall - known[0], "cpu_s": cpu - known[1]}
            steps.append({"wall_s": wall, "cpu_s": cpu, "phases": by_phase})
            print(f"  step {len(steps)}: wall {wall:.1f} s, cpu {cpu:.1f} s", file=sys.stderr, flush=True)

    trainer.add_callback(StepTimer())
    trainer.train()
    history = trainer.state.log_history
    return {
        "steps": steps,
        "build_s": build_s,
        "completion_length": [
            h.get("completions/mean_length") for h in history if "completions/mean_length" in h
        ],
        "torch_threads": torch.get_num_threads(),
        "dtype": str(next(trainer.model.parameters()).dtype),
        "attn_implementation": trainer.model.config._attn_implementation,
    }


def worker_eval(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One `evaluate_model` of the budget's evaluation on EVAL_PROBLEMS held-out problems."""
    import torch

    from experiments.evaluation.evaluate import eval_kwargs, evaluate_model
    from experiments.inputs.data import DataSpec
    from experiments.run import train as runner

    exp, cfg = _parse(args.method, ["--n_eval", str(EVAL_PROBLEMS), *extra])
    runner.setup_torch(exp, cfg)
    _, eval_rows = runner.build_datasets(DataSpec.from_config(exp))
    model_path = runner.starting_model(exp.model, exp.warm_start_steps, seed=exp.split_seed)
    sampling = runner.apply_model_sampling(exp, cfg, model_path)
    model, tokenizer = runner.load_for_eval(model_path, cfg)
    kwargs = eval_kwargs(exp, cfg.seed, sampling["eval"])
    w0, c0 = time.perf_counter(), _cpu()
    result = evaluate_model(model, tokenizer, eval_rows, progress=False, **kwargs)
    wall, cpu = time.perf_counter() - w0, _cpu() - c0
    metrics = result.scalars("")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "generation_s": result.generation_seconds,
        "scoring_s": result.scoring_seconds,
        "tokens_generated": result.tokens_generated,
        "problems": result.num_problems,
        "metrics": metrics,
        "settings": result.settings,
        "torch_threads": torch.get_num_threads(),
        "dtype": str(next(model.parameters()).dtype),
    }


def worker_kernels(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """The choices behind the CPU settings, each timed on SmolLM2 itself: float32 vs bfloat16 matmuls, decoding
    cost per row by batch size, the dynamic vs the static KV cache, and top-p by sorting vs `_TopP`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TemperatureLogitsWarper, TopPLogitsWarper

    from experiments.evaluation.evaluate import _TopP
    from experiments.inputs.data import DataSpec
    from experiments.run import train as runner

    exp, cfg = _parse(args.method, extra)
    runner.setup_torch(exp, cfg)
    model = AutoModelForCausalLM.from_pretrained(
        runner.starting_model(exp.model, exp.warm_start_steps, seed=exp.split_seed), dtype=torch.float32
    ).eval()
    out: dict[str, Any] = {"torch_threads": torch.get_num_threads()}

    def best_of(fn: Callable[[], Any], repeats: int = 3) -> float:
        fn()  # warm-up: oneDNN primitives, allocator
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    hidden, inter = model.config.hidden_size, model.config.intermediate_size
    a, b = torch.randn(2400, hidden), torch.randn(hidden, inter)  # 16 sequences x 150 tokens, an MLP matmul
    for dtype in (torch.float32, torch.bfloat16):
        x, y = a.to(dtype), b.to(dtype)
        seconds = best_of(lambda x=x, y=y: x @ y)
        out[f"matmul_gflops_{str(dtype).removeprefix('torch.')}"] = (
            2 * a.shape[0] * hidden * inter / seconds / 1e9
        )

    # Decoding and top-p on the budget's own evaluation prompts (chat, ~110 tokens): the model's next-token
    # distributions on them are as sharp as in an evaluation, which random token ids would not give.
    from experiments.evaluation.evaluate import _prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(
        runner.starting_model(exp.model, exp.warm_start_steps, seed=exp.split_seed)
    )
    _, eval_rows = runner.build_datasets(DataSpec.from_config(exp))
    prompts = [_prompt_ids(tokenizer, row["prompt"]) for row in eval_rows.select(range(64))]
    width = min(map(len, prompts))
    ids = torch.tensor([p[-width:] for p in prompts])  # the same length, no padding

    def decode(rows: int, new_tokens: int, **kwargs: Any) -> float:
        batch = ids[:rows]
        with torch.inference_mode():
            return best_of(
                lambda: model.generate(
                    input_ids=batch,
                    attention_mask=torch.ones_like(batch),
                    do_sample=True,
                    temperature=0.7,
                    top_p=0.9,
                    top_k=0,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    **kwargs,
                ),
                repeats=2,
            )

    out["decode_s_per_step"] = {}
    for rows in (16, 32, 64):
        out["decode_s_per_step"][rows] = (decode(rows, 33) - decode(rows, 1)) / 32
    out["decode_s_per_step_static_cache_16"] = (
        decode(16, 33, cache_implementation="static") - decode(16, 1, cache_implementation="static")
    ) / 32

    with torch.inference_mode():  # top-p on the model's own next-token logits, 64 rows
        logits = model(input_ids=ids, logits_to_keep=1).logits[:, -1]
    first = ids[:, :1]
    temperature, warper = TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.9)
    out["top_p_s_64_rows"] = {
        "transformers_sort": best_of(lambda: warper(first, temperature(first, logits.clone()))),
        "passk_topk": best_of(lambda: _TopP(0.9, 0.7)(first, logits.clone())),
    }
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summarize_step(run: dict[str, Any]) -> dict[str, Any]:
    measured = run["steps"][1:] or run["steps"]
    names = sorted({k for s in measured for k in s["phases"]})
    return {
        "first_step": {"wall_s": run["steps"][0]["wall_s"], "cpu_s": run["steps"][0]["cpu_s"]},
        "wall_s": _mean([s["wall_s"] for s in measured]),
        "cpu_s": _mean([s["cpu_s"] for s in measured]),
        "phases": {
            n: {
                "wall_s": _mean([s["phases"].get(n, {}).get("wall_s", 0.0) for s in measured]),
                "cpu_s": _mean([s["phases"].get(n, {}).get("cpu_s", 0.0) for s in measured]),
            }
            for n in names
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", nargs="*", choices=("step", "eval", "kernels"), default=["step", "eval"])
    parser.add_argument("--method", default="grpo")
    parser.add_argument(
        "--steps", type=int, default=3, help="optimizer steps per round (the first is warm-up)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: the budget file's)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a budget override")
    parser.add_argument("--code", default=None, help="import experiments from this checkout instead")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", choices=("step", "eval", "kernels"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    extra: list[str] = []
    for item in args.set:
        key, _, value = item.partition("=")
        extra += [f"--{key}", value]
    if args.threads is not None:
        extra += ["--num_threads", str(args.threads)]

    if args.worker:
        worker = {"step": worker_step, "eval": worker_eval, "kernels": worker_kernels}[args.worker]
        result = worker(args, extra)
        print("BENCH_RESULT " + json.dumps(result))
        return

    env = dict(
        os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PASSK_BENCH_CODE=args.code or ""
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (args.code or str(ROOT), env.get("PYTHONPATH", "")) if p)
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for what in args.what:
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                what,
                "--method",
                args.method,
                "--steps",
                str(args.steps),
            ]
            for item in args.set:
                cmd += ["--set", item]
            if args.threads is not None:
                cmd += ["--threads", str(args.threads)]
            load0 = os.getloadavg()
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"bench_smollm2_cpu: {what} worker failed:\n{proc.stderr[-3000:]}")
            line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH_RESULT "))
            result = json.loads(line.removeprefix("BENCH_RESULT "))
            entry = {
                "what": what,
                "round": r,
                "load_before": load0,
                "load_after": os.getloadavg(),
                "process_s": time.perf_counter() - t0,
                "result": result,
            }
            if what == "step":
                entry["summary"] = summarize_step(result)
                s = entry["summary"]
                print(
                    f"[{args.label}] round {r} step ({args.method}): wall {s['wall_s']:.1f} s, cpu {s['cpu_s']:.1f} s; "
                    + ", ".join(f"{k} {v['wall_s']:.1f}/{v['cpu_s']:.1f}" for k, v in s["phases"].items())
                    + f"; load {load0[0]:.1f}",
                    flush=True,
                )
            elif what == "kernels":
                print(
                    f"[{args.label}] round {r} kernels: {json.dumps(result)}; load {load0[0]:.1f}", flush=True
                )
            else:
                print(
                    f"[{args.label}] round {r} eval: wall {result['wall_s']:.1f} s, cpu {result['cpu_s']:.1f} s, "
                    f"generation {result['generation_s']:.1f} s, scoring {result['scoring_s']:.1f} s, "
                    f"{result['tokens_generated']} tokens; load {load0[0]:.1f}",
                    flush=True,
                )
            rounds.append(entry)
    record = {
        "label": args.label,
        "code": args.code or "this checkout",
        "method": args.method,
        "overrides": args.set,
        "threads": args.threads,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "rounds": rounds,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
