"""The spawner: forked by the judge before any task, it builds the candidates' root, attaches the seccomp
filter and keeps one candidate forked and set up ahead of time; ``Spawner`` is the judge's end of it."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import _socket
import json
import os
import select
import signal
import struct

from .base import (
    CLONE_NEWPID,
    OWNER_IN,
    OWNER_OUT,
    PR_SET_PDEATHSIG,
    RESERVED_FDS,
    _check,
    libc,
    prctl,
    set_name,
    unshare,
)
from .candidate import candidate_setup, case_server, serve, set_filters
from .root import build_root, warm_root
from .wire import write_all

SCRATCH_MB = 64  # /tmp of a candidate: tmpfs size (its memory is not covered by RLIMIT_AS)
SCRATCH_INODES = 4096  # files + directories in /tmp: bounds what the kernel frees when the task ends


# ---- spawner -------------------------------------------------------------------------------------------
def spawner_main(sock, uids: tuple, layers: dict, pid_ns: int) -> None:
    """Keep one candidate forked and set up ahead of time; hand it out on b"t", fork a stdin/stdout case
    server on b"s" (made on demand: it is one fork per task, its cases are many), reap either on b"w PID"
    (answering with its wait status) or b"d PID" (no answer). Reaping never blocks the next hand-out: an
    exited child is reaped when its pidfd turns readable. The loop is lean on purpose: every page it writes
    while a child lives is a copy-on-write fault."""
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in range(3, RESERVED_FDS):  # new pipes then land above the candidate's fds 0-4
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(devnull, fd)
    scratch_opts = [
        f"size={SCRATCH_MB}m,nr_inodes={SCRATCH_INODES},mode=0700" + (f",uid={u},gid={u}" if u else "")
        for u in uids
    ]
    children = {}  # pid -> pidfd, until reaped
    waiting = {}  # pid -> reply wanted
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)

    def prepare(k, server=False):
        # Two uids alternate, so the running candidate cannot touch the next one (not even its /proc).
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        control = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET) if server else None
        if pid_ns >= 0:
            # The next child is PID 1 of a new namespace; setns() below makes the one after it possible.
            # Measured: no dearer than a plain fork; an intermediate fork would cost a whole fork and exit.
            unshare(CLONE_NEWPID)
        pid = os.fork()
        if pid == 0:
            try:
                fds = (devnull, out_w, err_w, req_r, rep_w)
                if server:
                    case_server((*fds, control[1].fileno()), uids[k & 1], layers, scratch_opts[k & 1])
                else:
                    candidate_setup(fds, uids[k & 1], layers, scratch_opts[k & 1])
                    serve()
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(70)
        if pid_ns >= 0:
            _check(libc.setns(pid_ns, CLONE_NEWPID), "setns")  # back, for the next unshare
        for fd in (req_r, rep_w, out_w, err_w):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        children[pid] = pidfd
        handed = [req_w, rep_r, out_r, err_r, pidfd]
        if control is not None:
            control[1].close()
            handed.append(control[0].detach())
        return pid, handed

    def hand_out(pid, fds):
        sock.sendmsg(
            [b"%d" % pid], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
        )
        for fd_ in fds:
            if fd_ != fds[4]:  # the pidfd stays until the child is reaped
                os.close(fd_)

    def reap(pid):
        pidfd = children.pop(pid)
        poller.unregister(pidfd)
        os.close(pidfd)
        try:
            status = os.waitpid(pid, 0)[1]
        except ChildProcessError:
            status = -1
        if waiting.pop(pid, False):
            sock.send(b"%d" % status)

    k = 0
    ready = prepare(k)
    while True:
        for fd, _ in poller.poll():
            if fd != sock.fileno():
                reap(next(p for p, f in children.items() if f == fd))
                continue
            try:
                data = sock.recv(64)
            except OSError:
                os._exit(0)
            if data == b"t":
                for attempt in range(4):  # a ready candidate that died in its set-up (out of memory...)
                    if not select.select([ready[1][4]], [], [], 0)[0]:
                        break
                    if attempt == 3:  # never hand out a dead one: the task would take the blame
                        os._exit(1)  # the judge sees the spawner die; the owner restarts the worker
                    children.pop(ready[0])
                    os.close(ready[1][4])
                    os.waitpid(ready[0], 0)
                    for fd_ in ready[1][:4]:
                        os.close(fd_)
                    k += 1
                    ready = prepare(k)
                hand_out(*ready)
                k += 1
                ready = prepare(k)  # while the judge works with the one just handed out
            elif data == b"s":
                hand_out(*prepare(k + 1, server=True))  # the uid the ready candidate does not have
            elif data[:2] in (b"w ", b"d "):
                pid = int(data[2:])
                if pid not in children:
                    if data[:1] == b"w":
                        sock.send(b"-1")
                    continue
                waiting[pid] = data[:1] == b"w"
                poller.register(children[pid], select.POLLIN)  # readable once it has exited
            else:
                os._exit(0)


class Spawner:
    def __init__(
        self, uids: tuple, layers: dict, load_seccomp, extra_paths: tuple | list, stacked=(None, None)
    ):
        self.sock, child = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        status_r, status_w = os.pipe()
        if layers["pid_namespace"]:
            try:
                unshare(CLONE_NEWPID)  # the spawner is PID 1 of its own namespace (one we may setns back to)
            except OSError:
                layers["pid_namespace"] = False
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.sock.close()
                os.close(status_r)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the judge is single-threaded
                set_name(b"passk-spawner")
                os.close(OWNER_IN)
                os.close(OWNER_OUT)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the judge's handler; SIGINT stays ignored
                report = {"top": None, "error": None}
                # Opened while the host's /proc is still there: the namespace setns() returns to after each
                # candidate's unshare(CLONE_NEWPID).
                pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY) if layers["pid_namespace"] else -1
                if layers["own_root"]:
                    try:
                        report["top"] = build_root(extra_paths)
                    except OSError as e:
                        report["error"] = f"the candidates' root could not be built ({e})"
                        layers["own_root"] = False
                if not layers["own_root"]:
                    # Whatever stopped the root (no CAP_SYS_ADMIN over a mount namespace, a container's
                    # seccomp profile) stops the candidates' own mount and IPC namespaces too.
                    layers.update(private_ns=False, proc=False)
                    layers["scratch"] = make_shared_scratch(uids)
                if layers["own_root"]:
                    warm_root()  # before seccomp, which refuses fadvise
                if load_seccomp is not None:
                    load_seccomp()  # inherited by every candidate
                    set_filters(*stacked)  # the candidate's and the stdin/stdout case's own filters
                report["layers"] = layers
                write_all(status_w, json.dumps(report).encode())
                os.close(status_w)
                spawner_main(child, uids, layers, pid_ns)
            finally:
                os._exit(0)
        child.close()
        os.close(status_w)
        data = b""
        while chunk := os.read(status_r, 1 << 16):
            data += chunk
        os.close(status_r)
        if not data:
            raise SystemExit("passk zygote: the spawner died while starting")
        self.report = json.loads(data)
        layers.update(self.report["layers"])
        self.pid_namespace = layers["pid_namespace"]

    def take(self, server: bool = False) -> tuple[int, list[int]]:
        """A candidate (its pid; fds: requests, replies, stdout, stderr, pidfd), or with ``server`` a new
        stdin/stdout case server (the same, and its case control socket)."""
        want = 6 if server else 5
        try:
            self.sock.send(b"s" if server else b"t")
            data, anc, _, _ = self.sock.recvmsg(64, _socket.CMSG_SPACE(4 * want))
            fds = list(struct.unpack(f"{want}i", anc[0][2])) if anc and len(anc[0][2]) == 4 * want else []
        except OSError:
            data, fds = b"", []
        if not data or len(fds) != want:
            raise SystemExit("passk zygote: the spawner died")
        return int(data), fds

    def reap(self, pid: int, wait: bool = True) -> int | None:
        try:
            self.sock.send(b"w %d" % pid if wait else b"d %d" % pid)
            data = self.sock.recv(64) if wait else b"-1"
        except OSError:
            data = b""
        if not data:
            raise SystemExit("passk zygote: the spawner died")
        status = int(data)
        return None if status < 0 else status


def make_shared_scratch(uids):
    """Without mount namespaces: one directory for the slot's candidates, removed when the worker stops."""
    import tempfile

    path = tempfile.mkdtemp(prefix="passk-")
    os.chmod(path, 0o1777 if uids[0] is not None else 0o700)
    return path
