"""A real pretrained model moves: SmolLM2-135M-Instruct trained a few steps on a few learnable-task problems.

An overfitting check, not a generalisation claim: the reward is measured on the very problems trained on, before
and after, by sampling at the training temperature. The test and its threshold are fixed in advance: a one-sided
two-proportion z test of "after > before" on all sampled completions, passing at z >= 1.645 (p <= 0.05).
Runs through `experiments.train.run`, the path `passk train smollm2_learnable` takes.
"""

from __future__ import annotations

import pytest

PROBLEMS = 4  # the first training problems of the learnable task (split seed 0): fixed, not chosen by score
SAMPLES = 16  # per problem, before and after, at the training temperature
Z_ONE_SIDED_5PC = 1.645
TRAIN = {
    "method": "grpo",
    "beta": "0.0",  # no reference model: half the forward passes, and the check is about the reward only
    "n_train": str(PROBLEMS),
    "n_eval": "0",
    "per_device_train_batch_size": "8",  # 2 prompts x 4 completions per optimizer step
    "budget_prompts": "16",  # 8 optimizer steps: every problem seen 4 times
    "learning_rate": "5.0e-5",
    "eval_before": "false",
    "eval_after": "false",
    "save_strategy": "no",
    "report_to": "none",
    "num_threads": "2",
}


@pytest.mark.slow
def test_smollm2_reward_rises_on_its_training_problems(smollm2_dir, tmp_path, monkeypatch):
    from transformers import TrainerCallback

    from experiments.config import config_path, parse_config
    from experiments.data import build_datasets
    from experiments.evaluation import evaluate_model
    from experiments.task_recipe import two_proportion_z
    from experiments.train import run

    monkeypatch.setenv("PASSK_CACHE", str(smollm2_dir.parent))  # the converted model, made once per session
    args = [str(config_path("smollm2_learnable")), "--output_dir", str(tmp_path / "run")]
    for key, value in TRAIN.items():
        args += [f"--{key}", value]
    exp, cfg = parse_config(args)
    rows, _ = build_datasets(exp)
    assert len(rows) == PROBLEMS
    sampling = {"n_samples": SAMPLES, "ks": (1,), "temperature": cfg.temperature, "top_p": cfg.top_p,
                "max_new_tokens": cfg.max_completion_length, "greedy": False, "style": exp.style,
                "batch_size": PROBLEMS, "progress": False, "n_bootstrap": 10}  # fmt: skip
    scores: dict[str, int] = {}

    class Measure(TrainerCallback):
        """Samples the policy on the training problems before the first step and after the last."""

        def _score(self, name: str, model) -> None:
            result = evaluate_model(model, self.tokenizer, rows, seed=len(scores), **sampling)
            scores[name] = sum(p.correct for p in result.problems)

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
            self.tokenizer = processing_class
            self._score("before", model)

        def on_train_end(self, args, state, control, model=None, **kwargs):
            self._score("after", model)

    out = run(exp, cfg, callbacks=[Measure()])
    assert (out / "run.json").is_file()
    n = PROBLEMS * SAMPLES
    z = two_proportion_z(scores["before"], n, scores["after"], n)
    assert z >= Z_ONE_SIDED_5PC, (
        f"reward on the training problems: {scores['before']}/{n} -> {scores['after']}/{n}, z={z:.2f}"
    )
