"""The budget counts what the model sees: every method of a comparison samples the same prompts and completions.

The seven methods run on one budget file (cpu.yaml, the tiny model, the learnable task's prompts) for a few steps,
each through the real runner, with a reward that varies so that every method really updates. What each trainer
sampled is read back from what it recorded (`sampled_prompts.jsonl`, written by experiments.run.budget.SampleLog from
the trainer's reward seam) and checked against TRL's own logged completion lengths; PPO, with two epochs per
generation batch, must sample the same prompts in twice the optimizer steps. The arithmetic of the plan and of
the seed's prompt schedule is checked on its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.run.budget import BudgetError, derive_max_steps, prompt_schedule
from experiments.trainers import ORIGINAL_METHODS
from experiments.trainers.ppo import CRITIC_LR_SCALE

REPO = Path(__file__).resolve().parents[2]
BUDGET_PROMPTS = (
    8  # 4 generation batches of 2 prompts x 2 completions; one PPO rollout (4 steps of 2 prompts)
)


def varied_reward(completions, **kwargs) -> list[float]:
    """A reward that varies within groups (a random tiny model passes no unit test)."""
    return [(len(c) % 7) / 6.0 for c in completions]


def _argv(method: str, model: str, out: Path, *extra: str) -> list[str]:
    return [
        str(REPO / "experiments" / "configs" / "cpu.yaml"),
        "--method",
        method,
        "--model",
        model,
        "--dataset",
        "learnable",
        "--n_train",
        "16",
        "--n_eval",
        "0",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--max_completion_length",
        "8",
        "--learning_rate",
        "1e-3",
        "--budget_prompts",
        str(BUDGET_PROMPTS),
        "--reward_funcs",
        f"{Path(__file__).resolve()}:varied_reward",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(out),
        *extra,
    ]


def _read(run_dir: Path) -> dict:
    lines = (run_dir / "sampled_prompts.jsonl").read_text().splitlines()
    return {
        "generations": [json.loads(line) for line in lines],
        "run": json.loads((run_dir / "run.json").read_text()),
        "history": json.loads((run_dir / "trainer_state.json").read_text())["log_history"],
    }


@pytest.fixture(scope="module")
def seven_runs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, dict]:
    from experiments.run.argv import parse_config
    from experiments.run.train import run

    root = tmp_path_factory.mktemp("budget")
    runs = {}
    for method in ORIGINAL_METHODS:  # the later rows: tests/trainers/test_methods_variants.py
        run(*parse_config(_argv(method, str(tiny_model_dir), root / method)))
        runs[method] = _read(root / method)
    return runs


@pytest.mark.slow
def test_every_method_samples_the_same_prompts_and_completions(seven_runs: dict[str, dict]) -> None:
    reference = seven_runs["grpo"]["generations"]
    prompts = [p for g in reference for p in g["prompts"]]
    assert len(prompts) == BUDGET_PROMPTS and len(set(prompts)) > 1
    assert [g["completions"] for g in reference] == [4, 4, 4, 4]  # one step's 2 prompts x 2 per batch
    for method, got in seven_runs.items():
        generations = got["generations"]
        assert [p for g in generations for p in g["prompts"]] == prompts, method
        # PPO: one rollout of all 8 prompts (4 minibatches, one epoch): the same samples and steps.
        batches, steps = ([16], 4) if method == "ppo" else ([4, 4, 4, 4], 4)
        assert [g["completions"] for g in generations] == batches, method
        budget = got["run"]["budget"]
        assert budget["fresh_prompts"] == BUDGET_PROMPTS and budget["fresh_completions"] == 2 * BUDGET_PROMPTS
        assert budget["optimizer_steps"] == got["run"]["global_step"] == steps, method
        assert [g["step"] for g in generations] == list(range(0, steps, steps // len(batches))), method
        assert (
            budget["prompt_sequence_sha256"] == seven_runs["grpo"]["run"]["budget"]["prompt_sequence_sha256"]
        )


@pytest.mark.slow
def test_tokens_generated_agree_with_trls_logged_lengths(seven_runs: dict[str, dict]) -> None:
    for method, got in seven_runs.items():
        logged = [h["completions/mean_length"] for h in got["history"] if "completions/mean_length" in h]
        generations = got["generations"]
        assert len(logged) == len(generations) == (1 if method == "ppo" else 4), method  # one per generation
        counted = got["run"]["budget"]["tokens_generated"]
        assert counted == sum(g["tokens"] for g in generations) > 0
        assert counted == pytest.approx(sum(g["completions"] * n for g, n in zip(generations, logged))), (
            method
        )


@pytest.mark.slow
def test_run_json_carries_each_methods_hyperparameters(seven_runs: dict[str, dict]) -> None:
    hparams = {m: got["run"]["method_hparams"] for m, got in seven_runs.items()}
    assert hparams["ppo"]["lam"] == 1.0 and hparams["ppo"]["num_iterations"] == 1
    assert hparams["ppo"]["critic_learning_rate"] == pytest.approx(CRITIC_LR_SCALE * 1e-3)
    assert hparams["grpo"]["beta"] == 0.04 and hparams["rloo"]["beta"] == 0.05
    assert hparams["reinforce"]["baseline"] == "batch_mean" and hparams["reinforce_kl"]["kl_coef"] == 0.05
    assert all(
        h["logprob_temperature"] == 0.8 for h in hparams.values()
    )  # cpu.yaml sets no log-prob temperature
    assert len({json.dumps(h, sort_keys=True) for h in hparams.values()}) == len(ORIGINAL_METHODS)


@pytest.mark.slow
def test_the_seven_rows_take_different_steps(seven_runs: dict[str, dict], tiny_model_dir: Path) -> None:
    """Same samples at step one, different updates: no two rows end with the same weights, as reinforce_kl and
    TRL's RLOO did when reinforce_kl used the group mean (an exact coincidence stays below 1e-3 of the step, see
    test_trainers). Rows that differ only by a KL term or a per-group scale (reinforce / reinforce_kl, reinforce_rloo
    / grpo) take nearly the same first step, since the KL is zero at the reference and Adam's first step ignores a
    common scale, and drift apart from there: on the family split's prompts reinforce_rloo / grpo end 0.65% apart
    after 3 steps, the closest pair. The bound sits 3x above the coincidence floor."""
    import torch
    from safetensors.torch import load_file

    start = load_file(str(tiny_model_dir / "model.safetensors"))
    final = {
        m: load_file(str(Path(got["run"]["output_dir"]) / "model.safetensors"))
        for m, got in seven_runs.items()
    }

    def flat(weights: dict) -> torch.Tensor:
        return torch.cat([weights[k].flatten().float() for k in sorted(start)])

    moved = {m: flat(w) - flat(start) for m, w in final.items()}
    for m, delta in moved.items():
        assert delta.norm() > 0, m
    names = list(moved)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            gap = (moved[a] - moved[b]).norm() / max(moved[a].norm(), moved[b].norm())
            assert gap > 3e-3, (a, b, gap.item())


@pytest.mark.slow
def test_the_seed_schedule_is_what_every_method_samples(tmp_path: Path, tiny_model_dir: Path) -> None:
    """prompts_per_epoch lays out the seed's epochs of random draws; PPO and GRPO both walk them in order."""
    from experiments.learnable.tasks import train_rows
    from experiments.run.argv import parse_config
    from experiments.run.train import run

    rows = train_rows(16, seed=0)
    order = prompt_schedule(16, 4, BUDGET_PROMPTS, seed=42)
    expected = [rows[i]["task_id"] for i in order]
    for method in ("grpo", "ppo"):
        exp, cfg = parse_config(
            _argv(method, str(tiny_model_dir), tmp_path / method, "--prompts_per_epoch", "4")
        )
        assert cfg.shuffle_dataset is False and cfg.seed == 42
        run(exp, cfg)
        got = [p for g in _read(tmp_path / method)["generations"] for p in g["prompts"]]
        assert got == expected, method


# -------------------------------------------------------------------------------------------------- planning


def _shape(**kwargs) -> SimpleNamespace:
    base = {
        "num_generations": 2,
        "generation_batch_size": 2,
        "steps_per_generation": 1,
        "num_iterations": 1,
        "gradient_accumulation_steps": 1,
    }
    return SimpleNamespace(**(base | kwargs))


def test_max_steps_give_every_method_the_same_fresh_prompts() -> None:
    assert derive_max_steps(60, _shape()) == 60  # the seed: one prompt x 2 completions per update
    assert derive_max_steps(60, _shape(num_iterations=2)) == 120  # PPO: two epochs per batch
    assert derive_max_steps(320, _shape(num_generations=8, generation_batch_size=64)) == 40  # the demo
    # 8 prompts per generation batch, split into 4 micro-batches, 2 micro-batches per optimizer step.
    shape = _shape(generation_batch_size=16, steps_per_generation=4, gradient_accumulation_steps=2)
    assert derive_max_steps(16, shape) == 4


@pytest.mark.parametrize(
    "budget, shape, key",
    [
        (5, _shape(generation_batch_size=4), "budget_prompts"),  # 2 prompts per batch
        (1, _shape(gradient_accumulation_steps=2), "gradient_accumulation_steps"),  # half an optimizer step
    ],
)
def test_budgets_that_cannot_be_met_exactly_name_the_key(
    budget: int, shape: SimpleNamespace, key: str
) -> None:
    with pytest.raises(BudgetError, match=rf"^{key}:") as err:
        derive_max_steps(budget, shape)
    assert "\n" not in str(err.value)


def test_prompt_schedule_draws_fresh_epochs_like_the_seed() -> None:
    order = prompt_schedule(50, 20, 60, seed=0)
    epochs = [order[i : i + 20] for i in range(0, 60, 20)]
    assert len(order) == 60 and all(len(set(e)) == 20 for e in epochs)  # without replacement within an epoch
    assert all(0 <= i < 50 for i in order)
    assert epochs[0] != epochs[1] != epochs[2]  # a fresh draw each epoch
    assert prompt_schedule(50, 20, 60, seed=0) == order != prompt_schedule(50, 20, 60, seed=1)
    assert prompt_schedule(50, 20, 50, seed=0) == order[:50]  # a last epoch cut short
    with pytest.raises(BudgetError, match="^prompts_per_epoch:"):
        prompt_schedule(10, 20, 60, seed=0)


# ------------------------------------------------------------------------------------------ model sampling


@pytest.fixture(scope="module")
def model_with_sampling_defaults(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """The tiny model with a generation_config that sets top_k and a repetition penalty, as Qwen2.5's does."""
    import shutil

    from transformers import GenerationConfig

    folder = tmp_path_factory.mktemp("model") / "tiny-with-generation-config"
    shutil.copytree(tiny_model_dir, folder)
    config = (
        GenerationConfig.from_pretrained(folder) if (folder / "generation_config.json").is_file() else None
    )
    config = config or GenerationConfig()
    config.do_sample, config.top_k, config.repetition_penalty = True, 20, 1.1
    config.save_pretrained(folder)
    return folder


def test_model_sampling_reads_the_models_generation_config(
    model_with_sampling_defaults: Path, tiny_model_dir: Path
):
    from experiments.inputs.models import model_sampling

    read = model_sampling(str(model_with_sampling_defaults))
    assert (read["top_k"], read["repetition_penalty"], read["min_p"]) == (20, 1.1, None)
    assert read["source"]["top_k"] == "model generation_config"
    plain = model_sampling(str(tiny_model_dir))  # sets neither: what model.generate falls back to
    assert (plain["top_k"], plain["repetition_penalty"]) == (50, 1.0)
    assert plain["source"]["top_k"] == "transformers generate default"


@pytest.mark.slow
def test_the_models_sampling_is_applied_in_training_and_evaluation(
    tmp_path: Path, model_with_sampling_defaults: Path
):
    """model_generation_config: the trainer samples with the model's top_k and repetition penalty, evaluation too,
    run.json records them; under the penalty the KL's log π comes from a forward pass, not the sampling record."""
    from experiments.run.argv import parse_config
    from experiments.run.train import run

    out = tmp_path / "run"
    argv = _argv(
        "reinforce_kl",
        str(model_with_sampling_defaults),
        out,
        "--model_generation_config",
        "true",
        "--budget_prompts",
        "2",
        "--n_eval",
        "2",
        "--eval_n",
        "2",
        "--eval_ks",
        "1",
    )
    exp, cfg = parse_config(argv)
    run(exp, cfg)
    record = json.loads((out / "run.json").read_text())
    sampling = record["sampling"]
    assert sampling["from_model_generation_config"] and (
        sampling["top_k"],
        sampling["repetition_penalty"],
    ) == (20, 1.1)
    assert sampling["eval"] == {"top_k": 20, "repetition_penalty": 1.1}
    assert record["config"]["top_k"] == 20 and record["config"]["repetition_penalty"] == 1.1
    after = json.loads((out / "eval_after.json").read_text())
    assert after["settings"]["generation_kwargs"] == {"top_k": 20, "repetition_penalty": 1.1}
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [h["reinforce/kl_logps_recorded"] for h in history if "reinforce/kl_logps_recorded" in h] == [0.0]


def test_derive_max_steps_on_each_methods_own_config(tmp_path: Path) -> None:
    """The budget on the configs the methods really build (4 completions per device, groups of 2 where the
    method needs a group): PPO's rollout holds steps_per_generation (4) optimizer steps' worth for one epoch."""
    from experiments.trainers import ORIGINAL_METHODS, build_config

    one_per_prompt = {"vanilla_pg", "reinforce", "reinforce_kl", "ppo"}
    expected = {
        "vanilla_pg": 8,
        "reinforce": 8,
        "reinforce_kl": 8,
        "reinforce_rloo": 16,
        "ppo": 8,
        "grpo": 16,
    }
    expected["rloo"] = 16
    for method in ORIGINAL_METHODS:
        cfg = build_config(
            method,
            output_dir=str(tmp_path),
            per_device_train_batch_size=4,
            num_generations=1 if method in one_per_prompt else 2,
            use_cpu=True,
            report_to=[],
        )
        assert derive_max_steps(32, cfg) == expected[method], method
        if method == "ppo":  # 16 prompts per rollout: 8 is not a whole rollout, 16 is one
            assert (cfg.generation_batch_size, cfg.steps_per_generation, cfg.num_iterations) == (16, 4, 1)
            assert derive_max_steps(16, cfg) == 4
            with pytest.raises(BudgetError, match=r"^budget_prompts: 8 is not a multiple of the 16 prompt"):
                derive_max_steps(8, cfg)
