"""Live progress of a run on the console: one compact line per run, updated in place (step, reward, ETA).

`ConsoleProgress` is a `transformers.TrainerCallback`. On a terminal it rewrites one line (`\\r`) at most every
`min_interval` seconds; elsewhere (a file, a pipe, CI) it prints a plain line every tenth of the run, so a log
gets ten lines, not one per step. `attach(trainer, label)` puts it on a trainer:

- in a run that `passk compare` started, whose own output goes to `train.log`, it writes to the parent's
  terminal, a file descriptor the parent passes in `PASSK_PROGRESS_FD`;
- otherwise to stderr, in place of the trainer's own tqdm bar and printed log dicts (they stay in
  trainer_state.json and TensorBoard).

Only the world's main process prints.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import IO, Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

PROGRESS_FD_ENV = "PASSK_PROGRESS_FD"


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

    def __init__(self, label: str = "", stream: IO[str] | None = None, min_interval: float = 0.5) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self._t0 = 0.0
        self._start_step = 0
        self._last_write = -math.inf
        self._last_fraction = -1
        self._values: dict[str, float] = {}
        self._width = 0

    # -- hooks ------------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        self._t0 = time.monotonic()
        self._start_step = state.global_step  # a resumed run starts past 0: its ETA counts from here
        if state.is_world_process_zero:
            self._write(self._line(state), _fraction(state), final=False, force=True)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        for key in ("reward", "loss"):
            value = (logs or {}).get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                self._values[key] = float(value)

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
        if state.is_world_process_zero:
            self._write(self._line(state), _fraction(state), final=False)

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
        if done:
            parts.append(f"done in {format_duration(elapsed)}")
        elif done_steps > 0:
            per_step = elapsed / done_steps
            parts.append(f"{per_step:.1f} s/step")
            if total:
                parts.append(f"ETA {format_duration(per_step * (total - step))}")
        return " ".join(parts)

    def _write(self, line: str, fraction: float, *, final: bool, force: bool = False) -> None:
        now = time.monotonic()
        try:
            if self.tty:
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


def attach(trainer: Any, label: str = "") -> ConsoleProgress:
    """Put a `ConsoleProgress` on `trainer` (see the module docstring); returns it."""
    stream, from_parent = progress_stream()
    if not from_parent:  # our line replaces the tqdm bar and the per-step dicts on the same console
        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
    progress = ConsoleProgress(label, stream)
    trainer.add_callback(progress)
    return progress
