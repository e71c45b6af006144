"""How a run stops on a signal: Ctrl-C (SIGINT) and a scheduler's SIGTERM (Slurm, Kubernetes, spot instances) are
one request, "stop and leave a state `--resume true` continues", and end the same way (stdlib only).

- While training, `experiments.run.train.stop_at_step_end_on_ctrl_c` takes both: the run stops at the end of its
  step (generation batch), saves a checkpoint there and prints the resume command. A SIGTERM gives it
  `sigterm_grace_s` seconds to get there; after that, or at a second Ctrl-C, it stops at once (the last checkpoint
  saved whole is then the one to resume from).
- Anywhere else (loading, the starting and final evaluations), `sigterm_interrupts` makes SIGTERM stop the run at
  once as Ctrl-C does: nothing there is lost that a resume would need.

Either way the stop is an `Interrupted` (a KeyboardInterrupt, caught where Ctrl-C is) carrying the signal, and the
process exits with `exit_status`: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM), as a shell reports
a process that a signal ended.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["STOP_SIGNALS", "Interrupted", "exit_status", "signal_name", "sigterm_interrupts"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A stop asked by signal `signum` (SIGINT: Ctrl-C; SIGTERM: a scheduler), raised where the run stops."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__()
        self.signum = int(signum)


def signal_name(signum: int) -> str:
    """ "Ctrl-C" for SIGINT, else the signal's name ("SIGTERM")."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def exit_status(error: BaseException) -> int:
    """The exit status of a process stopped by `error`: 128 + its signal (a plain KeyboardInterrupt is Ctrl-C)."""
    return 128 + int(getattr(error, "signum", signal.SIGINT))


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises `Interrupted(SIGTERM)` as Ctrl-C raises KeyboardInterrupt (instead of ending the
    process with no message and nothing saved); the handler before is restored after. Only the main thread may set
    handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
