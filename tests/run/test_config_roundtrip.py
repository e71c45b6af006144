"""Config round trips: every numeric range at each of its ends, and `passk eval RUN_DIR` reading back a run's settings.

- `NUMERIC_RANGES` (experiments.run.validation) is checked against a table written out here, not read from the
  module: each key at its bound (accepted for a closed end, refused for an open one) and just beyond it, the
  error one line naming the key; every key is a field of some config, so that a misspelt key checks nothing.
- `RUN_EVAL_KEYS` (experiments.run.cli): a run.json holding every one of them at a non-default value is read back
  by `passk eval RUN_DIR` into the settings it evaluates with (the evaluation itself is replaced by a recorder).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.run import cli
from experiments.run.config import ExperimentArgs
from experiments.run.validation import NUMERIC_RANGES, check_numbers
from experiments.trainers import METHODS

# key -> (low, low closed, high, high closed); None: unbounded on that side.
AT_LEAST_0 = (
    "learning_rate",
    "critic_learning_rate",
    "vf_lr",
    "weight_decay",
    "max_grad_norm",
    "warmup_steps",
    "beta",
    "epsilon",
    "epsilon_high",
    "delta",
    "kl_coef",
    "cliprange_value",
    "cliprange",
    "entropy_coef",
    "entropy_coef_min",
    "entropy_coef_max",
    "entropy_coef_delta",
    "label_smoothing_factor",
    "num_train_epochs",
    "top_k",
    "seed",
    "data_seed",
    "dataloader_num_workers",
    "save_total_limit",
    "neftune_noise_alpha",
    "eval_delay",
)
ABOVE_0 = (
    "temperature",
    "logprob_temperature",
    "adam_epsilon",
    "repetition_penalty",
    "logging_steps",
    "save_steps",
    "eval_steps",
    "ddp_timeout",
    "vllm_server_timeout",
    "sapo_temperature_neg",
    "sapo_temperature_pos",
    "reward_memory_mb",
)
AT_LEAST_1 = (
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "num_iterations",
    "steps_per_generation",
    "generation_batch_size",
    "max_completion_length",
    "max_prompt_length",
    "num_generations_eval",
    "ref_model_sync_steps",
    "vllm_tensor_parallel_size",
)
EXPECTED = {
    **{k: (0, True, None, False) for k in AT_LEAST_0},
    **{k: (0, False, None, False) for k in ABOVE_0},
    **{k: (1, True, None, False) for k in AT_LEAST_1},
    **{
        k: (0, True, 1, True)
        for k in ("min_p", "top_entropy_quantile", "ref_model_mixup_alpha", "lam", "gamma", "warmup_ratio")
    },
    **{k: (0, False, 1, True) for k in ("top_p", "vllm_gpu_memory_utilization")},
    **{k: (0, True, 1, False) for k in ("adam_beta1", "adam_beta2")},
    "max_steps": (-1, True, None, False),
}
INTEGER_KEYS = set(AT_LEAST_1) | {
    "top_k",
    "seed",
    "data_seed",
    "dataloader_num_workers",
    "save_total_limit",
    "logging_steps",
    "save_steps",
    "eval_steps",
    "ddp_timeout",
    "reward_memory_mb",
    "warmup_steps",
    "max_steps",
}


def test_the_table_lists_every_range() -> None:
    assert sorted(NUMERIC_RANGES) == sorted(EXPECTED)


def test_every_range_is_a_field_of_some_config() -> None:
    fields = {f.name for f in dataclasses.fields(ExperimentArgs)}
    for spec in METHODS.values():
        fields |= {f.name for f in dataclasses.fields(spec.config_cls)}
    # These four are fields of no config of the installed TRL / transformers (removed there); their ranges check
    # nothing today. Any other key missing here is a misspelling.
    assert sorted(k for k in NUMERIC_RANGES if k not in fields) == [
        "cliprange",
        "max_prompt_length",
        "vf_lr",
        "warmup_ratio",
    ]


def _one(key: str, value: float):
    """A config holding only `key`."""
    return dataclasses.make_dataclass("One", [(key, float, dataclasses.field(default=value))])()


def _accepts(key: str, value: float) -> bool:
    try:
        check_numbers(_one(key, value))
    except ConfigError as err:
        text = str(err)
        assert "\n" not in text and text.startswith(f"{key}: must be "), text
        assert text.endswith(f", got {value}"), text
        return False
    return True


def _cases():
    for key, (low, low_closed, high, high_closed) in EXPECTED.items():
        step = 1 if key in INTEGER_KEYS else 1e-6
        if low is not None:
            yield key, low, low_closed
            yield key, low - step, False
            yield key, low + step, high is None or low + step < high or high_closed
        if high is not None:
            yield key, high, high_closed
            yield key, high + step, False
            yield key, high - step, True


CASES = list(_cases())


@pytest.mark.parametrize("key, value, accepted", CASES, ids=[f"{k}={v:g}" for k, v, _ in CASES])
def test_each_range_at_and_beyond_each_end(key: str, value: float, accepted: bool) -> None:
    if key in INTEGER_KEYS:
        value = int(value)
    assert _accepts(key, value) == accepted


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_float_must_be_finite_even_without_a_range(value: float) -> None:
    with pytest.raises(ConfigError, match=r"^eval_temperature: must be a finite number, got "):
        check_numbers(_one("eval_temperature", value))
    with pytest.raises(ConfigError, match=r"^gamma: must be a finite number"):
        check_numbers(_one("gamma", value))


def test_booleans_are_not_numbers() -> None:
    config = dataclasses.make_dataclass("B", [("top_p", bool, dataclasses.field(default=False))])()
    check_numbers(config)  # False is not the number 0, which top_p refuses


def test_the_first_config_out_of_range_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^top_p:"):
        check_numbers(_one("gamma", 0.5), _one("top_p", 0.0))


# ---- passk eval RUN_DIR ---------------------------------------------------------------------------------------
# Every RUN_EVAL_KEYS key at a value other than its default (and other than passk eval's).
NON_DEFAULT = {
    "dataset": "learnable",
    "n_train": 7,
    "n_eval": 3,
    "split_seed": 5,
    "style": "chat",
    "system_prompt": "Be brief.",
    "model_generation_config": True,
    "stop_at_code_end": False,
    "reward_timeout": 1.5,
    "reward_memory_mb": 512,
    "eval_n": 6,
    "eval_ks": [2, 3],
    "eval_temperature": 0.3,
    "eval_top_p": 0.5,
    "eval_max_new_tokens": 17,
    "eval_greedy": False,
    "eval_batch_size": 3,
    "eval_processes": 2,
    "num_threads": 4,
    "seed": 11,
}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []
    monkeypatch.setattr(cli, "_evaluate", lambda model, exp, ea, run_log, torch: calls.append((exp, ea)) or 0)
    return calls


def _run_dir(tmp_path: Path, config: dict) -> Path:
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"config": config, "budget": {"prompts": 4}}))
    return run


def test_non_default_values_cover_every_key() -> None:
    assert sorted(NON_DEFAULT) == sorted(cli.RUN_EVAL_KEYS)
    defaults = ExperimentArgs()
    for key, value in NON_DEFAULT.items():
        default = getattr(defaults, key) if hasattr(defaults, key) else cli.EvalArgs().seed
        assert value != default, key


@pytest.mark.parametrize("folder", ["", "checkpoint-2"])
def test_passk_eval_reads_every_run_setting_back(tmp_path: Path, recorded: list, folder: str) -> None:
    config = {
        **NON_DEFAULT,
        "learning_rate": 0.5,
        "method": "ppo",
        "eval_before": False,
        "eval_every_n_steps": 3,
        "reward_funcs": ["partial"],
        "warm_start_steps": 9,
    }
    run = _run_dir(tmp_path, config)
    assert cli.cmd_eval([str(run / folder)]) == 0
    ((exp, ea),) = recorded
    for key, value in NON_DEFAULT.items():
        got = ea.seed if key == "seed" else getattr(exp, key)
        assert got == value, key
    # Keys that do not decide what passk eval scores stay at their defaults.
    defaults = ExperimentArgs()
    for key in ("eval_before", "eval_every_n_steps", "reward_funcs", "warm_start_steps", "method"):
        assert getattr(exp, key) == getattr(defaults, key), key


def test_the_command_line_overrides_the_run(tmp_path: Path, recorded: list, capsys) -> None:
    run = _run_dir(tmp_path, NON_DEFAULT)
    argv = [
        str(run),
        "--eval_n",
        "4",
        "--eval_ks",
        "1",
        "4",
        "--seed",
        "3",
        "--eval_greedy",
        "true",
        "--split_seed",
        "0",
        "--device",
        "cpu",
    ]
    assert cli.cmd_eval(argv) == 0
    ((exp, ea),) = recorded
    assert (exp.eval_n, exp.eval_ks, ea.seed, exp.eval_greedy, exp.split_seed) == (4, [1, 4], 3, True, 0)
    assert exp.eval_temperature == NON_DEFAULT["eval_temperature"] and exp.style == "chat"
    said = capsys.readouterr().out
    # Only the run's settings that the command line replaced are named (--device is no run setting).
    assert "with --eval_greedy, --eval_ks, --eval_n, --seed, --split_seed from the command line" in said


def test_without_a_run_record_the_defaults_apply(tmp_path: Path, recorded: list) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    assert cli.cmd_eval([str(folder)]) == 0
    ((exp, ea),) = recorded
    assert exp == ExperimentArgs() and ea.seed == cli.EvalArgs().seed


# ---- argv helpers: each form of a flag --------------------------------------------------------------------------
def test_split_config_argv_in_each_style() -> None:
    from experiments.run.argv import split_config_argv

    assert split_config_argv(["a.yaml", "--seed", "1"]) == ("a.yaml", ["--seed", "1"])
    assert split_config_argv(["--seed", "1", "--config", "a.yaml", "--lr", "2"]) == (
        "a.yaml",
        ["--seed", "1", "--lr", "2"],
    )
    assert split_config_argv(["--seed", "1", "--config=a.yaml"]) == ("a.yaml", ["--seed", "1"])
    assert split_config_argv(["--seed", "1"]) == (None, ["--seed", "1"])
    with pytest.raises(ConfigError, match="^config:"):
        split_config_argv(["--seed", "1", "--config"])


def test_flag_helpers_read_both_forms() -> None:
    from experiments.run.argv import cli_value, drop_flags, flag_keys, join_negative_values, rename_trl_flags

    args = ["--a", "1", "--b=2", "--c", "--d", "x"]
    assert cli_value(args, "a") == "1" and cli_value(args, "b") == "2" and cli_value(args, "d") == "x"
    assert cli_value(args, "e") is None and cli_value(["--a"], "a") is None
    assert cli_value(["--ab", "1"], "a") is None  # a longer key is another flag
    assert flag_keys(args) == ["a", "b", "c", "d"]
    assert drop_flags(args, {"a": True, "b": True, "c": False}) == ["--d", "x"]
    assert drop_flags(args, {"d": False}) == ["--a", "1", "--b=2", "--c", "x"]
    assert drop_flags(["--b=2", "--keep", "1"], {"b": True}) == ["--keep", "1"]  # its value was in the flag
    assert rename_trl_flags(["--model_name_or_path", "m", "--dataset_name=d", "--model", "x"]) == [
        "--model",
        "m",
        "--dataset=d",
        "--model",
        "x",
    ]
    assert join_negative_values(["--lr", "-1e-3", "--x=-1", "--y", "-2", "--z", "3"]) == [
        "--lr=-1e-3",
        "--x=-1",
        "--y=-2",
        "--z",
        "3",
    ]
    assert join_negative_values(["--x=1", "-2"]) == ["--x=1", "-2"]  # a flag holding its value takes no other


def test_a_flag_followed_by_another_flag_has_no_value() -> None:
    """TRL's boolean flags take their value optionally (`--bf16` alone is true), so the token after a flag is its
    value only when it is no option: a bare flag must neither read nor drop the next flag."""
    from experiments.run.argv import bool_flag, cli_value, drop_flags

    args = ["--use_cpu", "--seed", "3", "--resume", "--bf16", "false", "--fp16=true", "--overwrite"]
    assert cli_value(args, "use_cpu") is None and cli_value(args, "resume") is None
    assert cli_value(args, "overwrite") is None and cli_value(args, "bf16") == "false"
    assert [bool_flag(args, k) for k in ("use_cpu", "bf16", "fp16", "overwrite", "resume", "absent")] == [
        True,
        False,
        True,
        True,
        True,
        None,
    ]
    assert bool_flag(["--bf16", "yes"], "bf16") is True and bool_flag(["--bf16", "0"], "bf16") is False
    assert drop_flags(args, {"use_cpu": True, "resume": True, "overwrite": True}) == [
        "--seed",
        "3",
        "--bf16",
        "false",
        "--fp16=true",
    ]
    assert drop_flags(["--resume", "true", "--seed", "3"], {"resume": True}) == ["--seed", "3"]


def test_a_bare_flag_ends_a_command_line_of_any_length() -> None:
    """A bare flag last has no value whatever the command line's length (a sweep's overrides can run long)."""
    from experiments.run.argv import bool_flag, cli_value, drop_flags

    args = [f"--k{i}={i}" for i in range(300)] + ["--overwrite"]
    assert cli_value(args, "overwrite") is None and bool_flag(args, "overwrite") is True
    assert drop_flags(args, {"overwrite": True}) == args[:-1]


@pytest.mark.parametrize(
    "flags",
    [
        ["--use_cpu", "--seed", "3", "--bf16", "false"],
        ["--seed", "3", "--bf16", "false", "--use_cpu"],
        ["--seed", "3", "--use_cpu", "true", "--bf16=false"],
    ],
)
def test_check_reads_a_bare_device_flag_as_true_and_keeps_the_next_flag(flags: list[str]) -> None:
    from experiments.run.argv import parse_config

    argv = ["--method", "grpo", "--model", "tiny", "--max_steps", "4", "--activation_checkpointing", "false"]
    exp, cfg = parse_config([*argv, *flags], device_free=True)
    assert (cfg.seed, cfg.use_cpu, cfg.bf16, cfg.fp16) == (3, True, False, False)
