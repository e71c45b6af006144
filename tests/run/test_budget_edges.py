"""The sampling budget (``experiments.run.budget``) at its boundaries: budgets exactly divisible and not divisible by
a generation batch, each method's shape (one epoch per batch, PPO's epochs and minibatches), the prompt schedule
at 1 and at n_train prompts per epoch, and the sample log's counts on a stand-in trainer (one process)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.errors import ConfigError
from experiments.run.budget import (
    CHECKPOINT_SAMPLES_FILE,
    BudgetError,
    SampleLog,
    _prompt_key,
    budget_record,
    derive_max_steps,
    generation_period,
    generation_shape,
    prompt_schedule,
    scheduled_rows,
)

SETTINGS = settings(max_examples=60, deadline=None)


def shape(**kwargs) -> SimpleNamespace:
    base = {"num_generations": 2, "generation_batch_size": 2, "steps_per_generation": 1, "num_iterations": 1}
    return SimpleNamespace(**(base | {"gradient_accumulation_steps": 1} | kwargs))


# ---- the generation batch ------------------------------------------------------------------------------------
def test_generation_shape_reads_what_trl_resolved() -> None:
    cfg = shape(num_generations=4, generation_batch_size=32, steps_per_generation=8, num_iterations=3)
    cfg.gradient_accumulation_steps = 2
    assert generation_shape(cfg) == {
        "num_generations": 4,
        "generation_batch_size": 32,
        "prompts_per_generation": 8,
        "steps_per_generation": 8,
        "num_iterations": 3,
        "gradient_accumulation_steps": 2,
    }
    # a config without num_iterations (or with None / 0) runs one epoch per batch
    for value in (None, 0):
        assert generation_shape(shape(num_iterations=value))["num_iterations"] == 1
    no_iterations = shape()
    del no_iterations.num_iterations
    assert generation_shape(no_iterations)["num_iterations"] == 1
    # one completion per prompt (PPO, vanilla_pg): every completion is a prompt
    assert generation_shape(shape(num_generations=1, generation_batch_size=6))["prompts_per_generation"] == 6
    assert generation_shape(shape(num_generations=0, generation_batch_size=6))["prompts_per_generation"] == 6
    # string values (a YAML-read config) are read as ints
    assert (
        generation_shape(shape(generation_batch_size="8", num_generations="2"))["prompts_per_generation"] == 4
    )


@pytest.mark.parametrize(
    ("spg", "iterations", "accumulation", "period"),
    [
        (1, 1, 1, 1),
        (4, 1, 1, 4),
        (4, 2, 1, 8),
        (4, 1, 2, 2),
        (4, 2, 4, 2),
        (3, 1, 2, 3),
        (2, 3, 4, 3),
        (1, 1, 4, 1),
    ],
)
def test_generation_period_is_the_steps_between_batches_in_step_with_the_optimizer(
    spg: int, iterations: int, accumulation: int, period: int
) -> None:
    cfg = shape(steps_per_generation=spg, num_iterations=iterations, gradient_accumulation_steps=accumulation)
    assert generation_period(cfg) == period


# ---- derive_max_steps, per method kind -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "cfg", "budget", "steps"),
    [
        # GRPO / RLOO: 8 prompts x 4 completions per batch, one optimizer step per micro-batch
        ("grpo", shape(num_generations=4, generation_batch_size=32), 16, 2),
        ("grpo", shape(num_generations=4, generation_batch_size=32), 8, 1),  # exactly one batch
        (
            "grpo, 4 steps per batch",
            shape(num_generations=4, generation_batch_size=32, steps_per_generation=4),
            16,
            8,
        ),
        (
            "rloo, accumulation 2",
            shape(generation_batch_size=8, steps_per_generation=2, gradient_accumulation_steps=2),
            8,
            2,
        ),
        # PPO: one completion per prompt, 4 minibatches per rollout, 2 epochs
        (
            "ppo",
            shape(num_generations=1, generation_batch_size=8, steps_per_generation=4, num_iterations=2),
            8,
            8,
        ),
        (
            "ppo",
            shape(num_generations=1, generation_batch_size=8, steps_per_generation=4, num_iterations=2),
            24,
            24,
        ),
        ("ppo, 1 epoch", shape(num_generations=1, generation_batch_size=8, steps_per_generation=4), 16, 8),
        (
            "ppo, accumulation 2",
            shape(
                num_generations=1,
                generation_batch_size=8,
                steps_per_generation=8,
                num_iterations=2,
                gradient_accumulation_steps=2,
            ),
            8,
            8,
        ),
        ("vanilla_pg", shape(num_generations=1, generation_batch_size=3), 9, 3),
        ("the seed", shape(), 60, 60),
        ("zero budget", shape(generation_batch_size=8), 0, 0),
    ],
)
def test_derive_max_steps_is_exact_for_each_method(
    kind: str, cfg: SimpleNamespace, budget: int, steps: int
) -> None:
    assert derive_max_steps(budget, cfg) == steps, kind


def test_budget_errors_are_one_line_config_errors_that_name_the_shape() -> None:
    with pytest.raises(BudgetError) as err:
        derive_max_steps(5, shape(num_generations=2, generation_batch_size=4, steps_per_generation=3))
    msg = str(err.value)
    assert isinstance(err.value, ConfigError) and "\n" not in msg
    assert msg.startswith("budget_prompts: 5 is not a multiple of the 2 prompt(s) one generation batch holds")
    assert "generation_batch_size 4 / num_generations 2; steps_per_generation 3" in msg
    with pytest.raises(BudgetError) as err:
        derive_max_steps(3, shape(steps_per_generation=1, num_iterations=1, gradient_accumulation_steps=2))
    msg = str(err.value)
    assert msg == (
        "gradient_accumulation_steps: 3 generation batches x steps_per_generation 1 x num_iterations 1 = 3 "
        "micro-batches do not fill whole optimizer steps of 2"
    )
    # a generation batch smaller than one group holds no whole prompt
    with pytest.raises(BudgetError, match=r"^budget_prompts: 4 is not a multiple of the 0 prompt"):
        derive_max_steps(4, shape(num_generations=4, generation_batch_size=2))


# ---- the prompt schedule --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n_rows", "per_epoch", "total"), [(5, 1, 7), (5, 5, 12), (1, 1, 3), (7, 3, 0), (4, 4, 4)]
)
def test_prompt_schedule_at_one_and_at_n_train_prompts_per_epoch(
    n_rows: int, per_epoch: int, total: int
) -> None:
    order = prompt_schedule(n_rows, per_epoch, total, seed=3)
    assert len(order) == total and all(isinstance(i, int) and 0 <= i < n_rows for i in order)
    for start in range(0, total, per_epoch):
        epoch = order[start : start + per_epoch]
        assert len(set(epoch)) == len(epoch)  # without replacement within an epoch
        if per_epoch == n_rows and len(epoch) == n_rows:
            assert sorted(epoch) == list(range(n_rows))  # every row once per epoch


def test_prompt_schedule_rejects_epochs_outside_one_to_n_train() -> None:
    for per_epoch in (0, -1, 6):
        with pytest.raises(
            BudgetError, match=rf"^prompts_per_epoch: must be in 1..n_train \(5\), got {per_epoch}$"
        ):
            prompt_schedule(5, per_epoch, 10, seed=0)


class Rows:
    def __init__(self, n: int) -> None:
        self.n = n
        self.selected: list[int] | None = None

    def __len__(self) -> int:
        return self.n

    def select(self, indices: list[int]) -> list[int]:
        self.selected = list(indices)
        return self.selected


def test_scheduled_rows_applies_the_schedule_only_with_prompts_per_epoch() -> None:
    rows = Rows(6)
    assert scheduled_rows(SimpleNamespace(prompts_per_epoch=0, budget_prompts=10), rows, seed=1) is rows
    out = scheduled_rows(SimpleNamespace(prompts_per_epoch=6, budget_prompts=10), rows, seed=1)
    assert out == prompt_schedule(6, 6, 10, 1) and len(out) == 10
    assert sorted(out[:6]) == list(range(6))
    assert scheduled_rows(SimpleNamespace(prompts_per_epoch=1, budget_prompts=3), Rows(6), seed=2) == (
        prompt_schedule(6, 1, 3, 2)
    )


# ---- the sample log --------------------------------------------------------------------------------------------------
def test_prompt_keys_are_the_task_id_or_a_digest_of_the_prompt() -> None:
    assert _prompt_key({"task_id": "HumanEval/3", "prompt": "x"}) == "HumanEval/3"
    assert _prompt_key({"task_id": 0}) == "0"
    digest = hashlib.sha256(json.dumps("p", sort_keys=True).encode()).hexdigest()[:16]
    assert _prompt_key({"task_id": None, "prompt": "p"}) == "sha256:" + digest
    chat_a = {"prompt": [{"role": "user", "content": "a"}]}
    chat_b = {"prompt": [{"content": "a", "role": "user"}]}
    assert _prompt_key(chat_a) == _prompt_key(chat_b) != _prompt_key({"prompt": "a"})
    assert len(_prompt_key({})) == len("sha256:") + 16


class Trainer:
    """What SampleLog reads of a TRL trainer, on one process."""

    def __init__(self, group: int, main: bool = True) -> None:
        self.num_generations = group
        self.model = SimpleNamespace(training=True)
        self.accelerator = SimpleNamespace(is_main_process=main)
        self.state = SimpleNamespace(global_step=0)
        self.calls: list[tuple] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self.calls.append((inputs, prompts, completions, completion_ids_list))
        return "rewards"


def feed(trainer: Trainer, task_ids: list, lengths: list[int]):
    inputs = [{"task_id": t, "prompt": f"p{t}"} for t in task_ids]
    ids = [[1] * n for n in lengths]
    return trainer._calculate_rewards(inputs, [r["prompt"] for r in inputs], ["c"] * len(ids), ids)


def test_the_sample_log_counts_each_generation_batch_in_training_only() -> None:
    trainer = Trainer(group=2)
    log = SampleLog(trainer, previous=[{"step": 0, "prompts": ["old"], "completions": 2, "tokens": 5}])
    assert feed(trainer, ["a", "a", "b", "b"], [3, 0, 2, 7]) == "rewards"  # the original still runs
    trainer.state.global_step = 3
    feed(trainer, ["c", "c"], [1, 1])
    trainer.model.training = False  # evaluation: not part of the budget
    feed(trainer, ["d", "d"], [9, 9])
    assert len(trainer.calls) == 3
    assert log.generations[1:] == [
        {"step": 0, "prompts": ["a", "b"], "completions": 4, "tokens": 12},
        {"step": 3, "prompts": ["c"], "completions": 2, "tokens": 2},
    ]
    totals = log.totals()
    assert totals == {
        "fresh_prompts": 4,
        "fresh_completions": 8,
        "tokens_generated": 19,
        "generation_batches": 3,
        "prompt_sequence_sha256": hashlib.sha256(b"old\na\nb\nc").hexdigest(),
    }


def test_one_completion_per_prompt_and_a_group_of_zero_count_every_row() -> None:
    for group in (1, 0):
        trainer = Trainer(group=group)
        log = SampleLog(trainer)
        feed(trainer, ["a", "b", "c"], [1, 2, 3])
        assert log.generations == [{"step": 0, "prompts": ["a", "b", "c"], "completions": 3, "tokens": 6}]


def test_only_the_main_process_keeps_the_counts() -> None:
    trainer = Trainer(group=2, main=False)
    log = SampleLog(trainer)
    assert feed(trainer, ["a", "a"], [1, 1]) == "rewards"
    assert log.generations == [] and log.totals()["generation_batches"] == 0
    assert log.totals()["prompt_sequence_sha256"] == hashlib.sha256(b"").hexdigest()


def test_the_log_is_written_and_read_back_line_by_line(tmp_path: Path) -> None:
    trainer = Trainer(group=2)
    log = SampleLog(trainer)
    feed(trainer, ["a", "a"], [1, 2])
    feed(trainer, ["b", "b"], [3, 4])
    path = tmp_path / "log.jsonl"
    log.write(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1]) == {
        "step": 0,
        "prompts": ["b"],
        "completions": 2,
        "tokens": 7,
    }
    assert path.read_text().endswith("\n")
    assert SampleLog.read(path) == log.generations
    path.write_text(path.read_text() + "\n  \n")
    assert SampleLog.read(path) == log.generations  # blank lines are skipped
    assert SampleLog.read(tmp_path / "absent.jsonl") == []
    assert SampleLog.read(tmp_path) == []  # a folder is not a log
    SampleLog(Trainer(group=2)).write(path)
    assert path.read_text() == "" and SampleLog.read(path) == []


def test_budget_record_holds_the_counts_and_the_inputs_that_planned_them() -> None:
    trainer = Trainer(group=2)
    log = SampleLog(trainer)
    feed(trainer, ["a", "a"], [1, 2])
    cfg = shape(
        generation_batch_size=4, max_steps="6", per_device_train_batch_size=2, gradient_accumulation_steps=1
    )
    exp = SimpleNamespace(budget_prompts="2", prompts_per_epoch=0)
    record = budget_record(
        exp, cfg, log, optimizer_steps=6.0, num_processes=2, max_steps_from="budget_prompts"
    )
    assert record == {
        **log.totals(),
        "optimizer_steps": 6,
        "budget_prompts": 2,
        "prompts_per_epoch": 0,
        "max_steps": 6,
        "max_steps_from": "budget_prompts",
        "per_device_train_batch_size": 2,
        "num_processes": 2,
        "shuffle_dataset": True,  # a config without the key shuffles (TRL's default)
        **generation_shape(cfg),
    }
    cfg.shuffle_dataset = False
    assert budget_record(exp, cfg, log, 6, 1, "max_steps")["shuffle_dataset"] is False


def test_generation_period_is_a_whole_number_of_steps() -> None:
    period = generation_period(shape(steps_per_generation=4, num_iterations=2, gradient_accumulation_steps=2))
    assert period == 4 and isinstance(period, int)


def test_derive_max_steps_is_a_whole_number_of_steps() -> None:
    steps = derive_max_steps(
        8, shape(generation_batch_size=4, steps_per_generation=2, gradient_accumulation_steps=2)
    )
    assert steps == 4 and isinstance(steps, int)


def test_the_log_reads_from_the_class_or_an_instance(tmp_path: Path) -> None:
    trainer = Trainer(group=2)
    log = SampleLog(trainer)
    feed(trainer, ["a", "a"], [1, 2])
    log.write(tmp_path / "log.jsonl")
    assert log.read(tmp_path / "log.jsonl") == SampleLog.read(tmp_path / "log.jsonl") == log.generations


# ---- properties (last: the slowest) ----


@SETTINGS
@given(
    st.integers(1, 4),  # num_generations
    st.integers(1, 6),  # prompts per batch
    st.integers(1, 4),  # steps_per_generation
    st.integers(1, 3),  # num_iterations
    st.integers(1, 4),  # gradient_accumulation_steps
    st.integers(0, 40),  # budget
)
def test_derive_max_steps_samples_exactly_the_budget_or_names_the_key(
    group: int, prompts: int, spg: int, iterations: int, accumulation: int, budget: int
) -> None:
    cfg = shape(
        num_generations=group,
        generation_batch_size=group * prompts,
        steps_per_generation=spg,
        num_iterations=iterations,
        gradient_accumulation_steps=accumulation,
    )
    if budget % prompts:
        with pytest.raises(
            BudgetError, match=rf"^budget_prompts: {budget} is not a multiple of the {prompts} "
        ):
            derive_max_steps(budget, cfg)
        return
    micro = budget // prompts * spg * iterations
    if micro % accumulation:
        with pytest.raises(BudgetError, match=rf"^gradient_accumulation_steps: .* = {micro} micro-batches"):
            derive_max_steps(budget, cfg)
        return
    steps = derive_max_steps(budget, cfg)
    # the steps, read back: steps x accumulation micro-batches; each batch gives spg x iterations of them
    assert steps * accumulation == micro
    assert steps * accumulation // (spg * iterations) * prompts == budget


@SETTINGS
@given(st.integers(1, 12), st.data(), st.integers(0, 40), st.integers(0, 3))
def test_prompt_schedule_is_seeded_epochs_of_distinct_rows(
    n_rows: int, data: st.DataObject, total: int, seed: int
) -> None:
    per_epoch = data.draw(st.integers(1, n_rows))
    order = prompt_schedule(n_rows, per_epoch, total, seed)
    assert order == prompt_schedule(n_rows, per_epoch, total, seed)
    assert len(order) == total
    longer = prompt_schedule(n_rows, per_epoch, total + per_epoch, seed)
    assert longer[:total] == order  # a longer budget extends the same draw
    for start in range(0, total, per_epoch):
        epoch = order[start : start + per_epoch]
        assert len(set(epoch)) == len(epoch) and all(0 <= i < n_rows for i in epoch)


def test_the_checkpoint_callback_saves_the_log_into_the_checkpoint(tmp_path: Path) -> None:
    trainer = Trainer(group=2)
    log = SampleLog(trainer)
    feed(trainer, ["a", "a"], [1, 2])
    callback = log.checkpoint_callback()
    args = SimpleNamespace(output_dir=str(tmp_path))
    (tmp_path / "checkpoint-4").mkdir()
    callback.on_save(args, SimpleNamespace(is_world_process_zero=True, global_step=4), None)
    assert SampleLog.read(tmp_path / "checkpoint-4" / CHECKPOINT_SAMPLES_FILE) == log.generations
    # another process, or a checkpoint folder that is not there: nothing written
    (tmp_path / "checkpoint-8").mkdir()
    callback.on_save(args, SimpleNamespace(is_world_process_zero=False, global_step=8), None)
    assert not (tmp_path / "checkpoint-8" / CHECKPOINT_SAMPLES_FILE).exists()
    callback.on_save(args, SimpleNamespace(is_world_process_zero=True, global_step=12), None)
    assert not (tmp_path / "checkpoint-12").exists()
