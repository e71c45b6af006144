"""SIGTERM (a scheduler preempting the job) stops a run as Ctrl-C does: at the end of its step with a checkpoint
there and the line that resumes it, within `sigterm_grace_s`, at every phase, on every process of a multi-process
run and in `passk compare`.

The phase tests run `experiments.run.train.run` on the tiny model in this process and send this process a real
SIGTERM at the phase (loading, the starting evaluation, training, the final evaluation); the end-to-end tests send
it to a real `passk train` / `passk compare` (slow).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from experiments.run import train
from experiments.run.argv import parse_config
from experiments.run.config import config_path
from experiments.run.stopping import Interrupted, exit_status, signal_name, sigterm_interrupts

REPO = Path(__file__).resolve().parents[2]


def _argv(model: Path, out: Path, *extra: str) -> list[str]:
    return [
        str(config_path("cpu")),
        "--method",
        "reinforce",
        "--model",
        str(model),
        "--budget_prompts",
        "0",
        "--max_steps",
        "2",
        "--save_steps",
        "1",
        "--n_eval",
        "2",
        "--eval_n",
        "1",
        "--eval_ks",
        "1",
        "--eval_greedy",
        "false",
        "--eval_max_new_tokens",
        "4",
        "--report_to",
        "none",
        "--output_dir",
        str(out),
        *extra,
    ]


def _sigterm_then(original: Any) -> Any:
    """`original`, after this process is sent SIGTERM (its handler runs before `original` does)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGTERM)
        return original(*args, **kwargs)

    return wrapped


# ---- the pieces ---------------------------------------------------------------------------------------------
def test_a_stop_exits_with_128_plus_its_signal_and_names_it() -> None:
    assert exit_status(KeyboardInterrupt()) == 130
    assert exit_status(Interrupted(signal.SIGINT)) == 130
    assert exit_status(Interrupted(signal.SIGTERM)) == 143
    assert isinstance(Interrupted(signal.SIGTERM), KeyboardInterrupt)  # caught wherever Ctrl-C is
    assert (signal_name(signal.SIGINT), signal_name(signal.SIGTERM)) == ("Ctrl-C", "SIGTERM")


def test_sigterm_raises_inside_and_the_handler_before_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped, sigterm_interrupts():
        signal.raise_signal(signal.SIGTERM)
    assert stopped.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


class _Trainer:
    def __init__(self, step: int, max_steps: int) -> None:
        from types import SimpleNamespace

        self.state = SimpleNamespace(global_step=step, max_steps=max_steps)
        self.accelerator = SimpleNamespace(num_processes=1)
        self.callbacks: list = []

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def remove_callback(self, callback: Any) -> None:
        self.callbacks.remove(callback)


def test_in_training_sigterm_stops_at_the_end_of_the_step_and_a_repeated_one_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from types import SimpleNamespace

    trainer = _Trainer(4, 10)
    before = signal.getsignal(signal.SIGTERM)
    with train.stop_at_step_end_on_ctrl_c(trainer, 3, grace_s=0) as callback:
        handler = signal.getsignal(signal.SIGTERM)
        handler(signal.SIGTERM, None)
        assert (
            "passk: SIGTERM: stopping at the end of step 6 and saving a checkpoint there "
            "(sigterm_grace_s 0: no deadline)" in capsys.readouterr().err
        )
        handler(signal.SIGTERM, None)  # a launcher passing the scheduler's on: no second request
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        callback.on_step_end(None, SimpleNamespace(global_step=5, max_steps=10), control)
        assert not control.should_training_stop
        callback.on_step_end(None, SimpleNamespace(global_step=6, max_steps=10), control)
        assert control.should_save and control.should_training_stop and callback.signum == signal.SIGTERM
        with pytest.raises(Interrupted) as now:  # Ctrl-C after it: at once
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert now.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before and trainer.callbacks == []


def test_past_the_grace_period_sigterm_stops_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _Trainer(0, 10)
    with pytest.raises(Interrupted) as stopped:
        with train.stop_at_step_end_on_ctrl_c(trainer, 1, grace_s=0.2):
            signal.raise_signal(signal.SIGTERM)
            time.sleep(30)  # a step that does not end in time; the deadline's signal ends the sleep
    assert stopped.value.signum == signal.SIGTERM
    said = capsys.readouterr().err
    assert "within sigterm_grace_s 0.2 s" in said
    assert "passk: SIGTERM: sigterm_grace_s (0.2 s) is over before the end of the step: stopping now" in said


def test_a_negative_grace_period_is_refused() -> None:
    from experiments.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^sigterm_grace_s: must be >= 0, got -1"):
        parse_config(["--method", "grpo", "--sigterm_grace_s", "-1"], device_free=True)


# ---- a real run, SIGTERM at each phase ----------------------------------------------------------------------
def _run_stopped(argv: list[str]) -> Interrupted:
    exp, cfg = parse_config(argv)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        train.run(exp, cfg)
    assert signal.getsignal(signal.SIGTERM) is before  # the run's handlers are gone with it
    return stopped.value


@pytest.mark.parametrize("phase", ["loading", "starting evaluation"])
def test_sigterm_before_training_stops_at_once_with_nothing_to_resume(
    phase: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    if phase == "loading":
        monkeypatch.setattr(train, "starting_model", _sigterm_then(train.starting_model))
    else:
        monkeypatch.setattr(train, "load_for_eval", _sigterm_then(train.load_for_eval))
    stopped = _run_stopped(_argv(tiny_model_dir, out))
    assert stopped.signum == signal.SIGTERM and exit_status(stopped) == 143
    _, cfg = parse_config(_argv(tiny_model_dir, out))
    said = train.interrupted_message(["cpu"], cfg)
    assert said.startswith(f"passk: interrupted; no checkpoint in {out} ") and not (out / "run.json").exists()


def test_sigterm_in_the_final_evaluation_leaves_the_last_step_saved_and_a_resume_finishes_it(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import experiments.evaluation.evaluate as evaluate

    out = tmp_path / "run"
    original = evaluate.evaluate_to_file

    def stop_in_eval_after(model: Any, tokenizer: Any, rows: Any, exp: Any, seed: Any, path: Path, *a: Any):
        if Path(path).name == "eval_after.json":
            signal.raise_signal(signal.SIGTERM)
        return original(model, tokenizer, rows, exp, seed, path, *a)

    with monkeypatch.context() as m:
        m.setattr(evaluate, "evaluate_to_file", stop_in_eval_after)
        stopped = _run_stopped(_argv(tiny_model_dir, out))
    assert stopped.signum == signal.SIGTERM
    assert train.last_checkpoint(out) == str(out / "checkpoint-2") and not (out / "run.json").exists()
    exp, cfg = parse_config(_argv(tiny_model_dir, out, "--resume", "true"))
    train.run(exp, cfg)
    record = json.loads((out / "run.json").read_text())
    assert record["global_step"] == 2 and record["resumed_from"] == str(out / "checkpoint-2")
    assert (out / "eval_after.json").is_file()


SLOW_REWARD = """
import os
import time
from pathlib import Path


def reward(completions, **kwargs):
    with open(Path(__file__).with_name("calls"), "a") as f:
        f.write("x")
    time.sleep(float(os.environ.get("SLOW_REWARD_S", "1")))
    return [0.0] * len(completions)
"""


def test_sigterm_in_a_step_longer_than_the_grace_period_stops_at_once_resumable_from_the_last_checkpoint(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLOW_REWARD_S", "0")
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, out, "--reward_funcs", "slow_reward.py:reward", "--n_eval", "0")
    argv += ["--max_steps", "3", "--sigterm_grace_s", "0.5"]

    from transformers import TrainerCallback

    class SigtermInStep2(TrainerCallback):  # the step after checkpoint-1 is saved takes 60 s
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 1:
                os.environ["SLOW_REWARD_S"] = "60"
                signal.raise_signal(signal.SIGTERM)

    exp, cfg = parse_config(argv)
    t0 = time.monotonic()
    with pytest.raises(Interrupted) as stopped:
        train.run(exp, cfg, callbacks=[SigtermInStep2()])
    assert stopped.value.signum == signal.SIGTERM and time.monotonic() - t0 < 50
    assert train.last_checkpoint(out) == str(out / "checkpoint-1")
    assert "last checkpoint: " + str(out / "checkpoint-1") in train.interrupted_message(["cpu"], cfg)


# ---- end to end: passk train, passk compare, two processes ----------------------------------------------------
def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, PASSK_CACHE=str(cache), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _sigterm_once_started(proc: subprocess.Popen, calls: Path, n: int = 2, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not (calls.is_file() and len(calls.read_text()) >= n):
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)


@pytest.mark.slow
def test_sigterm_to_passk_train_saves_at_the_step_and_its_resume_command_finishes_on_budget(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    out = tmp_path / "run"
    args = ["train", *_argv(tiny_model_dir, out, "--reward_funcs", "slow_reward.py:reward", "--n_eval", "0")]
    args[1] = "cpu"
    args += ["--max_steps", "6", "--save_steps", "100", "--steps_per_generation", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run.cli", *args],
        cwd=tmp_path,
        env=_env(passk_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _sigterm_once_started(proc, tmp_path / "calls")
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr
    stop = re.search(
        r"passk: SIGTERM: stopping at the end of step (\d+) and saving a checkpoint there", stderr
    )
    assert stop, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(r"passk: interrupted; last checkpoint: (.+); resume with: (.+)", last)
    assert match, last
    step = int(stop.group(1))
    assert Path(match.group(1)) == out / f"checkpoint-{step}" and step < 6
    command = shlex.split(match.group(2))
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
    record = json.loads((out / "run.json").read_text())
    assert record["global_step"] == 6 and record["resumed_from"] == str(out / f"checkpoint-{step}")
    sampled = [json.loads(line)["step"] for line in (out / "sampled_prompts.jsonl").read_text().splitlines()]
    assert sampled == [0, 2, 4]  # each generation batch once: nothing sampled twice across the stop


@pytest.mark.slow
def test_sigterm_to_passk_compare_stops_its_runs_at_their_step_and_says_how_to_continue(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    out = tmp_path / "cmp"
    args = ["compare", "cpu", "--methods", "grpo,reinforce", "--model", str(tiny_model_dir)]
    args += ["--budget_prompts", "8", "--save_steps", "100", "--n_eval", "0"]
    args += ["--reward_funcs", "slow_reward.py:reward", "--jobs", "2", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run.cli", *args],
        cwd=tmp_path,
        env=_env(passk_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _sigterm_once_started(proc, tmp_path / "calls", n=3)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stdout[-2000:] + stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"passk compare: interrupted; finished: none; not finished: grpo \(at checkpoint-(\d+)\), "
        r"reinforce \(at checkpoint-(\d+)\); continue with: (.+)",
        last,
    )
    assert match, last
    for log in ("grpo", "reinforce"):
        assert "passk: SIGTERM: stopping at the end of step" in (out / "logs" / f"{log}.log").read_text()


@pytest.mark.slow
def test_sigterm_reaches_every_process_of_a_two_process_run(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path
) -> None:
    """`passk train --accelerate_config cpu` (2 processes): a SIGTERM sent to passk alone, as to a container's first
    process, is passed on to the launcher and every rank; all stop at the same step and save it."""
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    out = tmp_path / "run"
    args = ["train", *_argv(tiny_model_dir, out, "--reward_funcs", "slow_reward.py:reward", "--n_eval", "0")]
    args[1] = "cpu"
    args += ["--max_steps", "8", "--save_steps", "100", "--accelerate_config", "cpu", "--num_processes", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run.cli", *args],
        cwd=tmp_path,
        env=_env(passk_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _sigterm_once_started(proc, tmp_path / "calls", n=2)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, stdout[-2000:] + stderr[-2000:]
    said = stdout + stderr
    assert said.count("passk: SIGTERM: stopping at the end of step") == 2, said[-3000:]  # each rank
    match = re.search(r"passk: interrupted; last checkpoint: (\S+); resume with: ", said)
    assert match, said[-3000:]
    saved = Path(match.group(1))
    assert saved.parent == out and (saved / "trainer_state.json").is_file()
    assert int(saved.name.split("-")[1]) < 8


@pytest.mark.slow
@pytest.mark.parametrize(
    ("phase", "line"),
    [
        # The run's first line (its data read, the model next): a fixed 6 s stood in for it and, on 2 loaded
        # cores, came before the handler was set (the process died of the signal, -15)
        ("loading", "method="),
        ("starting evaluation", "evaluating the starting model"),
        ("final evaluation", "evaluating the trained model"),
    ],
)
def test_sigterm_to_passk_train_at_each_phase_exits_143_in_one_line_and_resumes(
    tmp_path: Path, passk_cache: Path, tiny_model_dir: Path, phase: str, line: str
) -> None:
    import threading

    out = tmp_path / "run"
    args = [
        "train",
        *_argv(tiny_model_dir, out, "--n_eval", "16", "--eval_n", "4", "--eval_max_new_tokens", "48"),
    ]
    args[1] = "cpu"
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run.cli", *args],
        cwd=tmp_path,
        env=_env(passk_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err: list[str] = []
    out_lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for text in proc.stderr:
            err.append(text)
            if line in text:
                seen.set()

    # Each pipe has one reader, to its end: communicate() would also read stderr, racing this thread for the
    # last lines (it took the interrupt line under load).
    readers = [
        threading.Thread(target=read, daemon=True),
        threading.Thread(target=lambda: out_lines.extend(proc.stdout), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        assert seen.wait(300), "".join(err)[-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
        for reader in readers:
            reader.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    stdout = "".join(out_lines)
    said = "".join(err)
    assert proc.returncode == 143, stdout[-2000:] + said[-2000:]
    assert "Traceback" not in said
    last = said.strip().splitlines()[-1]
    if phase == "final evaluation":  # trained to the end and saved there: the resume finishes it
        match = re.fullmatch(r"passk: interrupted; last checkpoint: (.+); resume with: (.+)", last)
        assert match and Path(match.group(1)) == out / "checkpoint-2", last
        resumed = subprocess.run(
            [sys.executable, "-m", "experiments.run.cli", *shlex.split(match.group(2))[1:]],
            cwd=tmp_path,
            env=_env(passk_cache),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert json.loads((out / "run.json").read_text())["global_step"] == 2
    else:  # nothing saved yet: one line says so
        assert last.startswith(("passk: interrupted", "passk train: interrupted")), last
        assert not (out / "run.json").exists()
