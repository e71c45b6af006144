"""ConsoleProgress: one compact line per run (step, reward, ETA), updated in place on a terminal, a line per tenth
of the run elsewhere; attach() sends it to the parent's terminal in a compare child."""

from __future__ import annotations

import io
import os
from pathlib import Path

from transformers import TrainerControl, TrainerState
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from experiments.run.progress import PROGRESS_FD_ENV, ConsoleProgress, attach, format_duration


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(progress: ConsoleProgress, steps: int = 40) -> None:
    """Drive the callback as a Trainer does: begin, then per step a log with the reward and a step end."""
    state, control = TrainerState(max_steps=steps), TrainerControl()
    progress.on_train_begin(None, state, control)
    for step in range(1, steps + 1):
        progress.on_step_begin(None, state, control)
        state.global_step = step
        if step == 20:
            state.log_history.append({"eval/pass@1": 0.45, "step": 20})
        progress.on_step_end(None, state, control)
        progress.on_log(None, state, control, logs={"reward": step / steps, "loss": 0.0})
    progress.on_train_end(None, state, control)


def test_a_log_file_gets_a_line_per_tenth_with_step_reward_and_eta() -> None:
    out = io.StringIO()
    _run(ConsoleProgress("grpo", out))
    lines = out.getvalue().splitlines()
    assert lines[0] == "grpo step 0/40"
    assert len(lines) == 12  # start, each tenth, the end
    mid = next(line for line in lines if line.startswith("grpo step 24/40 "))
    assert "reward 0.600" in mid and "held-out pass@1 0.450 (step 20)" in mid and " s/step ETA " in mid
    assert lines[-1].startswith("grpo step 40/40 reward 1.000 held-out pass@1 0.450 (step 20) done in ")
    assert "\r" not in out.getvalue()


def test_a_terminal_gets_one_line_rewritten_in_place() -> None:
    out = _Terminal()
    _run(ConsoleProgress("ppo", out, min_interval=0.0), steps=5)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, ended when training ends
    frames = text.rstrip("\n").split("\r")[1:]
    assert len(frames) == 7 and frames[3].startswith("ppo step 3/5 reward 0.600")
    assert frames[-1].startswith("ppo step 5/5 reward 1.000 done in ")


def test_without_a_reward_the_line_shows_the_loss() -> None:
    out = io.StringIO()
    progress = ConsoleProgress("warm start", out)
    state, control = TrainerState(max_steps=10), TrainerControl()
    progress.on_train_begin(None, state, control)
    state.global_step = 10
    progress.on_log(None, state, control, logs={"loss": 0.8276, "grad_norm": 0.7})
    progress.on_train_end(None, state, control)
    assert out.getvalue().splitlines()[-1].startswith("warm start step 10/10 loss 0.828 done in ")


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 59.6, 65, 3725)] == ["0:00", "1:00", "1:05", "1:02:05"]


class _Trainer:
    def __init__(self) -> None:
        self.callbacks: list = [ProgressCallback, PrinterCallback]

    def remove_callback(self, cb: type) -> None:
        self.callbacks.remove(cb)

    def add_callback(self, cb: object) -> None:
        self.callbacks.append(cb)


def test_attach_replaces_the_bar_on_the_console_and_writes_to_the_parent_terminal_in_a_child(
    monkeypatch,
) -> None:
    monkeypatch.delenv(PROGRESS_FD_ENV, raising=False)
    trainer = _Trainer()
    progress = attach(trainer, "grpo")
    assert trainer.callbacks == [progress]  # no tqdm bar nor printed dicts beside our line

    read, write = os.pipe()
    try:
        monkeypatch.setenv(PROGRESS_FD_ENV, str(write))
        trainer = _Trainer()
        progress = attach(trainer, "grpo")
        assert trainer.callbacks == [ProgressCallback, PrinterCallback, progress]  # they go to train.log
        _run(progress, steps=2)
        progress.stream.close()
        os.close(write)
        write = -1
        received = os.read(read, 4096).decode()
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
    assert received.startswith("grpo step 0/2\n") and "grpo step 2/2 reward 1.000 done in" in received


CHILD = """
import os, sys, time
fd = os.environ.get("PASSK_PROGRESS_FD")
with os.fdopen(int(fd), "w", buffering=1, closefd=False) as progress:
    for step in (1, 2):
        progress.write(f"{sys.argv[1]} step {step}/2\\n")
print("own output of", sys.argv[1])
if sys.argv[1] == "waits":  # finishes only if "creates" runs at the same time
    for _ in range(600):
        if os.path.exists(sys.argv[2]):
            break
        time.sleep(0.05)
    else:
        sys.exit(7)
if sys.argv[1] == "creates":
    open(sys.argv[2], "w").close()
sys.exit(3 if sys.argv[1] == "fails" else 0)
"""


def _children(tmp_path, names, flag=None):
    import sys

    from experiments.run.progress import Child

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return [
        Child(n, [sys.executable, str(script), n, str(flag or tmp_path / "flag")], log=tmp_path / f"{n}.log")
        for n in names
    ]


def test_run_children_shows_each_childs_progress_and_keeps_its_output_in_its_log(tmp_path) -> None:
    from experiments.run.progress import ProgressBoard, run_children

    out = io.StringIO()
    done = []
    children = run_children(_children(tmp_path, ["a", "b"]), board=ProgressBoard(out), on_done=done.append)
    assert [c.returncode for c in children] == [0, 0] and [c.label for c in done] == ["a", "b"]
    assert out.getvalue() == "a step 1/2\na step 2/2\nb step 1/2\nb step 2/2\n"
    assert (tmp_path / "a.log").read_text() == "own output of a\n"


def test_run_children_runs_jobs_at_once(tmp_path) -> None:
    from experiments.run.progress import ProgressBoard, run_children

    children = run_children(
        _children(tmp_path, ["waits", "creates"]), jobs=2, board=ProgressBoard(io.StringIO())
    )
    assert [c.returncode for c in children] == [0, 0]  # one at a time, "waits" would give up (7)


def test_run_children_stops_after_a_failure(tmp_path) -> None:
    from experiments.run.progress import ProgressBoard, run_children

    children = run_children(_children(tmp_path, ["fails", "a"]), board=ProgressBoard(io.StringIO()))
    assert [c.returncode for c in children] == [3, None]
    assert not (tmp_path / "a.log").exists()


def test_the_board_redraws_one_line_on_a_terminal() -> None:
    from experiments.run.progress import ProgressBoard

    out = _Terminal()
    board = ProgressBoard(out, width=80)
    board.update("a", "a step 1/4")
    board.update("b", "b step 1/8")
    board.update("a", "a step 2/4")
    board.finish("a")
    board.message("passk compare [1/2] a: done")
    shown = out.getvalue().split("\r")
    assert "a step 1/4 | b step 1/8" in shown and "a step 2/4 | b step 1/8" in shown
    assert "a step 2/4\n" in out.getvalue() and "passk compare [1/2] a: done\n" in out.getvalue()
    assert out.getvalue().endswith("b step 1/8")  # the live line: the runs still going


def test_the_warm_start_shows_a_progress_line_not_loss_dicts(tiny_model_dir, tmp_path, capfd) -> None:
    from experiments.learnable.warm_start import warm_start

    warm_start(tiny_model_dir, tmp_path / "warm", steps=3, n_examples=64, batch_size=8)
    out, err = capfd.readouterr()
    assert "{'loss'" not in out + err and "'train_runtime'" not in out + err
    lines = [line for line in err.splitlines() if line.startswith("warm start step ")]
    assert lines[0] == "warm start step 0/3" and lines[-1].startswith("warm start step 3/3 ")
    assert " done in " in lines[-1]


CHILD_COUNTING_SIGINTS = """
import signal, sys, time
from pathlib import Path
got = []
signal.signal(signal.SIGINT, lambda *a: (got.append(1), Path(sys.argv[1]).write_text(str(len(got)))))
Path(sys.argv[1]).write_text("0")
end = time.monotonic() + 4
while time.monotonic() < end:
    time.sleep(0.05)
sys.exit(130 if got else 0)
"""

PARENT_OF_ONE_CHILD = """
import sys
from pathlib import Path
from experiments.run.progress import Child, ProgressBoard, run_children
child = Child("c", [sys.executable, sys.argv[1], sys.argv[2]], log=Path(sys.argv[3]))
try:
    run_children([child], board=ProgressBoard(open("/dev/null", "w")))
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_one_ctrl_c_reaches_the_running_child_once_and_a_second_one_again(tmp_path) -> None:
    """The parent passes Ctrl-C on from its handler: the child gets exactly one SIGINT for one Ctrl-C (a second
    would mean "stop now" to a run), two for two, and the parent ends as interrupted."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "child.py").write_text(CHILD_COUNTING_SIGINTS)
    (tmp_path / "parent.py").write_text(PARENT_OF_ONE_CHILD)
    repo = str(Path(__file__).resolve().parents[2])
    for ctrl_cs in (1, 2):
        count = tmp_path / f"count{ctrl_cs}"
        parent = subprocess.Popen(
            [
                sys.executable,
                str(tmp_path / "parent.py"),
                str(tmp_path / "child.py"),
                str(count),
                str(tmp_path / "log"),
            ],
            env=dict(os.environ, PYTHONPATH=repo),
        )
        deadline = time.monotonic() + 60
        while not count.exists():
            assert parent.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        for _ in range(ctrl_cs):
            parent.send_signal(signal.SIGINT)
            time.sleep(0.5)
        assert parent.wait(timeout=60) == 130
        assert count.read_text() == str(ctrl_cs)
