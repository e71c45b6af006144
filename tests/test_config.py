"""Config parsing: YAML + command-line overrides, precedence, one-line errors naming the key, shipped YAMLs.

Nothing here loads a model: `no_model_loads` makes any attempt fail the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from experiments.config import (
    BUDGET_KEYS,
    ConfigError,
    ExperimentArgs,
    budget,
    parse_config,
    shipped_configs,
)

SEED_FILE = "000_a89d4566d7285a51.txt"
FAMILIES = ("", "_cpu", "_smollm2", "_smollm2_learnable", "_demo")
# What the shipped GPU configs must reproduce from the seed's TrainingConfig and evaluate_model call.
SEED_HYPERPARAMETERS = {
    "model": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
    "dataset": "humaneval",
    "n_train": 50,
    "n_eval": 30,
    "num_generations": 2,
    "max_completion_length": 40,
    "temperature": 0.8,
    "top_p": 0.9,
    "learning_rate": 1e-6,
    "num_train_epochs": 3,
    "eval_n": 5,
    "eval_temperature": 0.7,
    "eval_top_p": 0.9,
    "eval_max_new_tokens": 256,
    "bf16": True,
}


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    import experiments.models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded while parsing a config")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    for name in ("resolve_model", "tiny_model_path", "smollm2_path", "build_tiny_model"):
        monkeypatch.setattr(experiments.models, name, refuse)


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


CPU = "use_cpu: true\nbf16: false\nactivation_checkpointing: false\n"


def test_yaml_values_and_cli_overrides(tmp_path: Path, no_model_loads: None) -> None:
    cfg_file = write(
        tmp_path,
        "method: grpo\nmodel: tiny\nn_train: 12\nlearning_rate: 1e-5\nnum_generations: 2\n"
        "per_device_train_batch_size: 4\neval_ks: [1, 2]\neval_n: 2\n" + CPU,
    )
    exp, cfg = parse_config([cfg_file, "--n_train", "20", "--learning_rate", "3e-4", "--eval_ks", "1"])
    assert isinstance(exp, ExperimentArgs)
    assert type(cfg).__name__ == "GRPOConfig"
    assert exp.n_train == 20 and exp.eval_ks == [1]  # the command line beats the YAML
    assert cfg.learning_rate == pytest.approx(3e-4)
    assert cfg.num_generations == 2 and cfg.per_device_train_batch_size == 4  # YAML beats the class default
    assert exp.eval_n == 2 and exp.model == "tiny"
    assert cfg.report_to == ["tensorboard"]  # passk's default: local TensorBoard
    # TRL's own spelling works too.
    exp2, _ = parse_config(["--config", cfg_file, "--n_train", "7"])
    assert exp2.n_train == 7


def test_precedence_method_defaults_below_yaml(tmp_path: Path, no_model_loads: None) -> None:
    from experiments.trainers import METHODS

    key, value = next(iter(METHODS["reinforce_kl"].defaults.items()))
    base = "method: reinforce_kl\nnum_generations: 2\nper_device_train_batch_size: 2\n" + CPU
    _, cfg = parse_config([write(tmp_path, base)])
    assert getattr(cfg, key) == value  # the method's defining value applies when the YAML is silent
    other = "none" if isinstance(value, str) else (not value if isinstance(value, bool) else value * 2)
    _, cfg2 = parse_config([write(tmp_path, base + f"{key}: {yaml.safe_dump(other).split()[0]}\n", "b.yaml")])
    assert getattr(cfg2, key) == other  # the YAML beats it


def test_method_from_command_line_picks_the_config_class(tmp_path: Path, no_model_loads: None) -> None:
    cfg_file = write(tmp_path, "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\n" + CPU)
    exp, cfg = parse_config([cfg_file, "--method", "ppo"])
    assert exp.method == "ppo" and type(cfg).__name__ == "PPOConfig"


@pytest.mark.parametrize(
    ("yaml_text", "argv", "key"),
    [
        ("method: grpo\nbogus_key: 1\n", [], "bogus_key"),
        ("method: grpo\n", ["--bogus_flag", "1"], "bogus_flag"),
        ("method: grpo\nlearning_rate: [1]\n", [], "learning_rate"),
        ("method: grpo\n", ["--learning_rate", "abc"], "learning_rate"),
        ("method: grpo\n", ["--style", "poetry"], "style"),
        ("method: grpo\neval_n: 2\neval_ks: [1, 5]\n", [], "eval_ks"),
        (
            "method: grpo\n",
            ["--num_generations", "3", "--per_device_train_batch_size", "4"],
            "num_generations",
        ),
        ("method: grpo\nnum_generations: 1\nper_device_train_batch_size: 2\n", [], "num_generations"),
        ("method: grpo\nnum_generations: 2\nper_device_train_batch_size: 8\nn_train: 3\n", [], "n_train"),
        ("method: grpo\nreward_funcs: [nonsense]\n", [], "reward_funcs"),
        ("method: grpo\ndataset: /no/such/file.jsonl\n", [], "dataset"),
        ("method: grpo\nwarm_start_steps: 10\n", [], "warm_start_steps"),
        ("method: nope\n", [], "method"),
        ("model: tiny\n", [], "method"),
    ],
)
def test_bad_values_fail_with_one_line_naming_the_key(
    tmp_path: Path, no_model_loads: None, yaml_text: str, argv: list[str], key: str
) -> None:
    text = yaml_text if "bf16" in yaml_text else yaml_text + CPU
    with pytest.raises(ConfigError) as err:
        parse_config([write(tmp_path, text), *argv])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{key}:"), message


def test_cpu_rule_names_the_key(tmp_path: Path, no_model_loads: None) -> None:
    text = "method: grpo\nuse_cpu: true\nbf16: false\nactivation_checkpointing: true\n"
    with pytest.raises(ConfigError, match=r"^activation_checkpointing:"):
        parse_config([write(tmp_path, text)])


def test_bad_value_through_passk_train_is_one_line_and_loads_nothing(
    tmp_path: Path, no_model_loads: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.cli import main

    cfg_file = write(tmp_path, "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\n" + CPU)
    assert main(["train", cfg_file, "--eval_top_p", "1.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "eval_top_p" in err, err


def test_every_shipped_yaml_parses(no_model_loads: None) -> None:
    """Every shipped file parses into its method's config (the 35 per-method files; a budget file without `method:`
    is parsed with --method). The GPU ones are parsed with the device keys switched to
    CPU, because GRPOConfig refuses bf16 on a machine without a GPU; the rest of their values are checked."""
    from experiments.trainers import METHODS

    files = shipped_configs()
    per_method = [p for p in files if "method" in yaml.safe_load(p.read_text())]  # the others take --method
    assert {p.name for p in per_method} == {f"{m}{f}.yaml" for m in METHODS for f in FAMILIES}
    for path in files:
        raw = yaml.safe_load(path.read_text())
        gpu = "use_cpu" not in raw
        extra = ["--use_cpu", "true", "--bf16", "false"] if gpu else []
        extra += [] if "method" in raw else ["--method", "ppo"]
        exp, cfg = parse_config([str(path), *extra])
        assert exp.method == raw.get("method", "ppo") and isinstance(cfg, METHODS[exp.method].config_cls), path.name
        if not gpu:  # the project's CPU rule
            assert cfg.use_cpu and not cfg.bf16 and not cfg.activation_checkpointing, path.name
            assert exp.num_threads >= 1, path.name


def test_gpu_configs_carry_the_seed_hyperparameters() -> None:
    from experiments.trainers import METHODS

    gpu = [p for p in shipped_configs() if p.stem in METHODS]
    assert len(gpu) == len(METHODS)
    for path in gpu:
        raw = yaml.safe_load(path.read_text())
        for key, value in SEED_HYPERPARAMETERS.items():
            assert raw[key] == (pytest.approx(value) if isinstance(value, float) else value), (path.name, key)
        # One prompt x 2 generations per update, 3 epochs x 20 prompts = 60 updates.
        assert raw["per_device_train_batch_size"] == 2 and raw["max_steps"] == 60, path.name
        assert SEED_FILE in path.read_text(), path.name


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_shares_one_budget(family: str, no_model_loads: None) -> None:
    """Within a family the files differ only in the method (and where they write), so compare is fair."""
    from experiments.trainers import METHODS

    budgets = {}
    for method in METHODS:
        path = next(p for p in shipped_configs(f"{method}{family}.yaml"))
        raw = yaml.safe_load(path.read_text())
        extra = ["--use_cpu", "true", "--bf16", "false"] if "use_cpu" not in raw else []
        budgets[method] = budget(*parse_config([str(path), *extra]))
        keys = set(raw) - {"method", "output_dir"}
        budgets[method]["_keys"] = sorted(keys)
    first = next(iter(budgets.values()))
    for method, b in budgets.items():
        assert b == first, (
            family,
            method,
            {k: (b[k], first[k]) for k in (*BUDGET_KEYS, "_keys") if b[k] != first[k]},
        )


def test_sharded_launch_refuses_evaluation_during_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_model_loads: None
) -> None:
    """Under FSDP (or ZeRO-3) the callback would refuse only after the model loaded; the config says so first.
    The launcher's environment is what tells; FSDP's is set here (DeepSpeed is not installed on CPU machines)."""
    text = "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\neval_every_n_steps: 5\n" + CPU
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigError, match=r"^eval_every_n_steps:"):
        parse_config([write(tmp_path, text)])
    exp, _ = parse_config([write(tmp_path, text), "--eval_every_n_steps", "0"])
    assert exp.eval_every_n_steps == 0
    monkeypatch.delenv("ACCELERATE_USE_FSDP")  # DDP keeps full weights on every rank
    assert parse_config([write(tmp_path, text)])[0].eval_every_n_steps == 5
