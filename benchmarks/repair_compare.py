"""Single-turn against multi-turn GRPO at an equal budget of generated tokens (issue 54 item 5), pre-registered in
docs/repair.md#the-pre-registered-comparison.

Both arms are TRL's GRPOTrainer through the same repair environment (rewards.repair) on the learnable task
(experiments.learnable.tasks), whose prompts show no example: one of each problem's four asserts is visible
(`visible="split:1"`, shown in the prompt and run by `run_tests`), the other three are hidden and are the reward.
The single-turn arm has `max_turns=1` (one attempt: the feedback of its one run comes after its answer), the
multi-turn arm `max_turns=3` (RLEF's). Each arm trains until the model has generated `--budget_tokens` tokens
(TRL's count of the model's own tokens: `GeneratedTokenBudget`), from the same start, seed and data. The start and
both ends are scored by `evaluate_repair` at 1 and at 3 turns on the same held-out problems; the report gives each
figure with its bootstrap interval over problems and the paired difference of the primary endpoint.

    python benchmarks/repair_compare.py --one_step            # time one training step of each arm (sizing)
    python benchmarks/repair_compare.py --out benchmarks/results/repair_smollm2   # the comparison

Resumable, since the comparison outlasts a session: the start's evaluation (`start.json`), each arm's training
(a checkpoint every `--save_steps` steps; the token budget is recounted from the restored log) and each arm's
evaluation (`<arm>/eval.json`, from the arm's saved `<arm>/final`) are skipped when their file exists, so the same
command run again goes on where it stopped.

SmolLM2-135M-Instruct's own template has no tools: it gets TRL's Qwen2.5 template (`use_tool_template`), which
it was not trained on; the signal check (docs/repair.md) says what that means for the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _rows(n_train: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    from experiments.inputs.data import chat_messages
    from experiments.learnable.tasks import heldout_rows, train_rows

    def chat(rows: Any) -> list[dict]:
        return [{**r, "prompt": chat_messages(r["code_prompt"])} for r in rows]

    return chat(train_rows(n_train)), chat(heldout_rows(n_eval))


def _model_path(model: str) -> Path:
    """`smollm2`, a parted model's name (`qwen2.5-coder-0.5b`) or a local model directory."""
    from experiments.inputs.models import parted_model_path, smollm2_path

    if Path(model).is_dir():
        return Path(model)
    return smollm2_path() if model == "smollm2" else parted_model_path(model)


def _trainer(args: argparse.Namespace, turns: int, train: list[dict], out: Path) -> tuple[Any, Any]:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from experiments.evaluation.repair import GeneratedTokenBudget, use_tool_template
    from rewards.repair import RepairReward, repair_environment

    path = str(_model_path(args.model))
    tokenizer = AutoTokenizer.from_pretrained(path)
    if args.model == "smollm2" or args.tool_template:  # SmolLM2's own template has no tools (docs/repair.md)
        use_tool_template(tokenizer)
    per_step = args.num_generations * args.prompts_per_step
    config = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=per_step,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=turns,
        temperature=0.8,
        top_p=0.9,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        beta=0.0,
        max_steps=args.max_steps,
        logging_steps=1,
        seed=args.seed,
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        report_to="none",
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=1,
    )
    budget = GeneratedTokenBudget(args.budget_tokens, per_step)
    trainer = GRPOTrainer(
        model=path,
        reward_funcs=[RepairReward()],
        args=config,
        train_dataset=Dataset.from_list(train),
        processing_class=tokenizer,
        environment_factory=repair_environment(max_turns=turns, visible=args.visible),
        callbacks=[budget],
    )
    return trainer, budget


def _evaluate(model: Any, tokenizer: Any, rows: list[dict], args: argparse.Namespace) -> dict[str, Any]:
    from experiments.evaluation.repair import evaluate_repair

    return {
        f"turns_{t}": evaluate_repair(
            model,
            tokenizer,
            rows,
            turns=t,
            n_samples=args.eval_n,
            max_new_tokens=args.max_completion_length,
            batch_size=args.eval_batch_size,
            seed=args.seed,
            visible=args.visible,
        )
        for t in (1, 3)
    }


def _paired(a: dict, b: dict, metric: str, seed: int) -> list[float]:
    import numpy as np

    from experiments.evaluation.stats import paired_interval

    key = {"final_pass@1": "final_passed", "first_pass@1": "first_passed"}[metric]
    x = np.array([[p[key] / p["n"] for p in a["problems"]]])
    y = np.array([[p[key] / p["n"] for p in b["problems"]]])
    return paired_interval(x, y, n_bootstrap=2000, seed=seed)


def _phase(path: Path, run: Any) -> dict[str, Any]:
    """The phase's record from `path` if an earlier call wrote it, else `run()`'s, written there first."""
    if path.exists():
        print(f"{path}: done before, kept", flush=True)
        return json.loads(path.read_text())
    record = run()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record


def _evaluate_start(
    args: argparse.Namespace, train: list[dict], heldout: list[dict], out: Path
) -> dict[str, Any]:
    start, _ = _trainer(
        args, 1, train, out / "start"
    )  # the model and tool template exactly as the arms start
    return _evaluate(start.model, start.processing_class, heldout, args)


def _evaluate_saved(arm: Path, heldout: list[dict], args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = arm / "final"
    return _evaluate(
        AutoModelForCausalLM.from_pretrained(final), AutoTokenizer.from_pretrained(final), heldout, args
    )


def _train(args: argparse.Namespace, turns: int, train: list[dict], out: Path) -> dict[str, Any]:
    """Trains one arm to its token budget, from its last checkpoint if an earlier call stopped; saves `out/final`."""
    trainer, budget = _trainer(args, turns, train, out)
    resume = any(out.glob("checkpoint-*"))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(str(out / "final"))
    trainer.processing_class.save_pretrained(str(out / "final"))
    return {
        "train_seconds": time.perf_counter() - t0,  # this call's; a resumed arm's earlier calls are not in it
        "resumed": resume,
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
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--visible", default="split:1")
    parser.add_argument("--n_train", type=int, default=200)
    parser.add_argument("--n_eval", type=int, default=100)
    parser.add_argument("--eval_n", type=int, default=4)
    parser.add_argument("--eval_batch_size", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--save_steps", type=int, default=5, help="a checkpoint every this many steps (resume)"
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, heldout = _rows(args.n_train, args.n_eval)
    result: dict[str, Any] = {"settings": vars(args)}
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

    result["start"] = _phase(out / "start.json", partial(_evaluate_start, args, train, heldout, out))
    for name, turns in (("single", 1), ("multi", 3)):
        result[name] = _phase(out / name / "train.json", partial(_train, args, turns, train, out / name))
        result[name]["eval"] = _phase(
            out / name / "eval.json", partial(_evaluate_saved, out / name, heldout, args)
        )
        (out / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    multi, single = result["multi"]["eval"]["turns_3"], result["single"]["eval"]["turns_3"]
    result["primary"] = {
        "endpoint": "final_pass@1 at 3 turns, multi-turn arm minus single-turn arm",
        "difference": multi["metrics"]["final_pass@1"]["value"] - single["metrics"]["final_pass@1"]["value"],
        "interval": _paired(multi, single, "final_pass@1", args.seed),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result["primary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
