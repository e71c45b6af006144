"""A real pretrained model moves: SmolLM2-135M-Instruct trained a few GRPO steps on two learnable-task problems.

An overfitting check, not a generalisation claim: the reward is measured on the very problems trained on, before
and after, by sampling at the training temperature. The test and its threshold are fixed in advance: a one-sided
two-proportion z test of "after > before" over all sampled completions, passing at z >= 1.645 (p <= 0.05).

The problems are the first two training-split problems of the `max` operation ("Return the larger of y and -9."),
chosen by operation before their own scores were seen: on the held-out `max` problems the starting model passes
about a quarter of its samples (benchmarks/results/smollm2/), often answering `return m, -16` for "the larger of m
and -16", so a group of 8 completions usually holds a right and a wrong answer and GRPO has a signal from the first
steps. A first design (4 mixed problems, most of them already solved, learning rate 5e-5, 2 prompts x 4 per step)
did not rise (40/64 -> 32/64). This one, calibrated at seeds 0 and 1 with one thread, went 7/48 -> 44/48 and
6/48 -> 48/48; at the budget file's seed 42 with 2 threads it goes 3/48 -> 46/48 (z = 8.8), 2:43 on 2 quiet cores.
Runs through `experiments.run.train.run`, the path `passk train smollm2_learnable` takes, with the training problems
as its evaluation rows.
"""

from __future__ import annotations

import json

import pytest

OP = "max"
PROBLEMS = 2
SAMPLES = 24  # per problem, before and after, at the training temperature and length
Z_ONE_SIDED_5PC = 1.645
TRAIN = {
    "method": "grpo",
    "beta": "0.0",  # no reference model: the check is about the reward only
    "n_train": str(PROBLEMS),
    "n_eval": str(PROBLEMS),
    "num_generations": "8",
    "per_device_train_batch_size": "8",  # 1 prompt x 8 completions per optimizer step
    "budget_prompts": "8",  # 8 optimizer steps, each problem 4 times
    "learning_rate": "2.0e-5",
    "eval_n": str(SAMPLES),
    "eval_ks": "1",
    "eval_temperature": "0.8",  # the budget file's training temperature
    "eval_max_new_tokens": "48",  # and training length
    "eval_batch_size": str(PROBLEMS),
    "save_strategy": "no",
    "report_to": "none",
    "num_threads": "2",
}


@pytest.mark.slow
def test_smollm2_reward_rises_on_its_training_problems(smollm2_dir, tmp_path, monkeypatch):
    from experiments.inputs.data import to_rl_rows
    from experiments.learnable import tasks
    from experiments.learnable.recipe import two_proportion_z
    from experiments.run import train
    from experiments.run.argv import parse_config
    from experiments.run.config import config_path

    problems = [p for p in tasks.train_problems(None, seed=0) if p.op == OP][:PROBLEMS]
    rows = to_rl_rows(tasks.build_rows(problems), style="chat", system_prompt=None)
    # Train on these rows and evaluate on the same rows: the check is about the problems trained on.
    monkeypatch.setattr(train, "build_datasets", lambda exp: (rows, rows))
    monkeypatch.setenv("PASSK_CACHE", str(smollm2_dir.parent))  # the converted model, made once per session
    args = [str(config_path("smollm2_learnable")), "--output_dir", str(tmp_path / "run")]
    for key, value in TRAIN.items():
        args += [f"--{key}", value]
    out = train.run(*parse_config(args))

    def passed(name: str) -> int:
        result = json.loads((out / name).read_text())
        assert [p["task_id"] for p in result["problems"]] == [f"synth/{p.identity}" for p in problems]
        assert all(p["n"] == SAMPLES for p in result["problems"])
        return sum(p["correct"] for p in result["problems"])

    before, after = passed("eval_before.json"), passed("eval_after.json")
    n = PROBLEMS * SAMPLES
    z = two_proportion_z(before, n, after, n)
    assert z >= Z_ONE_SIDED_5PC, f"reward on the training problems: {before}/{n} -> {after}/{n}, z={z:.2f}"
