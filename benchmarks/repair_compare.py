"""Single-turn against multi-turn GRPO at an equal budget of generated tokens (issue 54 item 5), pre-registered in
docs/repair.md#the-pre-registered-comparison.

Both arms are TRL's GRPOTrainer through the same repair environment (rewards.repair) on the learnable task
(experiments.learnable.tasks), whose prompts show no example: one of each problem's four asserts is visible
(`visible="split:1"`, shown in the prompt and run by `run_tests`), the other three are hidden and are the reward.
The single-turn arm has `max_turns=1` (one attempt: the feedback of its one run comes after its answer), the
multi-turn arm `max_turns=3` (RLEF's). Each arm trains until the model has generated `--budget_tokens` tokens
(TRL's count of the model's own tokens: `GeneratedTokenBudget`), from the same start, seed and data. The start and
both ends are scored by `evaluate_repair` at 1 and at 3 turns on the same problems (the held-out ones; with
`--eval_rows all` the trained ones, then the held-out ones); the report gives each figure with its bootstrap
interval over problems and the paired difference of the primary endpoint.

    python benchmarks/repair_compare.py --one_step            # time one training step of each arm (sizing)
    python benchmarks/repair_compare.py --out benchmarks/results/repair_smollm2   # the comparison

Resumable, since the comparison outlasts a session: it runs as phases, each writing one file (the start's and each
arm's evaluation at 1 and at 3 turns, `<start|single|multi>/eval_turns_<N>.json`; each arm's training,
`<arm>/train.json` and the model in `<arm>/final`, a checkpoint every `--save_steps` steps with the token budget
recounted from the restored log), and a phase whose file exists is skipped, so the same command run again goes on
where it stopped. `--submit answer` runs RLEF's own loop in both arms (every answer runs on the visible tests and
the report is the next user turn; experiments.trainers.answer_feedback), for models that do not call the tool.
`--use_vllm`: TRL's colocated vLLM engine generates, in training and in evaluation; each phase
then runs in a child process, since a colocated engine and its torch.distributed setup outlive the phase.

SmolLM2-135M-Instruct's own template has no tools: it gets TRL's Qwen2.5 template (`use_tool_template`), which
it was not trained on; the signal check (docs/repair.md) says what that means for the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _rows(dataset: str, n_train: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    """The training and held-out rows, with chat prompts: the learnable task's splits, or HumanEval (the wheel's
    164 problems, or a HumanEval-shaped .jsonl such as a screen's) split by passk's `split_dataset` (seed 0: the
    first `n_train` problems by hash train, the next `n_eval` are held out)."""
    from experiments.inputs.data import chat_messages, load_humaneval, split_dataset
    from experiments.learnable.tasks import heldout_rows, train_rows

    def chat(rows: Any) -> list[dict]:
        return [{**r, "prompt": chat_messages(r["code_prompt"])} for r in rows]

    if dataset != "learnable":  # HumanEval's `prompt` is the code prompt; its solution stays out of the rows
        source = None if dataset == "humaneval" else dataset  # a HumanEval-shaped file: a screen's problems
        parts = split_dataset(load_humaneval(source), n_train=n_train, n_eval=n_eval, seed=0)
        keep = ("task_id", "test", "entry_point")
        return tuple(
            chat([{**{k: r[k] for k in keep}, "code_prompt": r["prompt"]} for r in parts[name]])
            for name in ("train", "eval")
        )
    return chat(train_rows(n_train)), chat(heldout_rows(n_eval))


def _splittable(rows: list[dict], visible: str) -> tuple[list[dict], list[str]]:
    """The rows the repair environment can read with `visible` (a `split:K` needs more than K asserts), and the
    task ids of the others: a row it refuses is dropped, and the record says which."""
    from rewards.repair import RepairEnvironment, RepairOptions

    keep, dropped = [], []
    for row in rows:
        try:
            RepairEnvironment(RepairOptions(visible=visible)).reset(**row)
            keep.append(row)
        except ValueError:
            dropped.append(str(row.get("task_id")))
    return keep, dropped


# The pre-registered signal check (docs/repair.md): the start model gets feedback often enough, and its first
# attempts neither all pass nor all fail. A report follows a failed answer (submit="answer"), a tool call is a run.
SIGNAL_PROBLEMS, SIGNAL_SAMPLES, FIRST_PASS_BAND = 20, 5, (0.05, 0.95)
MIN_SUBMISSIONS = {"answer": 1.2, "tool": 0.2}


def _signal_check(args: argparse.Namespace, rows: list[dict]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from experiments.evaluation.repair import evaluate_repair

    path = str(_model_path(args.model))
    record = evaluate_repair(
        AutoModelForCausalLM.from_pretrained(path),
        _tokenizer(args, path),
        rows[:SIGNAL_PROBLEMS],
        turns=3,
        n_samples=SIGNAL_SAMPLES,
        max_new_tokens=args.max_completion_length,
        batch_size=8,
        seed=0,
        visible=args.visible,
        submit=args.submit,
        use_vllm=args.use_vllm,
    )
    first = record["metrics"]["first_pass@1"]["value"]
    lo, hi = FIRST_PASS_BAND
    record["rule"] = {
        "submissions_mean_at_least": MIN_SUBMISSIONS[args.submit],
        "first_pass_within": [lo, hi],
        "passed": record["submissions_mean"] >= MIN_SUBMISSIONS[args.submit] and lo <= first <= hi,
    }
    return record


def _model_path(model: str) -> Path:
    """`smollm2`, a parted model's name (`qwen2.5-coder-0.5b`) or a local model directory."""
    from experiments.inputs.models import parted_model_path, smollm2_path

    if Path(model).is_dir():
        return Path(model)
    return smollm2_path() if model == "smollm2" else parted_model_path(model)


def _tokenizer(args: argparse.Namespace, path: str) -> Any:
    from transformers import AutoTokenizer

    from experiments.evaluation.repair import use_tool_template

    tokenizer = AutoTokenizer.from_pretrained(path)
    if args.model == "smollm2" or args.tool_template:  # SmolLM2's own template has no tools (docs/repair.md)
        use_tool_template(tokenizer)
    return tokenizer


def _trainer(args: argparse.Namespace, turns: int, train: list[dict], out: Path) -> tuple[Any, Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from experiments.evaluation.repair import GeneratedTokenBudget, repair_loop
    from experiments.trainers.vllm_cpu import (
        check_cpu_attention,
        engine_dtype,
        host_dtype,
        install_cpu_vllm_sync,
    )
    from rewards.repair import RepairReward

    path = str(_model_path(args.model))
    rollout = repair_loop(train, turns=turns, visible=args.visible, submit=args.submit)
    tokenizer = _tokenizer(args, path)
    engine = (
        {"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 2048} if args.use_vllm else {}
    )
    per_step = args.num_generations * args.prompts_per_step
    micro = args.micro_batch or per_step
    if per_step % micro:
        raise SystemExit(f"--micro_batch {micro} must divide the {per_step} completions of a step")
    config = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=micro,  # one optimizer step still takes all `per_step` completions
        gradient_accumulation_steps=per_step // micro,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=turns,
        temperature=0.8,
        top_p=args.train_top_p,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        beta=0.0,
        max_steps=args.max_steps,
        logging_steps=1,
        seed=args.seed,
        use_cpu=True,
        bf16=False,
        activation_checkpointing=args.activation_checkpointing,
        report_to="none",
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=1,
        **engine,
    )
    budget = GeneratedTokenBudget(args.budget_tokens, per_step)
    if args.use_vllm:
        check_cpu_attention(path)
    with engine_dtype(host_dtype() if args.use_vllm else None):
        trainer = GRPOTrainer(
            model=path,
            reward_funcs=[RepairReward()],
            args=config,
            train_dataset=Dataset.from_list(train),
            processing_class=tokenizer,
            callbacks=[budget],
            **rollout,
        )
    # A no-op unless the engine is colocated on vLLM's CPU backend (experiments.trainers.vllm_cpu).
    install_cpu_vllm_sync(trainer)
    if args.skip_zero_gradient_steps:
        from experiments.trainers.zero_gradient import SkipZeroGradientSteps

        trainer.add_callback(SkipZeroGradientSteps(trainer))
    return trainer, budget


def _evaluate(who: str, turns: int, args: argparse.Namespace, rows: list[dict], out: Path) -> dict[str, Any]:
    """`who` (start: the model as both arms start; an arm: its saved `final`) scored at `turns` turns."""
    from transformers import AutoModelForCausalLM

    from experiments.evaluation.repair import evaluate_repair

    path = str(_model_path(args.model)) if who == "start" else str(out / who / "final")
    return evaluate_repair(
        AutoModelForCausalLM.from_pretrained(path),
        _tokenizer(args, path),  # a saved arm's tokenizer already holds the template it trained with
        rows,
        turns=turns,
        n_samples=args.eval_n,
        max_new_tokens=args.max_completion_length,
        batch_size=args.eval_batch_size,
        seed=args.seed,
        visible=args.visible,
        submit=args.submit,
        use_vllm=args.use_vllm,
    )


def _difference(a: dict, b: dict, metric: str, seed: int, part: slice = slice(None)) -> dict[str, Any]:
    """`metric` of record `a` minus record `b` over the problems in `part` (the same problems, in the same order,
    in both), with the paired bootstrap interval over those problems."""
    import numpy as np

    from experiments.evaluation.stats import paired_interval

    key = {"final_pass@1": "final_passed", "first_pass@1": "first_passed"}[metric]
    x, y = ([[p[key] / p["n"] for p in r["problems"][part]]] for r in (a, b))
    return {
        "difference": float(np.mean(x) - np.mean(y)),
        "interval": paired_interval(np.array(x), np.array(y), n_bootstrap=2000, seed=seed),
        "problems": len(x[0]),
    }


def _comparisons(result: dict[str, Any], n_trained: int | None, seed: int) -> dict[str, Any]:
    """The primary endpoint and the secondary differences (docs/repair.md): multi minus single at 3 turns, over
    all scored problems and, when the trained ones were scored first (`n_trained`), over each part apart; and
    each arm's change from the start at 1 turn (first attempt) and at 3 turns (final answer)."""
    ends = {arm: result[arm]["eval"] for arm in ("single", "multi")}
    parts = {"all": slice(None)}
    if n_trained is not None:
        parts |= {"trained": slice(None, n_trained), "heldout": slice(n_trained, None)}
    out: dict[str, Any] = {
        "primary": {
            "endpoint": "final_pass@1 at 3 turns, multi-turn arm minus single-turn arm",
            **_difference(ends["multi"]["turns_3"], ends["single"]["turns_3"], "final_pass@1", seed),
        },
        "multi_minus_single_at_3_turns": {
            name: _difference(ends["multi"]["turns_3"], ends["single"]["turns_3"], "final_pass@1", seed, part)
            for name, part in parts.items()
        },
    }
    for arm, turns, metric in (
        (a, t, m) for a in ends for t, m in ((1, "first_pass@1"), (3, "final_pass@1"))
    ):
        start = result["start"][f"turns_{turns}"]
        out[f"{arm}_minus_start_at_{turns}_turns"] = {
            name: _difference(ends[arm][f"turns_{turns}"], start, metric, seed, part)
            for name, part in parts.items()
        }
    return out


def _write(path: Path, record: dict[str, Any]) -> None:
    """Writes an evaluation's or a phase's record; an evaluation whose every problem's samples are copies of one
    sample is written beside it as `*.copies.json` and stops the run: at temperature > 0 that is shared sampling,
    not n draws, and its per-sample figures would be one draw counted n times."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if record.get("distinct_rollouts_share") == 0.0 and record["num_problems"] > 1:
        void = path.with_name(f"{path.stem}.copies.json")
        void.write_text(json.dumps(record, indent=2, default=str) + "\n")
        raise SystemExit(
            f"{path.stem}: every problem's {record['settings']['n_samples']} samples are copies of one sample "
            f"(shared sampling, not independent draws); the record is void, kept as {void}"
        )
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")


def _phase(path: Path, run: Any) -> None:
    """Runs one phase and writes its record to `path` (a phase whose file exists is not run again)."""
    print(f"{path.parent.name}/{path.stem}: running", flush=True)
    _write(path, run())


def _train(args: argparse.Namespace, turns: int, train: list[dict], out: Path) -> dict[str, Any]:
    """Trains one arm to its token budget, from its last checkpoint if an earlier call stopped; saves `out/final`."""
    from experiments.trainers.zero_gradient import ZERO_GRADIENT_METRIC

    trainer, budget = _trainer(args, turns, train, out)
    resume = any(out.glob("checkpoint-*"))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(str(out / "final"))
    trainer.processing_class.save_pretrained(str(out / "final"))
    return {
        "train_seconds": time.perf_counter() - t0,  # this call's; a resumed arm's earlier calls are not in it
        "resumed": resume,
        "activation_checkpointing": trainer.args.activation_checkpointing,
        # the steps the option skipped, from the log (logging_steps 1, so a resumed arm's too); None: it was off
        "skipped_zero_gradient_steps": [
            h["step"] for h in trainer.state.log_history if h.get(ZERO_GRADIENT_METRIC) == 1.0
        ]
        if args.skip_zero_gradient_steps
        else None,
        "steps": trainer.state.global_step,
        "generated_tokens": budget.tokens,
        "log_history": trainer.state.log_history,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/repair_smollm2")
    parser.add_argument(
        "--one_step", action="store_true", help="time one step of each arm, train nothing more"
    )
    parser.add_argument("--arms", default="single,multi", help="with --one_step: the arms to time")
    parser.add_argument(
        "--signal_check",
        action="store_true",
        help="score the start model on the first 20 scored problems x 5 at 3 turns; the rule's verdict",
    )
    parser.add_argument(
        "--model", default="smollm2", help="smollm2 | qwen2.5-coder-0.5b (the fallback) | a model directory"
    )
    parser.add_argument(
        "--tool_template",
        action="store_true",
        help="give the tokenizer TRL's Qwen2.5 tool template (always for smollm2; Qwen's own has tools)",
    )
    parser.add_argument("--budget_tokens", type=int, default=12000)
    parser.add_argument("--max_steps", type=int, default=400, help="a bound; the token budget ends each arm")
    parser.add_argument("--num_generations", type=int, default=4)
    parser.add_argument("--prompts_per_step", type=int, default=1)
    parser.add_argument("--max_completion_length", type=int, default=384)
    parser.add_argument(
        "--micro_batch",
        type=int,
        help="completions per forward-backward pass (default: all of a step's), for memory; a step takes them all",
    )
    parser.add_argument(
        "--activation_checkpointing",
        action="store_true",
        help="recompute activations in the backward pass: less memory, the same gradients, a slower step",
    )
    parser.add_argument(
        "--skip_zero_gradient_steps",
        action="store_true",
        help="skip an optimizer step whose gradient is exactly zero (experiments.trainers.zero_gradient)",
    )
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument(
        "--dataset",
        default="learnable",
        help="learnable | humaneval (docs/repair.md's third amendment: --n_train 100 --n_eval 64 --visible "
        "split:2) | a HumanEval-shaped .jsonl (the fourth: the sized run's 35 screened problems)",
    )
    parser.add_argument(
        "--eval_rows",
        default="heldout",
        choices=("heldout", "all"),
        help="the rows every evaluation and the signal check score: the held-out ones, or the trained ones "
        "followed by the held-out ones (the fourth amendment)",
    )
    parser.add_argument("--visible", default="split:1")
    parser.add_argument(
        "--submit",
        default="tool",
        choices=("tool", "answer"),
        help="tool: the model calls run_tests | answer: every answer runs, RLEF's loop (docs/repair.md)",
    )
    parser.add_argument("--n_train", type=int, default=200)
    parser.add_argument("--n_eval", type=int, default=100)
    parser.add_argument("--eval_n", type=int, default=4)
    parser.add_argument("--eval_batch_size", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--save_steps", type=int, default=5, help="a checkpoint every this many steps (resume)"
    )
    parser.add_argument(
        "--train_top_p", type=float, default=0.9, help="training's top-p (1.0 with --use_vllm)"
    )
    parser.add_argument("--use_vllm", action="store_true", help="TRL's colocated vLLM engine generates")
    parser.add_argument("--phase", help=argparse.SUPPRESS)  # set by a --use_vllm run for its children
    args = parser.parse_args(argv)
    if args.use_vllm and args.train_top_p < 1.0:
        # vLLM samples from the truncated distribution and the trainer scores the full one, so TRL's
        # importance-sampling ratio would measure the truncation (0.45-0.55 at top_p 0.9; docs/running.md).
        parser.error(
            "--use_vllm trains at --train_top_p 1.0: below 1, TRL's IS ratio measures the truncation"
        )

    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, heldout = _rows(args.dataset, args.n_train, args.n_eval)
    train, dropped_train = _splittable(train, args.visible)
    heldout, dropped_heldout = _splittable(heldout, args.visible)
    scored = train + heldout if args.eval_rows == "all" else heldout  # what every evaluation scores
    result: dict[str, Any] = {
        "settings": {**vars(args), "out": Path(args.out).name},  # the folder, not this machine's path
        "dropped": {"train": dropped_train, "heldout": dropped_heldout},
    }
    if dropped_train or dropped_heldout:
        print(f"visible={args.visible}: dropped {dropped_train + dropped_heldout} (too few tests to split)")
    if args.signal_check:
        record = _signal_check(args, scored)
        record["dropped"] = result["dropped"]
        _write(out / "signal_check.json", record)
        print("signal check:", json.dumps(record["rule"]), flush=True)
        return 0
    check = out / "signal_check.json"
    if check.exists() and not json.loads(check.read_text())["rule"]["passed"]:
        raise SystemExit(
            f"{check} says the signal check failed: the comparison cannot show an effect (docs/repair.md)"
        )
    if args.one_step:
        for name, turns in (("single", 1), ("multi", 3)):
            if name not in args.arms.split(","):
                continue
            trainer, _ = _trainer(args, turns, train, out / name)
            trainer.args.max_steps = 1
            t0 = time.perf_counter()
            trainer.train()
            log = trainer.state.log_history[0]
            result[name] = {
                "step_seconds": time.perf_counter() - t0,
                "mean_length": log.get("completions/mean_length"),
                "tool_calls_per_rollout": log.get("tools/call_frequency"),
                "cut_by_cap": log.get("completions/clipped_ratio"),
                "repair/submissions_mean": log.get("repair/submissions_mean"),
                "reward": log.get("reward"),
                "prompt_tokens": len(
                    trainer.processing_class(
                        trainer.processing_class.apply_chat_template(
                            train[0]["prompt"],
                            tools=trainer.tools,
                            add_generation_prompt=True,
                            tokenize=False,
                        )
                    )["input_ids"]
                ),
            }
            print(name, json.dumps(result[name]), flush=True)
        (out / "one_step.json").write_text(json.dumps(result, indent=2) + "\n")
        return 0

    arms = {"single": 1, "multi": 3}
    phases = {f"start/eval_turns_{t}": partial(_evaluate, "start", t, args, scored, out) for t in (1, 3)}
    for name, turns in arms.items():
        phases[f"{name}/train"] = partial(_train, args, turns, train, out / name)
        phases |= {f"{name}/eval_turns_{t}": partial(_evaluate, name, t, args, scored, out) for t in (1, 3)}
    if args.phase:  # a child of a --use_vllm run: this phase only
        _phase(out / f"{args.phase}.json", phases[args.phase])
        return 0
    for name, run in phases.items():
        if (out / f"{name}.json").exists():
            print(f"{name}: done before, kept", flush=True)
        elif args.use_vllm:  # a fresh process per engine
            child = [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv), "--phase", name]
            subprocess.run(child, check=True)
        else:
            _phase(out / f"{name}.json", run)
    result["start"] = {
        f"turns_{t}": json.loads((out / f"start/eval_turns_{t}.json").read_text()) for t in (1, 3)
    }
    for name in arms:
        result[name] = json.loads((out / f"{name}/train.json").read_text())
        result[name]["eval"] = {
            f"turns_{t}": json.loads((out / f"{name}/eval_turns_{t}.json").read_text()) for t in (1, 3)
        }
    n_trained = len(train) if args.eval_rows == "all" else None
    result |= _comparisons(result, n_trained, args.seed)
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result["primary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
