"""Zygote worker of the passk sandbox. Stdlib only, never imports the ``sandbox`` package; started by the
owner as ``python -I -S -c "...import _zygote; _zygote.run(CONFIG_JSON)"`` with a minimal environment
(imported, not run as a script: a script is compiled at every start, which leaves more heap in every fork).
One zygote per worker slot, pinned to one CPU with everything it forks (the three processes below hand work to
each other at every call). This module is the start-up (the judge's isolation, the probe, the task loop); the
rest, imported whole before anything forks: ``base`` (fds, flags, system calls), ``wire`` (frames and values),
``seccomp``, ``root`` (the candidates' root), ``candidate`` (candidate and case server), ``spawner``,
``judge`` (rpc and exec) and ``stdio_judge``.

Processes of one slot:

* **judge** (this process; root when the owner is root): enters a private network namespace (and a user
  namespace when not root), then loops: tasks in on fd 3, results out on fd 4, each frame a 4-byte
  big-endian length + JSON. Runs the *trusted* code (the dataset prompt and the tests); the candidate is
  reached only through ``RemoteFunction`` proxies that move plain tagged JSON. The calls a test is certain to
  make first (its leading ``assert candidate(<literals>) == <literal>`` statements) are sent with the task
  and answered in order: the same calls, one wake-up instead of one per call. Exits on EOF of fd 3, i.e.
  when the owner closes the pool or dies.
* **spawner**: forked at start-up, before any task, so its memory never holds a test: a candidate forked
  from it cannot find expected values even in freed memory. It is PID 1 of a PID namespace of its own and
  builds, once, the candidates' root: a read-only tmpfs holding only the interpreter's standard library, the
  shared libraries its extension modules load, a minimal /dev and mount points for /proc and /tmp
  (``build_root``); then it attaches the seccomp filter that every candidate inherits. It keeps one
  candidate forked and set up ahead of time; the judge takes it over a socket (its pipes and a pidfd passed
  with SCM_RIGHTS), and the spawner forks the next while the task runs.
* **candidate**: one per task, PID 1 of its own PID namespace (the kernel kills whatever it leaves when it
  dies) with its own IPC and mount namespaces, a /proc of its own, and a fresh size- and inode-limited
  tmpfs as /tmp and working directory, discarded with the namespace (never walked). Then rlimits and its own
  uid; it reads the task, lowers RLIMIT_AS/RLIMIT_CPU to the task's, runs the untrusted program and serves
  calls (rpc mode), or runs trusted code + program + tests and writes the per-task nonce at the end (exec
  mode).
* **case server** (stdin/stdout tasks): forked by the spawner on request, one per task. It compiles the
  program once and, for each case the judge asks for, forks a case process set up exactly as a candidate
  (its own namespaces, /tmp, rlimits, uid), whose stdin, stdout and stderr are pipes to the judge. The judge
  streams the input, reads the output and decides the verdict; the server never sees either, and runs no
  program code.

The frames, task keys, result keys and flags are written down in docs/contracts.md ("The sandbox protocol").
Every limit says what it protects, codejail-style (beside it, in the module that uses it).
"""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import builtins
import ctypes
import gc
import json
import os
import signal
import sys
import time

from . import judge
from .base import (
    CLONE_NEWNET,
    CLONE_NEWUSER,
    OWNER_IN,
    OWNER_OUT,
    PR_GET_DUMPABLE,
    PR_SET_DUMPABLE,
    compile_source,
    libc,
    prctl,
    set_name,
)
from .candidate import _flush
from .judge import Abort, OwnerGone, OwnerLink, Run, Verdict, judge_exec, judge_rpc
from .root import STDLIB_DIRS
from .seccomp import CANDIDATE, THREADS, build_seccomp
from .spawner import SCRATCH_INODES, SCRATCH_MB, Spawner
from .stdio_judge import describe_exit, judge_stdio
from .wire import decode_value, encode_frame, encode_reply, encode_value, write_all

# Imported once here so that candidates fork with them loaded: an import in a forked candidate is dear even for
# bisect (the import machinery's first use copies many pages), dearer for bigger modules. But every page the
# spawner holds costs every task at fork and exit, so the list holds the modules solutions commonly import and
# that are small; calendar, dataclasses, datetime, decimal, fractions, hashlib and statistics (megabytes and many
# mappings together) are imported by the few programs that use them (benchmarks/bench_sandbox.py measures the
# fork floor this image sets).
PREIMPORT = (
    "abc array bisect cmath collections collections.abc contextlib copy enum functools heapq io itertools "
    "keyword numbers operator random re string textwrap typing unicodedata"
).split()

ALARM_SLACK = 1.0  # the judge's own backstop (SIGALRM) for trusted code that never returns

JUDGES = {"rpc": judge_rpc, "exec": judge_exec, "stdio": judge_stdio}


def run_task(task: dict, spawner: Spawner) -> dict:
    t0 = time.monotonic()
    verdict = Verdict()
    stdio = task["mode"] == "stdio"
    budget = task["total_timeout"] if stdio else task["timeout"]
    run = Run(spawner, t0 + budget, task["max_output"], server=stdio)
    status = message = "sandbox_error"
    try:
        signal.setitimer(signal.ITIMER_REAL, budget + ALARM_SLACK)  # backstop for trusted code
        try:
            status, message = JUDGES[task["mode"]](run, task, verdict)
        except OwnerGone:
            raise
        except Abort as a:
            status, message = a.reason, a.message
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        # The exit status matters only when the candidate ended on its own (or in exec mode).
        wait = task["mode"] == "exec" or status not in (
            "passed",
            "failed",
            "runtime_error",
            "timeout",
            "output_limit",
            "memory_exceeded",
            "sandbox_error",
        )
        exit_status = run.finish(spawner, wait)

    flags = verdict.flags
    if status == "early_exit" and stdio:  # the case server died before it compiled the program
        status, message = "runtime_error", f"the program could not be compiled ({describe_exit(exit_status)})"
    elif status == "early_exit":
        flags.add("early_exit")
        status = "runtime_error"
        if exit_status is not None and os.WIFSIGNALED(exit_status):
            if os.WTERMSIG(exit_status) == signal.SIGXCPU:
                status, message = "timeout", "CPU time limit exceeded"
            elif b"MemoryError" in run.err:
                status = "memory_exceeded"
        message = f"{message} ({describe_exit(exit_status)})"
    elif status == "protocol_violation":
        flags.add("protocol_violation")
        status = "runtime_error"
    elif task["mode"] == "exec" and status == "passed" and exit_status != 0:
        status, message = "runtime_error", f"nonce written but {describe_exit(exit_status)}"
    units = verdict.units
    result = {
        "id": task.get("id"),
        "status": status,
        "asserts_passed": units.passed if units else verdict.cases.count("passed") if verdict.cases else 0,
        "asserts_total": verdict.asserts_total,
        "duration": time.monotonic() - t0,
        "stdout": (run.out if verdict.stdout is None else verdict.stdout).decode("utf-8", "replace"),
        "stderr": (run.err if verdict.stderr is None else verdict.stderr).decode("utf-8", "replace"),
        "message": message,
        "flags": sorted(flags),
    }
    if stdio:
        result["cases"] = verdict.cases or ["skipped"] * len(task["cases"])
    return result


# ---- start-up: isolation of the judge, the probe, the loop ------------------------------------------------
def isolate(cfg: dict) -> dict:
    """Enter a private network namespace (and, without root, the user namespace it needs). Returns the
    layers the spawner may then try."""
    off = set(cfg.get("disable", ()))
    layers = {"userns": False, "netns": False}
    if os.geteuid() != 0:
        if "userns" in off:
            return layers
        uid, gid = os.getuid(), os.getgid()
        flags = CLONE_NEWUSER | (0 if "netns" in off else CLONE_NEWNET)
        if libc.unshare(flags) != 0:
            return layers
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
        layers.update(userns=True, netns=bool(flags & CLONE_NEWNET))
    elif "netns" not in off:
        # Loopback stays down in a fresh network namespace: no network at all, not even 127.0.0.1.
        layers["netns"] = libc.unshare(CLONE_NEWNET) == 0
    return layers


PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None)
r = {"uid": os.getuid(), "env": sorted(os.environ), "pid": os.getpid(), "root": sorted(os.listdir("/")),
     "seccomp": libc.prctl(21, 0, 0, 0, 0) == 2, "dumpable": libc.prctl(3, 0, 0, 0, 0)}
try:
    pid = os.fork()
except OSError:
    r["fork"] = False
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    r["fork"] = True
def attempt(key, fn):
    try:
        r[key] = fn()
    except OSError:
        r[key] = None
attempt("ifaces", lambda: sorted(l.split(":")[0].strip() for l in open("/proc/self/net/dev").readlines()[2:]))
attempt("procs", lambda: sorted(e for e in os.listdir("/proc") if e.isdigit()))
attempt("ipc", lambda: os.readlink("/proc/self/ns/ipc"))
attempt("mnt", lambda: os.readlink("/proc/self/ns/mnt"))
attempt("dev", lambda: sorted(os.listdir("/dev")))
st = os.statvfs(".")
r["scratch"] = [os.path.realpath("."), st.f_blocks * st.f_frsize, st.f_files]
def writable(path):
    try:
        with open(os.path.join(path, ".passk_probe"), "w"):
            pass
    except OSError:
        return False
    os.unlink(os.path.join(path, ".passk_probe"))
    return True
r["scratch_writable"] = writable(".")
r["root_writable"] = writable("/")
r["host_counters"] = [p for p in ("stat", "meminfo", "loadavg", "vmstat") if os.path.exists("/proc/" + p)]
r["proc_self"] = os.path.exists("/proc/self/status")
def refused(fn):
    try:
        fn()
    except OSError as e:
        return e.errno == 1
    return False
def fadvise():
    fd = os.open(os.__file__, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
r["fadvise_refused"] = refused(fadvise)
r["memfd_refused"] = refused(lambda: os.close(os.memfd_create("probe")))
def own_files():
    if ctypes.CDLL(None, use_errno=True).unshare(0x400) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
r["unshare_files_refused"] = refused(own_files)
libc.prctl(4, 1, 0, 0, 0)
r["dumpable_after"] = libc.prctl(3, 0, 0, 0, 0)
print(json.dumps(r))
"""


def probe(spawner, cfg, layers, top):
    """Run a probe candidate through the real path and report the layers it observed."""
    task = {
        "mode": "exec",
        "program": PROBE,
        "tests": "",
        "entry_point": None,
        "timeout": 10.0,
        "memory_mb": 512,
        "max_output": 1 << 16,
    }
    res = run_task(task, spawner)
    try:
        r = json.loads(res["stdout"])
    except ValueError:
        raise SystemExit(f"passk zygote: probe failed: {res}") from None
    own_ipc = os.readlink("/proc/self/ns/ipc")
    return {
        "separate_process": True,
        "rlimits": True,
        "separate_uid": r["uid"] not in (0, cfg.get("owner_uid", os.getuid())),
        "no_new_processes": not r["fork"],
        "network_namespace": r["ifaces"] is not None and set(r["ifaces"]) <= {"lo"},
        "own_root": top is not None and r["root"] == top and not r["root_writable"],
        "minimal_dev": r["dev"] == ["fd", "null", "stderr", "stdin", "stdout", "urandom", "zero"],
        "pid_namespace": r["pid"] == 1 and r["procs"] == ["1"],
        "ipc_namespace": r["ipc"] is not None and r["ipc"] != own_ipc,
        "scratch_tmpfs": r["scratch"] == ["/tmp", SCRATCH_MB << 20, SCRATCH_INODES] and r["scratch_writable"],
        "seccomp": r["seccomp"],
        "clean_env": set(r["env"]) <= {"PATH", "LANG"},
        "non_dumpable": r["dumpable"] == 0
        and prctl(PR_GET_DUMPABLE) == 0,  # the spawner inherits the judge's
        # Sandbox v3: no channel between tasks, no memory past the limits, no way back to dumpable.
        "proc_own_view": r["proc_self"] and r["host_counters"] == [],
        "page_cache_sealed": r["fadvise_refused"],
        "no_memfd": r["memfd_refused"],
        "shared_file_table": r["unshare_files_refused"],  # and a thread must share it: the threads filter
        "dumpable_locked": r["dumpable_after"] == 0,
    }


WARM_PROGRAM = '''
from typing import List, Optional


def solve(numbers: List[int], k: Optional[int] = None) -> List[int]:
    """ A docstring, as in the prompts.
    >>> solve([1, 2], 1)
    [2, 3]
    """
    return [n + (k or 0) for n in numbers if n is not None]
'''


def warm_up():
    """Run the candidate's code paths once before the spawner forks: lazy one-time initialisations (the
    compiler's, the JSON codec's, method caches) then happen here once, not in every candidate: a trivial
    candidate then costs less CPU (benchmarks/bench_sandbox.py's one-assert task)."""
    g = {"__name__": "__warm__", "__builtins__": builtins}
    exec(compile_source(WARM_PROGRAM, "<warm>"), g)
    prctl(PR_GET_DUMPABLE)  # the ctypes call path, as used for PR_SET_PDEATHSIG
    frame = encode_frame(["solve", encode_value([[1, 2, 3], 1]), encode_value({"k": (1, {2}, b"")})])
    call = json.loads(frame[4:])
    encode_reply(["ret", encode_value(g["solve"](*decode_value(call[1])))])
    decode_value(call[2])
    _flush()


def as_a_script() -> None:
    """Give programs what ``python program.py`` gives them and this ``-I -S -c`` start does not: ``exit()``
    and ``quit()`` (site's, which -S leaves out; a common way to end a competitive-programming solution) and a
    one-entry ``sys.argv``. The start's own command line (this package's directory, the pool's config) is
    overwritten where the kernel keeps it, so that a candidate's /proc/1/cmdline names no host path."""
    import site  # with -S, importing it runs nothing; setquit() is the part of its main() that programs use

    site.setquit()
    sys.argv[:] = ["program.py"]
    with open("/proc/self/stat", "rb") as f:  # fields 48 and 49: where the kernel keeps argv
        fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])
    if start and end > start:  # 0 where the kernel does not show them
        title = b"passk-judge"[: end - start - 1]
        ctypes.memset(start, 0, end - start)
        ctypes.memmove(start, title, len(title))


def main(config: str) -> None:
    cfg = json.loads(config)
    as_a_script()
    off = set(cfg.get("disable", ()))
    os.dup2(0, OWNER_IN)
    os.dup2(1, OWNER_OUT)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # the tests may print; the protocol lives on OWNER_OUT
    os.close(devnull)
    owner = judge.OWNER = OwnerLink()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the trainer: the owner decides
    set_name(b"passk-judge")
    sys.path[:] = STDLIB_DIRS + list(cfg.get("python_paths", ()))

    def on_alarm(signum, frame):
        raise Abort("timeout", "wall-clock time limit exceeded (in the tests)")

    signal.signal(signal.SIGALRM, on_alarm)
    for name in cfg.get("preimport", PREIMPORT):
        __import__(name)
    if cfg.get("warm", True):
        warm_up()
    if cfg.get("pin") is not None:  # judge, spawner and candidates ping-pong: keep them on one CPU
        os.sched_setaffinity(0, {cfg["pin"]})
    load_seccomp, stacked = None, (None, None)
    if "seccomp" not in off:
        try:
            load_seccomp, stacked = build_seccomp(), (build_seccomp(CANDIDATE), build_seccomp(THREADS))
        except OSError as e:
            print(f"passk zygote: no seccomp ({e})", file=sys.stderr)
    try:
        os.close(os.pidfd_open(os.getpid()))  # the judge kills candidates through pidfds
    except (AttributeError, OSError) as e:
        raise SystemExit(f"passk zygote: the sandbox needs Linux >= 5.3 (pidfd_open): {e}") from None
    layers = isolate(cfg)
    # Not dumpable (after the user namespace's uid map is written: that needs /proc/self owned by us): no
    # ptrace and no /proc/<pid>/mem of the judge (the tests' expected values) or of the spawner, even by a
    # process with the same uid (the non-root mode). Debuggers then need root.
    prctl(PR_SET_DUMPABLE, 0)
    root_ok = os.geteuid() == 0 or layers["userns"]
    layers.update(own_root=root_ok, pid_namespace=root_ok, private_ns=root_ok, proc=root_ok, scratch="/tmp")
    # Never run candidates as root: RLIMIT_NPROC does not bind root, and root may signal every process.
    uids = (cfg["uid"], cfg["uid"] + 1) if os.geteuid() == 0 else (None, None)
    gc.collect()
    gc.freeze()  # forked children then do not touch these pages through the collector
    libc.malloc_trim(0)  # fewer pages to copy at every fork
    spawner = Spawner(uids, layers, load_seccomp, cfg.get("readonly_paths", ()), stacked)
    try:
        observed = probe(spawner, cfg, layers, spawner.report["top"])
        hello = {
            "layers": observed,
            "pid": os.getpid(),
            "spawner": spawner.pid,
            "python": sys.version.split()[0],
            "root": spawner.report["top"],
            "root_error": spawner.report["error"],
        }
        write_all(OWNER_OUT, encode_frame({"hello": hello}))
        while True:
            task = owner.next_task()
            if task is None:
                break
            try:
                result = run_task(task, spawner)
            except OwnerGone:
                break
            except SystemExit:
                raise
            except BaseException:
                import traceback

                result = {
                    "id": task.get("id"),
                    "status": "sandbox_error",
                    "message": traceback.format_exc(limit=5)[-2000:],
                }
            write_all(OWNER_OUT, encode_frame(result))
    finally:
        if layers["scratch"] != "/tmp":
            import shutil

            shutil.rmtree(layers["scratch"], ignore_errors=True)


def run(config: str) -> None:
    try:
        main(config)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
