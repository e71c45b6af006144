"""The `passk` command line: help, --check, compare's budget guard, an end-to-end `passk train`, LoRA + eval."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "experiments" / "configs"


def _env(passk_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PASSK_CACHE"] = str(passk_cache)  # never the user's ~/.cache/passk
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def test_help_lists_the_subcommands() -> None:
    exe = shutil.which("passk")
    cmd = [exe] if exe else [sys.executable, "-m", "experiments.cli"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("train", "eval", "compare", "demo"):
        assert f"passk {name}" in out.stdout and name in out.stdout.split("positional arguments")[1]


def test_unknown_subcommand_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.cli import main

    assert main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_check_prints_the_resolved_config_and_loads_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.cli import main

    assert main(["train", "grpo_cpu", "--check", "--learning_rate", "2e-6"]) == 0
    out = capsys.readouterr().out
    resolved = yaml.safe_load(out)
    assert resolved["method"] == "grpo" and resolved["learning_rate"] == pytest.approx(2e-6)
    assert "nothing was loaded" in out


def test_compare_refuses_different_budgets_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments import cli

    other = yaml.safe_load((CONFIGS / "ppo_cpu.yaml").read_text())
    other["max_steps"] = 99
    (tmp_path / "ppo_long.yaml").write_text(yaml.safe_dump(other))

    def no_run(*args, **kwargs):
        raise AssertionError("a run started")

    monkeypatch.setattr(cli.subprocess, "call", no_run)
    rc = cli.main(
        ["compare", str(CONFIGS / "grpo_cpu.yaml"), str(tmp_path / "ppo_long.yaml"), "--out", str(tmp_path)]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "max_steps" in err and err.strip().count("\n") == 0


@pytest.mark.slow
def test_passk_train_end_to_end(tmp_path: Path, passk_cache: Path, tiny_model_dir: Path) -> None:
    """`passk train` on a shipped cpu config, 2 steps, in a fresh process: every file of the run layout."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "experiments.cli", "train", "grpo_cpu", "--model", str(tiny_model_dir),
        "--max_steps", "2", "--n_eval", "4", "--save_steps", "1", "--output_dir", str(out),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(passk_cache), timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"run written to {out}" in proc.stdout

    for name in ("eval_before.json", "eval_after.json"):
        ev = json.loads((out / name).read_text())
        assert ev["num_problems"] == 4 and set(ev["metrics"]) >= {"pass@1", "pass@2", "greedy_pass@1"}
    run = json.loads((out / "run.json").read_text())
    assert run["method"] == "grpo" and run["seed"] == 42 and run["global_step"] == 2
    assert run["wall_time_s"] > 0 and run["tokens_per_s"] > 0 and run["config"]["max_steps"] == 2
    assert run["device"] == "cpu" and run["torch_threads"] == 1
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [h["step"] for h in history if "reward" in h] == [1, 2]
    assert (out / "checkpoint-2").is_dir() and (out / "model.safetensors").is_file()
    assert list((out / "runs").rglob("events.out.tfevents.*")), "no TensorBoard log"

    from experiments.report import write_report

    report = write_report([out], tmp_path / "report")
    assert Path(report).is_file()


@pytest.mark.slow
def test_lora_flag_trains_an_adapter_that_passk_eval_loads(
    tmp_path: Path, passk_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file

    from experiments.cli import main
    from experiments.tasks import task_model_path
    from experiments.train import warm_started_model

    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))
    model = warm_started_model(str(task_model_path(cache_dir=passk_cache)), 80, cache_dir=passk_cache)
    out = tmp_path / "lora"
    common = ["--n_eval", "8", "--eval_n", "2", "--eval_ks", "1", "2", "--eval_every_n_steps", "0"]
    argv = [
        "train", "reinforce_demo", "--model", model, "--warm_start_steps", "0", "--max_steps", "2",
        "--per_device_train_batch_size", "16", "--num_generations", "4", "--n_train", "32",
        "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--learning_rate", "1e-2",
        "--report_to", "none", "--output_dir", str(out), *common,
    ]  # fmt: skip
    assert main(argv) == 0
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8
    assert not (out / "model.safetensors").exists()  # only the adapter is saved
    weights = load_file(str(out / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # B starts at zero: the adapter was trained
    assert (out / "eval_after.json").is_file()

    # passk eval on the run directory loads base + adapter and scores it.
    capsys.readouterr()
    eval_out = tmp_path / "eval.json"
    assert main(["eval", str(out), "--config", "reinforce_demo", *common, "--out", str(eval_out)]) == 0
    ev = json.loads(eval_out.read_text())
    assert ev["num_problems"] == 8 and "pass@1" in ev["metrics"]


def test_accelerate_command_launches_the_train_module() -> None:
    from experiments.cli import accelerate_command

    cmd = accelerate_command(["cfg.yaml", "--max_steps", "2"], "cpu", 2)
    assert cmd[1:3] == ["-m", "accelerate.commands.launch"]
    assert cmd[cmd.index("--config_file") + 1] == str(REPO / "accelerate_configs" / "cpu.yaml")
    assert cmd[cmd.index("--num_processes") + 1] == "2"
    assert cmd[-5:] == ["-m", "experiments.train", "cfg.yaml", "--max_steps", "2"]


def test_compare_runs_every_config_per_seed_with_the_same_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The launch plan of `passk compare --seeds`: one run per (seed, config), each told its seed and directory."""
    import experiments.report
    from experiments import cli

    launched: list[list[str]] = []

    def fake_call(cmd, **kwargs):
        launched.append(cmd)
        return 0

    reported = {}
    monkeypatch.setattr(cli.subprocess, "call", fake_call)
    monkeypatch.setattr(
        experiments.report,
        "write_report",
        lambda dirs, out: reported.update(dirs=dirs) or Path(out) / "report.md",
    )
    configs = [str(CONFIGS / "grpo_cpu.yaml"), str(CONFIGS / "rloo_cpu.yaml")]
    rc = cli.main(["compare", *configs, "--seeds", "3,4", "--out", str(tmp_path), "--max_steps", "1"])
    assert rc == 0, capsys.readouterr().err
    got = {(c[c.index("--seed") + 1], c[c.index("--output_dir") + 1]) for c in launched}
    assert got == {(s, str(tmp_path / f"{m}-seed{s}")) for s in ("3", "4") for m in ("grpo", "rloo")}
    assert all(c[c.index("--max_steps") + 1] == "1" for c in launched)
    assert sorted(p.name for p in reported["dirs"]) == [
        "grpo-seed3",
        "grpo-seed4",
        "rloo-seed3",
        "rloo-seed4",
    ]


def test_demo_covers_every_method_with_one_budget() -> None:
    from experiments.cli import demo_configs
    from experiments.config import budget, parse_config
    from experiments.trainers import METHODS

    configs = demo_configs()
    parsed = [parse_config([str(p)]) for p in configs]
    assert sorted(exp.method for exp, _ in parsed) == sorted(METHODS)
    budgets = [budget(exp, cfg) for exp, cfg in parsed]
    assert all(b == budgets[0] for b in budgets)
    assert budgets[0]["dataset"] == "learnable" and budgets[0]["warm_start_steps"] > 0
    assert all(cfg.use_cpu and exp.num_threads == 1 for exp, cfg in parsed)
    assert [p.name for p in demo_configs(["ppo", "grpo"])] == ["ppo_demo.yaml", "grpo_demo.yaml"]
