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
import torch

from experiments.trainers import METHODS, ORIGINAL_METHODS

pytestmark = pytest.mark.slow

# Varies from step to step and run to run even when nothing is wrong.
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def _argv(method: str, model: str, out: Path, *extra: str) -> list[str]:
    config = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "demo.yaml"
    return [
        str(config),
        "--method",
        method,
        "--model",
        model,
        "--warm_start_steps",
        "0",
        "--budget_prompts",
        "0",
        "--n_train",
        "64",
        "--per_device_train_batch_size",
        "16",
        "--num_generations",
        "4",
        "--lr_scheduler_type",
        "constant",
        "--eval_before",
        "false",
        "--eval_after",
        "false",
        "--eval_every_n_steps",
        "0",
        "--save_model",
        "false",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(out),
        *extra,
    ]


def _run_counting_generations(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> int:
    from experiments.run.argv import parse_config
    from experiments.run.train import run

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


# The original seven (ORIGINAL_METHODS): the GRPO variants resume through grpo's GRPOTrainer code, and CI time.
@pytest.mark.parametrize("method", list(ORIGINAL_METHODS))
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
    # Only what step 3 needs is generated after resuming: a new rollout if one starts there, else none (PPO's
    # first rollout spans all 3 steps and comes back from the checkpoint).
    from experiments.run.argv import parse_config

    _, cfg = parse_config(_argv(method, warm_task_model, straight, "--max_steps", "3"))
    rollout_steps = (
        cfg.steps_per_generation * getattr(cfg, "num_iterations", 1) // cfg.gradient_accumulation_steps
    )
    assert n_resumed == (1 if 2 % rollout_steps == 0 else 0) and n_resumed < n_straight, (
        n_resumed,
        n_straight,
    )
    if method == "ppo":
        assert (resumed / "checkpoint-2" / "passk_rollout_rank0.pt").is_file()
    # The sample count carries over from the checkpoint: the resumed run sampled what the straight one did.
    straight_budget = json.loads((straight / "run.json").read_text())["budget"]
    for key in ("fresh_prompts", "fresh_completions", "tokens_generated", "prompt_sequence_sha256"):
        assert run["budget"][key] == straight_budget[key], key
    # run.json's figures after the resume: the token count is the whole run's, the rate only this attempt's.
    straight_run = json.loads((straight / "run.json").read_text())
    assert run["num_tokens"] == straight_run["num_tokens"] > 0
    state = json.loads((resumed / "checkpoint-2" / "trainer_state.json").read_text())
    at_checkpoint = [h["num_tokens"] for h in state["log_history"] if "num_tokens" in h][-1]
    # TRL counts tokens as it generates: more after the checkpoint only where this attempt generated.
    assert 0 < at_checkpoint <= run["num_tokens"]
    assert (at_checkpoint < run["num_tokens"]) == (n_resumed > 0)
    assert run["tokens_per_s"] == pytest.approx((run["num_tokens"] - at_checkpoint) / run["train_time_s"])

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
    from experiments.run.argv import ConfigError, parse_config
    from experiments.run.train import run

    exp, cfg = parse_config(_argv("grpo", "/nonexistent-model", tmp_path / "empty", "--resume", "true"))
    with pytest.raises(ConfigError, match=r"^resume: no checkpoint"):
        run(exp, cfg)


def test_a_checkpoint_whose_save_was_cut_short_is_never_resumed_from(tmp_path: Path) -> None:
    """A save interrupted before trainer_state.json (written after the weights and optimizer) is not a checkpoint:
    resume, the Ctrl-C message and `passk eval RUN_DIR` take the last one saved whole."""
    from experiments.run.argv import parse_config
    from experiments.run.train import find_resume_checkpoint, interrupted_message, last_checkpoint

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


# ---------------------------------------------------------------------------------- resume through passk compare

REPO = Path(__file__).resolve().parents[2]


def _passk(args: list[str], cache: Path, cwd: Path, **kwargs):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PASSK_CACHE=str(cache), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "experiments.run.cli", *args]
    if kwargs.pop("background", False):
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kwargs)


def test_a_resumed_comparison_keeps_finished_runs_and_the_budget(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    """`passk compare ... --resume true` after a complete comparison trains nothing more: TRL's own resume of a
    finished run takes one step past max_steps, sampling past the budget. A run that trained to the end but lost
    its run.json (stopped in eval_after) is finished from its last checkpoint, without a step more."""
    out = tmp_path / "cmp"
    args = [
        "compare",
        "cpu",
        "--methods",
        "grpo,reinforce",
        "--model",
        str(tiny_model_dir),
        "--budget_prompts",
        "4",
        "--save_steps",
        "2",
        "--n_eval",
        "2",
        "--out",
        str(out),
    ]
    first = _passk(args, passk_cache, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    kept = (out / "reinforce" / "run.json").read_bytes()
    (out / "grpo" / "run.json").unlink()  # as if stopped while evaluating the trained model
    (out / "grpo" / "eval_after.json").unlink()

    again = _passk([*args, "--resume", "true"], passk_cache, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    console = again.stdout + again.stderr
    assert "passk compare [2/2] reinforce: finished earlier, kept" in console, console
    assert "passk compare [1/2] grpo: resuming from its last checkpoint" in console, console
    assert (out / "reinforce" / "run.json").read_bytes() == kept  # not run again
    grpo = json.loads((out / "grpo" / "run.json").read_text())
    assert grpo["global_step"] == 4 and grpo["resumed_from"].endswith("checkpoint-4")
    assert (grpo["budget"]["fresh_prompts"], grpo["budget"]["generation_batches"]) == (4, 4)
    report = json.loads((out / "report.json").read_text())
    assert [(r["method"], r["fresh_prompts"], r["optimizer_steps"]) for r in report["runs"]] == [
        ("grpo", 4, 4),
        ("reinforce", 4, 4),
    ]

    # The same with passk train: a finished run resumes to nothing and says so.
    train = _passk(
        [
            "train",
            "cpu",
            "--method",
            "reinforce",
            "--model",
            str(tiny_model_dir),
            "--budget_prompts",
            "4",
            "--output_dir",
            str(out / "reinforce"),
            "--resume",
            "true",
        ],
        passk_cache,
        tmp_path,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert "already trained its 4 steps (run.json): nothing to resume" in train.stdout
    assert (out / "reinforce" / "run.json").read_bytes() == kept


COUNTING_SLOW_REWARD = """
import time
from pathlib import Path


def reward(completions, **kwargs):
    with open(Path(__file__).with_name("calls"), "a") as f:
        f.write("x")
    time.sleep(1.0)  # long enough a step to be interrupted in
    return [0.0] * len(completions)
"""


def test_ctrl_c_in_a_comparison_saves_a_checkpoint_and_its_continue_command_finishes_on_budget(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    """Ctrl-C in `passk compare` (no save_steps checkpoint yet): the running run stops at the end of its generation
    batch (two optimizer steps each here) and saves a checkpoint there; the console names the command that
    continues; that command resumes it from that checkpoint, starts the run that never began, and every run samples
    its budget exactly."""
    import re
    import shlex
    import signal
    import time

    (tmp_path / "slow_reward.py").write_text(COUNTING_SLOW_REWARD)
    out = tmp_path / "cmp"
    args = [
        "compare",
        "cpu",
        "--methods",
        "grpo,reinforce",
        "--model",
        str(tiny_model_dir),
        "--budget_prompts",
        "8",
        "--steps_per_generation",
        "2",
        "--save_steps",
        "100",
        "--n_eval",
        "0",
        "--reward_funcs",
        "slow_reward.py:reward",
        "--out",
        str(out),
    ]
    proc = _passk(args, passk_cache, tmp_path, background=True)
    try:
        deadline = time.monotonic() + 300
        while not ((tmp_path / "calls").is_file() and len((tmp_path / "calls").read_text()) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends (the runs have process groups of their own)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"passk compare: interrupted; finished: none; not finished: grpo \(at (checkpoint-\d+)\), "
        r"reinforce \(no checkpoint: starts again\); continue with: (.+)",
        last,
    )
    assert match, last
    step = int(match.group(1).split("-")[1])
    assert 2 <= step < 8 and step % 2 == 0, step  # at the end of a generation batch
    command = shlex.split(match.group(2))
    assert command == ["passk", *args[:-2], "--out", str(out), "--resume", "true"]

    resumed = _passk(command[1:], passk_cache, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    grpo = json.loads((out / "grpo" / "run.json").read_text())
    assert grpo["resumed_from"] == str(out / "grpo" / f"checkpoint-{step}") and grpo["global_step"] == 8
    sampled = [
        json.loads(line)["step"] for line in (out / "grpo" / "sampled_prompts.jsonl").read_text().splitlines()
    ]
    assert sampled == [0, 2, 4, 6]  # each generation batch once: nothing sampled twice across the stop
    report = json.loads((out / "report.json").read_text())
    assert [(r["method"], r["fresh_prompts"]) for r in report["runs"]] == [("grpo", 8), ("reinforce", 8)]


def test_a_finished_run_is_recognised_by_its_run_json_and_a_smaller_budget_is_refused(tmp_path: Path) -> None:
    from experiments.run.config import ConfigError
    from experiments.run.train import finished_run

    (tmp_path / "run.json").write_text(json.dumps({"global_step": 6}))
    assert finished_run(tmp_path, 6) and not finished_run(tmp_path, 8)  # 8: a larger budget continues it
    assert not finished_run(tmp_path / "absent", 6)
    with pytest.raises(
        ConfigError, match=r"^resume: .* trained 6 steps, past this run's max_steps 4; resume with"
    ):
        finished_run(tmp_path, 4)


def test_ppo_with_lora_resumes_its_lora_critic(
    warm_task_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `use_peft`, PPO's critic is a LoRA too (the policy's adapter settings, its value head trained in full):
    its checkpoint holds only the adapter and the head, and resuming from it equals an uninterrupted run."""
    lora = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--learning_rate", "1e-2"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _run_counting_generations(
        monkeypatch,
        _argv("ppo", warm_task_model, straight, "--max_steps", "3", "--save_strategy", "no", *lora),
    )
    save = ["--save_strategy", "steps", "--save_steps", "2", *lora]
    _run_counting_generations(monkeypatch, _argv("ppo", warm_task_model, resumed, "--max_steps", "2", *save))
    critic_dir = resumed / "checkpoint-2" / "critic"
    assert (critic_dir / "adapter_model.safetensors").is_file() and not (
        critic_dir / "model.safetensors"
    ).exists()
    from safetensors.torch import load_file

    keys = load_file(critic_dir / "adapter_model.safetensors").keys()
    assert any("lora_A" in k for k in keys) and any(k.endswith("score.weight") for k in keys), sorted(keys)[
        :5
    ]
    assert not any(k.endswith("q_proj.weight") and "lora" not in k for k in keys)  # no base weights
    _run_counting_generations(
        monkeypatch, _argv("ppo", warm_task_model, resumed, "--max_steps", "3", "--resume", "true", *save)
    )
    expected, got = _step(straight, 3), _step(resumed, 3)
    assert expected["grad_norm"] > 0 and any(k.startswith("ppo/v") for k in expected), expected
    assert got == expected


def test_ppo_lora_critic_trains_only_its_adapter_and_head(
    tiny_model_dir: Path, tmp_path: Path, tiny_train_args
) -> None:
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from experiments.learnable.tasks import train_rows
    from experiments.trainers import build_config
    from experiments.trainers.ppo import PPOTrainer

    args = build_config(
        "ppo",
        output_dir=str(tmp_path),
        **(tiny_train_args | {"learning_rate": 1e-2}),
    )

    def length_reward(completions: list[str], **kwargs) -> list[float]:
        # returns that vary, so the critic has something to learn (the tiny model never passes a unit test, and
        # PPO's default has no KL penalty to give it returns of its own)
        return [(len(c) % 7) / 6.0 for c in completions]

    trainer = PPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[length_reward],
        args=args,
        train_dataset=train_rows(64),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"),
    )
    critic = trainer.accelerator.unwrap_model(trainer.critic)
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or ".score." in n for n in trainable), sorted(trainable)
    assert len({p for g in trainer.critic_optimizer.optimizer.param_groups for p in g["params"]}) == len(
        trainable
    )
    head = [p for n, p in critic.named_parameters() if ".score." in n and p.requires_grad]
    assert head and all(torch.count_nonzero(p) == 0 for p in head)  # the zeroed value head, under the adapter
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    trainer.train()
    after = dict(critic.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before if n not in trainable)  # base weights frozen
    assert any(not torch.equal(before[n], after[n]) for n in trainable)
