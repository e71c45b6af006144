"""Resume from the last checkpoint, every method: 2 steps + `--resume true` to 3 equals 3 steps straight.

The runs start from the warm-started task model (its rewards vary, so the updates really move the weights) and are
exact on CPU: model, optimizer, scheduler, RNG state and, for PPO, the critic are restored from checkpoint-2.
The step-3 metrics of the resumed run must equal those of an uninterrupted run, and the resumed run must have
generated fewer batches (it really resumed instead of starting over: a fresh 3-step run would match too).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.trainers import METHODS

pytestmark = pytest.mark.slow

# Varies from step to step and run to run even when nothing is wrong.
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def _argv(method: str, model: str, out: Path, *extra: str) -> list[str]:
    config = Path(__file__).resolve().parent.parent / "experiments" / "configs" / "demo.yaml"
    return [
        str(config), "--method", method, "--model", model, "--warm_start_steps", "0", "--budget_prompts", "0",
        "--n_train", "64",
        "--per_device_train_batch_size", "16", "--num_generations", "4", "--lr_scheduler_type", "constant",
        "--eval_before", "false", "--eval_after", "false", "--eval_every_n_steps", "0", "--save_model", "false",
        "--report_to", "none", "--disable_tqdm", "true", "--output_dir", str(out), *extra,
    ]  # fmt: skip


def _run_counting_generations(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> int:
    from experiments.config import parse_config
    from experiments.train import run

    exp, cfg = parse_config(argv)
    cls = METHODS[exp.method].trainer_cls
    original = cls._generate_and_score_completions
    calls = []

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(cls, "_generate_and_score_completions", counting)
        run(exp, cfg)
    return len(calls)


def _step(out: Path, step: int) -> dict:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    rows = [h for h in history if h.get("step") == step and "loss" in h]
    assert len(rows) == 1, f"step {step} logged {len(rows)} times in {out}"
    return {k: v for k, v in rows[0].items() if k not in TIMING_KEYS}


@pytest.mark.parametrize("method", list(METHODS))
def test_resume_matches_an_uninterrupted_run(
    method: str, warm_task_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    n_straight = _run_counting_generations(
        monkeypatch, _argv(method, warm_task_model, straight, "--max_steps", "3", "--save_strategy", "no")
    )
    save = ["--save_strategy", "steps", "--save_steps", "2"]
    _run_counting_generations(monkeypatch, _argv(method, warm_task_model, resumed, "--max_steps", "2", *save))
    assert (resumed / "checkpoint-2").is_dir()
    n_resumed = _run_counting_generations(
        monkeypatch, _argv(method, warm_task_model, resumed, "--max_steps", "3", "--resume", "true", *save)
    )

    run = json.loads((resumed / "run.json").read_text())
    assert run["resumed_from"].endswith("checkpoint-2") and run["global_step"] == 3
    assert 0 < n_resumed < n_straight, (n_resumed, n_straight)  # only step 3 was generated after resuming
    # The sample count carries over from the checkpoint: the resumed run sampled what the straight one did.
    straight_budget = json.loads((straight / "run.json").read_text())["budget"]
    for key in ("fresh_prompts", "fresh_completions", "tokens_generated", "prompt_sequence_sha256"):
        assert run["budget"][key] == straight_budget[key], key

    expected, got = _step(straight, 3), _step(resumed, 3)
    # A real update at the compared step (all-zero advantages would make it a no-op that any run matches). Not
    # the rewards: PPO's critic gives advantages even when all 16 completions fail, as at its step 3 here.
    assert expected["grad_norm"] > 0, expected
    if method == "ppo":  # the critic's numbers are compared too, so a lost critic would show
        assert any(k.startswith("ppo/v") for k in expected), sorted(expected)
    assert got == expected
    # The steps before the checkpoint come back from it unchanged.
    assert _step(resumed, 2) == _step(straight, 2)


def test_resume_without_a_checkpoint_fails_before_loading(tmp_path: Path) -> None:
    from experiments.config import ConfigError, parse_config
    from experiments.train import run

    exp, cfg = parse_config(_argv("grpo", "/nonexistent-model", tmp_path / "empty", "--resume", "true"))
    with pytest.raises(ConfigError, match=r"^resume: no checkpoint"):
        run(exp, cfg)


def test_a_checkpoint_whose_save_was_cut_short_is_never_resumed_from(tmp_path: Path) -> None:
    """A save interrupted before trainer_state.json (written after the weights and optimizer) is not a checkpoint:
    resume, the Ctrl-C message and `passk eval RUN_DIR` take the last one saved whole."""
    from experiments.config import parse_config
    from experiments.train import find_resume_checkpoint, interrupted_message, last_checkpoint

    out = tmp_path / "run"
    for step, state in ((1, '{"global_step": 1}'), (2, '{"global_step": 2}'), (3, '{"global_st'), (10, None)):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        if state is not None:
            (out / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    (out / "checkpoint-x").mkdir()
    assert last_checkpoint(out) == str(out / "checkpoint-2")  # 3: cut short mid-write; 10: before it
    assert last_checkpoint(tmp_path / "missing") is None

    exp, cfg = parse_config(_argv("grpo", "/nonexistent-model", out, "--resume", "true"))
    assert find_resume_checkpoint(exp, cfg) == str(out / "checkpoint-2")
    assert f"last checkpoint: {out / 'checkpoint-2'};" in interrupted_message(["cpu"], cfg)
