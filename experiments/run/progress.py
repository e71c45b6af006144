"""Live progress of a run on the console: one compact line per run, updated in place (step, reward, ETA).

`ConsoleProgress` is a `transformers.TrainerCallback`. On a terminal it rewrites one line (`\\r`) at most every
`min_interval` seconds; elsewhere (a file, a pipe, CI) it prints a plain line every tenth of the run, so a log
gets ten lines, not one per step. `attach(trainer, label)` puts it on a trainer:

- in a run that `passk compare` started, whose own output goes to `train.log`, it writes to the parent's
  terminal, a file descriptor the parent passes in `PASSK_PROGRESS_FD`;
- otherwise to stderr, in place of the trainer's own tqdm bar and printed log dicts (they stay in
  trainer_state.json and TensorBoard).

Only the world's main process prints. On the parent's side, `run_children` runs such child processes, several at
a time if asked, and `ProgressBoard` shows the latest line of each running child on one console line (on a
terminal; elsewhere each child's lines as they come, a tenth of its run apart).
"""

from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

PROGRESS_FD_ENV = "PASSK_PROGRESS_FD"
# Set by the parent when its console is a terminal: the child then sends every update (a line each, at most
# every `min_interval` s), which the parent redraws in place; else a line per tenth of the run.
PROGRESS_LIVE_ENV = "PASSK_PROGRESS_LIVE"
# After Ctrl-C, how long a child may take to finish its step and save its checkpoint.
INTERRUPT_GRACE_S = 300.0


def format_duration(seconds: float) -> str:
    """`1:05` (m:ss) or `1:02:05` (h:mm:ss)."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ConsoleProgress(TrainerCallback):
    """One line per run: `label step 12/40 reward 0.41 held-out pass@1 0.45 (step 10) 1.9 s/step ETA 0:53`.

    Args:
        label: what the line starts with (the method, "warm start").
        stream: where to write; None is stderr.
        min_interval: on a terminal, the least seconds between two rewrites of the line.
    """

    def __init__(
        self, label: str = "", stream: IO[str] | None = None, min_interval: float = 0.5, *, feed: bool = False
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self.feed = feed  # every update as a line, for a parent that redraws them (ProgressBoard)
        self.tty = _isatty(self.stream)
        self._t0 = 0.0
        self._start_step = 0
        self._last_write = -math.inf
        self._last_fraction = -1
        self._values: dict[str, float] = {}
        self._width = 0
        self._pending = False

    # -- hooks ------------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        self._t0 = time.monotonic()
        self._start_step = state.global_step  # a resumed run starts past 0: its ETA counts from here
        # A resumed run's first line shows what its checkpoint logged last, as the interrupted run's last line did.
        for key in ("reward", "loss"):
            value = next((e[key] for e in reversed(state.log_history) if key in e), None)
            if isinstance(value, int | float) and math.isfinite(value):
                self._values[key] = float(value)
        if state.is_world_process_zero:
            self._write(self._line(state), _fraction(state), final=False, force=True)

    # The Trainer logs a step's metrics after on_step_end: the line for a step is written when its log comes, or
    # when the next step begins without one.
    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
        self._pending = True

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        for key in ("reward", "loss"):
            value = (logs or {}).get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                self._values[key] = float(value)
        self._flush(state)

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: D102
        self._flush(state)

    def _flush(self, state: Any) -> None:
        if self._pending and state.is_world_process_zero:
            self._write(self._line(state), _fraction(state), final=False)
        self._pending = False

    def on_train_end(self, args, state, control, **kwargs):  # noqa: D102
        if state.is_world_process_zero:
            self._write(self._line(state, done=True), 1.0, final=True, force=True)

    # -- internals --------------------------------------------------------------------------------------------
    def _line(self, state: Any, done: bool = False) -> str:
        step, total = state.global_step, state.max_steps
        parts = [self.label] if self.label else []
        parts.append(f"step {step}/{total}" if total else f"step {step}")
        if "reward" in self._values:
            parts.append(f"reward {self._values['reward']:.3f}")
        elif "loss" in self._values:
            parts.append(f"loss {self._values['loss']:.3f}")
        held_out = next((e for e in reversed(state.log_history) if "eval/pass@1" in e), None)
        if held_out is not None:
            parts.append(f"held-out pass@1 {held_out['eval/pass@1']:.3f} (step {held_out.get('step', '?')})")
        elapsed = time.monotonic() - self._t0
        done_steps = step - self._start_step
        if done:  # a run stopped before its last step (Ctrl-C, SIGTERM) is not done
            ended = "done in" if not total or step >= total else "stopped after"
            parts.append(f"{ended} {format_duration(elapsed)}")
        elif done_steps > 0:
            per_step = elapsed / done_steps
            parts.append(f"{per_step:.1f} s/step")
            if total:
                parts.append(f"ETA {format_duration(per_step * (total - step))}")
        return " ".join(parts)

    def _write(self, line: str, fraction: float, *, final: bool, force: bool = False) -> None:
        now = time.monotonic()
        try:
            if self.feed:
                if not force and now - self._last_write < self.min_interval:
                    return
                self.stream.write(line + "\n")
            elif self.tty:
                if not force and now - self._last_write < self.min_interval:
                    return
                pad = " " * max(0, self._width - len(line))  # erase the end of a longer previous line
                self.stream.write("\r" + line + pad + ("\n" if final else ""))
                self._width = 0 if final else len(line)
            else:
                tenth = int(10 * fraction)
                if not (force or tenth > self._last_fraction):
                    return
                self._last_fraction = tenth
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # the console went away (closed pipe): training goes on without it
            self.tty, self._last_fraction = False, 10**9
        self._last_write = now


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _fraction(state: Any) -> float:
    """How far the run is (0 without max_steps: such a run prints at its start and end only)."""
    return state.global_step / state.max_steps if state.max_steps else 0.0


def progress_stream() -> tuple[IO[str], bool]:
    """(the stream progress goes to, whether it is the parent's terminal passed in PASSK_PROGRESS_FD)."""
    fd = os.environ.get(PROGRESS_FD_ENV)
    if fd:
        try:
            return os.fdopen(int(fd), "w", buffering=1, closefd=False), True
        except (OSError, ValueError):
            pass
    return sys.stderr, False


def note(line: str) -> None:
    """One line about a run's phase (evaluating, resuming) where its progress goes: the parent's board or stderr.
    Main process only."""
    if os.environ.get("RANK", "0") != "0":
        return
    stream, _ = progress_stream()
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def attach(trainer: Any, label: str = "") -> ConsoleProgress:
    """Put a `ConsoleProgress` on `trainer` (see the module docstring); returns it."""
    stream, from_parent = progress_stream()
    if not from_parent:  # our line replaces the tqdm bar and the per-step dicts on the same console
        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
    progress = ConsoleProgress(label, stream, feed=from_parent and os.environ.get(PROGRESS_LIVE_ENV) == "1")
    trainer.add_callback(progress)
    return progress


# ----------------------------------------------------------------------------------------------- parent side


class ProgressBoard:
    """The latest progress line of each running child, on one console line that is redrawn in place (a
    terminal), or each child's lines printed as they come (elsewhere). `message` prints a line above it."""

    def __init__(self, stream: IO[str] | None = None, width: int | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream)
        self.width = width or (os.get_terminal_size(self.stream.fileno()).columns if self.tty else 200)
        self.lines: dict[str, str] = {}
        self._shown = 0

    def update(self, key: str, line: str) -> None:
        if not self.tty:
            self._print(line + "\n")
            return
        self.lines[key] = line
        self._redraw()

    def finish(self, key: str) -> None:
        """The child is done: its last line stays on the console, above the live line."""
        last = self.lines.pop(key, None)
        if self.tty and last is not None:
            self._clear()
            self._print(last + "\n")
            self._redraw()

    def message(self, text: str) -> None:
        self._clear()
        self._print(text + "\n")
        self._redraw()

    def _redraw(self) -> None:
        if not self.tty:
            return
        text = " | ".join(self.lines.values())
        if len(text) > self.width - 1:
            text = text[: self.width - 2] + "…"
        self._print("\r" + text + " " * max(0, self._shown - len(text)))
        self._shown = len(text)

    def _clear(self) -> None:
        if self.tty and self._shown:
            self._print("\r" + " " * self._shown + "\r")
            self._shown = 0

    def _print(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the console went away: the runs go on
            pass


@dataclass
class Child:
    """One child process for `run_children`: its command, its label on the console and the file that takes its
    own output (None: the parent's console, with no progress line)."""

    label: str
    cmd: Sequence[str]
    log: Path | None = None
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    returncode: int | None = None
    seconds: float = 0.0


def run_children(
    children: Sequence[Child],
    *,
    jobs: int = 1,
    board: ProgressBoard | None = None,
    on_start: Callable[[Child], None] | None = None,
    on_done: Callable[[Child], None] | None = None,
) -> list[Child]:
    """Run the children, at most `jobs` at a time, in order; their progress lines go to `board`.

    Each child with a `log` gets a pipe to the parent in PASSK_PROGRESS_FD (`attach` writes there) and its own
    output in `log`; a child without one writes to the console itself. When a child fails, none is started
    after it and the running ones are stopped; the children come back with their `returncode` (None: never
    started, or stopped).

    Ctrl-C reaches this process alone (each child has its own process group), and so does a scheduler's SIGTERM
    sent to it. The first one is passed on to the running children from the signal handler itself, once each, so
    that each run stops at the end of its step and saves a checkpoint there (a SIGTERM within the children's
    `sigterm_grace_s`); the loop then waits for them and raises `Interrupted` with that signal. A second Ctrl-C
    stops them at once; a repeated SIGTERM changes nothing. Only the handler's own work decides: a
    KeyboardInterrupt raised wherever the signal landed was once lost on a loaded machine (a comparison ran to the
    end and exited 0).
    """
    from experiments.run.stopping import STOP_SIGNALS, Interrupted

    board = board or ProgressBoard()
    pending = list(children)
    running: list[_Running] = []
    sel = selectors.DefaultSelector()
    failed = False
    ctrl_c = threading.Event()
    asked: list[int] = []  # the first stop signal

    def on_sigint(signum: int, frame: Any) -> None:
        if ctrl_c.is_set():
            if signum == signal.SIGTERM and asked == [signal.SIGTERM]:
                return  # the same request again
            raise Interrupted(asked[0] if asked else signum)
        asked.append(signum)
        ctrl_c.set()
        for run in list(running):
            run.interrupt(signum=signum)

    main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = {sig: signal.signal(sig, on_sigint) for sig in STOP_SIGNALS} if main_thread else {}
    try:
        while pending or running:
            if ctrl_c.is_set():
                raise Interrupted(asked[0] if asked else signal.SIGINT)
            while pending and not failed and len(running) < max(1, jobs):
                child = pending.pop(0)
                if on_start:
                    on_start(child)
                running.append(_Running.start(child, board.tty))
                sel.register(running[-1].read_fd, selectors.EVENT_READ, running[-1])
            for key, _ in sel.select(timeout=0.5):
                key.data.read(board)
            for run in [r for r in running if r.proc.poll() is not None]:
                # Exited: by process status, not end of file (a process it left behind may hold the pipe).
                run.read(board)
                sel.unregister(run.read_fd)
                running.remove(run)
                run.close()
                board.finish(run.child.label)
                failed = failed or run.child.returncode != 0
                if on_done:
                    on_done(run.child)
            if failed:
                pending.clear()
                for run in running:
                    sel.unregister(run.read_fd)
                    run.stop()
                running.clear()
    except KeyboardInterrupt:
        ctrl_c.set()  # a second Ctrl-C, from here on, raises in the handler
        for run in running:
            run.interrupt(signum=asked[0] if asked else signal.SIGINT)  # a no-op for the runs told already
        try:
            for run in running:
                run.stop(grace=INTERRUPT_GRACE_S)
        except KeyboardInterrupt:
            for run in running:
                run.interrupt(again=True)
                run.stop(grace=10.0)
        running.clear()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for run in running:  # left by another error: stop them
            run.stop()
        sel.close()
    return list(children)


@dataclass
class _Running:
    child: Child
    proc: subprocess.Popen
    read_fd: int
    log: IO[str] | None
    t0: float
    buffer: bytes = b""
    closed: bool = False
    interrupted: bool = False

    @classmethod
    def start(cls, child: Child, live: bool) -> _Running:
        read, write = os.pipe()
        os.set_blocking(read, False)
        env = dict(child.env)
        if child.log:
            env.update({PROGRESS_FD_ENV: str(write), PROGRESS_LIVE_ENV: "1" if live else "0"})
        log = open(child.log, "w") if child.log else None  # noqa: SIM115 (closed when the child ends)
        out: dict[str, Any] = {"stdout": log, "stderr": subprocess.STDOUT} if log else {}
        try:
            # Its own process group: a terminal's Ctrl-C goes to the parent, which passes one on (run_children).
            proc = subprocess.Popen(list(child.cmd), env=env, pass_fds=(write,), process_group=0, **out)
        except BaseException:
            os.close(read)
            if log:
                log.close()
            raise
        finally:
            os.close(write)  # the child holds its own copy
        return cls(child, proc, read, log, time.monotonic())

    def read(self, board: ProgressBoard) -> None:
        """Show the complete lines that have arrived."""
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            *complete, self.buffer = (self.buffer + chunk).split(b"\n")
            for raw in complete:
                if raw.strip():
                    board.update(self.child.label, raw.decode(errors="replace").rstrip("\r"))

    def close(self) -> None:
        self.child.returncode = self.proc.wait()
        self.child.seconds = time.monotonic() - self.t0
        os.close(self.read_fd)
        if self.log:
            self.log.close()

    def interrupt(self, again: bool = False, signum: int = signal.SIGINT) -> None:
        """Send the child `signum` (SIGINT, as Ctrl-C would; or SIGTERM) by its own handle (this call started it):
        once, since the child reads a second SIGINT as "stop now", unless `again` asks for that."""
        if self.proc.poll() is None and (again or not self.interrupted):
            self.interrupted = True
            self.proc.send_signal(signal.SIGINT if again else signum)

    def stop(self, grace: float = 0.0) -> None:
        """End the child (this call started it, so by its own handle), after `grace` seconds to end by itself."""
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()
        self.child.returncode = None
        if not self.closed:
            self.closed = True
            os.close(self.read_fd)
            if self.log:
                self.log.close()
