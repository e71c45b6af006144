"""The model card TRL writes into a run folder (README.md) names the model the run started from, as passk names it,
and never links to huggingface.co/None (TRL's template, when the trained model was loaded from a local folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.run.config import config_path
from experiments.run.model_card import base_model_words, passk_card_text


def test_a_real_runs_card_names_passks_model_and_loads_the_run_folder(
    passk_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from experiments.run.train import main

    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))  # `tiny` is the session's cached tiny model
    out = tmp_path / "run"
    argv = [str(config_path("cpu")), "--method", "reinforce", "--model", "tiny", "--budget_prompts", "0"]
    argv += ["--max_steps", "1", "--save_steps", "1", "--eval_before", "false", "--eval_after", "false"]
    argv += ["--report_to", "none", "--output_dir", str(out)]
    assert main(argv) == 0
    card = (out / "README.md").read_text()
    assert "None" not in card, card
    assert (
        "This model is a fine-tuned version of passk's `tiny` model (a randomly initialised Qwen2).\n" in card
    )
    assert f'pipeline("text-generation", model="{out}", device_map="auto")' in card


def test_the_card_names_every_kind_of_model_and_links_only_hub_ids(tmp_path: Path) -> None:
    hub = "https://huggingface.co/"
    assert base_model_words("qwen2.5-coder-0.5b") == (
        "passk's `qwen2.5-coder-0.5b`, Qwen2.5-Coder-0.5B-Instruct (AWQ, re-quantized to Q4_K_M GGUF) of "
        f"[Qwen/Qwen2.5-Coder-0.5B-Instruct]({hub}Qwen/Qwen2.5-Coder-0.5B-Instruct)"
    )
    assert f"of [HuggingFaceTB/SmolLM2-135M-Instruct]({hub}HuggingFaceTB/SmolLM2-135M-Instruct)" in (
        base_model_words("smollm2")
    )
    assert base_model_words("Qwen/Qwen2.5-Coder-1.5B-Instruct") == (
        f"[Qwen/Qwen2.5-Coder-1.5B-Instruct]({hub}Qwen/Qwen2.5-Coder-1.5B-Instruct)"
    )
    (tmp_path / "m").mkdir()
    assert base_model_words(str(tmp_path / "m")) == f"the local model `{tmp_path / 'm'}`"
    assert base_model_words("task", 95) == (
        "passk's `task` model (the learnable task's randomly initialised Qwen2), after 95 steps of passk's "
        "supervised warm start"
    )
    trl = (
        "# Model Card for run\n\nThis model is a fine-tuned version of [None](https://huggingface.co/None).\n"
        'generator = pipeline("text-generation", model="None", device_map="auto")\n'
    )
    assert passk_card_text(trl, "passk's `tiny` model", "runs/x") == (
        "# Model Card for run\n\nThis model is a fine-tuned version of passk's `tiny` model.\n"
        'generator = pipeline("text-generation", model="runs/x", device_map="auto")\n'
    )
    # With a hub_model_id, TRL's quick start already names it.
    assert 'model="None"' in passk_card_text(trl, "x", None)
