"""The `passk` command line: help, --check (the GPU file on CPU too), compare on one budget file, an end-to-end
`passk train`, LoRA + eval."""

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

    assert main(["train", "cpu", "--method", "grpo", "--check", "--learning_rate", "2e-6"]) == 0
    out = capsys.readouterr().out
    resolved = yaml.safe_load(out)
    assert resolved["method"] == "grpo" and resolved["learning_rate"] == pytest.approx(2e-6)
    assert "nothing was loaded" in out and "# grpo hyperparameters (METHODS): beta=0.04" in out


def test_check_of_the_gpu_file_works_on_any_machine_and_touches_no_device(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`passk train seed --method M --check` for every method on a machine that looks like a GPU machine (CUDA
    "available") but where any use of the device fails: the bf16 GPU file checks out without touching it. A plain
    parse would (GRPOConfig asks the GPU whether it supports bf16), which is what the refusing stubs prove."""
    import torch

    from experiments.cli import main
    from experiments.config import parse_config
    from experiments.trainers import METHODS

    parse_config([str(CONFIGS / "cpu.yaml"), "--method", "grpo"])  # import the lazily loaded config classes before stubbing CUDA

    def refuse(*args, **kwargs):
        raise AssertionError("the device was touched")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("_lazy_init", "init", "current_device", "set_device", "is_bf16_supported", "device_count",
                 "get_device_properties", "get_device_capability", "synchronize"):  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, refuse)
    with pytest.raises(AssertionError, match="the device was touched"):
        parse_config([str(CONFIGS / "seed.yaml"), "--method", "grpo"])
    for method in METHODS:
        assert main(["train", "seed", "--method", method, "--check"]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        resolved = yaml.safe_load(out)
        assert resolved["bf16"] is True and resolved["use_cpu"] is False, method
        assert resolved["max_steps"] == (120 if method == "ppo" else 60), method
        assert f"# {method} hyperparameters (METHODS):" in out and "no accelerator was touched" in out


def test_compare_takes_one_budget_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from experiments import cli

    rc = cli.main(["compare", "cpu", "demo", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "compare takes one budget file" in err and err.strip().count("\n") == 0
    assert cli.main(["compare", "cpu", "--methods", "grpo,ppo2", "--out", str(tmp_path)]) == 2
    assert "--methods: unknown method 'ppo2'" in capsys.readouterr().err


@pytest.mark.slow
def test_passk_train_end_to_end(tmp_path: Path, passk_cache: Path, tiny_model_dir: Path) -> None:
    """`passk train` on a shipped cpu config, 2 steps, in a fresh process: every file of the run layout."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "experiments.cli", "train", "cpu", "--method", "grpo", "--model", str(tiny_model_dir),
        "--budget_prompts", "2", "--n_eval", "4", "--save_steps", "1", "--output_dir", str(out),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(passk_cache), timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"run written to {out}" in proc.stdout

    for name in ("eval_before.json", "eval_after.json"):
        ev = json.loads((out / name).read_text())
        assert ev["num_problems"] == 4 and set(ev["metrics"]) >= {"pass@1", "pass@2", "greedy_pass@1"}
        first = [p["rewards"][0] >= 1.0 for p in ev["problems"]]
        assert [p["first_sample_passed"] for p in ev["problems"]] == first  # the seed's pass@1, per problem
        assert ev["metrics"]["first_sample_pass@1"]["value"] == sum(first) / 4
    run = json.loads((out / "run.json").read_text())
    assert run["method"] == "grpo" and run["seed"] == 42 and run["global_step"] == 2
    assert run["method_hparams"]["beta"] == 0.04 and run["method_hparams"]["logprob_temperature"] == 0.8
    budget = run["budget"]
    assert (budget["fresh_prompts"], budget["fresh_completions"], budget["optimizer_steps"]) == (2, 4, 2)
    assert budget["tokens_generated"] > 0 and budget["budget_prompts"] == 2
    assert run["sampling"]["top_k"] == 0 and not run["sampling"]["from_model_generation_config"]
    assert len((out / "sampled_prompts.jsonl").read_text().splitlines()) == 2
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
    from experiments.warm_start import WARM_START_STEPS, task_model_path, warm_started_model

    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))
    model = warm_started_model(
        str(task_model_path(cache_dir=passk_cache)), WARM_START_STEPS, cache_dir=passk_cache
    )
    out = tmp_path / "lora"
    common = ["--n_eval", "8", "--eval_n", "2", "--eval_ks", "1", "2", "--eval_every_n_steps", "0"]
    argv = [
        "train", "demo", "--method", "reinforce", "--model", model, "--warm_start_steps", "0", "--budget_prompts", "8",
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
    assert main(["eval", str(out), "--config", "demo", *common, "--out", str(eval_out)]) == 0
    ev = json.loads(eval_out.read_text())
    assert ev["num_problems"] == 8 and "pass@1" in ev["metrics"]


def test_accelerate_command_launches_the_train_module() -> None:
    from experiments.cli import accelerate_command

    cmd = accelerate_command(["cfg.yaml", "--max_steps", "2"], "cpu", 2)
    assert cmd[1:3] == ["-m", "accelerate.commands.launch"]
    assert cmd[cmd.index("--config_file") + 1] == str(REPO / "accelerate_configs" / "cpu.yaml")
    assert cmd[cmd.index("--num_processes") + 1] == "2"
    assert cmd[-5:] == ["-m", "experiments.train", "cfg.yaml", "--max_steps", "2"]


def test_compare_runs_every_method_per_seed_on_one_budget_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The launch plan of `passk compare CONFIG --methods --seeds`: one run per (seed, method), each told its method,
    seed and directory, all on the same file; an option only some methods have goes to those only."""
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
    argv = ["compare", "cpu", "--methods", "grpo,ppo", "--seeds", "3,4", "--out", str(tmp_path), "--budget_prompts",
            "1", "--lam", "0.9"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "--lam goes to ppo only" in capsys.readouterr().out
    got = {(c[c.index("--method") + 1], c[c.index("--seed") + 1], c[c.index("--output_dir") + 1]) for c in launched}
    assert got == {(m, s, str(tmp_path / f"{m}-seed{s}")) for s in ("3", "4") for m in ("grpo", "ppo")}
    assert all(c[c.index("experiments.train") + 1] == str(CONFIGS / "cpu.yaml") for c in launched)
    assert all(c[c.index("--budget_prompts") + 1] == "1" for c in launched)
    assert all(("--lam" in c) == (c[c.index("--method") + 1] == "ppo") for c in launched)
    assert sorted(p.name for p in reported["dirs"]) == ["grpo-seed3", "grpo-seed4", "ppo-seed3", "ppo-seed4"]
    # An option no chosen method has is an error, before any run.
    launched.clear()
    assert cli.main(["compare", "cpu", "--methods", "grpo,rloo", "--lam", "0.9", "--out", str(tmp_path)]) == 2
    assert "lam: none of grpo, rloo has this option" in capsys.readouterr().err and not launched


def test_demo_runs_every_method_on_the_demo_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments import cli, warm_start
    from experiments.config import parse_config
    from experiments.trainers import METHODS

    calls = {}
    monkeypatch.setattr(warm_start, "warm_started_model", lambda *a, **k: "warm")
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda exp: "base")
    monkeypatch.setattr(cli, "compare", lambda config, out, **kw: calls.update(config=config, **kw) or out / "r.md")
    assert cli.main(["demo", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    assert calls["config"] == str(CONFIGS / "demo.yaml") and calls["methods"] == list(METHODS)
    for method in METHODS:
        exp, cfg = parse_config([calls["config"], "--method", method])
        assert exp.dataset == "learnable" and exp.warm_start_steps > 0 and exp.budget_prompts == 320
        assert cfg.use_cpu and exp.num_threads == 1
    assert cli.main(["demo", "--out", str(tmp_path), "--methods", "ppo,grpo"]) == 0
    assert calls["methods"] == ["ppo", "grpo"]
