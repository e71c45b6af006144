"""The `passk` command line: help, --check (the GPU file on CPU too), compare on one budget file, an end-to-end
`passk train`, LoRA + eval."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "experiments" / "configs"


def _env(passk_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PASSK_CACHE"] = str(passk_cache)  # never the user's ~/.cache/passk
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def test_help_lists_the_subcommands() -> None:
    exe = shutil.which("passk")
    cmd = [exe] if exe else [sys.executable, "-m", "experiments.run.cli"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in ("train", "eval", "compare", "demo"):
        assert f"passk {name}" in out.stdout and name in out.stdout.split("positional arguments")[1]


def test_unknown_subcommand_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.run.cli import main

    assert main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_check_prints_the_resolved_config_and_loads_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.run.cli import main

    assert main(["train", "cpu", "--method", "grpo", "--check", "--learning_rate", "2e-6"]) == 0
    out = capsys.readouterr().out
    resolved = yaml.safe_load(out)
    assert resolved["method"] == "grpo" and resolved["learning_rate"] == pytest.approx(2e-6)
    assert "nothing was loaded" in out and "# grpo hyperparameters (METHODS): beta=0.04" in out


def test_trls_own_flag_names_are_aliases_of_passks_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model_name_or_path` and `--dataset_name`, as `trl grpo` takes them, set passk's `model` and `dataset`, on
    the command line (also `--flag=value`) and in a YAML file."""
    from experiments.run.cli import main

    argv = [
        "train",
        "cpu",
        "--method",
        "grpo",
        "--model_name_or_path",
        "smollm2",
        "--dataset_name=learnable",
        "--check",
    ]
    assert main(argv) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert (resolved["model"], resolved["dataset"]) == ("smollm2", "learnable")
    text = (CONFIGS / "cpu.yaml").read_text().replace("model: tiny", "model_name_or_path: smollm2")
    (tmp_path / "trl_names.yaml").write_text(text)
    assert main(["train", str(tmp_path / "trl_names.yaml"), "--method", "grpo", "--check"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["model"] == "smollm2"
    (tmp_path / "both.yaml").write_text(text + "model: tiny\n")
    assert main(["train", str(tmp_path / "both.yaml"), "--method", "grpo", "--check"]) == 2
    assert capsys.readouterr().err.startswith("passk: error: model_name_or_path: TRL's name for model")


def test_check_of_the_gpu_file_works_on_any_machine_and_touches_no_device(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """`passk train seed --method M --check` for every method on a machine that looks like a GPU machine (CUDA
    "available") but where any use of the device fails: the bf16 GPU file checks out without touching it. A plain
    parse would (GRPOConfig asks the GPU whether it supports bf16), which is what the refusing stubs prove."""
    import torch
    from transformers.utils import import_utils

    from experiments.run.argv import parse_config
    from experiments.run.cli import main
    from experiments.trainers import METHODS

    parse_config(
        [str(CONFIGS / "cpu.yaml"), "--method", "grpo"]
    )  # import the lazily loaded config classes before stubbing CUDA

    def refuse(*args, **kwargs):
        raise AssertionError("the device was touched")

    # transformers caches its device answers: an earlier test's would hide the device use looked for here, and the
    # stubbed answers given here must not outlive this test.
    cached = [getattr(import_utils, n) for n in ("is_torch_cuda_available", "is_torch_bf16_gpu_available")]
    for answer in cached:
        answer.cache_clear()
    request.addfinalizer(lambda: [answer.cache_clear() for answer in cached])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in (
        "_lazy_init",
        "init",
        "current_device",
        "set_device",
        "is_bf16_supported",
        "device_count",
        "get_device_properties",
        "get_device_capability",
        "synchronize",
    ):
        monkeypatch.setattr(torch.cuda, name, refuse)
    with pytest.raises(AssertionError, match="the device was touched"):
        parse_config([str(CONFIGS / "seed.yaml"), "--method", "grpo"])
    for method in METHODS:
        assert main(["train", "seed", "--method", method, "--check", "--all"]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        resolved = yaml.safe_load(out)
        assert resolved["bf16"] is True and resolved["use_cpu"] is False, method
        assert resolved["max_steps"] == 60, method  # PPO too: one epoch per rollout
        assert f"# {method} hyperparameters (METHODS):" in out and "no accelerator was touched" in out


def test_check_puts_passks_keys_first_and_the_trl_defaults_only_with_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import dataclasses

    from experiments.run.cli import main
    from experiments.run.config import ExperimentArgs

    assert main(["train", "demo", "--method", "grpo", "--check", "--learning_rate", "1e-4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "# passk (ExperimentArgs)"
    keys = [line.split(":")[0] for line in lines if line and not line.startswith((" ", "#", "-"))]
    own = [f.name for f in dataclasses.fields(ExperimentArgs)]
    assert keys[: len(own)] == own  # passk's keys first, in their documented order
    trainer = keys[len(own) :]
    assert "learning_rate" in trainer and "max_steps" in trainer and "beta" in trainer  # what was set
    assert "adam_beta1" not in trainer and "seed" not in trainer  # TRL's defaults: not without --all
    assert "more GRPOConfig keys at their TRL / transformers defaults (--check --all lists them)" in out
    assert main(["train", "demo", "--method", "grpo", "--check", "--all"]) == 0
    out = capsys.readouterr().out
    assert "# GRPOConfig: TRL / transformers defaults, unchanged" in out
    resolved = yaml.safe_load(out)
    assert (
        resolved["adam_beta1"] == 0.9 and resolved["learning_rate"] == 3e-4 and resolved["method"] == "grpo"
    )


def test_compare_takes_one_budget_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.run import cli

    rc = cli.main(["compare", "cpu", "demo", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "compare takes one budget file" in err and err.strip().count("\n") == 0
    assert cli.main(["compare", "cpu", "--methods", "grpo,ppo2", "--out", str(tmp_path)]) == 2
    assert "--methods: unknown method 'ppo2'" in capsys.readouterr().err


def test_passk_train_without_arguments_exits_2_with_its_usage() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run.cli", "train"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "passk: error: train needs a CONFIG and a method: passk train CONFIG --method M "
        "[--key value ...] (passk train --help)"
    )


def test_an_output_dir_holding_a_run_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run import cli

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")
    assert cli.main(["train", "cpu", "--method", "grpo", "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"passk: error: output_dir: {out} already holds files (run.json); pass --overwrite to replace "
        "them, --resume true to continue that run, or another --output_dir"
    )
    # compare checks every run's directory before the first run starts
    (tmp_path / "cmp" / "ppo").mkdir(parents=True)
    (tmp_path / "cmp" / "ppo" / "model.safetensors").write_text("")
    assert cli.main(["compare", "cpu", "--methods", "grpo,ppo", "--out", str(tmp_path / "cmp")]) == 2
    assert "output_dir: " + str(tmp_path / "cmp" / "ppo") in capsys.readouterr().err
    assert not (tmp_path / "cmp" / "grpo").exists()


@pytest.mark.slow
def test_passk_train_end_to_end(tmp_path: Path, passk_cache: Path, tiny_model_dir: Path) -> None:
    """`passk train` on a shipped cpu config, 2 steps, in a fresh process: every file of the run layout; its
    progress on the console in one line per update, not the trainer's dicts; --overwrite replaces what was there."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint-9").mkdir()  # an earlier run's
    cmd = [
        sys.executable,
        "-m",
        "experiments.run.cli",
        "train",
        "cpu",
        "--method",
        "grpo",
        "--model",
        str(tiny_model_dir),
        "--budget_prompts",
        "2",
        "--n_eval",
        "4",
        "--save_steps",
        "1",
        "--output_dir",
        str(out),
        "--overwrite",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(passk_cache), timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"run written to {out}" in proc.stdout
    assert not (out / "checkpoint-9").exists()
    progress = [line for line in proc.stderr.splitlines() if line.startswith("run step ")]
    assert progress[0] == "run step 0/2" and progress[-1].startswith("run step 2/2 reward ")
    assert " done in " in progress[-1] and "{'loss'" not in proc.stdout + proc.stderr

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

    from experiments.learnable.warm_start import WARM_START_STEPS, task_model_path, warm_started_model
    from experiments.run.cli import main

    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))
    model = warm_started_model(
        str(task_model_path(cache_dir=passk_cache)), WARM_START_STEPS, cache_dir=passk_cache
    )
    out = tmp_path / "lora"
    common = ["--n_eval", "8", "--eval_n", "2", "--eval_ks", "1", "2", "--eval_every_n_steps", "0"]
    argv = [
        "train",
        "demo",
        "--method",
        "reinforce",
        "--model",
        model,
        "--warm_start_steps",
        "0",
        "--budget_prompts",
        "8",
        "--per_device_train_batch_size",
        "16",
        "--num_generations",
        "4",
        "--n_train",
        "32",
        "--use_peft",
        "true",
        "--lora_r",
        "4",
        "--lora_alpha",
        "8",
        "--learning_rate",
        "1e-2",
        "--report_to",
        "none",
        "--output_dir",
        str(out),
        *common,
    ]
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
    from experiments.run.cli import accelerate_command

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
    import experiments.run.progress
    from experiments.run import cli

    launched: list[list[str]] = []
    jobs = []

    def fake_run_children(children, **kwargs):
        jobs.append(kwargs["jobs"])
        for child in children:
            launched.append(list(child.cmd))
            child.returncode = 0
        return children

    reported = {}
    monkeypatch.setattr(experiments.run.progress, "run_children", fake_run_children)
    monkeypatch.setattr(
        experiments.report,
        "write_report",
        lambda dirs, out: reported.update(dirs=dirs) or Path(out) / "report.md",
    )
    argv = [
        "compare",
        "cpu",
        "--methods",
        "grpo,ppo",
        "--seeds",
        "3,4",
        "--out",
        str(tmp_path),
        "--budget_prompts",
        "4",
        "--lam",
        "0.9",
        "--jobs",
        "2",
    ]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert jobs == [2]
    assert "--lam goes to ppo only" in capsys.readouterr().out
    got = {
        (c[c.index("--method") + 1], c[c.index("--seed") + 1], c[c.index("--output_dir") + 1])
        for c in launched
    }
    assert got == {(m, s, str(tmp_path / f"{m}-seed{s}")) for s in ("3", "4") for m in ("grpo", "ppo")}
    assert all(c[c.index("experiments.train") + 1] == str(CONFIGS / "cpu.yaml") for c in launched)
    assert all(c[c.index("--budget_prompts") + 1] == "4" for c in launched)
    assert all(("--lam" in c) == (c[c.index("--method") + 1] == "ppo") for c in launched)
    assert sorted(p.name for p in reported["dirs"]) == ["grpo-seed3", "grpo-seed4", "ppo-seed3", "ppo-seed4"]
    # An option no chosen method has is an error, before any run.
    launched.clear()
    assert cli.main(["compare", "cpu", "--methods", "grpo,rloo", "--lam", "0.9", "--out", str(tmp_path)]) == 2
    assert "lam: none of grpo, rloo has this option" in capsys.readouterr().err and not launched


def test_demo_runs_every_method_on_the_demo_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.learnable import warm_start
    from experiments.run import cli
    from experiments.run.argv import parse_config
    from experiments.trainers import METHODS, ORIGINAL_METHODS

    calls = {}
    monkeypatch.setattr(warm_start, "warm_started_model", lambda *a, **k: "warm")
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda exp: "base")
    monkeypatch.setattr(
        cli, "compare", lambda config, out, **kw: calls.update(config=config, **kw) or out / "r.md"
    )
    assert cli.main(["demo", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    assert calls["config"] == str(CONFIGS / "demo.yaml") and calls["methods"] == list(ORIGINAL_METHODS)
    for method in METHODS:
        exp, cfg = parse_config([calls["config"], "--method", method])
        assert exp.dataset == "learnable" and exp.warm_start_steps > 0 and exp.budget_prompts == 320
        assert cfg.use_cpu and exp.num_threads == 1
    assert cli.main(["demo", "--out", str(tmp_path), "--methods", "ppo,grpo"]) == 0
    assert calls["methods"] == ["ppo", "grpo"]


@pytest.mark.slow
def test_compare_shows_each_runs_progress_and_keeps_the_trainer_output_in_logs(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    out = tmp_path / "cmp"
    cmd = [
        sys.executable,
        "-m",
        "experiments.run.cli",
        "compare",
        "cpu",
        "--methods",
        "grpo,reinforce",
        "--jobs",
        "2",
        "--model",
        str(tiny_model_dir),
        "--budget_prompts",
        "2",
        "--n_eval",
        "4",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(passk_cache), timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    for method in ("grpo", "reinforce"):
        lines = [line for line in console.splitlines() if line.startswith(f"{method} step ")]
        assert lines[0] == f"{method} step 0/2" and lines[-1].startswith(f"{method} step 2/2 reward "), (
            console
        )
        assert f"{method} evaluating the starting model on 4 problems" in console
        assert f"passk compare [{1 if method == 'grpo' else 2}/2] {method}: pass@1 " in console
        assert (
            "'loss'" in (out / "logs" / f"{method}.log").read_text()
        )  # the trainer's own output, in its log
    assert "{'loss'" not in console and (out / "report.md").is_file()


SLOW_REWARD = """
import time


def reward(completions, **kwargs):
    time.sleep(2.0)  # keeps each step long enough to be interrupted between two checkpoints
    return [0.0] * len(completions)
"""


@pytest.mark.slow
def test_ctrl_c_says_where_the_last_checkpoint_is_and_its_resume_command_resumes(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    import shlex
    import signal
    import time

    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    out = tmp_path / "run"
    args = [
        "train",
        "cpu",
        "--method",
        "grpo",
        "--model",
        str(tiny_model_dir),
        "--budget_prompts",
        "0",
        "--max_steps",
        "8",
        "--save_steps",
        "1",
        "--n_eval",
        "0",
        "--reward_funcs",
        "slow_reward.py:reward",
        "--output_dir",
        str(out),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run.cli", *args],
        cwd=tmp_path,
        env=_env(passk_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not (out / "checkpoint-1" / "trainer_state.json").is_file() and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint-1"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr
    # The first Ctrl-C only sets a flag, honoured at the step's end: never raised inside a finalizer that ignores it.
    stop = re.search(
        r"passk: Ctrl-C: stopping at the end of step (\d+) and saving a checkpoint there", stderr
    )
    assert stop, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(r"passk: interrupted; last checkpoint: (.+); resume with: (.+)", last)
    assert match, last
    checkpoint, command = Path(match.group(1)), shlex.split(match.group(2))
    assert checkpoint.parent == out and checkpoint.is_dir() and checkpoint.name != "checkpoint-8"
    assert checkpoint.name == f"checkpoint-{stop.group(1)}"  # saved where it stopped
    assert command == ["passk", *args, "--resume", "true"]

    resumed = subprocess.run(
        [sys.executable, "-m", "experiments.run.cli", *command[1:]],
        cwd=tmp_path,
        env=_env(passk_cache),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    step = checkpoint.name.split("-")[1]
    assert f"passk: resuming from {checkpoint} (step {step})" in resumed.stdout
    assert "missing keys" not in resumed.stdout + resumed.stderr  # the tied lm_head is not missing
    run = json.loads((out / "run.json").read_text())
    assert run["global_step"] == 8 and run["resumed_from"] == str(checkpoint) and run["tokens_per_s"] > 0


def test_eval_of_a_run_or_its_checkpoint_uses_the_runs_settings_and_says_so(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run.cli import main

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run_dir / "checkpoint-3")
    # checkpoint-3 saved whole (its trainer_state.json), checkpoint-4 cut short: `passk eval RUN_DIR` takes 3.
    (run_dir / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
    (run_dir / "checkpoint-4").mkdir()
    config = {
        "dataset": "learnable",
        "n_train": 40,
        "n_eval": 6,
        "split_seed": 0,
        "style": "completion",
        "eval_n": 2,
        "eval_ks": [1, 2],
        "eval_temperature": 1.0,
        "eval_top_p": 1.0,
        "eval_max_new_tokens": 8,
        "seed": 42,
        "learning_rate": 3e-4,
        "method": "grpo",
    }
    (run_dir / "run.json").write_text(json.dumps({"config": config}))
    out = tmp_path / "eval.json"
    assert main(["eval", str(run_dir / "checkpoint-3"), "--out", str(out)]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert (
        f"passk eval: learnable (eval split of split_seed 0, 6 eval problems), completion prompts, n=2 at "
        f"temperature 1 (top_p 1), up to 8 new tokens, seed 42: settings of the run's {run_dir / 'run.json'}"
        in said
    )
    ev = json.loads(out.read_text())
    assert ev["num_problems"] == 6 and ev["n"] == 2 and ev["problems"][0]["task_id"].startswith("synth/")
    # The model as named on the command line, and what passk built it from.
    assert ev["model"] == str(run_dir / "checkpoint-3")
    assert ev["model_source"] == json.loads((tiny_model_dir / "passk_build.json").read_text())
    assert (ev["dtype"], ev["device"]) == ("float32", "cpu")  # --dtype auto on CPU
    assert (
        ev["settings"]["temperature"] == 1.0
        and ev["settings"]["max_new_tokens"] == 8
        and ev["settings"]["seed"] == 42
    )
    # Told otherwise on the command line: that wins, and is named.
    assert main(["eval", str(run_dir), "--out", str(out), "--eval_n", "3", "--eval_ks", "1"]) == 0
    assert "with --eval_ks, --eval_n from the command line" in capsys.readouterr().out
    assert json.loads(out.read_text())["n"] == 3
    assert json.loads(out.read_text())["model"] == str(run_dir)
    assert main(["eval", str(run_dir), "--out", str(out), "--dtype", "bfloat16"]) == 0
    assert json.loads(out.read_text())["dtype"] == "bfloat16"


def test_a_hub_id_without_network_fails_fast_in_one_line_saying_how_to_work_offline(
    tmp_path: Path, passk_cache: Path
) -> None:
    import socket

    with (
        socket.socket() as s
    ):  # a local port that nothing listens on: the hub's connection is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in _env(passk_cache).items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"))  # an empty HF cache
    cmd = [
        sys.executable,
        "-m",
        "experiments.run.cli",
        "train",
        "cpu",
        "--method",
        "grpo",
        "--model",
        "some-org/some-model",
        "--output_dir",
        str(tmp_path / "run"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"passk: error: model 'some-org/some-model': the Hugging Face hub http://127.0.0.1:{port} cannot be reached "
        f"(Connection refused); to work offline, set HF_HUB_OFFLINE=1 with the model in the Hugging Face cache "
        f"({tmp_path / 'hf' / 'hub'}), or pass a local model folder"
    )
    assert "Traceback" not in proc.stderr


def test_the_missing_key_warning_is_dropped_only_for_tied_weights(tiny_model_dir: Path) -> None:
    import logging

    from transformers import AutoModelForCausalLM

    from experiments.run.train import TiedWeightsLoaded

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # lm_head.weight is the embeddings' tensor
    tied = TiedWeightsLoaded(model)

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("transformers.trainer", logging.WARNING, __file__, 1, message, None, None)

    assert not tied.filter(
        record("There were missing keys in the checkpoint model loaded: ['lm_head.weight'].")
    )
    assert tied.filter(
        record("There were missing keys in the checkpoint model loaded: ['model.norm.weight'].")
    )
    assert tied.filter(
        record("There were unexpected keys in the checkpoint model loaded: ['lm_head.weight'].")
    )


@pytest.mark.slow
def test_the_console_shows_passk_and_the_libraries_chatter_goes_to_the_run_log(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    """`passk train` (PPO: transformers reports its new value head as MISSING) prints passk's lines only: no
    LOAD REPORT, FutureWarning or weight-loading bars; they are in output_dir/train.log. `--check` prints no
    warning either."""
    out = tmp_path / "run"
    base = [
        sys.executable,
        "-m",
        "experiments.run.cli",
        "train",
        "cpu",
        "--method",
        "ppo",
        "--model",
        str(tiny_model_dir),
    ]
    check = subprocess.run(
        [*base, "--check"], capture_output=True, text=True, cwd=tmp_path, env=_env(passk_cache)
    )
    assert check.returncode == 0 and check.stderr == "", check.stderr
    proc = subprocess.run(
        [*base, "--n_eval", "2", "--output_dir", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(passk_cache),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    for chatter in ("LOAD REPORT", "MISSING", "FutureWarning", "Loading weights", "Writing model shards"):
        assert chatter not in console, console
    assert "run step 0/" in console and f"passk: run written to {out}" in console
    log = (out / "train.log").read_text()
    assert "LOAD REPORT" in log and "score.weight" in log and "FutureWarning" in log


def test_passk_eval_checks_the_model_before_touching_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import experiments.inputs.data
    from experiments.run.cli import main

    def no_data(*args, **kwargs):
        raise AssertionError("data loaded before the model was checked")

    monkeypatch.setattr(experiments.inputs.data, "build_datasets", no_data)
    assert main(["eval", str(tmp_path / "no-such-model")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("passk: error: model ") and err.count("\n") == 1, err


@pytest.mark.parametrize("cached", [False, True])
def test_words_that_were_stale_say_what_is_true(
    cached: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check says where grpo's log-prob temperature comes from and that the file's is not used, without seeming
    to contradict itself; the bf16 error names a config that exists; the demo says whether it builds the warm start
    or reads it from the cache, before it does."""
    from experiments.learnable import warm_start
    from experiments.run import cli
    from experiments.run.argv import _one_line

    assert cli.main(["train", "seed", "--method", "grpo", "--check"]) == 0
    out = capsys.readouterr().out
    assert "logprob_temperature=0.8 (= temperature)" in out
    assert (
        "# not used by grpo: the budget file's logprob_temperature (GRPOConfig has no such option; grpo uses "
        "logprob_temperature=0.8, above)"
    ) in out

    line = _one_line(ValueError("Your setup doesn't support bf16/gpu. You need to assign use_cpu."))
    named = re.search(r"\(as (experiments/configs/\S+) does\)", line)
    assert named and "*_cpu" not in line and "bf16: false" in (REPO / named.group(1)).read_text()

    built = []
    monkeypatch.setattr(warm_start, "warm_start_cached", lambda *a, **k: cached)
    monkeypatch.setattr(warm_start, "warm_started_model", lambda *a, **k: built.append(1) or "warm")
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda exp: "base")
    monkeypatch.setattr(cli, "compare", lambda config, out, **kw: out / "r.md")
    assert cli.main(["demo", "--out", str(tmp_path)]) == 0
    said = (
        "warm start (95 SFT steps) from the cache"
        if cached
        else "building the warm start (95 SFT steps; cached"
    )
    assert f"passk demo: {said}" in capsys.readouterr().out and built == [1]


def test_train_help_shows_the_methods_the_budget_files_values_and_passks_keys_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`passk train --help` names the methods, the budget files and passk's keys; `passk train cpu --help` works
    without a method; with one, a screenful: passk's keys, the method's own and the file's, at the file's values
    (not the classes' defaults); TRL's every key only with --all, at the values in force."""
    from experiments.run.argv import parse_config
    from experiments.run.cli import main
    from experiments.trainers import METHODS

    cpu = yaml.safe_load((CONFIGS / "cpu.yaml").read_text())
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n  {m} " in out for m in METHODS) and "\n  cpu " in out and "\n  --budget_prompts 0 " in out

    assert main(["train", "cpu", "--help"]) == 0
    out = capsys.readouterr().out
    assert (
        all(f"\n  {m} " in out for m in METHODS) and f"\n  --budget_prompts {cpu['budget_prompts']} " in out
    )

    assert main(["train", "cpu", "--method", "grpo", "--help"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 120, len(out.splitlines())
    assert out.index("passk's keys") < out.index("grpo's own hyperparameters") < out.index("GRPOConfig keys")
    assert f"\n  --budget_prompts {cpu['budget_prompts']} " in out and "\n  --beta 0.04 " in out
    assert (
        f"\n  --learning_rate {cpu['learning_rate']:g} " in out
        and f"\n  --save_steps {cpu['save_steps']} " in out
    )
    assert "--help --all" in out and "gradient_checkpointing" not in out  # TRL's other keys: on request

    max_steps = parse_config([str(CONFIGS / "cpu.yaml"), "--method", "grpo"])[1].max_steps
    assert main(["train", "cpu", "--method", "grpo", "--help", "--all"]) == 0
    out = capsys.readouterr().out
    assert "--gradient_checkpointing" in out
    after = out[out.index("  --max_steps MAX_STEPS") :]
    assert f"(default: {max_steps})" in after[: after.index("\n  --", 3)]  # the budget's, not TRL's -1


@pytest.mark.slow
def test_the_demo_console_shows_passk_only_while_it_builds_its_models(tmp_path: Path) -> None:
    """`passk demo` on a fresh cache builds the task model and the warm start in its own process: their loading and
    writing bars and datasets' map bars go to DIR/logs/passk.log, not the console."""
    out = tmp_path / "demo"
    env = {**_env(tmp_path / "fresh-cache"), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "experiments.run.cli",
        "demo",
        "--methods",
        "grpo",
        "--out",
        str(out),
        "--budget_prompts",
        "8",
        "--eval_every_n_steps",
        "0",
        "--n_eval",
        "4",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    assert "passk demo: building the warm start (95 SFT steps; cached for later runs)" in console
    for chatter in ("Loading weights", "Writing model shards", "Map:", "examples/s", "it/s]"):
        assert chatter not in console, console
    assert (out / "logs" / "passk.log").is_file() and (out / "report.md").is_file()
