"""benchmarks/gpu_check.py and the GPU throughput config it runs (experiments/configs/throughput.yaml).

The check itself needs a GPU; here its `--cpu --tiny` smoke path runs end to end (GRPO and PPO, so the ratio
and verdict code runs too), its verdicts are checked on made-up numbers, and the throughput config is parsed for
every method.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"
THROUGHPUT = REPO / "experiments" / "configs" / "throughput.yaml"


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verdicts_compare_each_method_with_grpo() -> None:
    gpu_check = _gpu_check()
    results = {
        "methods": {
            "grpo": {"step_time_s": 2.0, "generation_tokens_per_s": 12_000.0, "peak_gpu_memory_gib": 60.0},
            "ppo": {"step_time_s": 3.0, "generation_tokens_per_s": 11_000.0, "peak_gpu_memory_gib": 85.0},
            "reinforce": {
                "step_time_s": 2.2,
                "generation_tokens_per_s": 9_000.0,
                "peak_gpu_memory_gib": 60.0,
            },
            "rloo": {"error": "RuntimeError: boom"},
        }
    }
    gpu_check.add_ratios(results)
    ppo = results["methods"]["ppo"]
    assert ppo["step_time_vs_grpo"] == pytest.approx(1.5) and ppo["peak_memory_vs_grpo"] == pytest.approx(
        85 / 60
    )
    lines = gpu_check.verdicts(results, full_scale=True)
    assert "ppo step time 1.50x GRPO (target <= 1.3x): MISSED" in lines
    assert "reinforce step time 1.10x GRPO (target <= 1.3x): met" in lines
    assert "ppo peak memory 1.42x GRPO (target <= 1.5x): met" in lines
    assert "reinforce generation 9,000 tok/s (target >= 10,000): MISSED" in lines
    assert not any(line.startswith("rloo") for line in lines)
    assert not any("generation" in line for line in gpu_check.verdicts(results, full_scale=False))


@pytest.mark.parametrize(
    "method", ["vanilla_pg", "reinforce", "reinforce_kl", "reinforce_rloo", "ppo", "grpo", "rloo"]
)
def test_throughput_config_fills_one_generate_per_sixteen_steps(method: str) -> None:
    """Any method (--method) reads it; one generate samples 512 completions, the optimizer steps every 32."""
    from experiments.run.argv import parse_config

    raw = yaml.safe_load(THROUGHPUT.read_text())
    assert "method" not in raw and raw["bf16"] is True
    exp, cfg = parse_config([str(THROUGHPUT), "--method", method, "--use_cpu", "true", "--bf16", "false"])
    assert exp.method == method
    assert (cfg.per_device_train_batch_size, cfg.steps_per_generation, cfg.generation_batch_size) == (
        32,
        16,
        512,
    )
    assert cfg.gradient_accumulation_steps == 1 and cfg.max_completion_length == 128
    assert (cfg.learning_rate, cfg.temperature, cfg.top_p) == (1e-6, 0.8, 0.9)  # the seed's


@pytest.mark.slow
def test_gpu_check_smoke_on_cpu(tmp_path: Path, passk_cache: Path) -> None:
    """The --cpu --tiny path: GRPO then PPO, one generation cycle each, numbers and ratios printed and written."""
    env = dict(os.environ, PASSK_CACHE=str(passk_cache), OUT=str(tmp_path))
    cmd = [sys.executable, str(SCRIPT), "--cpu", "--tiny", "--methods", "ppo,grpo"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert list(result["methods"]) == ["grpo", "ppo"]  # the baseline first
    grpo, ppo = result["methods"]["grpo"], result["methods"]["ppo"]
    assert len(grpo["step_times_s"]) == 2 and len(ppo["step_times_s"]) == 2  # a cycle: spg 2, one PPO epoch
    for row in (grpo, ppo):
        assert row["step_time_s"] > 0 and row["generation_tokens_per_s"] > 0 and row["generation_tokens"] > 0
    assert ppo["step_time_vs_grpo"] == pytest.approx(ppo["step_time_s"] / grpo["step_time_s"])
    assert any(v.startswith("ppo step time") for v in result["verdicts"])
    assert result["sandbox_after_cuda"]["passed"] == result["sandbox_after_cuda"]["programs"]
    assert "ppo: step" in proc.stdout and "results:" in proc.stdout
