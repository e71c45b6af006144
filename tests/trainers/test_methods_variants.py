"""The GRPO variant rows (dr_grpo, dapo, gspo, cispo) and pkpo: each resolves to its paper's values, differs from
the `grpo` row only in them, takes the same budget as every method on the shared budget files, and DAPO's
overlong filtering really masks truncated completions out of the loss. Their two-step runs are
tests/trainers/test_trainers.py's `test_each_method_trains_two_steps` (parametrised over METHODS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experiments.trainers import METHODS, ORIGINAL_METHODS, build_config, method_hparams

# The papers' values, written out here independently of METHODS (a wrong value in a row fails its case).
PAPER_VALUES = {
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0},  # arXiv:2503.20783
    "dapo": {  # arXiv:2503.14476: clip-higher, token-level loss, overlong filtering, no KL
        "loss_type": "dapo",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "mask_truncated_completions": True,
        "beta": 0.0,
    },
    "gspo": {  # arXiv:2507.18071 (v2) section 5.1
        "importance_sampling_level": "sequence",
        "loss_type": "grpo",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "beta": 0.0,
    },
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0, "beta": 0.0},  # arXiv:2506.13585, TRL's epsilon_high
    "pkpo": {"pkpo_k": 2, "beta": 0.04},  # arXiv:2505.15201 on the grpo row
}
PAPERS = {
    "dr_grpo": "2503.20783",
    "dapo": "2503.14476",
    "gspo": "2507.18071",
    "cispo": "2506.13585",
    "pkpo": "2505.15201",
}
CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "configs"
BASE = {"use_cpu": True, "bf16": False, "num_generations": 2, "per_device_train_batch_size": 2}


def test_the_new_rows_follow_the_original_seven() -> None:
    assert [m for m in METHODS if m not in ORIGINAL_METHODS] == list(PAPER_VALUES)


@pytest.mark.parametrize("method", list(PAPER_VALUES))
def test_each_row_resolves_to_its_papers_values(method: str, tmp_path: Path) -> None:
    cfg = build_config(method, output_dir=str(tmp_path), **BASE)
    for key, value in PAPER_VALUES[method].items():
        assert getattr(cfg, key) == value, (method, key)
    assert PAPERS[method] in METHODS[method].paper
    reported = method_hparams(method, cfg)  # run.json's method_hparams
    assert {k: reported[k] for k in PAPER_VALUES[method]} == PAPER_VALUES[method]


@pytest.mark.parametrize("method", list(PAPER_VALUES))
def test_each_row_differs_from_grpo_only_in_its_papers_values(method: str, tmp_path: Path) -> None:
    """Every GRPOConfig value the row does not name is the `grpo` row's; pkpo keeps all of them (only its
    advantages differ, by pkpo_k)."""
    import dataclasses

    from trl import GRPOConfig

    grpo = build_config("grpo", output_dir=str(tmp_path), **BASE)
    cfg = build_config(method, output_dir=str(tmp_path), **BASE)
    differ = {f.name for f in dataclasses.fields(GRPOConfig) if getattr(cfg, f.name) != getattr(grpo, f.name)}
    if method == "pkpo":
        assert differ == set() and cfg.pkpo_k == 2
    else:
        assert differ and differ <= set(PAPER_VALUES[method]), (method, sorted(differ))


@pytest.mark.parametrize("budget", ["cpu", "demo", "seed", "smollm2", "smollm2_learnable", "throughput"])
def test_the_new_rows_take_grpos_budget_on_each_shared_file(budget: str) -> None:
    """The same generation shape and optimizer steps as `grpo` (budget_prompts -> max_steps, experiments.run.budget)."""
    from experiments.run.argv import parse_config
    from experiments.run.budget import generation_shape

    path = str(CONFIGS / f"{budget}.yaml")
    _, grpo = parse_config([path, "--method", "grpo"], device_free=True)
    for method in PAPER_VALUES:
        exp, cfg = parse_config([path, "--method", method], device_free=True)
        assert generation_shape(cfg) == generation_shape(grpo) and cfg.max_steps == grpo.max_steps, (
            budget,
            method,
        )
        for key, value in PAPER_VALUES[method].items():
            assert getattr(cfg, key) == value, (budget, method, key)


def test_dapo_masks_truncated_completions_out_of_the_loss(
    tiny_model_dir: Path, tmp_path: Path, tiny_train_args
) -> None:
    """Overlong filtering: with every completion cut at max_completion_length the loss is 0 and the policy stays;
    with an EOS forced at the last position none is truncated and the policy moves."""
    from transformers import AutoTokenizer

    from experiments.learnable.tasks import train_rows

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def run(name: str, **overrides) -> tuple[bool, list[dict]]:
        args = build_config(
            "dapo",
            output_dir=str(tmp_path / name),
            **(tiny_train_args | {"max_steps": 1} | overrides),
        )
        trainer = METHODS["dapo"].trainer_cls(
            model=str(tiny_model_dir),
            reward_funcs=[lambda completions, **kw: [(len(c) % 7) / 6.0 for c in completions]],
            args=args,
            train_dataset=train_rows(16),
            processing_class=tokenizer,
        )
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        trainer.train()
        moved = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
        return moved, [h for h in trainer.state.log_history if "loss" in h]

    moved, logs = run("truncated")
    assert logs[0]["completions/clipped_ratio"] == 1.0 and logs[0]["loss"] == 0.0 and not moved
    moved, logs = run("ended", generation_kwargs={"forced_eos_token_id": tokenizer.eos_token_id})
    assert logs[0]["completions/clipped_ratio"] == 0.0 and moved


def varied_reward(completions, **kwargs) -> list[float]:
    """A reward that varies within groups (a random tiny model passes no unit test)."""
    return [(len(c) % 7) / 6.0 for c in completions]


@pytest.mark.slow
def test_the_new_rows_sample_grpos_prompts_through_the_runner(tiny_model_dir: Path, tmp_path: Path) -> None:
    """tests/run/test_budget.py's check for the original seven, for the later rows: on cpu.yaml, the runner's
    sampled_prompts.jsonl and run.json's budget equal grpo's (the same prompts, completions and steps)."""
    import json

    from experiments.run.argv import parse_config
    from experiments.run.train import run

    def sampled(method: str) -> tuple[list, dict]:
        out = tmp_path / method
        run(
            *parse_config(
                [
                    str(CONFIGS / "cpu.yaml"),
                    "--method",
                    method,
                    "--model",
                    str(tiny_model_dir),
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
                    "8",
                    "--reward_funcs",
                    f"{Path(__file__).resolve()}:varied_reward",
                    "--save_strategy",
                    "no",
                    "--save_model",
                    "false",
                    "--report_to",
                    "none",
                    "--disable_tqdm",
                    "true",
                    "--output_dir",
                    str(out),
                ]
            )
        )
        lines = (out / "sampled_prompts.jsonl").read_text().splitlines()
        record = json.loads((out / "run.json").read_text())
        return [json.loads(line)["prompts"] for line in lines], record

    grpo_prompts, grpo_run = sampled("grpo")
    assert len(grpo_prompts) == 4 and sum(map(len, grpo_prompts)) == 8
    keys = ("fresh_prompts", "fresh_completions", "optimizer_steps", "prompt_sequence_sha256")
    for method in PAPER_VALUES:
        prompts, record = sampled(method)
        assert prompts == grpo_prompts, method
        assert {k: record["budget"][k] for k in keys} == {k: grpo_run["budget"][k] for k in keys}, method
        assert {k: record["method_hparams"][k] for k in PAPER_VALUES[method]} == PAPER_VALUES[method]
