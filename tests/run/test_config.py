"""Config parsing: YAML + command-line overrides, precedence, one-line errors naming the key, the budget files.

Nothing here loads a model: `no_model_loads` makes any attempt fail the test.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import typing
from pathlib import Path

import pytest
import yaml

from experiments.run.argv import parse_config
from experiments.run.config import ConfigError, ExperimentArgs, shipped_configs

BUDGETS = ("cpu", "demo", "seed", "smollm2", "smollm2_learnable", "throughput")
# What seed.yaml must reproduce from the seed's TrainingConfig, training loop and evaluate_model call
# (docs/seed-fidelity.md has the full table).
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
    "lr_scheduler_type": "constant",
    "budget_prompts": 60,
    "prompts_per_epoch": 20,
    "max_grad_norm": 0.0,
    "logprob_temperature": 1.0,
    "loss_normalization": "token",
    "model_generation_config": True,
    "eval_n": 5,
    "eval_temperature": 0.7,
    "eval_top_p": 0.9,
    "eval_max_new_tokens": 256,
    "bf16": True,
}


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    import experiments.inputs.models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded while parsing a config")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    for name in ("resolve_model", "tiny_model_path", "smollm2_path", "build_tiny_model"):
        monkeypatch.setattr(experiments.inputs.models, name, refuse)


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
    assert cfg.logging_steps == 1 and cfg.output_dir == "runs/grpo"  # per-step curves, one folder per method
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
    ("method", "rule"),
    [
        ("ppo", None),
        ("vanilla_pg", None),
        ("reinforce", None),
        ("reinforce_kl", None),
        ("grpo", "GRPO requires"),
        ("rloo", "RLOO requires"),
        ("reinforce_rloo", "REINFORCE with baseline 'rloo'"),
    ],
)
def test_num_generations_lower_bound_is_the_methods_own(
    tmp_path: Path, no_model_loads: None, method: str, rule: str | None
) -> None:
    """One completion per prompt: PPO (its critic is the baseline) and the REINFORCE methods without a per-prompt
    baseline (none, batch mean) take it; the group-based ones refuse it, in one line naming the key and their own
    rule."""
    cfg_file = write(tmp_path, "model: tiny\nnum_generations: 1\nper_device_train_batch_size: 2\n" + CPU)
    if rule is None:
        _, cfg = parse_config([cfg_file, "--method", method])
        assert cfg.num_generations == 1
    else:
        with pytest.raises(ConfigError, match=rf"^num_generations: {rule}") as info:
            parse_config([cfg_file, "--method", method])
        assert "\n" not in str(info.value) and str(info.value).count("num_generations:") == 1


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
        ("model: tiny\nkl_coef: 0.1\n", ["--method", "ppo"], "kl_coef"),
        (
            "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 4\nbudget_prompts: 3\n",
            [],
            "budget_prompts",
        ),
        ("method: grpo\nbudget_prompts: 8\nmax_steps: 4\n", [], "max_steps"),
        ("method: grpo\nprompts_per_epoch: 4\n", [], "prompts_per_epoch"),
        ("method: grpo\nbudget_prompts: 8\nprompts_per_epoch: 60\n", [], "prompts_per_epoch"),
        (
            "method: grpo\nbudget_prompts: 8\nprompts_per_epoch: 4\nshuffle_dataset: true\n",
            [],
            "shuffle_dataset",
        ),
        ("method: grpo\nmodel_generation_config: true\n", ["--top_k", "5"], "top_k"),
        ("method: grpo\n", ["--budget_prompts", "-1"], "budget_prompts"),
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
    from experiments.run.cli import main

    cfg_file = write(tmp_path, "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\n" + CPU)
    assert main(["train", cfg_file, "--eval_top_p", "1.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "eval_top_p" in err, err


def test_one_budget_file_per_scenario_and_every_method_parses_from_each(no_model_loads: None) -> None:
    """Each file, with each method. The GPU file is parsed as `--check` does (device_free): GRPOConfig would
    otherwise query the GPU for bf16; its device values are kept as written."""
    from experiments.trainers import METHODS

    files = shipped_configs()
    assert [p.stem for p in files] == list(BUDGETS)
    for path in files:
        raw = yaml.safe_load(path.read_text())
        assert "method" not in raw, path.name  # the method comes from the command line
        for method in METHODS:
            exp, cfg = parse_config([str(path), "--method", method], device_free=True)
            assert exp.method == method and isinstance(cfg, METHODS[method].config_cls), (path.name, method)
            assert cfg.output_dir.endswith(f"/{method}"), cfg.output_dir
            assert cfg.use_cpu == raw.get("use_cpu", False) and cfg.bf16 == raw["bf16"], (path.name, method)
            if cfg.use_cpu:  # the project's CPU rule
                assert not cfg.bf16 and not cfg.activation_checkpointing and exp.num_threads >= 1, path.name


def test_budget_files_leave_the_methods_hyperparameters_to_methods(no_model_loads: None) -> None:
    from experiments.run.config import method_hparam_owners

    owners = method_hparam_owners()
    assert {"kl_coef", "beta", "lam", "critic_learning_rate", "baseline", "num_iterations"} <= set(owners)
    for path in shipped_configs():
        raw = yaml.safe_load(path.read_text())
        assert not set(raw) & set(owners), (path.name, sorted(set(raw) & set(owners)))


@pytest.mark.parametrize("name", BUDGETS)
def test_every_method_gets_the_same_fresh_prompts(name: str, no_model_loads: None) -> None:
    """The plan: max_steps derived per method so that each samples budget_prompts prompts (PPO, with two epochs per
    generation batch, twice the optimizer steps). tests/run/test_budget.py counts what the trainers really sample."""
    from experiments.run.budget import generation_shape
    from experiments.trainers import METHODS

    path = next(p for p in shipped_configs() if p.stem == name)
    for method in METHODS:
        exp, cfg = parse_config([str(path), "--method", method], device_free=True)
        shape = generation_shape(cfg)
        generations = (
            cfg.max_steps
            * shape["gradient_accumulation_steps"]
            / (shape["steps_per_generation"] * shape["num_iterations"])
        )
        assert generations * shape["prompts_per_generation"] == exp.budget_prompts > 0, (name, method)
        generations = exp.budget_prompts // shape["prompts_per_generation"]
        micro_steps = generations * shape["steps_per_generation"] * shape["num_iterations"]
        assert cfg.max_steps == micro_steps // shape["gradient_accumulation_steps"], (name, method)


def test_seed_config_carries_the_seed_settings(no_model_loads: None) -> None:
    path = next(p for p in shipped_configs() if p.stem == "seed")
    raw = yaml.safe_load(path.read_text())
    for key, value in SEED_HYPERPARAMETERS.items():
        assert raw[key] == (pytest.approx(value) if isinstance(value, float) else value), key
    # One prompt x 2 generations per update, 3 epochs x 20 prompts = 60 updates (PPO too: one epoch per rollout).
    assert raw["per_device_train_batch_size"] == 2 and "max_steps" not in raw
    steps = {}
    for method in ("reinforce", "ppo", "grpo"):
        exp, cfg = parse_config([str(path), "--method", method], device_free=True)
        steps[method] = cfg.max_steps
        assert (
            cfg.shuffle_dataset is False and cfg.max_grad_norm == 0.0 and cfg.lr_scheduler_type == "constant"
        )
    assert steps == {"reinforce": 60, "ppo": 60, "grpo": 60}
    exp, cfg = parse_config([str(path), "--method", "reinforce"], device_free=True)
    assert (cfg.logprob_temperature, cfg.loss_normalization) == (1.0, "token") and not exp.not_applicable
    # TRL's GRPO has neither option: parsed without them, and the run records that they did not apply.
    exp, cfg = parse_config([str(path), "--method", "grpo"], device_free=True)
    assert set(exp.not_applicable) == {"logprob_temperature", "loss_normalization"}
    assert not hasattr(cfg, "logprob_temperature")


def test_a_budget_file_may_not_set_a_methods_hyperparameter(tmp_path: Path, no_model_loads: None) -> None:
    text = "model: tiny\nnum_generations: 2\nper_device_train_batch_size: 2\nkl_coef: 0.1\n" + CPU
    with pytest.raises(ConfigError, match=r"^kl_coef: a hyperparameter of .*reinforce_kl.*ppo") as err:
        parse_config([write(tmp_path, text), "--method", "grpo"])
    assert "\n" not in str(err.value)
    # A one-method file may, and so may the command line.
    _, cfg = parse_config([write(tmp_path, "method: ppo\n" + text, "ppo.yaml")])
    assert cfg.kl_coef == 0.1
    _, cfg = parse_config(
        [
            write(tmp_path, text.replace("kl_coef: 0.1\n", ""), "b.yaml"),
            "--method",
            "reinforce",
            "--kl_coef",
            "0.2",
        ]
    )
    assert cfg.kl_coef == 0.2


def test_budget_prompts_sets_max_steps_and_refuses_both(tmp_path: Path, no_model_loads: None) -> None:
    text = "model: tiny\nnum_generations: 2\nper_device_train_batch_size: 4\nbudget_prompts: 8\n" + CPU
    cfg_file = write(tmp_path, text)
    assert parse_config([cfg_file, "--method", "grpo"])[1].max_steps == 4
    assert parse_config([cfg_file, "--method", "ppo"])[1].max_steps == 4
    assert (
        parse_config([cfg_file, "--method", "ppo", "--num_iterations", "2"])[1].max_steps == 8
    )  # two epochs
    with pytest.raises(ConfigError, match=r"^max_steps: derived per method from budget_prompts"):
        parse_config([cfg_file, "--method", "grpo", "--max_steps", "3"])
    assert (
        parse_config([cfg_file, "--method", "grpo", "--budget_prompts", "0", "--max_steps", "3"])[1].max_steps
        == 3
    )


def test_output_dir_names_the_method(tmp_path: Path, no_model_loads: None) -> None:
    text = "model: tiny\nnum_generations: 2\nper_device_train_batch_size: 2\n" + CPU
    assert parse_config([write(tmp_path, text), "--method", "rloo"])[1].output_dir == "runs/rloo"
    text += "output_dir: out/budget/{method}\n"
    assert parse_config([write(tmp_path, text), "--method", "ppo"])[1].output_dir == "out/budget/ppo"


def test_compare_overrides_go_to_the_methods_that_have_them(no_model_loads: None) -> None:
    from experiments.run.argv import overrides_for

    args = ["--lam", "0.9", "--learning_rate", "1e-5", "--eval_ks", "1", "2"]
    assert overrides_for("ppo", args) == (args, [])
    assert overrides_for("grpo", args) == (["--learning_rate", "1e-5", "--eval_ks", "1", "2"], ["lam"])
    assert overrides_for("grpo", ["--bogus", "1"]) == (
        ["--bogus", "1"],
        [],
    )  # parse_config rejects it by name
    # `--key=value` is one word whose key is before the `=`; a stray value before any flag is kept for the parser.
    assert overrides_for("grpo", ["stray", "--lam=0.9", "--seed=3"]) == (["stray", "--seed=3"], ["lam"])
    # A one-letter key is a flag and ends the skipped one's values; a bare `--` is not a flag (as in flag_keys).
    assert overrides_for("grpo", ["--lam", "0.9", "--k", "2"]) == (["--k", "2"], ["lam"])
    assert overrides_for("grpo", ["--lam", "0.9", "--", "--seed", "3"]) == (["--seed", "3"], ["lam"])


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


def test_invalid_yaml_keeps_its_line_and_column(
    tmp_path: Path, no_model_loads: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run.cli import main

    path = write(tmp_path, "method: grpo\nlearning_rate: 1e-6\nnum_generations: [2, 4\nseed: 1\n")
    assert main(["train", path, "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith(f"passk: error: config: {path}:4:5: not valid YAML: "), err


def test_a_typo_in_a_key_says_did_you_mean(
    tmp_path: Path, no_model_loads: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run.cli import main

    path = write(tmp_path, "method: grpo\nlearning_rat: 1e-6\n" + CPU)
    assert main(["train", path, "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"passk: error: learning_rat: unknown key in {path} (not a field of ExperimentArgs or of any "
        "method's config); did you mean 'learning_rate'?"
    )
    assert main(["train", "demo", "--method", "grpo", "--check", "--eval_temprature", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "passk: error: eval_temprature: unknown option '--eval_temprature'; did you mean 'eval_temperature'?"
    )
    assert main(["train", "demo", "--method", "grpo", "--check", "--zzz", "1"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # nothing close: no guess


@pytest.mark.parametrize(
    ("method", "argv", "line"),
    [
        ("grpo", ["--learning_rate", "-1e-3"], "learning_rate: must be >= 0, got -0.001"),  # two arguments
        ("grpo", ["--learning_rate=-2"], "learning_rate: must be >= 0, got -2.0"),
        ("grpo", ["--learning_rate", "nan"], "learning_rate: must be a finite number, got nan"),
        ("grpo", ["--temperature", "0"], "temperature: must be > 0, got 0.0"),
        ("grpo", ["--top_p", "1.5"], "top_p: must be in (0, 1], got 1.5"),
        ("grpo", ["--adam_beta2", "1"], "adam_beta2: must be in [0, 1), got 1.0"),
        ("grpo", ["--max_grad_norm", "-1"], "max_grad_norm: must be >= 0, got -1.0"),
        ("grpo", ["--weight_decay", "-1"], "weight_decay: must be >= 0, got -1.0"),
        ("grpo", ["--beta", "-0.1"], "beta: must be >= 0, got -0.1"),
        ("grpo", ["--max_completion_length", "0"], "max_completion_length: must be >= 1, got 0"),
        ("grpo", ["--reward_memory_mb", "0"], "reward_memory_mb: must be > 0, got 0"),
        ("ppo", ["--lam", "1.5"], "lam: lam must be in [0, 1]; got 1.5"),  # PPOConfig's own check
        ("ppo", ["--epsilon", "-1"], "epsilon: must be >= 0, got -1.0"),
        ("reinforce", ["--seed", "-3"], "seed: must be >= 0, got -3"),
        ("rloo", ["--top_k", "-1"], "top_k: must be >= 0, got -1"),
    ],
)
def test_numeric_settings_are_range_checked_in_one_line_before_anything_loads(
    no_model_loads: None, capsys: pytest.CaptureFixture[str], method: str, argv: list[str], line: str
) -> None:
    from experiments.run.cli import main

    assert main(["train", "demo", "--method", method, *argv]) == 2
    assert capsys.readouterr().err.strip() == f"passk: error: {line}"


def test_an_output_dir_that_holds_a_run_is_refused_unless_overwritten_or_resumed(
    tmp_path: Path, no_model_loads: None
) -> None:
    from experiments.run.validation import check_output_dir

    out = tmp_path / "run"
    demo = str(shipped_configs("demo.yaml")[0])
    exp, cfg = parse_config([demo, "--method", "grpo", "--output_dir", str(out)])
    check_output_dir(exp, cfg)  # absent: fine
    out.mkdir()
    check_output_dir(exp, cfg)  # empty: fine
    (out / "eval_before.json").write_text("{}")  # stopped before its first checkpoint: --resume cannot help
    with pytest.raises(ConfigError) as err:
        check_output_dir(exp, cfg)
    assert str(err.value) == (
        f"output_dir: {out} already holds files (eval_before.json) of a run that saved no "
        "checkpoint, so --resume cannot continue it; pass --overwrite to start it again, or "
        "another --output_dir"
    )
    (out / "eval_before.json").unlink()
    (out / "run.json").write_text("{}")
    (out / "checkpoint-40").mkdir()
    with pytest.raises(ConfigError) as err:
        check_output_dir(exp, cfg)
    assert str(err.value) == (
        f"output_dir: {out} already holds files (checkpoint-40, run.json); pass --overwrite to "
        "replace them, --resume true to continue that run, or another --output_dir"
    )
    for flags in (["--overwrite"], ["--resume", "true"]):
        check_output_dir(*parse_config([demo, "--method", "grpo", "--output_dir", str(out), *flags]))
    with pytest.raises(ConfigError, match="^overwrite: set either"):
        check_output_dir(
            *parse_config(
                [demo, "--method", "grpo", "--output_dir", str(out), "--overwrite", "--resume", "true"]
            )
        )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "a: [1, 2\n",
            ":2:1: not valid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)",
        ),
        (
            "a: b: c\n",
            ":1:5: not valid YAML: mapping values are not allowed here",
        ),  # no context: nothing after
    ],
)
def test_yaml_errors_give_the_problem_and_its_context_only_when_there_is_one(tmp_path: Path, text, message):
    from experiments.run.argv import load_yaml

    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert str(info.value) == f"config: {path}{message}"


def test_trls_names_for_model_and_dataset_stand_for_them_once(tmp_path: Path, no_model_loads: None) -> None:
    exp, _ = parse_config([write(tmp_path, CPU + "method: grpo\nmodel_name_or_path: some/model\n")])
    assert exp.model == "some/model"
    both = write(
        tmp_path, CPU + "method: grpo\nmodel_name_or_path: some/model\nmodel: other/model\n", "both.yaml"
    )
    with pytest.raises(
        ConfigError, match="^model_name_or_path: TRL's name for model, which .* also sets; keep one"
    ):
        parse_config([both])


def test_the_parsers_error_is_its_first_line_as_a_config_error():
    from experiments.run.argv import trl_parser_cls

    parser = trl_parser_cls()((ExperimentArgs,), allow_abbrev=False)
    with pytest.raises(ConfigError, match="^lr: invalid float value: 'x'$"):
        parser.error("argument --lr/--l-r: invalid float value: 'x'\nusage: ...")
    with pytest.raises(ConfigError, match="^invalid arguments$"):
        parser.error("")


def test_negative_values_join_only_the_flag_just_before_them():
    from experiments.run.argv import join_negative_values

    assert join_negative_values(["cfg.yaml", "--lr", "-1e-3"]) == ["cfg.yaml", "--lr=-1e-3"]
    assert join_negative_values(["--a", "x", "-1"]) == ["--a", "x", "-1"]  # "-1" follows a value, not a flag
    assert join_negative_values(["--a=1", "-1"]) == ["--a=1", "-1"]


def test_flag_keys_skip_a_bare_double_dash():
    from experiments.run.argv import flag_keys

    assert flag_keys(["--", "--lr", "1", "--seed=3", "x"]) == ["lr", "seed"]


def test_with_no_argv_the_command_line_after_the_program_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_model_loads: None
) -> None:
    monkeypatch.setattr("sys.argv", ["passk", write(tmp_path, CPU + "method: grpo\n"), "--n_train", "7"])
    exp, _ = parse_config()
    assert exp.method == "grpo" and exp.n_train == 7


def test_of_several_unknown_keys_the_first_is_named(tmp_path: Path, no_model_loads: None) -> None:
    with pytest.raises(ConfigError, match="^zzz_first: unknown key in "):
        parse_config([write(tmp_path, CPU + "method: grpo\nzzz_first: 1\naaa_second: 2\n")])


def test_another_methods_key_in_a_file_is_set_aside_not_applied(tmp_path: Path, no_model_loads: None) -> None:
    exp, cfg = parse_config([write(tmp_path, CPU + "method: grpo\ncliprange_value: 0.3\npkpo_k: 2\n")])
    assert sorted(exp.not_applicable) == ["cliprange_value", "pkpo_k"]
    assert not hasattr(cfg, "cliprange_value") and not hasattr(cfg, "pkpo_k")


def test_a_config_class_sharing_keys_with_experiment_args_names_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_model_loads: None
) -> None:
    from types import SimpleNamespace

    import experiments.run.argv as argv

    @dataclasses.dataclass
    class Clashing:
        seed: int = 0
        model: str = ""
        dataset: str = ""

    monkeypatch.setattr(argv, "method_spec", lambda name: SimpleNamespace(config_cls=Clashing, defaults={}))
    with pytest.raises(ConfigError, match="^dataset: defined by both ExperimentArgs and Clashing$"):
        parse_config([write(tmp_path, "method: grpo\n")])


def test_a_checkpoint_with_its_trainer_state_is_a_run_resume_can_continue(
    tmp_path: Path, no_model_loads: None
) -> None:
    from experiments.run.validation import check_output_dir

    out = tmp_path / "run"
    exp, cfg = parse_config(
        [str(shipped_configs("demo.yaml")[0]), "--method", "grpo", "--output_dir", str(out)]
    )
    (out / "checkpoint-7").mkdir(parents=True)  # a checkpoint cut off before its trainer_state.json
    with pytest.raises(ConfigError, match="of a run that saved no checkpoint"):
        check_output_dir(exp, cfg)
    (out / "checkpoint-7" / "trainer_state.json").write_text("{}")  # written last: a whole checkpoint
    with pytest.raises(ConfigError, match=r"already holds files \(checkpoint-7\); pass --overwrite"):
        check_output_dir(exp, cfg)


def test_too_few_prompts_for_one_generation_batch_say_how_many_it_needs(
    tmp_path: Path, no_model_loads: None
) -> None:
    args = ["--per_device_train_batch_size", "4", "--num_generations", "2", "--steps_per_generation", "2"]
    with pytest.raises(ConfigError) as info:
        parse_config([write(tmp_path, CPU + "method: grpo\n"), *args, "--n_train", "3"])
    # 4 completions x 2 steps = 8 completions, 2 per prompt: 4 prompts.
    assert str(info.value) == (
        "n_train: 3 prompts are fewer than the 4 one generation batch needs (TRL would train 0 steps)"
    )


@pytest.mark.parametrize(
    "env, sharded",
    [
        ({}, False),
        ({"ACCELERATE_USE_FSDP": "True"}, True),
        ({"ACCELERATE_USE_DEEPSPEED": "TRUE", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, True),
        ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}, False),
        ({"ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, False),  # a stage without DeepSpeed in use
        # Accelerator builds its FSDP plugin only for "true" (any case): another truthy word does not shard.
        ({"ACCELERATE_USE_FSDP": "yes"}, False),
        ({"ACCELERATE_USE_FSDP": "false"}, False),
        ({"ACCELERATE_USE_DEEPSPEED": "yes", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, False),
    ],
)
def test_sharded_weights_read_from_the_launchers_environment(monkeypatch: pytest.MonkeyPatch, env, sharded):
    from experiments.run.validation import sharded_weights

    for var in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert sharded_weights() is sharded


class _Color(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    "value, tp, ok",
    [
        (object(), typing.Any, True),
        ("x", str, True),
        (123, str, False),
        (None, type(None), True),
        (0, type(None), False),
        (True, bool, True),
        ("yes", bool, True),
        (1, bool, False),
        (3, int, True),
        (True, int, False),
        ("3", int, True),
        (2.5, float, True),
        (2, float, True),
        (False, float, False),
        ({"a": 1}, dict, True),
        ("{}", dict[str, int], True),
        ([1], dict, False),
        ([1, 2], list[int], True),
        ("[1, 5]", list[int], True),  # a string for a list: argparse converts it
        ([1, "x"], list[int], True),  # "x": a string passes for a scalar (argparse converts)
        ([1, [2]], list[int], False),
        (5, list[int], False),
        (_Color.RED, _Color, True),
        ("red", _Color, True),
        (3, _Color, False),
        (object(), Path, True),  # a type it does not know: the dataclass decides
        (None, int | None, True),
        ("a", typing.Literal["a", "b"], True),
        ("c", typing.Literal["a", "b"], False),
    ],
)
def test_yaml_value_types_against_field_types(value, tp, ok):
    from experiments.run.validation import _type_ok

    assert _type_ok(value, tp) is ok


def test_config_flag_at_the_end_and_without_a_path():
    from experiments.run.argv import split_config_argv

    assert split_config_argv(["--lr", "1", "--config", "c.yaml"]) == ("c.yaml", ["--lr", "1"])
    with pytest.raises(ConfigError, match="^config: --config needs a path$"):
        split_config_argv(["--lr", "1", "--config"])


def test_the_experiment_defaults_are_the_documented_ones():
    # What a run gets when its config is silent (docs/seed-fidelity.md cites the split and sampling ones): a
    # change to any of them changes results or what a run writes, so each is stated here.

    exp = ExperimentArgs()
    assert {f.name: getattr(exp, f.name) for f in dataclasses.fields(exp) if f.init} == {
        "method": None,
        "model": "tiny",
        "dataset": "humaneval",
        "n_train": 50,
        "n_eval": 30,
        "split_seed": 0,
        "style": "completion",
        "system_prompt": None,
        "warm_start_steps": 0,
        "budget_prompts": 0,
        "prompts_per_epoch": 0,
        "model_generation_config": False,
        "stop_at_code_end": True,
        "screen_n": 0,
        "screen_band": [0.1, 0.9],
        "skip_zero_gradient_steps": False,
        "vllm_dtype": "auto",
        "reward_funcs": ["unit_test"],
        "reward_timeout": 3.0,
        "reward_memory_mb": 1024,
        "reward_stdio_tests": "hidden",
        "eval_n": 5,
        "eval_ks": [1, 5],
        "eval_temperature": 0.7,
        "eval_top_p": 0.9,
        "eval_max_new_tokens": 256,
        "eval_greedy": True,
        "eval_batch_size": 8,
        "eval_processes": 1,
        "eval_every_n_steps": 0,
        "eval_before": True,
        "eval_after": True,
        "use_peft": False,
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_target_modules": None,
        "resume": False,
        "overwrite": False,
        "sigterm_grace_s": 25.0,
        "num_threads": 1,
        "save_model": True,
    }


def test_run_json_keeps_the_trainer_configs_public_keys_only(tmp_path: Path, no_model_loads: None) -> None:
    from experiments.run.config import to_dict

    exp, cfg = parse_config([write(tmp_path, CPU + "method: grpo\n")])
    out = to_dict(exp, cfg)
    assert out["learning_rate"] == cfg.learning_rate and out["n_train"] == exp.n_train
    assert not [k for k in out if k.startswith("_")]


def test_a_world_size_of_zero_counts_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.run.validation import _world_size

    for value, want in (("0", 1), ("", 1), ("4", 4)):
        monkeypatch.setenv("WORLD_SIZE", value)
        assert _world_size() == want


@pytest.mark.parametrize("files, shown", [(3, "a, b, c"), (4, "a, b, c, ...")])
def test_an_occupied_output_dir_shows_three_of_its_files(
    tmp_path: Path, no_model_loads: None, files, shown
) -> None:
    from experiments.run.validation import check_output_dir

    out = tmp_path / "run"
    exp, cfg = parse_config(
        [str(shipped_configs("demo.yaml")[0]), "--method", "grpo", "--output_dir", str(out)]
    )
    out.mkdir()
    for name in "abcd"[:files]:
        (out / name).write_text("")
    with pytest.raises(ConfigError, match=rf"already holds files \({shown.replace('.', '[.]')}\) of a run"):
        check_output_dir(exp, cfg)


def test_a_class_whose_annotations_do_not_resolve_is_left_to_argparse():

    from experiments.run.validation import check_types

    @dataclasses.dataclass
    class Unresolvable:
        size: NoSuchType = None  # noqa: F821 - the annotation names nothing importable

    check_types({"size": [1, 2]}, (Unresolvable,), "cfg.yaml")  # no hint, no check
    with pytest.raises(ConfigError, match=r"^n_train: \[1\] \(from cfg\.yaml\)"):
        check_types({"size": [1, 2], "n_train": [1]}, (Unresolvable, ExperimentArgs), "cfg.yaml")


def test_a_wrongly_typed_value_names_its_fields_type():
    from experiments.run.validation import check_types

    with pytest.raises(ConfigError, match=r"^n_train: \[1\] \(from cfg\.yaml\) is not a valid int$"):
        check_types({"n_train": [1]}, (ExperimentArgs,), "cfg.yaml")


def test_an_env_mapping_is_exported_before_anything_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_model_loads: None
) -> None:
    monkeypatch.delenv("PASSK_TEST_ENV_VALUE", raising=False)
    parse_config([write(tmp_path, CPU + "method: grpo\nenv:\n  PASSK_TEST_ENV_VALUE: 7\n")])
    assert os.environ["PASSK_TEST_ENV_VALUE"] == "7"
    monkeypatch.delenv("PASSK_TEST_ENV_VALUE")
    with pytest.raises(ConfigError, match="^env: must be a mapping of environment variables$"):
        parse_config([write(tmp_path, CPU + "method: grpo\nenv: [PASSK_TEST_ENV_VALUE]\n")])


def test_a_budget_file_names_the_owners_of_its_first_method_hyperparameter(
    tmp_path: Path, no_model_loads: None
) -> None:
    text = "model: tiny\nnum_generations: 2\nper_device_train_batch_size: 2\nlam: 0.9\nbeta: 0.1\n" + CPU
    with pytest.raises(
        ConfigError, match=r"^lam: a hyperparameter of ppo \(METHODS\).*; pass --lam for one run"
    ):
        parse_config([write(tmp_path, text), "--method", "grpo"])


def test_an_abbreviated_flag_is_an_unknown_option_not_a_prefix_match(
    tmp_path: Path, no_model_loads: None
) -> None:
    # argparse would read --n_trai as --n_train; a typo must fail by name instead of setting another key.
    with pytest.raises(ConfigError, match="^n_trai: unknown option '--n_trai'; did you mean 'n_train'"):
        parse_config([write(tmp_path, CPU + "method: grpo\n"), "--n_trai", "7"])


def test_an_unknown_option_with_its_value_after_an_equals_sign_names_the_key(
    tmp_path: Path, no_model_loads: None
) -> None:
    with pytest.raises(ConfigError, match="^bogus_key: unknown option '--bogus_key=3'$"):
        parse_config([write(tmp_path, CPU + "method: grpo\n"), "--bogus_key=3"])


@pytest.mark.parametrize("flags", [["--bf16", "true"], ["--bf16=true"]])
def test_a_check_keeps_the_device_flags_asked_for_in_either_form(
    tmp_path: Path, no_model_loads: None, flags: list[str]
) -> None:
    # `passk train --check` parses for the CPU, then sets back what the command line asked for.
    text = "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\n"
    _, cfg = parse_config([write(tmp_path, text), "--use_cpu", "false", *flags], device_free=True)
    assert cfg.bf16 is True and cfg.use_cpu is False and cfg.fp16 is False


def test_of_several_misspelt_keys_the_first_gets_the_suggestion(tmp_path: Path, no_model_loads: None) -> None:
    with pytest.raises(ConfigError, match="^n_trian: unknown key in .*; did you mean 'n_train'[?]$"):
        parse_config([write(tmp_path, CPU + "method: grpo\nn_trian: 5\nlearnin_rate: 0.1\n")])


def test_a_stray_value_on_the_command_line_is_named(tmp_path: Path, no_model_loads: None) -> None:
    with pytest.raises(ConfigError, match="^stray: unknown option 'stray'$"):
        parse_config([write(tmp_path, CPU + "method: grpo\n"), "--n_train", "5", "stray", "other"])


def test_a_config_class_error_naming_two_keys_is_put_under_the_first(
    tmp_path: Path, no_model_loads: None
) -> None:
    args = ["--generation_batch_size", "4", "--steps_per_generation", "2"]
    with pytest.raises(
        ConfigError, match="^generation_batch_size: 'generation_batch_size' and 'steps_per_gen"
    ):
        parse_config([write(tmp_path, CPU + "method: grpo\nnum_generations: 2\n"), *args])


def test_a_yaml_error_without_a_problem_gives_its_first_line(tmp_path: Path) -> None:
    # A reader error (a control character) carries no `problem`: its message's first line says what is wrong.
    with pytest.raises(
        ConfigError, match="not valid YAML: unacceptable character #x0001: special characters"
    ):
        parse_config([write(tmp_path, "method: grpo\nmodel: a\x01\n")])


def test_without_check_the_config_class_is_built_for_this_machine(
    tmp_path: Path, no_model_loads: None
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the bf16 refusal is what a machine without a GPU says")
    text = (
        "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\n"  # TRL's bf16 default, no use_cpu
    )
    with pytest.raises(ConfigError, match="^bf16: Your setup doesn't support bf16/gpu.*use_cpu: true"):
        parse_config([write(tmp_path, text)])


def test_a_check_gives_trls_bf16_default_unless_fp16_is_asked_for(
    tmp_path: Path, no_model_loads: None
) -> None:
    path = write(tmp_path, "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\n")
    _, cfg = parse_config([path], device_free=True)
    assert (cfg.bf16, cfg.fp16) == (True, False)
    _, cfg = parse_config([path, "--fp16", "true"], device_free=True)
    assert (cfg.bf16, cfg.fp16) == (False, True)


def test_a_check_builds_the_config_class_for_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_model_loads: None
) -> None:
    """--check must not touch an accelerator: the class's __post_init__ (which sets up the device) sees a CPU
    config, whatever the file asks for; the values asked for are set back afterwards."""
    from types import SimpleNamespace

    from trl import GRPOConfig

    import experiments.run.argv as argv

    seen: list[tuple] = []

    @dataclasses.dataclass
    class Recording(GRPOConfig):
        def __post_init__(self) -> None:
            seen.append((self.use_cpu, self.bf16, self.fp16))
            super().__post_init__()

    spec = argv.method_spec("grpo")
    monkeypatch.setattr(
        argv, "method_spec", lambda name: SimpleNamespace(config_cls=Recording, defaults=spec.defaults)
    )
    text = "method: grpo\nnum_generations: 2\nper_device_train_batch_size: 2\nuse_cpu: false\nbf16: true\n"
    _, cfg = parse_config([write(tmp_path, text)], device_free=True)
    assert seen == [(True, False, False)]
    assert (cfg.use_cpu, cfg.bf16, cfg.fp16) == (False, True, False)


def test_parse_configs_options_are_keywords(tmp_path: Path, no_model_loads: None) -> None:
    path = write(tmp_path, CPU + "method: grpo\n")
    assert parse_config(argv=[path])[0].method == "grpo"
    with pytest.raises(TypeError):
        parse_config([path], path)  # a second path would read as `config`, silently replacing the first


def test_values_holding_an_equals_sign_are_kept_whole() -> None:
    from experiments.run.argv import cli_value, split_config_argv

    assert cli_value(["--system_prompt=x=1 is an assignment"], "system_prompt") == "x=1 is an assignment"
    assert split_config_argv(["--config=runs/lr=1e-5.yaml", "--n_train", "5"]) == (
        "runs/lr=1e-5.yaml",
        ["--n_train", "5"],
    )


def test_a_config_class_error_gives_its_first_line() -> None:
    from experiments.run.argv import _one_line

    error = ValueError("max_steps must be positive\nsee the documentation for details")
    assert (
        _one_line(error, ["max_steps"]) == "max_steps: max_steps must be positive"
    )  # put under the key it names
    assert _one_line(ValueError("")) == "ValueError"


def test_run_json_never_holds_a_hub_token(tmp_path: Path, no_model_loads: None) -> None:
    from experiments.run.config import to_dict

    exp, cfg = parse_config([write(tmp_path, CPU + "method: grpo\n")])
    cfg.hub_token = "hf_not_for_the_record"
    out = to_dict(exp, cfg)
    assert "hf_not_for_the_record" not in json.dumps(out) and out["hub_token"] == "<HUB_TOKEN>"


def test_of_several_sampling_keys_the_model_owns_the_first_is_named(
    tmp_path: Path, no_model_loads: None
) -> None:
    args = ["--repetition_penalty", "1.1", "--top_k", "5"]
    with pytest.raises(ConfigError, match="^top_k: model_generation_config takes it"):
        parse_config([write(tmp_path, CPU + "method: grpo\nmodel_generation_config: true\n"), *args])
