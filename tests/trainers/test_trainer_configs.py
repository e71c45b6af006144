"""The trainers' configs at their edges, with no model: every range's closed end accepted and its first value
outside refused, each option's every value, the values a config sets for GRPOTrainer (beta, steps_per_generation,
num_generations) and gives back, PPO's parallelism check, and the METHODS table's own rows.

tests/trainers/test_trainers.py holds one refused value per rule; a rule written with the wrong comparison (`>`
for `>=`) refuses its own closed end, which only an accepted edge shows.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from trl import GRPOConfig, RLOOConfig

from experiments.trainers import (
    GRPO_BETA,
    METHODS,
    PKPOConfig,
    PPOConfig,
    ReinforceConfig,
    build_config,
    config_fields,
    method_hparams,
)
from experiments.trainers.ppo import (
    CRITIC_LR_SCALE,
    ROLLOUT_MINIBATCHES,
    _unsupported_message,
    _unsupported_parallelism,
)
from experiments.trainers.reinforce import BASELINES, LOSS_NORMALIZATIONS

BASE = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "num_generations": 2,
    "per_device_train_batch_size": 2,
}


def _make(cls: type, tmp_path, **kw: Any) -> Any:
    return cls(output_dir=str(tmp_path), **(BASE | kw))


def _refused(cls: type, tmp_path, message: str, **kw: Any) -> str:
    with pytest.raises(ValueError, match=message) as err:
        _make(cls, tmp_path, **kw)
    assert "\n" not in str(err.value)
    return str(err.value)


# ------------------------------------------------------------------------------------------------------ PPO


@pytest.mark.parametrize(
    "key, edge",
    [
        ("gamma", 0.0),
        ("gamma", 1.0),
        ("lam", 0.0),
        ("lam", 1.0),
        ("kl_coef", 0.0),
        ("cliprange_value", 1e-9),
        ("critic_learning_rate", 1e-12),
        ("num_iterations", 1),
        ("critic_warmup_rollouts", 0),
        ("logprob_temperature", 1e-6),
    ],
)
def test_ppo_accepts_each_ranges_closed_end(tmp_path, key: str, edge: float) -> None:
    assert getattr(_make(PPOConfig, tmp_path, **{key: edge}), key) == edge


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("gamma", -1e-9, r"^gamma must be in \[0, 1\]; got -1e-09$"),
        ("gamma", 1.000001, r"^gamma must be in \[0, 1\]; got 1.000001$"),
        ("lam", 1.000001, r"^lam must be in \[0, 1\]; got 1.000001$"),
        ("lam", -1e-9, r"^lam must be in \[0, 1\]; got -1e-09$"),
        ("cliprange_value", 0.0, r"^cliprange_value must be > 0; got 0.0$"),
        ("cliprange_value", -0.1, r"^cliprange_value must be > 0; got -0.1$"),
        ("kl_coef", -1e-9, r"^kl_coef must be >= 0; got -1e-09$"),
        ("critic_learning_rate", 0.0, r"^critic_learning_rate must be > 0; got 0.0$"),
        ("critic_learning_rate", -1e-4, r"^critic_learning_rate must be > 0; got -0.0001$"),
        ("num_iterations", -1, r"^num_iterations must be >= 1; got -1$"),
        ("critic_warmup_rollouts", -1, r"^critic_warmup_rollouts must be >= 0; got -1$"),
        ("logprob_temperature", 0.0, r"^logprob_temperature must be > 0; got 0.0$"),
        ("logprob_temperature", -0.5, r"^logprob_temperature must be > 0; got -0.5$"),
        ("num_iterations", 0, r"^num_iterations must be >= 1; got 0$"),
        ("advantage_normalization", "whitened", r"^advantage_normalization must be .*; got 'whitened'$"),
        ("kl_in", "returns", r"^kl_in must be 'reward' or 'loss'; got 'returns'$"),
    ],
)
def test_ppo_refuses_the_first_value_outside_each_range(tmp_path, key: str, value: Any, message: str) -> None:
    _refused(PPOConfig, tmp_path, message, **{key: value})


@pytest.mark.parametrize("mode", ["whiten", "center", "none"])
def test_ppo_takes_every_advantage_normalization(tmp_path, mode: str) -> None:
    assert _make(PPOConfig, tmp_path, advantage_normalization=mode).advantage_normalization == mode


def test_ppo_refuses_fp16(tmp_path) -> None:
    _refused(PPOConfig, tmp_path, "^PPOTrainer does not support fp16", fp16=True, use_cpu=False)


@pytest.mark.parametrize("kl_coef, beta", [(0.05, 0.0), (0.05, 0.05), (0.0, 0.0), (0.2, 0.2)])
def test_ppo_beta_is_kl_coef_whether_left_at_0_or_given_equal(tmp_path, kl_coef: float, beta: float) -> None:
    """beta only makes GRPOTrainer load the reference model: it ends equal to kl_coef."""
    assert _make(PPOConfig, tmp_path, kl_coef=kl_coef, beta=beta).beta == kl_coef


def test_ppo_refuses_a_beta_of_its_own(tmp_path) -> None:
    _refused(PPOConfig, tmp_path, r"leave beta at 0 \(got 0.1\)$", kl_coef=0.05, beta=0.1)


@pytest.mark.parametrize("ga", [1, 3])
def test_ppo_rollout_is_four_optimizer_steps_unless_the_shape_is_given(tmp_path, ga: int) -> None:
    cfg = _make(PPOConfig, tmp_path, gradient_accumulation_steps=ga)
    assert cfg.steps_per_generation == ROLLOUT_MINIBATCHES * ga == 4 * ga
    assert cfg.generation_batch_size == 2 * 4 * ga
    assert (
        _make(
            PPOConfig, tmp_path, gradient_accumulation_steps=ga, steps_per_generation=1
        ).steps_per_generation
        == 1
    )
    given = _make(PPOConfig, tmp_path, gradient_accumulation_steps=ga, generation_batch_size=6)
    assert (given.generation_batch_size, given.steps_per_generation) == (6, 3)


def test_ppo_takes_one_generation_per_prompt_and_gives_it_back(tmp_path) -> None:
    cfg = _make(PPOConfig, tmp_path, num_generations=1)
    assert cfg.num_generations == 1
    assert _make(PPOConfig, tmp_path, num_generations=1, generation_batch_size=4).num_generations == 1
    assert _make(PPOConfig, tmp_path, num_generations=3, per_device_train_batch_size=3).num_generations == 3


def _left_after_refusal(cls: type, tmp_path, message: str, **kw: Any) -> Any:
    """The config object as its refused constructor left it."""
    cfg = cls.__new__(cls)
    with pytest.raises(ValueError, match=message):
        cfg.__init__(output_dir=str(tmp_path), **(BASE | kw))
    return cfg


@pytest.mark.parametrize("kw", [{"num_generations": 0}, {"num_generations": 4, "generation_batch_size": 6}])
def test_ppo_leaves_grpo_configs_group_checks_to_it_beyond_one_generation(tmp_path, kw) -> None:
    """Only num_generations=1 is PPO's own; GRPOConfig still checks every other value (0 completions, or a
    generation batch that does not hold whole groups). TRL 1.16 refuses 0 with a ZeroDivisionError."""
    with pytest.raises((ValueError, ZeroDivisionError)) as grpo:
        _make(GRPOConfig, tmp_path, **kw)
    with pytest.raises(grpo.type):
        _make(PPOConfig, tmp_path, **kw)


def test_ppo_one_generation_needs_an_even_generation_batch(tmp_path) -> None:
    kw = {"num_generations": 1, "generation_batch_size": 3, "per_device_train_batch_size": 1}
    _refused(PPOConfig, tmp_path, "^with num_generations=1, give an even generation_batch_size$", **kw)
    assert _left_after_refusal(PPOConfig, tmp_path, "even", **kw).num_generations == 1


def test_ppo_gives_back_num_generations_when_grpo_config_refuses(tmp_path) -> None:
    """GRPOConfig's own check fails after PPOConfig stood num_generations=2 in for 1: the value is put back."""
    kw = {"num_generations": 1, "generation_batch_size": 4, "steps_per_generation": 2}
    assert _left_after_refusal(PPOConfig, tmp_path, "can not be both configured", **kw).num_generations == 1


@pytest.mark.parametrize(
    "rollouts, spg, epochs, ga, ok",
    [(1, 2, 1, 2, True), (1, 3, 1, 2, False), (1, 3, 2, 2, True), (2, 3, 1, 2, True), (0, 3, 1, 2, True)],
)
def test_ppo_warmup_must_end_on_an_optimizer_step(tmp_path, rollouts, spg, epochs, ga, ok) -> None:
    kw = {
        "critic_warmup_rollouts": rollouts,
        "steps_per_generation": spg,
        "num_iterations": epochs,
        "gradient_accumulation_steps": ga,
    }
    if ok:
        assert _make(PPOConfig, tmp_path, **kw).critic_warmup_steps == rollouts * spg * epochs // ga
    else:
        message = _refused(PPOConfig, tmp_path, "^critic_warmup_rollouts: 1 rollouts", **kw)
        assert "steps_per_generation 3 x num_iterations 1" in message
        assert message.endswith("gradient_accumulation_steps 2")


def test_ppo_critic_lr_follows_the_policys_by_the_scale(tmp_path) -> None:
    assert CRITIC_LR_SCALE == 10.0  # verl's critic 1e-5 against its actor's 1e-6
    assert _make(PPOConfig, tmp_path, learning_rate=1e-4).critic_lr == pytest.approx(1e-3, rel=1e-12)


def _args(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**({"deepspeed_plugin": None, "fsdp": "", "fsdp_config": None} | kw))


@pytest.mark.parametrize(
    "args, env, unsupported",
    [
        (_args(), {}, None),
        (_args(deepspeed_plugin=SimpleNamespace(zero_stage=2)), {}, "DeepSpeed ZeRO-2"),
        (_args(fsdp="full_shard"), {}, None),  # transformers' default FSDP version is 2
        (_args(fsdp="full_shard", fsdp_config={"version": 2}), {}, None),
        (_args(fsdp="full_shard", fsdp_config={"version": 1}), {}, "FSDP v1"),
        (_args(fsdp="full_shard", fsdp_config={"version": "1"}), {}, "FSDP v1"),
        (_args(), {"ACCELERATE_USE_FSDP": "true"}, "FSDP v1"),  # accelerate launch's default
        (_args(), {"ACCELERATE_USE_FSDP": "1", "FSDP_VERSION": "2"}, None),
        (_args(), {"ACCELERATE_USE_FSDP": "YES", "FSDP_VERSION": "1"}, "FSDP v1"),
        (_args(), {"ACCELERATE_USE_FSDP": "True"}, "FSDP v1"),
        (_args(), {"ACCELERATE_USE_FSDP": "false", "FSDP_VERSION": "1"}, None),
        (_args(), {"ACCELERATE_USE_FSDP": "0"}, None),
        # The config's own FSDP setting wins over the launcher's.
        (_args(fsdp="full_shard", fsdp_config={"version": 2}), {"ACCELERATE_USE_FSDP": "true"}, None),
    ],
)
def test_ppo_names_the_parallelism_it_cannot_run_under(monkeypatch, args, env, unsupported) -> None:
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("FSDP_VERSION", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _unsupported_parallelism(args) == unsupported


def test_ppo_unsupported_message_is_one_line_naming_what_and_the_way_out() -> None:
    message = _unsupported_message("FSDP v1")
    assert message.startswith("PPOTrainer does not support FSDP v1: ") and "\n" not in message
    assert "multi_gpu.yaml" in message and "fsdp2.yaml" in message


# ------------------------------------------------------------------------------------------------ REINFORCE


@pytest.mark.parametrize("baseline", BASELINES)
@pytest.mark.parametrize("loss_normalization", LOSS_NORMALIZATIONS)
def test_reinforce_takes_every_baseline_and_loss_normalization(
    tmp_path, baseline, loss_normalization
) -> None:
    cfg = _make(ReinforceConfig, tmp_path, baseline=baseline, loss_normalization=loss_normalization)
    assert (cfg.baseline, cfg.loss_normalization) == (baseline, loss_normalization)
    assert BASELINES == ("none", "batch_mean", "group_mean", "rloo") and LOSS_NORMALIZATIONS == (
        "sequence",
        "token",
    )


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            {"baseline": "leave_one_out"},
            r"^baseline must be one of 'none', 'batch_mean', 'group_mean', 'rloo'; got ",
        ),
        (
            {"loss_normalization": "tokens"},
            r"^loss_normalization must be one of 'sequence', 'token'; got 'tokens'$",
        ),
        ({"logprob_temperature": -0.5}, r"^logprob_temperature must be > 0; got -0.5$"),
        ({"kl_coef": -1e-9}, r"^kl_coef must be >= 0; got -1e-09$"),
        ({"num_iterations": 0}, r"^REINFORCE is on-policy: num_iterations must be 1; got 0$"),
        ({"num_iterations": 2}, r"^REINFORCE is on-policy: num_iterations must be 1; got 2$"),
        ({"logprob_temperature": 0.0}, r"^logprob_temperature must be > 0; got 0.0$"),
        ({"kl_coef": 0.05, "beta": 0.04}, r"leave beta at 0 \(got beta=0.04\)$"),
    ],
)
def test_reinforce_refuses_each_value_outside_its_rules(tmp_path, kw, message) -> None:
    _refused(ReinforceConfig, tmp_path, message, **kw)


@pytest.mark.parametrize("baseline", ["batch_mean", "group_mean", "rloo"])
def test_reinforce_normalizes_with_any_baseline_but_none(tmp_path, baseline) -> None:
    assert _make(ReinforceConfig, tmp_path, baseline=baseline, normalize_advantages=True).normalize_advantages


def test_reinforce_refuses_to_normalize_without_a_baseline_however_the_name_was_made(tmp_path) -> None:
    """A value read from a file or a command line is a string built at run time, not the literal "none"."""
    read = "".join(["no", "ne"])
    _refused(ReinforceConfig, tmp_path, "needs a baseline", baseline=read, normalize_advantages=True)


@pytest.mark.parametrize(
    "kw",
    [{"kl_coef": 0.0}, {"logprob_temperature": 1e-6}, {"logprob_temperature": None}, {"num_iterations": 1}],
)
def test_reinforce_accepts_each_rules_edge(tmp_path, kw) -> None:
    cfg = _make(ReinforceConfig, tmp_path, **kw)
    assert all(getattr(cfg, k) == v for k, v in kw.items())


@pytest.mark.parametrize("kl_coef, beta", [(0.05, 0.0), (0.05, 0.05), (0.0, 0.0)])
def test_reinforce_beta_is_kl_coef(tmp_path, kl_coef, beta) -> None:
    assert _make(ReinforceConfig, tmp_path, kl_coef=kl_coef, beta=beta).beta == kl_coef


@pytest.mark.parametrize("baseline", ["none", "batch_mean"])
def test_reinforce_without_groups_takes_one_generation_and_gives_it_back(tmp_path, baseline) -> None:
    assert _make(ReinforceConfig, tmp_path, baseline=baseline, num_generations=1).num_generations == 1


@pytest.mark.parametrize("baseline", ["group_mean", "rloo"])
def test_reinforce_with_groups_needs_two_generations(tmp_path, baseline) -> None:
    message = _refused(
        ReinforceConfig,
        tmp_path,
        f"^num_generations: REINFORCE with baseline '{baseline}' compares",
        baseline=baseline,
        num_generations=1,
    )
    assert "got 1 " in message
    assert _make(ReinforceConfig, tmp_path, baseline=baseline, num_generations=2).num_generations == 2


def test_reinforce_gives_back_num_generations_when_grpo_config_refuses(tmp_path) -> None:
    kw = {"num_generations": 1, "generation_batch_size": 4, "steps_per_generation": 2, "baseline": "none"}
    assert (
        _left_after_refusal(ReinforceConfig, tmp_path, "can not be both configured", **kw).num_generations
        == 1
    )


# ------------------------------------------------------------------------------------------------------ PKPO


@pytest.mark.parametrize("k, ok", [(0, False), (1, True), (4, True), (5, False)])
def test_pkpo_k_is_between_1_and_the_group_size(tmp_path, k: int, ok: bool) -> None:
    kw = {"num_generations": 4, "per_device_train_batch_size": 4, "pkpo_k": k}
    if ok:
        assert _make(PKPOConfig, tmp_path, **kw).pkpo_k == k
    else:
        _refused(PKPOConfig, tmp_path, rf"^pkpo_k: .*num_generations \(4\); got {k}$", **kw)


# ------------------------------------------------------------------------------------------------- the table


# The original seven rows' defining values, written out here independently of METHODS (the papers and the seed:
# docs/methods.md); the newer rows are tests/trainers/test_methods_variants.py's.
ORIGINAL_VALUES = {
    "vanilla_pg": (ReinforceConfig, {"baseline": "none", "kl_coef": 0.0, "normalize_advantages": False}),
    "reinforce": (ReinforceConfig, {"baseline": "batch_mean", "kl_coef": 0.0, "normalize_advantages": False}),
    "reinforce_kl": (
        ReinforceConfig,
        {"baseline": "batch_mean", "kl_coef": 0.05, "normalize_advantages": False},
    ),
    "reinforce_rloo": (ReinforceConfig, {"baseline": "rloo", "kl_coef": 0.0, "normalize_advantages": True}),
    "ppo": (PPOConfig, {}),
    "grpo": (GRPOConfig, {"beta": 0.04}),
    "rloo": (RLOOConfig, {}),
}


@pytest.mark.parametrize("method", list(ORIGINAL_VALUES))
def test_each_original_row_is_its_methods_values(method: str) -> None:
    config_cls, defaults = ORIGINAL_VALUES[method]
    spec = METHODS[method]
    assert (spec.config_cls, spec.defaults) == (config_cls, defaults)
    assert GRPO_BETA == 0.04


def test_the_hparams_each_row_reports() -> None:
    reinforce = ("baseline", "normalize_advantages", "kl_coef")
    for method in ("vanilla_pg", "reinforce", "reinforce_kl", "reinforce_rloo"):
        assert METHODS[method].hparams == reinforce
    assert METHODS["ppo"].hparams == (
        "critic_learning_rate",
        "cliprange_value",
        "gamma",
        "lam",
        "advantage_normalization",
        "critic_warmup_rollouts",
        "kl_coef",
        "kl_in",
        "epsilon",
        "num_iterations",
        "entropy_coef",
    )
    assert METHODS["grpo"].hparams == ("beta", "epsilon", "loss_type", "scale_rewards", "num_iterations")
    assert METHODS["rloo"].hparams == ("beta", "epsilon", "normalize_advantages", "num_iterations")
    variants = (
        "beta",
        "epsilon",
        "epsilon_high",
        "loss_type",
        "scale_rewards",
        "importance_sampling_level",
        "mask_truncated_completions",
        "num_iterations",
    )
    for method in ("dr_grpo", "dapo", "gspo", "cispo"):
        assert METHODS[method].hparams == variants
    assert METHODS["pkpo"].hparams == ("pkpo_k", "beta", "epsilon", "loss_type", "num_iterations")


def test_method_hparams_reports_the_critic_lr_in_force_and_the_logprob_temperature(tmp_path) -> None:
    ppo = build_config(
        "ppo", output_dir=str(tmp_path), **(BASE | {"learning_rate": 1e-4, "temperature": 0.7})
    )
    got = method_hparams("ppo", ppo)
    assert got["critic_learning_rate"] == pytest.approx(1e-3, rel=1e-12)
    assert got["logprob_temperature"] == 0.7  # None in the config: the sampling temperature is in force
    assert "loss_normalization" not in got  # PPOConfig has no such option
    assert list(got)[: len(METHODS["ppo"].hparams)] == list(METHODS["ppo"].hparams)
    given = build_config("ppo", output_dir=str(tmp_path), **(BASE | {"critic_learning_rate": 2e-5}))
    assert method_hparams("ppo", given)["critic_learning_rate"] == 2e-5

    rf = build_config(
        "reinforce", output_dir=str(tmp_path), **(BASE | {"logprob_temperature": 1.0, "temperature": 0.6})
    )
    got = method_hparams("reinforce", rf)
    assert got == {
        "baseline": "batch_mean",
        "normalize_advantages": False,
        "kl_coef": 0.0,
        "logprob_temperature": 1.0,
        "loss_normalization": "sequence",
    }
    grpo = build_config("grpo", output_dir=str(tmp_path), **(BASE | {"temperature": 0.9}))
    got = method_hparams("grpo", grpo)
    assert (
        got["logprob_temperature"] == 0.9 and "loss_normalization" not in got
    )  # GRPOConfig has neither option


def test_build_config_overrides_win_over_the_rows_values(tmp_path) -> None:
    cfg = build_config("reinforce_kl", output_dir=str(tmp_path), **(BASE | {"kl_coef": 0.2}))
    assert (cfg.kl_coef, cfg.baseline) == (0.2, "batch_mean")
    with pytest.raises(ValueError, match=r"^unknown config key\(s\) for ppo \(PPOConfig\): a_key, b_key$"):
        build_config("ppo", output_dir=str(tmp_path), b_key=1, a_key=2)
    with pytest.raises(ValueError, match=r"^unknown method 'x'; known: vanilla_pg, reinforce, "):
        build_config("x")


def test_a_scripted_cpu_run_is_fp32_on_the_cpu_and_writes_nothing_but_its_results() -> None:
    from experiments.trainers import CPU_ARGS

    assert CPU_ARGS == {
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
    }


def test_a_methods_row_cannot_be_changed_in_place() -> None:
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS["grpo"].defaults = {}


def test_config_fields_are_the_constructor_keywords() -> None:
    fields = config_fields(PPOConfig)
    assert {"gamma", "lam", "kl_coef", "output_dir", "beta"} <= fields
    assert config_fields(PKPOConfig) - config_fields(GRPOConfig) == {"pkpo_k"}


# The defaults each config's docstring gives, written out here (a changed default changes every run that leaves
# the value out).
DOCUMENTED_DEFAULTS = {
    PPOConfig: {
        "critic_model_name_or_path": None,
        "critic_learning_rate": None,
        "cliprange_value": 0.5,
        "gamma": 1.0,
        "lam": 1.0,
        "advantage_normalization": "whiten",
        "critic_warmup_rollouts": 0,
        "kl_coef": 0.0,
        "kl_in": "reward",
        "num_iterations": 1,
        "logprob_temperature": None,
        "beta": 0.0,  # set to kl_coef
    },
    ReinforceConfig: {
        "baseline": "batch_mean",
        "normalize_advantages": False,
        "loss_normalization": "sequence",
        "logprob_temperature": None,
        "kl_coef": 0.0,
        "beta": 0.0,
        "num_iterations": 1,
    },
    PKPOConfig: {"pkpo_k": 2},
}


@pytest.mark.parametrize("config_cls", list(DOCUMENTED_DEFAULTS))
def test_each_config_defaults_to_its_documented_values(tmp_path, config_cls) -> None:
    cfg = _make(config_cls, tmp_path)
    assert {key: getattr(cfg, key) for key in DOCUMENTED_DEFAULTS[config_cls]} == DOCUMENTED_DEFAULTS[
        config_cls
    ]


def test_ppo_has_no_value_loss_weight(tmp_path) -> None:
    """The critic has its own AdamW, which does not see a loss's scale: a vf_coef would be inert, so it is gone."""
    with pytest.raises(TypeError, match="vf_coef"):
        _make(PPOConfig, tmp_path, vf_coef=0.1)
