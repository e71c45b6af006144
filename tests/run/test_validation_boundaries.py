"""Every validation rule of experiments.run.validation and experiments.run.budget, on both sides of its boundary.

A rule tested only far from its edge survives an off-by-one (`<` for `<=`), a dropped check or a term left out
of the arithmetic (the world size in the generation batch). Each case here is a pair: the last accepted value
and the first rejected one, through the public entry points `parse_config`, `validate` and `derive_max_steps`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.run.argv import ConfigError, parse_config
from experiments.run.budget import BudgetError, derive_max_steps
from experiments.run.validation import validate

BASE = (
    "method: grpo\nmodel: tiny\ndataset: humaneval\nuse_cpu: true\nbf16: false\nactivation_checkpointing: false\n"
    "num_generations: 2\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 1\n"
    "n_train: 50\neval_n: 5\neval_ks: [1, 5]\n"
)


@pytest.fixture(scope="module")
def base_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "base.yaml"
    path.write_text(BASE)
    return path


@pytest.fixture(scope="module")
def parsed(base_yaml: Path):
    return parse_config([str(base_yaml)])


def _check(parsed, *, world_size: int = 1, cfg_fields: dict | None = None, **exp_fields) -> None:
    exp, cfg = copy.deepcopy(parsed)
    for key, value in exp_fields.items():
        setattr(exp, key, value)
    for key, value in (cfg_fields or {}).items():
        setattr(cfg, key, value)
    validate(exp, cfg, world_size=world_size)


# (key that the error must name, accepted fields, rejected fields)
EXP_BOUNDARIES = [
    ("n_train", {"n_train": 1}, {"n_train": 0}),
    ("eval_n", {"eval_n": 1, "eval_ks": [1]}, {"eval_n": 0, "eval_ks": [1]}),
    ("eval_max_new_tokens", {"eval_max_new_tokens": 1}, {"eval_max_new_tokens": 0}),
    ("eval_batch_size", {"eval_batch_size": 1}, {"eval_batch_size": 0}),
    ("eval_processes", {"eval_processes": 1}, {"eval_processes": 0}),
    ("num_threads", {"num_threads": 0}, {"num_threads": -1}),
    ("n_eval", {"n_eval": 0}, {"n_eval": -1}),
    ("split_seed", {"split_seed": 0}, {"split_seed": -1}),
    ("eval_every_n_steps", {"eval_every_n_steps": 0}, {"eval_every_n_steps": -1}),
    ("warm_start_steps", {"warm_start_steps": 0}, {"warm_start_steps": -1}),
    ("eval_ks", {"eval_ks": [1]}, {"eval_ks": [0]}),
    ("eval_ks", {"eval_ks": [5]}, {"eval_ks": [6]}),  # k <= eval_n (5)
    ("eval_ks", {"eval_ks": [1, 5]}, {"eval_ks": [1, 0]}),  # every k, not only the first
    ("eval_ks", {"eval_ks": [1]}, {"eval_ks": []}),
    ("eval_temperature", {"eval_temperature": 1e-6}, {"eval_temperature": 0.0}),
    ("eval_temperature", {"eval_temperature": 0.7}, {"eval_temperature": -0.7}),
    ("eval_top_p", {"eval_top_p": 1.0}, {"eval_top_p": 1.0001}),
    ("eval_top_p", {"eval_top_p": 1e-6}, {"eval_top_p": 0.0}),
    ("eval_top_p", {"eval_top_p": 0.9}, {"eval_top_p": -0.9}),
    ("reward_timeout", {"reward_timeout": 1e-3}, {"reward_timeout": 0.0}),
    ("reward_timeout", {"reward_timeout": 3.0}, {"reward_timeout": -1.0}),  # below zero too, not only at it
    ("reward_funcs", {"reward_funcs": ["unit_test"]}, {"reward_funcs": []}),
    ("reward_funcs", {"reward_funcs": ["my_module.reward"]}, {"reward_funcs": ["no_such_reward"]}),
    (
        "lora_r",
        {"use_peft": True, "lora_r": 1, "lora_alpha": 1},
        {"use_peft": True, "lora_r": 0, "lora_alpha": 1},
    ),
    (
        "lora_r",
        {"use_peft": True, "lora_r": 1, "lora_alpha": 1},
        {"use_peft": True, "lora_r": 1, "lora_alpha": 0},
    ),
    (  # the common LoRA shape, not only the edge: any rank and alpha from 1 up
        "lora_r",
        {"use_peft": True, "lora_r": 16, "lora_alpha": 32},
        {"use_peft": True, "lora_r": 0, "lora_alpha": 32},
    ),
    ("lora_dropout", {"lora_dropout": 0.0}, {"lora_dropout": -0.01}),
    ("lora_dropout", {"lora_dropout": 0.99}, {"lora_dropout": 1.0}),
    ("lora_dropout", {"lora_dropout": 0.05}, {"lora_dropout": 1.5}),  # above 1, not only at it
    ("warm_start_steps", {"dataset": "learnable", "warm_start_steps": 5}, {"warm_start_steps": 5}),
    ("resume", {"resume": True}, {"resume": True, "_cfg": {"resume_from_checkpoint": "x"}}),
]


@pytest.mark.parametrize(
    "key, ok, bad", EXP_BOUNDARIES, ids=[f"{c[0]}-{i}" for i, c in enumerate(EXP_BOUNDARIES)]
)
def test_each_rule_on_both_sides_of_its_boundary(parsed, key: str, ok: dict, bad: dict) -> None:
    _check(parsed, **ok)
    bad = dict(bad)
    cfg_fields = bad.pop("_cfg", None)
    with pytest.raises(ConfigError, match=rf"^{key}:"):
        _check(parsed, cfg_fields=cfg_fields, **bad)


def test_a_local_task_file_has_no_warm_start(parsed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("tasks.jsonl").write_text("")  # a relative name, as a config gives it
    _check(parsed, dataset="tasks.jsonl")
    with pytest.raises(ConfigError, match=r"^warm_start_steps: only the learnable task"):
        _check(parsed, dataset="tasks.jsonl", warm_start_steps=5)


def test_the_cpu_rule_on_both_sides(parsed) -> None:
    for key in ("bf16", "fp16", "activation_checkpointing", "gradient_checkpointing"):
        _check(parsed, cfg_fields={"use_cpu": False, key: True})  # only a CPU run must turn them off
        with pytest.raises(ConfigError, match=rf"^{key}:"):
            _check(parsed, cfg_fields={"use_cpu": True, key: True})


def test_eval_processes_only_for_a_single_cpu_process(parsed) -> None:
    _check(parsed, eval_processes=2)  # BASE is a CPU run in one process
    with pytest.raises(ConfigError, match=r"^eval_processes:.*use_cpu: true"):
        _check(parsed, cfg_fields={"use_cpu": False}, eval_processes=2)
    with pytest.raises(ConfigError, match=r"^eval_processes:.*2 processes"):
        _check(parsed, world_size=2, eval_processes=2)
    _check(parsed, world_size=2, eval_processes=1)


def test_max_steps_or_epochs(parsed) -> None:
    _check(parsed, cfg_fields={"max_steps": 1, "num_train_epochs": 0})
    _check(parsed, cfg_fields={"max_steps": -1, "num_train_epochs": 0.5})
    # transformers hands the run's length to num_train_epochs only for a negative max_steps
    # (Trainer.set_initial_training_values: epoch_based = max_steps < 0); max_steps 0 trained one step.
    for epochs in (0.5, 0):
        with pytest.raises(ConfigError, match=r"^max_steps: 0 is no run length; give max_steps >= 1, or -1"):
            _check(parsed, cfg_fields={"max_steps": 0, "num_train_epochs": epochs})
    # -1 is TrainingArguments' own "not set" for max_steps: no more a step count than 0 is.
    with pytest.raises(ConfigError, match=r"^max_steps:"):
        _check(parsed, cfg_fields={"max_steps": -1, "num_train_epochs": 0})


# ---- the generation batch: group size, prompts, processes -------------------------------------------------
@pytest.mark.parametrize("method", ["grpo", "rloo", "reinforce_rloo"])
def test_num_generations_needs_a_group_of_two(base_yaml: Path, method: str) -> None:
    """The bound is the config class's own, checked when the file is parsed: group baselines need 2."""
    parse_config([str(base_yaml), "--method", method, "--num_generations", "2"])
    with pytest.raises(ConfigError, match=r"^num_generations:"):
        parse_config([str(base_yaml), "--method", method, "--num_generations", "1"])


@pytest.mark.parametrize("method", ["vanilla_pg", "reinforce", "reinforce_kl"])
def test_no_baseline_or_a_batch_mean_takes_one_completion_per_prompt(base_yaml: Path, method: str) -> None:
    """No baseline, or one mean over the batch, compares no completions of one prompt: a group of one is valid."""
    _, cfg = parse_config([str(base_yaml), "--method", method, "--num_generations", "1"])
    assert cfg.num_generations == 1


def test_ppo_takes_one_completion_per_prompt(base_yaml: Path) -> None:
    """PPO's baseline is its critic, so a group of one is a valid batch."""
    _, cfg = parse_config([str(base_yaml), "--method", "ppo", "--num_generations", "1"])
    assert cfg.num_generations == 1


def test_n_train_exactly_filling_the_generation_batch(parsed) -> None:
    """8 completions of groups of 2 are 4 prompts: n_train 4 fills one generation batch, 3 cannot."""
    cfg = {"num_generations": 2, "generation_batch_size": 8}
    _check(parsed, n_train=4, cfg_fields=cfg)
    with pytest.raises(ConfigError, match=r"^n_train:"):
        _check(parsed, n_train=3, cfg_fields=cfg)


def test_generation_batch_divisible_by_the_group(parsed) -> None:
    _check(parsed, cfg_fields={"num_generations": 3, "generation_batch_size": 6})
    with pytest.raises(ConfigError, match=r"^num_generations:"):
        _check(parsed, cfg_fields={"num_generations": 3, "generation_batch_size": 4})


@pytest.mark.parametrize("via", ["argument", "environment"])
def test_world_size_counts_in_the_generation_batch(parsed, monkeypatch: pytest.MonkeyPatch, via: str) -> None:
    """Without a resolved generation_batch_size the batch is per_device x processes x accumulation: 2 processes
    of 2 prompts x 2 completions need 4 training prompts (3 pass on one process), and 3 completions per device
    are divisible by a group of 2 only across an even number of processes."""

    def check(world_size: int, n_train: int, per_device: int) -> None:
        cfg = {
            "generation_batch_size": None,
            "per_device_train_batch_size": per_device,
            "gradient_accumulation_steps": 1,
            "num_generations": 2,
        }
        if via == "environment":
            monkeypatch.setenv("WORLD_SIZE", str(world_size))
            _check(parsed, n_train=n_train, cfg_fields=cfg, world_size=None)
        else:
            _check(parsed, n_train=n_train, cfg_fields=cfg, world_size=world_size)

    check(1, n_train=2, per_device=4)  # 4 completions = 2 prompts
    check(2, n_train=4, per_device=4)  # 8 completions = 4 prompts
    with pytest.raises(ConfigError, match=r"^n_train:"):
        check(2, n_train=3, per_device=4)
    check(2, n_train=50, per_device=3)  # 6 completions: 3 groups of 2
    with pytest.raises(ConfigError, match=r"^num_generations:"):
        check(1, n_train=50, per_device=3)
    with pytest.raises(ConfigError, match=r"^num_generations:") as err:
        check(3, n_train=50, per_device=3)
    assert "3 process(es)" in str(err.value)


def test_gradient_accumulation_counts_in_the_generation_batch(parsed) -> None:
    cfg = {"generation_batch_size": None, "per_device_train_batch_size": 2, "num_generations": 2}
    _check(parsed, n_train=2, cfg_fields={**cfg, "gradient_accumulation_steps": 2})
    with pytest.raises(ConfigError, match=r"^n_train:"):
        _check(parsed, n_train=1, cfg_fields={**cfg, "gradient_accumulation_steps": 2})


# ---- through parse_config: the budget keys and the world size TRL resolves ---------------------------------
def _parse(tmp_path: Path, extra: str, *argv: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(BASE + extra)
    return parse_config([str(path), *argv])


@pytest.mark.parametrize(
    "ok, bad, key",
    [
        ("budget_prompts: 0\n", "budget_prompts: -1\n", "budget_prompts"),
        (
            "budget_prompts: 4\nprompts_per_epoch: 0\n",
            "budget_prompts: 4\nprompts_per_epoch: -1\n",
            "prompts_per_epoch",
        ),
        (
            "budget_prompts: 4\nprompts_per_epoch: 4\nn_train: 4\n",
            "budget_prompts: 4\nprompts_per_epoch: 5\nn_train: 4\n",
            "prompts_per_epoch",
        ),
        ("budget_prompts: 4\nprompts_per_epoch: 2\n", "prompts_per_epoch: 2\n", "prompts_per_epoch"),
        ("eval_ks: [1]\n", "eval_ks: [0]\n", "eval_ks"),
        ("eval_ks: [5]\n", "eval_ks: [6]\n", "eval_ks"),
    ],
)
def test_parse_config_boundaries(tmp_path: Path, ok: str, bad: str, key: str) -> None:
    _parse(tmp_path, ok)
    with pytest.raises(ConfigError, match=rf"^{key}:"):
        _parse(tmp_path, bad)


def test_budget_prompts_against_the_batch_trl_resolved(tmp_path: Path) -> None:
    """4 completions per device in groups of 2: 2 prompts per generation batch on this (one-process) run, so
    budget_prompts 6 is 3 optimizer steps and 5 cannot be met."""
    exp, cfg = _parse(tmp_path, "per_device_train_batch_size: 4\nbudget_prompts: 6\n")
    assert cfg.generation_batch_size == 4 and cfg.max_steps == 3
    with pytest.raises(BudgetError, match=r"^budget_prompts:"):
        _parse(tmp_path, "per_device_train_batch_size: 4\nbudget_prompts: 5\n")


# ---- derive_max_steps --------------------------------------------------------------------------------------
def _shape(**kw) -> SimpleNamespace:
    base = {
        "num_generations": 2,
        "generation_batch_size": 4,
        "steps_per_generation": 1,
        "num_iterations": 1,
        "gradient_accumulation_steps": 1,
    }
    return SimpleNamespace(**(base | kw))


def test_derive_max_steps_boundaries() -> None:
    assert derive_max_steps(2, _shape()) == 1  # exactly one generation batch of 2 prompts
    with pytest.raises(BudgetError, match=r"^budget_prompts:"):
        derive_max_steps(1, _shape())
    with pytest.raises(BudgetError, match=r"^budget_prompts:"):
        derive_max_steps(3, _shape())
    # Micro-batches filling whole optimizer steps: 2 generations x 1 = 2 fill one step of 2; 1 does not.
    assert derive_max_steps(4, _shape(gradient_accumulation_steps=2)) == 1
    with pytest.raises(BudgetError, match=r"^gradient_accumulation_steps:"):
        derive_max_steps(2, _shape(gradient_accumulation_steps=2))
    # A generation batch over 2 processes (TRL: generation_batch_size counts every process) holds twice the
    # prompts, so the same budget takes half the optimizer steps.
    one, two = _shape(generation_batch_size=4), _shape(generation_batch_size=8)
    assert derive_max_steps(8, one) == 4 and derive_max_steps(8, two) == 2
    with pytest.raises(BudgetError, match=r"^budget_prompts:"):
        derive_max_steps(6, two)
    # Group size larger than the generation batch: no prompt fits.
    with pytest.raises(BudgetError, match=r"^budget_prompts:"):
        derive_max_steps(4, _shape(num_generations=8, generation_batch_size=4))
    assert derive_max_steps(4, _shape(num_iterations=2)) == 4
    assert derive_max_steps(4, _shape(steps_per_generation=3)) == 6


def test_eval_ks_error_names_the_first_k_out_of_range(parsed) -> None:
    with pytest.raises(ConfigError, match=r"^eval_ks: k=0 is outside 1\.\.eval_n \(5\)$"):
        _check(parsed, eval_ks=[1, 0, 9])
    with pytest.raises(ConfigError, match=r"^eval_ks: k=6 is outside"):
        _check(parsed, eval_ks=[6, 0])


def test_the_world_size_is_a_keyword(parsed) -> None:
    exp, cfg = copy.deepcopy(parsed)
    validate(exp=exp, cfg=cfg, world_size=1)
    with pytest.raises(TypeError):
        validate(exp, cfg, 1)  # a bare number after the configs says nothing about what it is
