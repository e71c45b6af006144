"""Multi-turn repair through TRL on the tiny model, in both loops (the model calls run_tests through
environment_factory; every answer is run and its report is the next user turn through rollout_func, RLEF's): the
loss reaches the model's own tokens and never the feedback's (GRPOTrainer's and ReinforceTrainer's), the turn limit
and the token cap hold, a training step and the evaluation run, misuse and PPO are refused in one line, and the
token budget stops training."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.slow

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROW = {
    "task_id": "synth/plus/calc/x/79",
    "prompt": [
        {"role": "user", "content": 'Complete:\n```python\ndef calc(x):\n    """Return x plus 79."""\n```'}
    ],
    "code_prompt": 'def calc(x):\n    """Return x plus 79."""\n',
    "test": "def check(candidate):\n    assert candidate(49) == 128\n    assert candidate(65) == 144\n"
    "    assert candidate(84) == 163\n    assert candidate(158) == 237\n",
    "entry_point": "calc",
}


def _call(code: str) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": "run_tests", "arguments": {"code": code}})
        + "\n</tool_call><|im_end|>"
    )


@pytest.fixture
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    from experiments.evaluation.repair import use_tool_template

    return use_tool_template(AutoTokenizer.from_pretrained(tiny_model_dir))


def _scripted(trainer: Any, tokenizer: Any, turns: list[str]) -> list[int]:
    """Make every generation call return the next scripted turn for each of its rows (a random tiny model never
    writes a tool call); returns the list the calls' row counts are appended to."""
    calls: list[int] = []

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        text = turns[min(len(calls), len(turns) - 1)]
        calls.append(len(prompt_ids))  # one completion per row: TRL's rows are the rollouts already
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return [list(ids) for _ in prompt_ids], None

    trainer._generate_single_turn = generate
    return calls


def _feedback_and_model_tokens(trainer: Any, tokenizer: Any, out: dict) -> tuple[str, str]:
    mask = (
        trainer._loss_mask(out)
        if hasattr(trainer, "_loss_mask")
        else out["completion_mask"] * out["tool_mask"]
    )
    ids = out["completion_ids"][0].tolist()
    real = out["completion_mask"][0].tolist()
    feedback = [t for t, m, r in zip(ids, mask[0].tolist(), real) if r and not m]
    own = [t for t, m, r in zip(ids, mask[0].tolist(), real) if r and m]
    return tokenizer.decode(feedback), tokenizer.decode(own)


def _gradient_on_tokens(trainer: Any, out: dict) -> torch.Tensor:
    """d loss / d log π of each completion token, with every advantage 1."""
    captured: dict[str, torch.Tensor] = {}
    original = trainer._get_per_token_logps_and_entropies

    def capture(*args: Any, **kwargs: Any) -> Any:
        logps, *rest = original(*args, **kwargs)
        logps.retain_grad()
        captured["logps"] = logps
        return (logps, *rest)

    trainer._get_per_token_logps_and_entropies = capture
    out = dict(out)
    out["advantages"] = torch.ones_like(out["advantages"])
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = (
        trainer.args.gradient_accumulation_steps
    )  # set by training_step
    trainer.compute_loss(trainer.model, out).backward()
    return captured["logps"].grad


def _assert_the_loss_reaches_only_the_models_tokens(trainer: Any, out: dict) -> None:
    grad = _gradient_on_tokens(trainer, out)
    mask = out["completion_mask"] * out["tool_mask"]
    feedback_positions = (out["completion_mask"] == 1) & (out["tool_mask"] == 0)
    assert feedback_positions.any()
    assert torch.all(grad[feedback_positions] == 0)
    assert torch.all(grad[mask.bool()] != 0)


def _first_final_repair(result: dict) -> tuple[float, ...]:
    return tuple(result["metrics"][k]["value"] for k in ("first_pass@1", "final_pass@1", "repair_rate"))


def _trainer(cls: Any, config: Any, model_dir: Path, tokenizer: Any, turns: int = 2) -> tuple[Any, Any]:
    from datasets import Dataset

    from rewards.repair import RepairReward, repair_environment

    reward = RepairReward()
    trainer = cls(
        model=str(model_dir),
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_list([ROW] * 4),
        processing_class=tokenizer,
        environment_factory=repair_environment(max_turns=turns, visible="split:2"),
    )
    return trainer, reward


def _config(cls: Any, tmp_path: Path, tiny_train_args: Any, **extra: Any) -> Any:
    args = dict(tiny_train_args) | {
        "per_device_train_batch_size": 2,
        "num_generations": 2,
        "max_completion_length": 1024,
        "max_tool_calling_iterations": 2,
        "max_steps": 1,
        "report_to": "none",
    }
    return cls(output_dir=str(tmp_path), **(args | extra))


@pytest.mark.parametrize("method", ["grpo", "reinforce_rloo"])
def test_the_loss_reaches_the_models_tokens_and_never_the_feedback(
    method: str, tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any, tokenizer: Any
) -> None:
    from experiments.trainers import METHODS, build_config

    spec = METHODS[method]
    config = build_config(
        method, **(_config(dict, tmp_path, tiny_train_args) | {"output_dir": str(tmp_path)})
    )
    trainer, reward = _trainer(spec.trainer_cls, config, tiny_model_dir, tokenizer)
    wrong, right = "def calc(x):\n    return x + 78", "def calc(x):\n    return x + 79"
    calls = _scripted(trainer, tokenizer, [_call(wrong), _call(right), "Done.<|im_end|>"])
    trainer.model.eval()
    out = trainer._generate_and_score_completions([dict(trainer.train_dataset[0]) for _ in range(2)])
    assert calls == [2, 2, 2]  # the first turn, then one regeneration per tool result
    assert [r.final_passed for r in reward.last_records] == [True, True]
    assert [r.first_passed for r in reward.last_records] == [False, False]
    feedback, own = _feedback_and_model_tokens(trainer, tokenizer, out)
    assert "returned 127" in feedback and "all 2 visible tests passed" in feedback
    assert "returned" not in own and "visible" not in own
    assert own.count("run_tests") == 2 and "Done." in own
    _assert_the_loss_reaches_only_the_models_tokens(trainer, out)


def test_a_grpo_step_through_the_environment_logs_the_repair_metrics(
    tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any, tokenizer: Any
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    config = _config(GRPOConfig, tmp_path, tiny_train_args)
    trainer, _ = _trainer(GRPOTrainer, config, tiny_model_dir, tokenizer)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    assert {"repair/final_pass", "repair/first_pass", "repair/sandbox_runs"} <= set(logged)


def test_ppo_refuses_multi_turn_rollouts_in_one_line(
    tmp_path: Path, tiny_model_dir: Path, tokenizer: Any
) -> None:
    from experiments.trainers import PPOConfig, PPOTrainer

    with pytest.raises(ValueError, match="PPOTrainer cannot train multi-turn rollouts") as err:
        _trainer(PPOTrainer, PPOConfig(output_dir=str(tmp_path), use_cpu=True), tiny_model_dir, tokenizer)
    assert "\n" not in str(err.value)


def test_evaluate_repair_scores_first_and_final_attempts(tiny_model_dir: Path, tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    from experiments.evaluation import repair

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    rows = [ROW, {**ROW, "task_id": "other"}]
    original = repair.repair_trainer

    def scripted_trainer(*args: Any, **kwargs: Any) -> Any:
        trainer, reward = original(*args, **kwargs)
        wrong, right = "def calc(x):\n    return x + 78", "def calc(x):\n    return x + 79"
        _scripted(trainer, tokenizer, [_call(wrong), _call(right), "Done.<|im_end|>"])
        return trainer, reward

    repair.repair_trainer = scripted_trainer
    try:
        result = repair.evaluate_repair(
            model, tokenizer, rows, turns=2, n_samples=2, max_new_tokens=1024, batch_size=2, visible="split:2"
        )
        single = repair.evaluate_repair(
            model, tokenizer, rows, turns=1, n_samples=2, max_new_tokens=1024, batch_size=2, visible="split:2"
        )
    finally:
        repair.repair_trainer = original
    assert _first_final_repair(result) == (0.0, 1.0, 1.0)
    assert result["sandbox_runs"] == 4 * 2 * 2  # 4 rollouts x 2 submissions x 2 visible tests
    assert result["tokens_generated"] > 0 and result["num_problems"] == 2
    # One turn: the first submission is the answer; the rest of the script is never run.
    assert single["metrics"]["final_pass@1"]["value"] == 0.0 and single["sandbox_runs"] == 4 * 2


def test_the_token_budget_stops_training(tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from experiments.evaluation.repair import GeneratedTokenBudget
    from rewards import unit_test_reward

    config = GRPOConfig(
        output_dir=str(tmp_path), **(dict(tiny_train_args) | {"max_steps": 5, "report_to": "none"})
    )
    budget = GeneratedTokenBudget(max_tokens=1, completions_per_step=8)
    rows = [{k: v for k, v in ROW.items() if k != "prompt"} | {"prompt": ROW["code_prompt"]}] * 8
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[unit_test_reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
        callbacks=[budget],
    )
    trainer.train()
    assert trainer.state.global_step == 1 and budget.tokens >= 1


def test_the_token_budget_counts_a_resumed_runs_logged_steps() -> None:
    from types import SimpleNamespace

    from transformers import TrainerControl

    from experiments.evaluation.repair import GeneratedTokenBudget

    args = SimpleNamespace(logging_steps=1)
    restored = SimpleNamespace(
        log_history=[{"completions/mean_length": 10.0, "loss": 0.1}, {"train_runtime": 1.0}]
    )
    budget, control = GeneratedTokenBudget(max_tokens=100, completions_per_step=4), TrainerControl()
    budget.on_train_begin(args, restored, control)
    assert budget.tokens == 40.0 and not control.should_training_stop
    budget.on_log(args, restored, control, logs={"completions/mean_length": 15.0})
    assert budget.tokens == 100.0 and control.should_training_stop
    # A fresh start forgets what an earlier train() call counted.
    budget.on_train_begin(args, SimpleNamespace(log_history=[]), control := TrainerControl())
    assert budget.tokens == 0.0 and not control.should_training_stop


def test_passk_eval_turns_writes_the_repair_metrics(
    tmp_path: Path, passk_cache: Path, monkeypatch: Any
) -> None:
    from experiments.errors import ConfigError
    from experiments.run.cli import cmd_eval

    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))
    common = ["--n_eval", "2", "--eval_n", "2", "--eval_max_new_tokens", "8", "--num_threads", "1"]
    with pytest.raises(ConfigError, match=r"cannot render tool calls.*--tool_template true") as err:
        cmd_eval(["tiny", "--turns", "2", *common, "--out", str(tmp_path / "refused.json")])
    assert "\n" not in str(err.value)
    out = tmp_path / "eval.json"
    assert cmd_eval(["tiny", "--turns", "2", "--tool_template", "true", *common, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["metrics"]) == {"final_pass@1", "first_pass@1", "repair_rate"}
    assert data["settings"]["turns"] == 2 and data["model"] == "tiny" and data["tokens_generated"] > 0


def test_the_docs_script_runs_as_written(tmp_path: Path, passk_cache: Path) -> None:
    import re
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    page = (repo / "docs" / "repair.md").read_text()
    (script,) = re.findall(r"^## In a TRL script\n.*?^```python\n(.*?)^```$", page, flags=re.S | re.M)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(repo))
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "repair steps: 1" in proc.stdout.splitlines()


# ---- RLEF's loop: every answer is run, the report is the next user turn (experiments.trainers.answer_feedback) ----
WRONG_ANSWER = "```python\ndef calc(x):\n    return x + 78\n```<|im_end|>"
RIGHT_ANSWER = "```python\ndef calc(x):\n    return x + 79\n```<|im_end|>"


@pytest.fixture
def chatml_tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)  # its own ChatML template: no tools needed


def _answer_trainer(
    cls: Any, config: Any, model_dir: Path, chatml_tokenizer: Any, turns: int = 3
) -> tuple[Any, Any, Any]:
    from datasets import Dataset

    from experiments.trainers.answer_feedback import AnswerFeedbackRollout
    from rewards.repair import RepairReward

    reward, dataset = RepairReward(), Dataset.from_list([ROW] * 4)
    rollout = AnswerFeedbackRollout(dataset, max_turns=turns, visible="split:1")
    trainer = cls(
        model=str(model_dir),
        reward_funcs=[reward],
        args=config,
        train_dataset=dataset,
        processing_class=chatml_tokenizer,
        rollout_func=rollout,
    )
    return trainer, reward, rollout


def _answer_config(tmp_path: Path, tiny_train_args: Any, **extra: Any) -> dict[str, Any]:
    return (
        dict(tiny_train_args)
        | {
            "output_dir": str(tmp_path),
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 512,
            "max_steps": 1,
            "report_to": "none",
        }
        | extra
    )


def _answer_rollouts(trainer: Any) -> dict[str, Any]:
    trainer.model.eval()
    return trainer._generate_and_score_completions([dict(trainer.train_dataset[0]) for _ in range(2)])


@pytest.mark.parametrize("method", ["grpo", "reinforce_rloo"])
def test_answer_feedback_loss_reaches_the_models_tokens_and_never_the_reports(
    method: str, tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any, chatml_tokenizer: Any
) -> None:
    from experiments.trainers import METHODS, build_config

    config = build_config(method, **_answer_config(tmp_path, tiny_train_args))
    trainer, reward, _ = _answer_trainer(
        METHODS[method].trainer_cls, config, tiny_model_dir, chatml_tokenizer
    )
    calls = _scripted(trainer, chatml_tokenizer, [WRONG_ANSWER, RIGHT_ANSWER, "never reached<|im_end|>"])
    out = _answer_rollouts(trainer)
    assert calls == [2, 2]  # the first answer, then one more per report: the second passes the visible test
    records = reward.last_records
    assert [(r.first_passed, r.final_passed, r.submissions) for r in records] == [(False, True, 2)] * 2
    assert [r.sandbox_runs for r in records] == [2, 2]  # each answer ran on the one visible test
    feedback, own = _feedback_and_model_tokens(trainer, chatml_tokenizer, out)
    assert "returned 127" in feedback and "answer 1 of 3" in feedback
    assert "returned" not in own and "x + 78" in own and "x + 79" in own
    _assert_the_loss_reaches_only_the_models_tokens(trainer, out)


def test_answer_feedback_turn_limit_holds_and_the_last_answer_is_not_run(
    tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any, chatml_tokenizer: Any
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(**_answer_config(tmp_path, tiny_train_args))
    trainer, reward, _ = _answer_trainer(GRPOTrainer, config, tiny_model_dir, chatml_tokenizer)
    calls = _scripted(trainer, chatml_tokenizer, [WRONG_ANSWER])
    out = _answer_rollouts(trainer)
    assert calls == [2, 2, 2]  # three answers, no fourth turn
    assert [(r.submissions, r.sandbox_runs, r.final_passed) for r in reward.last_records] == [
        (3, 2, False)
    ] * 2
    feedback, _ = _feedback_and_model_tokens(trainer, chatml_tokenizer, out)
    assert feedback.count("Fix it and answer again") == 2 and "1 answer left" in feedback


def test_answer_feedback_stays_within_the_cap_and_a_cut_answer_ends_the_rollout(
    tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any, chatml_tokenizer: Any
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    cap = (
        len(chatml_tokenizer(WRONG_ANSWER, add_special_tokens=False)["input_ids"]) + 20
    )  # room for one answer, not its report
    config = GRPOConfig(**_answer_config(tmp_path, tiny_train_args, max_completion_length=cap))
    trainer, reward, _ = _answer_trainer(GRPOTrainer, config, tiny_model_dir, chatml_tokenizer)
    calls = _scripted(trainer, chatml_tokenizer, [WRONG_ANSWER])
    out = _answer_rollouts(trainer)
    assert calls == [2] and out["completion_ids"].shape[1] <= cap
    assert [r.submissions for r in reward.last_records] == [1, 1]

    cut = (
        len(chatml_tokenizer(WRONG_ANSWER, add_special_tokens=False)["input_ids"]) - 3
    )  # the answer itself does not fit
    config = GRPOConfig(**_answer_config(tmp_path, tiny_train_args, max_completion_length=cut))
    trainer, reward, _ = _answer_trainer(GRPOTrainer, config, tiny_model_dir, chatml_tokenizer)
    calls = _scripted(trainer, chatml_tokenizer, [WRONG_ANSWER])
    _answer_rollouts(trainer)
    # A cut answer is the last attempt, and it is not run on the visible tests.
    assert calls == [2] and [(r.submissions, r.sandbox_runs) for r in reward.last_records] == [(1, 0), (1, 0)]


def test_a_grpo_step_with_answer_feedback_logs_the_repair_metrics(
    tmp_path: Path, tiny_model_dir: Path, tiny_train_args: Any, chatml_tokenizer: Any
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(**_answer_config(tmp_path, tiny_train_args, max_completion_length=48))
    trainer, _, _ = _answer_trainer(GRPOTrainer, config, tiny_model_dir, chatml_tokenizer)
    trainer.train()  # the tiny model's own generations: the loop runs whatever it writes
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    assert {"repair/final_pass", "repair/first_pass", "repair/submissions_mean"} <= set(logged)
    assert logged["repair/submissions_mean"] >= 1.0  # every rollout's answer is an attempt


def test_evaluate_repair_runs_answer_feedback(tiny_model_dir: Path, chatml_tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    from experiments.evaluation import repair

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    rows = [
        ROW,
        {**ROW, "task_id": "other", "prompt": [{"role": "user", "content": "Write calc(x): x + 79."}]},
    ]
    original = repair.repair_trainer

    def scripted_trainer(*args: Any, **kwargs: Any) -> Any:
        trainer, reward = original(*args, **kwargs)
        _scripted(trainer, chatml_tokenizer, [WRONG_ANSWER, RIGHT_ANSWER])
        return trainer, reward

    repair.repair_trainer = scripted_trainer
    try:
        result = repair.evaluate_repair(
            model,
            chatml_tokenizer,
            rows,
            turns=3,
            n_samples=2,
            max_new_tokens=512,
            batch_size=2,
            visible="split:1",
            submit="answer",
        )
        capped = repair.evaluate_repair(
            model, chatml_tokenizer, rows, turns=3, n_samples=2, max_new_tokens=8, batch_size=2,
            visible="split:1", submit="answer",
        )  # fmt: skip
    finally:
        repair.repair_trainer = original
    assert _first_final_repair(result) == (0.0, 1.0, 1.0)
    assert result["submissions_mean"] == 2.0 and result["sandbox_runs"] == 4 * 2
    assert result["cut_by_cap"] == 0  # every scripted answer ends with <|im_end|>
    # Every sample runs the same script: the record shows the copies.
    assert [p["distinct_rollouts"] for p in result["problems"]] == [1, 1]
    assert result["distinct_rollouts_share"] == 0.0
    # A cap shorter than the first answer: every rollout is cut, and a cut answer gets no report.
    assert capped["cut_by_cap"] == 4 and capped["submissions_mean"] == 1.0 and capped["sandbox_runs"] == 0
    assert result["settings"]["submit"] == "answer"


def test_evaluate_repair_samples_each_rollout_of_a_problem_apart(
    tiny_model_dir: Path, chatml_tokenizer: Any
) -> None:
    """n samples of one prompt are n draws, not one draw scored n times: the tiny model's near-uniform next-token
    distribution makes two equal 16-token samples all but impossible, so equal ones would mean shared sampling."""
    from transformers import AutoModelForCausalLM

    from experiments.evaluation.repair import evaluate_repair

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    result = evaluate_repair(
        model, chatml_tokenizer, [ROW], turns=1, n_samples=4, max_new_tokens=16, temperature=1.0, top_p=1.0,
        batch_size=1, seed=42, visible="split:1", submit="answer", progress=False,
    )  # fmt: skip
    assert result["problems"][0]["distinct_rollouts"] == 4, result["problems"]
    assert result["distinct_rollouts_share"] == 1.0


def test_evaluate_repair_scores_each_sample_of_a_problem_on_its_own(
    tiny_model_dir: Path, chatml_tokenizer: Any
) -> None:
    """Two of a problem's four samples pass and two fail: pass@1 is 1/2, not one sample's verdict counted four
    times (TRL writes a rollout_func's per-rollout fields into the batch's input dicts, so a batch that repeats one
    dict for a problem's samples would hand every sample the last one's environment)."""
    from transformers import AutoModelForCausalLM

    from experiments.evaluation import repair

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    original = repair.repair_trainer

    def alternating_trainer(*args: Any, **kwargs: Any) -> Any:
        trainer, reward = original(*args, **kwargs)

        def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            texts = [
                WRONG_ANSWER if i < len(prompt_ids) // 2 else RIGHT_ANSWER for i in range(len(prompt_ids))
            ]
            return [chatml_tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], None

        trainer._generate_single_turn = generate
        return trainer, reward

    repair.repair_trainer = alternating_trainer
    try:
        result = repair.evaluate_repair(
            model, chatml_tokenizer, [ROW], turns=1, n_samples=4, max_new_tokens=512, batch_size=1,
            visible="split:1", submit="answer", progress=False,
        )  # fmt: skip
    finally:
        repair.repair_trainer = original
    assert result["problems"][0]["first_passed"] == 2 and result["problems"][0]["distinct_rollouts"] == 2
    assert result["metrics"]["first_pass@1"]["value"] == 0.5


def test_answer_feedback_misuse_is_refused_in_one_line(
    tmp_path: Path, tiny_model_dir: Path, chatml_tokenizer: Any
) -> None:
    from experiments.trainers import PPOConfig, PPOTrainer
    from experiments.trainers.answer_feedback import AnswerFeedbackRollout
    from rewards.repair import RepairReward, repair_environment

    errors = []
    with pytest.raises(ValueError, match="PPOTrainer cannot train multi-turn rollouts") as e:
        _answer_trainer(
            PPOTrainer, PPOConfig(output_dir=str(tmp_path), use_cpu=True), tiny_model_dir, chatml_tokenizer
        )
    errors.append(e)
    with pytest.raises(ValueError, match="not among AnswerFeedbackRollout's rows") as e:
        AnswerFeedbackRollout([ROW])([[{"role": "user", "content": "another problem"}]], trainer=None)
    errors.append(e)
    with pytest.raises(ValueError, match="share a prompt but not their tests") as e:
        AnswerFeedbackRollout([ROW, {**ROW, "test": "assert calc(1) == 80\n"}])
    errors.append(e)
    with pytest.raises(ValueError, match="needs chat prompts") as e:
        AnswerFeedbackRollout([{**ROW, "prompt": "Write calc"}])
    errors.append(e)
    with pytest.raises(ValueError, match='runs submit="answer" rollouts') as e:
        AnswerFeedbackRollout([ROW], submit="tool")
    errors.append(e)
    env = repair_environment(submit="answer", visible="split:1")()  # as if TRL's environment_factory ran it
    env.reset(**ROW)
    with pytest.raises(ValueError, match="not run by answer_feedback") as e:
        RepairReward().score(
            completions=[[{"role": "assistant", "content": RIGHT_ANSWER}]], environments=[env]
        )
    errors.append(e)
    assert all("\n" not in str(err.value) for err in errors)
