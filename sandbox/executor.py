"""The owner's side of the sandbox: a pool of zygote workers driven by one I/O thread, and the results.

The zygotes (the ``_zygote`` package) are started with fork+exec of a small ``python -I -S`` that never
imported torch or CUDA, so starting them is safe from a trainer that already initialised CUDA. A zygote exits
when its stdin closes, i.e. when this process closes the pool, is garbage collected, exits or is killed.

One thread (``sandbox-io``) serves every worker from a single ``selectors`` loop: it keeps a few tasks in
flight at each zygote (several per frame), so a zygote never waits for the owner between two tasks, and
the owner's work per task is one JSON encode and one decode, with no thread hand-off per worker.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import ctypes
import enum
import json
import logging
import os
import re
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, as_completed, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .verdicts import COMPARE_MODES, STATUSES

__all__ = ["Result", "Sandbox", "Status", "arun_batch", "get_sandbox", "run", "run_batch"]

log = logging.getLogger("sandbox")

ZYGOTE = Path(__file__).with_name("_zygote")  # the zygote package; its parent directory goes on sys.path
# Imported rather than run as a script, so that its bytecode comes from the .pyc cache instead of a compile.
LAUNCH = "import sys; sys.path.insert(0, sys.argv[1]); import _zygote; _zygote.run(sys.argv[2])"
MAX_PROGRAM_BYTES = 1 << 20  # program, tests and trusted code each: bounds the judge's parsing and memory
MAX_CASES_BYTES = 48 << 20  # inputs + expected outputs of one stdin/stdout task (the judge holds them)
CASE_START = 0.05  # seconds a stdin/stdout case may take to start, in the default overall limit
UID_BASE = 61000  # slot i runs its candidates as uids base + 2i and base + 2i + 1 (when root)
UIDS_PER_LOCAL_RANK = 256  # accelerate/torchrun ranks on one node start from disjoint uid ranges
UID_CLAIM_TRIES = 512  # ranges tried upwards when the preferred one is held by another pool
CPU_CLAIM_LEVELS = 64  # slots of all pools on one CPU before a slot goes unpinned
IN_FLIGHT = 4  # tasks queued at one zygote: it takes the next one without waiting for the owner
REFILL = 2  # a worker is topped up when this many of its tasks are done: two or more tasks per frame
CHECK_EVERY = 0.25  # seconds between looks for dead or hung workers
GRACE = 10.0  # seconds a zygote may take beyond a task's timeout before it is declared dead
START_TIMEOUT = 60.0  # seconds for a zygote to build its root, run the probe and say hello
START_FAILURES = 3  # consecutive failed starts after which a worker slot is given up
DISABLE = frozenset({"netns", "userns", "seccomp"})  # layers tests may switch off; never the uid drop
CHECK_FUNCTION = re.compile(r"^def[ \t]+check[ \t]*\(", re.MULTILINE)  # HumanEval's check(candidate)


def default_uid_base() -> int:
    """UID_BASE, shifted by the node-local rank: the first range each trainer process tries. Pools that still
    meet (two trainers without LOCAL_RANK, two pools in one process) are kept apart by ``claim_uids``."""
    return UID_BASE + UIDS_PER_LOCAL_RANK * int(os.environ.get("LOCAL_RANK", "0") or 0)


def claim_uids(first: int, count: int) -> tuple[int, list[socket.socket]]:
    """Claim ``count`` consecutive uids from ``first`` up, host-wide, for as long as this process lives.

    Each uid is claimed by binding an abstract unix socket named after it: the kernel refuses a second bind
    of the name and frees it when the owner dies, even by SIGKILL, so no lock file is left behind. When a
    uid of the range is taken, the next range is tried. Abstract names are per network namespace: pools in
    different network namespaces (containers) of one kernel should use different ``uid_base`` values."""
    base = first
    for _ in range(UID_CLAIM_TRIES):
        held: list[socket.socket] = []
        try:
            for uid in range(base, base + count):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound, never listening
                held.append(s)
                s.bind(f"\0passk-sandbox-uid-{uid}")
            return base, held
        except OSError:
            for s in held:
                s.close()
            base += count
    raise RuntimeError(f"sandbox: no free range of {count} uids from {first} (tried {UID_CLAIM_TRIES})")


def claim_cpus(n: int, cpus: Sequence[int]) -> tuple[list[int | None], list[socket.socket]]:
    """A CPU for each of ``n`` worker slots, chosen so that the pools of a host spread over its CPUs: each
    slot takes the CPU that the fewest slots of any pool hold (the lowest free level of ``cpus``, in order).

    A slot's claim on CPU c is the abstract unix socket ``passk-sandbox-cpu-<c>-<level>``, at the lowest level
    still free for c, held as long as this process lives (the kernel frees the name when it dies, even by
    SIGKILL), as ``claim_uids`` does. Without it every pool pinned slot i to CPU i, so that pools sharing a
    host (accelerate ranks, an evaluation beside training) stacked on the same CPUs while others idled. A
    slot finds no claim only when every CPU has CPU_CLAIM_LEVELS slots: it is not pinned (None)."""
    held: list[socket.socket] = []
    chosen: list[int | None] = []
    level = 0
    for _ in range(n):
        cpu = None
        while cpu is None and level < CPU_CLAIM_LEVELS:
            for c in cpus:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound, never listening
                try:
                    s.bind(f"\0passk-sandbox-cpu-{c}-{level}")
                except OSError:
                    s.close()
                    continue
                held.append(s)
                cpu = c
                break
            else:
                level += 1
        chosen.append(cpu)
    return chosen, held


# The status of a task: PASSED = "passed", FAILED = "failed", ... (the names and their meanings: verdicts.py).
Status = enum.StrEnum("Status", [(name.upper(), name) for name in STATUSES], module=__name__)


@dataclass(frozen=True)
class Result:
    """The verdict on one program. ``passed`` is True only when the tests ran to their end and all held.

    For a stdin/stdout task, ``asserts_passed`` / ``asserts_total`` count cases, ``cases`` holds each case's
    verdict in the task's order (``verdicts.CASE_VERDICTS``), and ``stdout`` / ``stderr`` are those of the
    first failing case (4 KiB at most)."""

    status: Status
    passed: bool
    asserts_passed: int = 0
    asserts_total: int = 0
    duration: float = 0.0
    stdout: str = ""
    stderr: str = ""
    message: str = ""
    flags: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Share of assert units (or cases) that passed, for partial credit; 1.0/0.0 from ``passed`` when there
        are none."""
        if self.asserts_total:
            return self.asserts_passed / self.asserts_total
        return 1.0 if self.passed else 0.0

    @classmethod
    def of(cls, status: Status | str, message: str = "", **kw: Any) -> Result:
        status = Status(status)
        return cls(status=status, passed=status is Status.PASSED, message=message, **kw)


def _traversable(path: str) -> bool:
    """Whether every directory above ``path`` lets other users through (o+x)."""
    return all(os.stat(d).st_mode & 0o001 for d in Path(path).resolve().parents)


def _can_make_namespaces() -> bool:
    """Whether this process has CAP_SYS_ADMIN (bit 21), which the candidates' own root needs as root."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 21 & 1)
    return False


def choose_python(python: str | None = None) -> str:
    """The workers' interpreter: this one by default. Candidates drop to other uids, but they see its
    standard library through their own root, where every directory on the way is traversable. Without that
    root (root without CAP_SYS_ADMIN, as in a default container) an interpreter under a directory other users
    cannot enter (a pyenv in /root) would fail at its first lazy import: then /usr/bin/python3."""
    if python:
        return python
    if (
        os.geteuid() == 0
        and not _can_make_namespaces()
        and os.path.exists("/usr/bin/python3")
        and not (_traversable(sys.executable) and _traversable(sys.base_prefix + "/lib"))
    ):
        log.warning(
            "sandbox: no CAP_SYS_ADMIN for the candidates' own root, and other users cannot reach %s: "
            "the workers run /usr/bin/python3 (pass python=... to choose)",
            sys.executable,
        )
        return "/usr/bin/python3"
    return sys.executable


def set_non_dumpable() -> bool:
    """PR_SET_DUMPABLE 0 on this process: no other process of the same uid may ptrace it or read its
    /proc/<pid>/mem. Returns whether it is now non-dumpable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except (OSError, AttributeError):
        return False


def python_paths(readonly_paths: Sequence[str]) -> list[str]:
    """The import path entries that make the packages among ``readonly_paths`` importable: the parent of a
    package directory (``.../site-packages/numpy`` -> ``.../site-packages``, where only numpy is visible to
    the candidates) or of a module file."""
    out: list[str] = []
    for p in readonly_paths:
        is_package = os.path.isdir(p) and os.path.exists(os.path.join(p, "__init__.py"))
        is_module = os.path.isfile(p) and p.endswith((".py", ".so"))
        parent = os.path.dirname(p)
        if (is_package or is_module) and parent not in out:
            out.append(parent)
    return out


_layers_reported: set[tuple] = set()


def _report_layers(layers: dict[str, bool], python: str) -> None:
    """Log once per process (and again only if a later pool has a different set of layers)."""
    key = tuple(sorted(layers.items()))
    if key in _layers_reported:
        return
    _layers_reported.add(key)
    off = [k for k, v in layers.items() if not v]
    if off:
        log.warning(
            "sandbox: isolation layers NOT active: %s (active: %s; python %s)",
            ", ".join(off),
            ", ".join(k for k, v in layers.items() if v),
            python,
        )
    else:
        log.info("sandbox: all isolation layers active: %s (python %s)", ", ".join(layers), python)


_dumps = json.JSONEncoder(separators=(",", ":")).encode  # built once, not at every call
_loads = json.JSONDecoder().decode


def _frame(obj: Any) -> bytes:
    """A frame to a judge: length + JSON. Frames, task keys and result keys: docs/contracts.md, "The sandbox
    protocol" (the judge's side is _zygote/judge.py)."""
    data = _dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def _budget(task: dict[str, Any]) -> float:
    """Seconds a task may run: its timeout, or a stdin/stdout task's overall limit."""
    return task.get("total_timeout") or task["timeout"]


class _Worker:
    """One zygote: its process, its pipes (non-blocking), and the tasks in flight there, oldest first."""

    def __init__(self, slot: int, config: dict[str, Any], python: str, cpu: int | None = None):
        self.slot, self.config, self.python = slot, config, python
        self.cpu = cpu  # pinned there with everything it forks (None: not pinned)
        self.proc: subprocess.Popen | None = None
        self.hello: dict[str, Any] = {}
        self.inbuf, self.outbuf = bytearray(), bytearray()
        self.inflight: collections.deque[tuple[int, dict[str, Any], Future]] = collections.deque()
        self.head_since = 0.0  # when the oldest task in flight started (about)
        self.started_at = 0.0
        self.failures = 0  # consecutive failed starts
        self.next_id = 0

    @property
    def ready(self) -> bool:
        return self.proc is not None and bool(self.hello)

    def spawn(self) -> None:
        cfg = dict(self.config)
        if cfg.get("uid_base") is not None:
            cfg["uid"] = cfg["uid_base"] + 2 * self.slot
        cfg.pop("pin_cpus", None)
        if self.cpu is not None:
            cfg["pin"] = self.cpu
        self.proc = subprocess.Popen(
            [self.python, "-I", "-S", "-c", LAUNCH, str(ZYGOTE.parent), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            cwd="/",
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        os.set_blocking(self.proc.stdin.fileno(), False)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.hello, self.inbuf, self.outbuf = {}, bytearray(), bytearray()
        self.started_at = time.monotonic()

    @property
    def rfd(self) -> int:
        return self.proc.stdout.fileno()  # type: ignore[union-attr]

    @property
    def wfd(self) -> int:
        return self.proc.stdin.fileno()  # type: ignore[union-attr]

    def read(self) -> list[dict[str, Any]] | None:
        """Frames that arrived (one read: the selector said there is something); None when the zygote closed
        its end (it died)."""
        try:
            data = os.read(self.rfd, 1 << 20)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            return None
        self.inbuf += data
        frames = []
        while len(self.inbuf) >= 4:
            (n,) = struct.unpack_from(">I", self.inbuf)
            if len(self.inbuf) < 4 + n:
                break
            frames.append(_loads(self.inbuf[4 : 4 + n].decode()))
            del self.inbuf[: 4 + n]
        return frames

    def flush(self) -> None:
        """Write what the pipe takes now; the rest waits for EVENT_WRITE."""
        while self.outbuf:
            try:
                n = os.write(self.wfd, self.outbuf)
            except BlockingIOError:
                return
            del self.outbuf[:n]

    def kill(self, wait: float = 2.0) -> None:
        proc, self.proc = self.proc, None
        self.hello = {}
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            proc.wait(timeout=wait)  # EOF on stdin: the zygote exits, even mid-task
        except subprocess.TimeoutExpired:
            proc.kill()  # the spawner and candidates follow through PR_SET_PDEATHSIG
            proc.wait()


class _Pool:
    """Workers, the task queue and the I/O thread. Holds no reference to the Sandbox, so that an unreferenced
    Sandbox is garbage collected and its finalizer stops the pool."""

    def __init__(self, n_workers: int, config: dict[str, Any], python: str):
        self.owner_pid = os.getpid()
        self.closed = False
        self.lock = threading.Lock()
        # (task, future, already running): tasks given back by a failed worker are running already
        self.pending: collections.deque[tuple[dict[str, Any], Future, bool]] = collections.deque()
        self.uid_claims: list[socket.socket] = []
        config = dict(config)
        if os.geteuid() == 0:
            base, self.uid_claims = claim_uids(config["uid_base"], 2 * n_workers)
            if base != config["uid_base"]:
                log.info(
                    "sandbox: uids %d.. are held by another pool; this one takes %d..",
                    config["uid_base"],
                    base,
                )
            config["uid_base"] = base
        else:
            config["uid_base"] = None
        self.uids = range(config["uid_base"], config["uid_base"] + 2 * n_workers) if self.uid_claims else None
        self.non_dumpable = set_non_dumpable()
        cpus: list[int | None] = [None] * n_workers
        self.cpu_claims: list[socket.socket] = []
        if config.get("pin_cpus"):
            cpus, self.cpu_claims = claim_cpus(n_workers, sorted(os.sched_getaffinity(0)))
        self.cpus = cpus
        self.workers = [_Worker(i, config, python, cpus[i]) for i in range(n_workers)]
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.woken = False
        try:
            for w in self.workers:  # start them all, then wait: start-up runs in parallel
                w.spawn()
            self._await_hellos()
        except BaseException:
            self._shutdown()
            raise
        hello = self.workers[0].hello
        self.layers = dict(
            hello["layers"],
            unique_uids=bool(self.uid_claims),
            non_dumpable=hello["layers"]["non_dumpable"] and self.non_dumpable,
        )
        self.root = hello.get("root")
        if hello.get("root_error"):
            log.warning("sandbox: %s", hello["root_error"])
        _report_layers(self.layers, hello.get("python", "?"))
        self.thread = threading.Thread(target=self._loop, name="sandbox-io", daemon=True)
        self.thread.start()

    # ---- start-up -----------------------------------------------------------------------------------------
    def _await_hellos(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        waiting = {w.rfd: w for w in self.workers}
        with selectors.DefaultSelector() as sel:
            for fd in waiting:
                sel.register(fd, selectors.EVENT_READ)
            while waiting:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(
                        f"sandbox: worker {next(iter(waiting.values())).slot} did not start within "
                        f"{START_TIMEOUT:.0f} s"
                    )
                for key, _ in sel.select(remaining):
                    w = waiting[key.fd]
                    frames = w.read()
                    if frames is None:
                        raise RuntimeError(
                            f"sandbox: worker {w.slot} exited while starting "
                            f"({w.proc.poll() if w.proc else '?'}); run python -I -S -c '{LAUNCH}' "
                            f"{ZYGOTE.parent} '{{}}' to see why"
                        )
                    for frame in frames:
                        w.hello = frame["hello"]
                    if w.hello:
                        sel.unregister(key.fd)
                        del waiting[key.fd]

    # ---- the I/O thread -------------------------------------------------------------------------------------
    def submit(self, task: dict[str, Any], future: Future) -> None:
        with self.lock:
            if self.closed:
                future.set_result(Result.of(Status.SANDBOX_ERROR, "the sandbox was closed"))
                return
            self.pending.append((task, future, False))
            wake = not self.woken
            self.woken = True
        if wake:
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.wake_r, selectors.EVENT_READ, None)
        for w in self.workers:
            sel.register(w.rfd, selectors.EVENT_READ, w)
        next_check = 0.0
        try:
            while not self.closed:
                self._dispatch(sel)
                timeout = self._timeout()
                if timeout is not None:  # timing is looked at every CHECK_EVERY at most
                    timeout = max(timeout, next_check - time.monotonic())
                for key, mask in sel.select(timeout):
                    w = key.data
                    if w is None:
                        self._drain_wake()
                        continue
                    if w.proc is None or key.fd not in (w.rfd, w.wfd):
                        continue
                    if mask & selectors.EVENT_READ:
                        self._on_read(sel, w)
                    if mask & selectors.EVENT_WRITE and w.proc is not None:
                        w.flush()
                        if not w.outbuf:
                            sel.unregister(w.wfd)
                if time.monotonic() >= next_check:
                    self._check_time(sel)
                    next_check = time.monotonic() + CHECK_EVERY
        except BaseException as e:  # never leave futures hanging
            log.exception("sandbox: the I/O thread failed")
            self._fail_all(f"the sandbox's I/O thread failed: {type(e).__name__}: {e}")
        finally:
            sel.close()
            self._shutdown()

    def _drain_wake(self) -> None:
        # Drain first, then clear the flag: a task submitted in between then writes a byte of its own (or, if
        # it saw the flag still set, is queued already and the dispatch that follows takes it).
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self.lock:
            self.woken = False

    def _dispatch(self, sel: selectors.BaseSelector) -> None:
        """Top every ready worker up to IN_FLIGHT tasks, in one frame each, once REFILL of its tasks are done."""
        for w in self.workers:
            if not w.ready or len(w.inflight) > IN_FLIGHT - REFILL:
                continue
            batch = []
            with self.lock:
                while self.pending and len(w.inflight) + len(batch) < IN_FLIGHT:
                    task, future, running = self.pending.popleft()
                    if running or future.set_running_or_notify_cancel():
                        batch.append((task, future))
            if not batch:
                return  # nothing pending: the other workers need nothing either
            if not w.inflight:
                w.head_since = time.monotonic()
            tasks = []
            for task, future in batch:
                w.next_id += 1
                w.inflight.append((w.next_id, task, future))
                tasks.append(dict(task, id=w.next_id))
            writing = bool(w.outbuf)
            w.outbuf += _frame(tasks)
            w.flush()
            if w.outbuf and not writing:
                sel.register(w.wfd, selectors.EVENT_WRITE, w)  # the rest when the pipe has room

    def _on_read(self, sel: selectors.BaseSelector, w: _Worker) -> None:
        try:
            frames = w.read()
        except ValueError:
            frames = None  # a malformed frame: the zygote is broken
        if frames is None:
            self._fault(sel, w, "the worker exited")
            return
        for frame in frames:
            if "hello" in frame:
                w.hello, w.failures = frame["hello"], 0
                continue
            if not w.inflight or frame.get("id") != w.inflight[0][0]:
                self._fault(sel, w, "the worker answered out of order")
                return
            frame.pop("id", None)
            try:
                frame["flags"] = tuple(frame.get("flags", ()))
                if "cases" in frame:
                    frame["cases"] = tuple(frame["cases"])
                result = Result.of(frame.pop("status"), **frame)
            except (KeyError, TypeError, ValueError) as e:
                # Before the task leaves inflight: _fault answers it, where a lost future would hang its caller.
                self._fault(
                    sel, w, f"the worker sent a result the protocol does not allow ({type(e).__name__}: {e})"
                )
                return
            _, task, future = w.inflight.popleft()
            w.head_since = time.monotonic()
            future.set_result(result)

    def _timeout(self) -> float | None:
        """Seconds until the earliest moment a worker could be declared dead."""
        now, best = time.monotonic(), None
        for w in self.workers:
            if w.proc is None:
                t = now + 1.0  # a slot waiting to be restarted
            elif not w.hello:
                t = w.started_at + START_TIMEOUT
            elif w.inflight:
                t = w.head_since + _budget(w.inflight[0][1]) + GRACE
            else:
                continue
            best = t if best is None else min(best, t)
        return None if best is None else max(0.0, best - now)

    def _check_time(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.proc is None:
                if w.failures < START_FAILURES:
                    self._restart(sel, w)
            elif not w.hello and now > w.started_at + START_TIMEOUT:
                self._fault(sel, w, f"the worker did not start within {START_TIMEOUT:.0f} s")
            elif w.hello and w.inflight and now > w.head_since + _budget(w.inflight[0][1]) + GRACE:
                self._fault(sel, w, f"the worker did not answer within {GRACE:.0f} s of the time limit")
        if all(w.proc is None and w.failures >= START_FAILURES for w in self.workers):
            self._fail_all("no worker could be (re)started")

    def _fault(self, sel: selectors.BaseSelector, w: _Worker, why: str) -> None:
        """A zygote died, hung or broke the protocol. The task it was running gets sandbox_error (it is never
        run again behind the caller's back); the tasks queued behind it never started and go back to the
        queue. The slot restarts."""
        for fd in (w.rfd, w.wfd):
            try:
                sel.unregister(fd)
            except (KeyError, ValueError):
                pass
        started = bool(w.hello)
        w.kill(wait=0.5)
        if not started:
            w.failures += 1
        if w.inflight:
            _, _, future = w.inflight.popleft()
            future.set_result(Result.of(Status.SANDBOX_ERROR, f"worker {w.slot} failed: {why}"))
        with self.lock:
            while w.inflight:
                _, task, future = w.inflight.pop()
                self.pending.appendleft((task, future, True))
        log.warning("sandbox: worker %d failed (%s); restarting it", w.slot, why)
        self._restart(sel, w)

    def _restart(self, sel: selectors.BaseSelector, w: _Worker) -> None:
        if self.closed:
            return
        try:
            w.spawn()
        except OSError as e:
            w.proc, w.failures = None, w.failures + 1
            log.warning("sandbox: worker %d could not be started: %s", w.slot, e)
            return
        sel.register(w.rfd, selectors.EVENT_READ, w)

    def _fail_all(self, why: str) -> None:
        with self.lock:
            futures = [future for _, future, _ in self.pending]
            self.pending.clear()
        for w in self.workers:
            futures += [future for _, _, future in w.inflight]
            w.inflight.clear()
        for future in futures:
            if not future.done():
                future.set_result(Result.of(Status.SANDBOX_ERROR, why))

    # ---- shutting down ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed or os.getpid() != self.owner_pid:  # a forked child must not touch the parent's workers
            return
        with self.lock:
            self.closed = True
        self._wake()
        thread = getattr(self, "thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)

    def _shutdown(self) -> None:
        self.closed = True
        self._fail_all("the sandbox was closed")
        for w in self.workers:  # EOF to all first: they stop in parallel
            for stream in (w.proc.stdin,) if w.proc is not None else ():
                try:
                    stream.close()  # type: ignore[union-attr]
                except OSError:
                    pass
        for w in self.workers:
            w.kill()
        for s in self.uid_claims + self.cpu_claims:
            s.close()
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers if w.proc is not None]


class Sandbox:
    """A pool of isolated workers that run untrusted programs against trusted tests.

    Args:
        n_workers: worker processes (default: ``os.cpu_count()``).
        timeout: wall-clock seconds per program, its load included; the CPU limit is ``ceil(timeout) + 1``.
        memory_mb: address-space limit of the candidate process.
        max_output_bytes: stdout + stderr cap; beyond it the program is killed (status ``output_limit``).
        python: interpreter for the workers (default: this one).
        uid_base: first uid tried for the ``2 * n_workers`` uids the candidates run as when started as root
            (default: 61000 + 256 * LOCAL_RANK). The range is claimed host-wide; when another pool holds it,
            the next free range is taken (``uids`` says which).
        readonly_paths: host files or directories the candidates may read, bound read-only at the same path
            into their root (nothing else of the host is there: see docs/sandbox.md), with the shared libraries
            their extension modules load. A package directory among them (``.../site-packages/numpy``) is
            importable: its parent joins the candidates' and the judge's ``sys.path`` (only what was bound is
            visible there).
        pin_cpus: pin each worker (its judge, spawner and candidates) to one CPU this process may use: they hand
            work to each other at every call, and on one CPU that costs no cross-CPU wake-ups. The CPUs are
            claimed host-wide (``claim_cpus``): each worker takes the CPU that the fewest workers of any pool
            hold, so that pools sharing a host spread out instead of stacking on the first CPUs.
        disable: isolation layers to switch off, for tests and debugging ("netns", "userns", "seccomp").
            The uid drop cannot be switched off: candidates never run as root. ``layers`` reports what is
            really active.

    The pool starts on first use (or ``start()``) and stops on ``close()``, at interpreter exit, or when the
    object is garbage collected. Its workers exit on their own when this process dies.

    Starting the pool makes this process non-dumpable (``PR_SET_DUMPABLE`` 0), as its workers are: a
    candidate that got the same uid (the non-root mode) can then neither ptrace it nor read its memory. The
    cost: attaching a debugger or profiler (gdb, py-spy, perf -p) to this process needs root or
    CAP_SYS_PTRACE, and it leaves no core dump.
    """

    def __init__(
        self,
        n_workers: int | None = None,
        timeout: float = 3.0,
        memory_mb: int = 1024,
        max_output_bytes: int = 1 << 20,
        python: str | None = None,
        *,
        uid_base: int | None = None,
        readonly_paths: Sequence[str] = (),
        pin_cpus: bool = True,
        disable: Sequence[str] = (),
    ):
        unknown = set(disable) - DISABLE
        if unknown:
            raise ValueError(
                f"cannot disable {sorted(unknown)} (only {sorted(DISABLE)}): candidates never run as root"
            )
        if timeout <= 0 or memory_mb < 64 or max_output_bytes < 1:
            raise ValueError(
                "timeout must be > 0, memory_mb >= 64 (the interpreter needs ~40 MiB), max_output_bytes >= 1"
            )
        paths = [os.path.abspath(p) for p in readonly_paths]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise ValueError(f"readonly_paths that do not exist: {missing}")
        hidden = [p for p in paths if p == "/" or p.split("/")[1] in ("tmp", "proc", "dev")]
        if hidden:
            raise ValueError(
                f"readonly_paths {hidden}: / is not allowed, and a candidate's own /tmp, /proc and "
                "/dev would hide anything bound under them"
            )
        self.n_workers = max(1, n_workers or os.cpu_count() or 1)
        self.timeout, self.memory_mb, self.max_output_bytes = (
            float(timeout),
            int(memory_mb),
            int(max_output_bytes),
        )
        self.python = choose_python(python)
        uid_base = default_uid_base() if uid_base is None else int(uid_base)
        self._config = {
            "uid_base": uid_base,
            "readonly_paths": paths,
            "python_paths": python_paths(paths),
            "disable": list(disable),
            "owner_uid": os.getuid(),
            "pin_cpus": pin_cpus,
        }
        self._pool: _Pool | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    # ---- life cycle ------------------------------------------------------------------------------------
    def start(self) -> Sandbox:
        with self._lock:
            if self._pool is None:
                pool = _Pool(self.n_workers, self._config, self.python)
                self._pool = pool
                self._finalizer = weakref.finalize(self, pool.close)
        return self

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def layers(self) -> dict[str, bool]:
        """Isolation layers as observed by a probe program in a real candidate process (``unique_uids`` and
        this process's part of ``non_dumpable``: as observed here)."""
        return dict(self.start()._pool.layers)  # type: ignore[union-attr]

    @property
    def uids(self) -> range | None:
        """The uids this pool's candidates run as (claimed host-wide), or None when not started as root."""
        return self.start()._pool.uids  # type: ignore[union-attr]

    def worker_pids(self) -> list[int]:
        """Process ids of the zygotes (for monitoring and tests)."""
        return self._pool.pids() if self._pool is not None else []

    # ---- running ---------------------------------------------------------------------------------------
    def _task(
        self,
        program: str,
        tests: str = "",
        entry_point: str | None = None,
        *,
        timeout: float | None = None,
        mode: str = "auto",
        trusted_code: str | None = None,
    ) -> dict[str, Any] | Result:
        """The task dict for a zygote, or a Result when the input is refused before dispatch."""
        if mode not in ("auto", "rpc", "exec"):
            raise ValueError(f"mode must be 'auto', 'rpc' or 'exec', not {mode!r}")
        if mode == "auto":  # the strictest mode, whatever columns the dataset has: exec only when asked for
            mode = "rpc"
        if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
            return Result.of(Status.INVALID_INPUT, f"entry_point {entry_point!r} is not an identifier")
        if not entry_point and isinstance(tests, str) and CHECK_FUNCTION.search(tests):
            # Without one, nothing would call check() and any program would pass.
            raise ValueError("tests that define check(candidate) need an entry_point: the function to check")
        texts = (("program", program), ("tests", tests or ""))
        if trusted_code is not None:
            texts += (("trusted_code", trusted_code),)
        for name, text in texts:
            if not isinstance(text, str):
                return Result.of(Status.INVALID_INPUT, f"{name} is a {type(text).__name__}, not a str")
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError as e:
                return Result.of(
                    Status.INVALID_INPUT, f"{name} is not valid UTF-8 text: {e.reason} at {e.start}"
                )
            if size > MAX_PROGRAM_BYTES:
                return Result.of(Status.INVALID_INPUT, f"{name} is {size} bytes (limit {MAX_PROGRAM_BYTES})")
        if "\x00" in program:  # compile() refuses it too; subprocess-based harnesses crash on it
            return Result.of(Status.SYNTAX_ERROR, "source code contains a NUL byte")
        timeout = self.timeout if timeout is None else float(timeout)
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, not {timeout}")
        task = {
            "program": program,
            "tests": tests or "",
            "entry_point": entry_point,
            "mode": mode,
            "timeout": timeout,
            "memory_mb": self.memory_mb,
            "max_output": self.max_output_bytes,
        }
        if trusted_code is not None:
            task["trusted"] = trusted_code
        return task

    def _stdio_task(
        self,
        program: str,
        cases: Sequence[Sequence[str]],
        *,
        timeout: float | None = None,
        total_timeout: float | None = None,
        stop_on_failure: bool = False,
        compare: str = "lines",
        float_tol: float | None = None,
    ) -> dict[str, Any] | Result:
        """The task dict of a stdin/stdout task, or a Result when the input is refused before dispatch."""
        if compare not in COMPARE_MODES:
            raise ValueError(f"compare must be one of {', '.join(COMPARE_MODES)}, not {compare!r}")
        if float_tol is not None and not float_tol >= 0:
            raise ValueError(f"float_tol must be >= 0 or None, not {float_tol}")
        timeout = self.timeout if timeout is None else float(timeout)
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, not {timeout}")
        if isinstance(cases, str | bytes):
            raise ValueError("cases must be a sequence of (input, expected output) pairs, not a string")
        pairs = [tuple(case) for case in cases]
        if not pairs:
            raise ValueError("a stdin/stdout task needs at least one case")
        if total_timeout is None:  # the cases' own limits, and time to compile and to start each case
            total_timeout = len(pairs) * (timeout + CASE_START) + 1.0
        total_timeout = float(total_timeout)
        if not total_timeout > 0:
            raise ValueError(f"total_timeout must be > 0, not {total_timeout}")
        if not isinstance(program, str):
            return Result.of(Status.INVALID_INPUT, f"program is a {type(program).__name__}, not a str")
        size = 0
        for n, pair in enumerate(pairs, 1):
            if len(pair) != 2 or not all(isinstance(text, str) for text in pair):
                return Result.of(
                    Status.INVALID_INPUT, f"case {n} is not an (input, expected output) pair of str"
                )
            for text in (program, *pair) if n == 1 else pair:
                try:
                    size += len(text.encode("utf-8"))
                except UnicodeEncodeError as e:
                    return Result.of(
                        Status.INVALID_INPUT,
                        f"case {n} or the program is not valid UTF-8 text: {e.reason} at {e.start}",
                    )
        if len(program.encode("utf-8")) > MAX_PROGRAM_BYTES:
            return Result.of(Status.INVALID_INPUT, f"program is over {MAX_PROGRAM_BYTES} bytes")
        if size > MAX_CASES_BYTES:
            return Result.of(Status.INVALID_INPUT, f"the cases are {size} bytes (limit {MAX_CASES_BYTES})")
        if "\x00" in program:
            return Result.of(Status.SYNTAX_ERROR, "source code contains a NUL byte")
        return {
            "mode": "stdio",
            "program": program,
            "cases": pairs,
            "timeout": min(timeout, total_timeout),
            "total_timeout": total_timeout,
            "stop_on_failure": bool(stop_on_failure),
            "compare": compare,
            "float_tol": None if float_tol is None else float(float_tol),
            "memory_mb": self.memory_mb,
            "max_output": self.max_output_bytes,
        }

    def _queue(self, task: dict[str, Any] | Result) -> Future:
        future: Future = Future()
        if isinstance(task, Result):
            future.set_result(task)
            return future
        pool = self.start()._pool
        if pool is None or pool.closed:
            future.set_result(Result.of(Status.SANDBOX_ERROR, "the sandbox was closed"))
        else:
            pool.submit(task, future)
        return future

    def submit(
        self,
        program: str,
        tests: str = "",
        entry_point: str | None = None,
        *,
        timeout: float | None = None,
        mode: str = "auto",
        trusted_code: str | None = None,
    ) -> Future:
        """Queue one program; returns a concurrent.futures.Future of its Result."""
        return self._queue(
            self._task(program, tests, entry_point, timeout=timeout, mode=mode, trusted_code=trusted_code)
        )

    def submit_stdio(
        self,
        program: str,
        cases: Sequence[Sequence[str]],
        *,
        timeout: float | None = None,
        total_timeout: float | None = None,
        stop_on_failure: bool = False,
        compare: str = "lines",
        float_tol: float | None = None,
    ) -> Future:
        """Queue one stdin/stdout task (see ``run_stdio``); returns a Future of its Result."""
        return self._queue(
            self._stdio_task(
                program,
                cases,
                timeout=timeout,
                total_timeout=total_timeout,
                stop_on_failure=stop_on_failure,
                compare=compare,
                float_tol=float_tol,
            )
        )

    def _submit_any(self, task: dict[str, Any]) -> Future:
        return self.submit_stdio(**task) if "cases" in task else self.submit(**task)

    def run(
        self,
        program: str,
        tests: str = "",
        entry_point: str | None = None,
        *,
        timeout: float | None = None,
        mode: str = "auto",
        trusted_code: str | None = None,
    ) -> Result:
        """Run ``program`` against ``tests``.

        mode "rpc": the tests run in the worker and call ``entry_point`` (and, in plain asserts, any function
        of the program) across processes; "exec": program, tests and ``check(entry_point)`` in one process,
        verdict by nonce (for tests that cannot cross a process boundary); "auto": rpc, with or without an
        entry_point (tests that define ``check`` need one: ValueError). ``trusted_code`` (the dataset prompt) is executed on the trusted side into the tests'
        namespace: the tests see its definitions (helpers such as HumanEval's ``poly``), never the program's
        redefinitions of them; the entry point, and names it does not define, are the program's."""
        return self.submit(
            program, tests, entry_point, timeout=timeout, mode=mode, trusted_code=trusted_code
        ).result()

    def run_stdio(
        self,
        program: str,
        cases: Sequence[Sequence[str]],
        *,
        timeout: float | None = None,
        total_timeout: float | None = None,
        stop_on_failure: bool = False,
        compare: str = "lines",
        float_tol: float | None = None,
    ) -> Result:
        """Run a whole program against stdin/stdout ``cases``: (input, expected output) pairs of str.

        The program is compiled once; every case runs in a fresh process forked from the one that compiled
        it, with all of a candidate's isolation, its input on stdin, within ``timeout`` seconds (default: the
        sandbox's), and all cases within ``total_timeout`` (default: no limit beyond the cases' own).
        The order is random (os.urandom); ``stop_on_failure`` stops at the first case that fails. Each case's
        verdict (``Result.cases``) is decided outside the program, from its exit status and by comparing its
        stdout with the expected output under ``compare`` ("lines" or "tokens") and ``float_tol`` (see
        ``sandbox.verdicts``). A non-zero exit is a runtime error whatever it printed."""
        return self.submit_stdio(
            program,
            cases,
            timeout=timeout,
            total_timeout=total_timeout,
            stop_on_failure=stop_on_failure,
            compare=compare,
            float_tol=float_tol,
        ).result()

    def run_batch(self, tasks: Sequence[dict[str, Any]], *, progress: bool = False) -> list[Result]:
        """Run many tasks on all workers; results in input order. A task is a dict of ``run`` keyword
        arguments, or of ``run_stdio`` keyword arguments (it has ``cases``)."""
        futures = [self._submit_any(t) for t in tasks]
        if progress:
            from tqdm import tqdm  # lazy: only for the progress bar

            for _ in tqdm(as_completed(futures), total=len(futures), desc="sandbox", unit="prog"):
                pass
        else:
            wait(futures)  # one wake-up of this thread for the batch, not one per result
        return [f.result() for f in futures]

    async def arun(
        self,
        program: str,
        tests: str = "",
        entry_point: str | None = None,
        *,
        timeout: float | None = None,
        mode: str = "auto",
        trusted_code: str | None = None,
    ) -> Result:
        """``run`` without blocking the event loop."""
        return await asyncio.wrap_future(
            self.submit(program, tests, entry_point, timeout=timeout, mode=mode, trusted_code=trusted_code)
        )

    async def arun_stdio(self, program: str, cases: Sequence[Sequence[str]], **kwargs: Any) -> Result:
        """``run_stdio`` without blocking the event loop."""
        return await asyncio.wrap_future(self.submit_stdio(program, cases, **kwargs))

    async def arun_batch(self, tasks: Sequence[dict[str, Any]]) -> list[Result]:
        """``run_batch`` without blocking the event loop."""
        futures = [self._submit_any(t) for t in tasks]
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))


# ---- process-wide shared instances -----------------------------------------------------------------------
_shared: dict[tuple, Sandbox] = {}
_shared_pid = os.getpid()
_shared_lock = threading.Lock()


def get_sandbox(**kwargs: Any) -> Sandbox:
    """The process-wide Sandbox for these keyword arguments, created on first use (again after a fork)."""
    global _shared_pid
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
    with _shared_lock:
        if _shared_pid != os.getpid():  # a forked child: the parent's workers are not ours
            _shared.clear()
            _shared_pid = os.getpid()
        sandbox = _shared.get(key)
        if sandbox is None:
            sandbox = _shared[key] = Sandbox(**kwargs)
    return sandbox


@atexit.register
def _close_shared() -> None:
    for sandbox in list(_shared.values()):
        sandbox.close()


def run(program: str, tests: str = "", entry_point: str | None = None, **kwargs: Any) -> Result:
    """``get_sandbox().run(...)``."""
    return get_sandbox().run(program, tests, entry_point, **kwargs)


def run_batch(tasks: Sequence[dict[str, Any]], *, progress: bool = False) -> list[Result]:
    """``get_sandbox().run_batch(...)``."""
    return get_sandbox().run_batch(tasks, progress=progress)


async def arun_batch(tasks: Sequence[dict[str, Any]]) -> list[Result]:
    """``await get_sandbox().arun_batch(...)``."""
    return await get_sandbox().arun_batch(tasks)
