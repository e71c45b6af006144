"""Zygote worker of the passk sandbox. Stdlib only, never imports the package; started by the owner as
``python -I -S _zygote.py CONFIG_JSON`` with a minimal environment. One zygote per worker slot, pinned to one
CPU with everything it forks (the three processes below hand work to each other at every call).

Processes of one slot:

* **judge** (this process; root when the owner is root): isolates itself once (network and mount
  namespaces), then loops: a task in on fd 0, a result out on fd 1, each a 4-byte big-endian length + JSON.
  Runs the *trusted* dataset tests; the candidate is reached only through ``RemoteFunction`` proxies that move
  plain tagged JSON. Exits on EOF of fd 0, i.e. when the owner closes the pool or dies.
* **spawner**: forked at start-up, before any task, so its memory never holds a test: a candidate forked
  from it cannot find expected values even in freed memory. It loads the seccomp filter on itself (every
  candidate inherits it) and keeps one candidate forked and set up ahead of time: the judge takes it over a
  socket (its pipes passed with SCM_RIGHTS), and the spawner forks the next while the task runs. Two uids and
  two scratch directories alternate, so the running candidate cannot touch the waiting one.
* **candidate**: one per task. setsid, rlimits, its own uid, PR_SET_PDEATHSIG, a private scratch directory;
  then it reads the task, lowers RLIMIT_AS/RLIMIT_CPU to the task's, runs the untrusted program and serves
  calls (rpc mode), or runs program + tests and writes the per-task nonce at the end (exec mode).
"""

import _socket  # not socket/shutil: each forked child pays for every page the spawner holds
import builtins
import ctypes
import gc
import json
import math
import os
import resource
import select
import signal
import struct
import sys
import time

# Imported once here so that candidates fork with them loaded: imports after the uid drop cost time
# (and fail outright when the interpreter lives under a 0700 directory).
PREIMPORT = (
    "abc array bisect calendar cmath collections collections.abc contextlib copy dataclasses datetime "
    "decimal enum fractions functools hashlib heapq io itertools keyword numbers operator random re "
    "statistics string textwrap typing unicodedata"
).split()

OWNER_IN, OWNER_OUT = 3, 4  # private copies of the owner's pipes; fds 0/1 become /dev/null
RESERVED_FDS, MAX_FD = 16, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
MAX_FRAME = 64 << 20  # owner <-> judge
MAX_REPLY = 32 << 20  # candidate -> judge
MAX_DEPTH = 100  # nesting of values crossing the RPC boundary
MAX_ITEMS = 2_000_000

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")

libc = ctypes.CDLL(None, use_errno=True)
# All arguments as unsigned long: prctl is variadic, and the kernel rejects garbage in unused arguments.
_prctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, *[ctypes.c_ulong] * 4, use_errno=True)(("prctl", libc))


def prctl(option, a2=0, a3=0, a4=0, a5=0):
    return _prctl(option, a2, a3, a4, a5)


# ---- framing -------------------------------------------------------------------------------------------
def encode_frame(obj):
    data = json.dumps(obj, separators=(",", ":")).encode()  # ensure_ascii: lone surrogates survive
    return struct.pack(">I", len(data)) + data


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(fd, limit=MAX_FRAME):
    head = read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > limit:
        raise ValueError(f"frame of {n} bytes")
    data = read_exact(fd, n)
    if data is None:
        return None
    return json.loads(data)


# ---- values crossing the RPC boundary: exact builtin types only, no pickle ------------------------------
class Unencodable(Exception):
    pass


def encode_value(x, depth=0, budget=None):
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise Unencodable("value too deep or too large")
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        return x if -(1 << 63) < x < 1 << 63 else {"t": "int", "v": hex(x)}
    if t is list:
        return [encode_value(v, depth + 1, budget) for v in x]
    if t is tuple or t is set or t is frozenset:
        return {"t": t.__name__, "v": [encode_value(v, depth + 1, budget) for v in x]}
    if t is dict:
        return {"t": "dict", "v": [[encode_value(k, depth + 1, budget), encode_value(v, depth + 1, budget)]
                                   for k, v in x.items()]}
    if t is bytes:
        return {"t": "bytes", "v": x.hex()}
    if t is complex:
        return {"t": "complex", "v": [x.real, x.imag]}
    raise Unencodable(f"{t.__module__}.{t.__qualname__}" if isinstance(t, type) else "object")


def decode_value(x, depth=0):
    if depth > MAX_DEPTH:
        raise ValueError("value too deep")
    t = type(x)
    if x is None or t is bool or t is str or t is float or t is int:
        return x
    if t is list:
        return [decode_value(v, depth + 1) for v in x]
    if t is dict and set(x) == {"t", "v"}:
        tag, v = x["t"], x["v"]
        if tag == "int" and type(v) is str:
            return int(v, 16)
        if tag == "bytes" and type(v) is str:
            return bytes.fromhex(v)
        if tag == "complex" and type(v) is list and len(v) == 2 and all(type(p) is float for p in v):
            return complex(*v)
        if type(v) is list:
            items = [decode_value(i, depth + 1) for i in v]
            if tag in ("tuple", "set", "frozenset"):
                return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
            if tag == "dict" and all(type(p) is list and len(p) == 2 for p in items):
                return dict(items)
    raise ValueError("malformed value")


# ---- isolation, once per zygote ------------------------------------------------------------------------
def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    _check(libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags),
                      data and data.encode()), f"mount {target}")


def rmtree(path):
    """Remove a scratch directory (its candidate is dead by now); symlinks are removed, never followed."""
    try:
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files:
                os.unlink(os.path.join(root, name))
            for name in dirs:
                p = os.path.join(root, name)
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    os.rmdir(p)
        os.rmdir(path)
    except OSError:
        pass


def isolate(cfg):
    """Enter private network and mount namespaces. Returns (namespaces entered, scratch root)."""
    done = {"netns": False, "mountns": False}
    off = set(cfg.get("disable", ()))
    if os.geteuid() != 0 and "userns" not in off:
        uid, gid = os.getuid(), os.getgid()
        flags = CLONE_NEWUSER | (0 if "netns" in off else CLONE_NEWNET) | (0 if "mountns" in off else CLONE_NEWNS)
        if libc.unshare(flags) == 0:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
            done = {"netns": bool(flags & CLONE_NEWNET), "mountns": bool(flags & CLONE_NEWNS)}
    elif os.geteuid() == 0:
        # Loopback stays down in a fresh network namespace: no network at all, not even 127.0.0.1.
        if "netns" not in off:
            done["netns"] = libc.unshare(CLONE_NEWNET) == 0
        if "mountns" not in off:
            done["mountns"] = libc.unshare(CLONE_NEWNS) == 0
    if done["mountns"]:
        try:
            mount(None, "/", None, MS_REC | MS_PRIVATE)
            ro = MS_NOSUID | MS_NODEV | MS_NOEXEC
            # An empty read-only tmpfs over every world-writable directory; /tmp stays writable just long
            # enough to hold the mount point of the size-limited scratch tmpfs.
            mount("tmpfs", "/tmp", "tmpfs", ro, "size=16k,mode=0755")
            for d in WORLD_WRITABLE[1:]:
                if os.path.isdir(d) and not os.path.islink(d) and os.stat(d).st_mode & 0o002:
                    mount("tmpfs", d, "tmpfs", MS_RDONLY | ro, "size=4k,mode=0755")
            os.mkdir("/tmp/passk")
            mount("tmpfs", "/tmp/passk", "tmpfs", ro, f"size={int(cfg.get('scratch_mb', 64))}m,mode=0711")
            mount(None, "/tmp", None, MS_REMOUNT | MS_RDONLY | ro)
            for d in cfg.get("hide", ()):
                if os.path.isdir(d):
                    mount("tmpfs", d, "tmpfs", MS_RDONLY | ro, "size=4k,mode=0555")
            return done, "/tmp/passk"
        except OSError as e:
            print(f"passk zygote: mount namespace set-up failed ({e}); scratch falls back to /tmp", file=sys.stderr)
            done["mountns"] = False
    root = f"/tmp/passk-{os.getpid()}-{os.urandom(4).hex()}"
    os.mkdir(root, 0o711)
    return done, root


SECCOMP_DENY = (
    "execve execveat ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot unshare setns "
    "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register kexec_load "
    "kexec_file_load init_module finit_module delete_module keyctl add_key request_key open_by_handle_at "
    "name_to_handle_at reboot swapon swapoff acct quotactl syslog mknod mknodat fanotify_init fsopen fsmount "
    "fsconfig fspick move_mount open_tree mount_setattr tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo "
    "pidfd_open pidfd_send_signal pidfd_getfd personality"
).split()


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


def build_seccomp():
    """Compile the filter once with libseccomp; returns a callable that loads it into the calling process."""
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    allow, eperm, ne = 0x7FFF0000, 0x00050000 | 1, 1  # SCMP_ACT_ALLOW, SCMP_ACT_ERRNO(EPERM), SCMP_CMP_NE
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise OSError("seccomp_init failed")

    def rule(name, *cmps):
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr >= 0:
            arr = (ArgCmp * max(len(cmps), 1))(*cmps)
            if lib.seccomp_rule_add_array(ctx, eperm, nr, len(cmps), arr) != 0:
                raise OSError(f"seccomp rule for {name}")

    for name in SECCOMP_DENY:
        rule(name)
    rule("socket", ArgCmp(0, ne, _socket.AF_UNIX, 0))  # no IP, netlink, packet... sockets
    rule("kill", ArgCmp(0, ne, 0, 0))  # only its own process group: never the trainer or another task

    def load():
        if lib.seccomp_load(ctx) != 0:  # sets no_new_privs too
            raise OSError("seccomp_load failed")

    return load


# ---- candidate (a child of the spawner) ----------------------------------------------------------------
def set_name(name):
    prctl(PR_SET_NAME, ctypes.cast(ctypes.c_char_p(name), ctypes.c_void_p).value)  # what ps and top show


def candidate_setup(fds, scratch, uid, spawner_pid):
    """Everything that does not depend on the task, done before the task arrives (pre-forked).
    Kept to few Python operations: every page a forked child writes is a copy-on-write fault (~3 us)."""
    os.setsid()
    for target, fd in enumerate(fds):  # 0 stdin=/dev/null, 1 stdout, 2 stderr, 3 requests, 4 replies
        os.dup2(fd, target)  # the sources are >= RESERVED_FDS, so nothing is overwritten
    os.closerange(5, MAX_FD)
    os.chdir(scratch)  # tempfile finds it too: /tmp and /var/tmp are read-only
    for lim, value in ((resource.RLIMIT_FSIZE, 16 << 20), (resource.RLIMIT_NOFILE, 64),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, 0)):
        resource.setrlimit(lim, (value, value))
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
    if os.getppid() != spawner_pid:
        os._exit(1)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _reply(obj):
    _flush()
    write_all(4, encode_frame(obj))


def _report(kind, exc):
    import traceback  # only on this path: importing it costs every fork

    traceback.print_exception(exc)
    _reply({kind: "error", "type": type(exc).__name__, "msg": str(exc)[:500]})


def serve():
    """Run in the candidate: take the task, then (rpc) answer calls or (exec) run the tests."""
    msg = read_frame(3)
    if msg is None:
        os._exit(0)
    mem, cpu = msg.pop("memory_mb") << 20, math.ceil(msg.pop("timeout")) + 1
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))  # lowering only: allowed after the uid drop
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    exec_mode = msg["mode"] == "exec"
    try:
        code = compile(msg.pop("program"), "<candidate>", "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: source code string cannot contain null bytes
        _reply({"load": "syntax_error", "type": type(e).__name__, "msg": str(e)[:500]})
        os._exit(0)
    g = {"__name__": "__main__" if exec_mode else "__candidate__", "__builtins__": builtins}
    if exec_mode:
        # In-process verdict: the nonce is written only if program, tests and check() all return.
        nonce, tests, entry = msg.pop("nonce"), msg.pop("tests"), msg.pop("entry_point")
        try:
            exec(code, g)
            if tests:
                exec(compile(tests, "<tests>", "exec"), g)
            if entry is not None:
                exec(f"check({entry})", g)
        except BaseException as e:
            _report("load", e)
            os._exit(0)
        _reply({"nonce": nonce})
        os._exit(0)
    del msg
    try:
        exec(code, g)
    except BaseException as e:
        _report("load", e)
        os._exit(0)
    _reply({"load": "ok"})
    while True:
        call = read_frame(3)
        if call is None:
            os._exit(0)
        fn = g.get(call["f"])
        try:
            if not callable(fn):
                raise NameError(f"name {call['f']!r} is not defined")
            ret = fn(*decode_value(call["a"]), **decode_value(call["k"]))
        except BaseException as e:
            _reply({"exc": type(e).__name__, "msg": str(e)[:500]})
            continue
        try:
            out = {"ret": encode_value(ret)}
        except Unencodable as e:
            out = {"unencodable": str(e)[:200]}
        except RecursionError:
            out = {"unencodable": "value too deep"}
        if "ret" in out and len(encode_frame(out)) > MAX_REPLY:
            out = {"unencodable": "value too large"}
        _reply(out)


# ---- spawner -------------------------------------------------------------------------------------------
def spawner_main(sock, scratch_root, uids):
    """Keep one candidate forked and set up ahead of time; hand it out on b"take", reap it on b"reap PID".
    The loop is lean on purpose: every page it writes while a child lives is a copy-on-write fault."""
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in range(3, RESERVED_FDS):  # new pipes then land above the candidate's fds 0-4
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(devnull, fd)
    me = os.getpid()
    scratch = {}  # pid -> its scratch directory

    def prepare(k):
        # Two uids and directories alternate, so the running candidate cannot touch the next one's.
        uid, path = uids[k & 1], scratch_root + ("/1" if k & 1 else "/0")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            rmtree(path)
            os.mkdir(path, 0o700)
        if uid is not None:
            os.chown(path, uid, uid)
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                candidate_setup((devnull, out_w, err_w, req_r, rep_w), path, uid, me)
                serve()
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(70)
        for fd in (req_r, rep_w, out_w, err_w):
            os.close(fd)
        scratch[pid] = path
        return pid, [req_w, rep_r, out_r, err_r]

    k = 0
    ready = prepare(k)
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            os._exit(0)
        if data == b"take":
            pid, fds = ready
            sock.sendmsg([b"%d" % pid], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("4i", *fds))])
            for fd in fds:
                os.close(fd)
            k += 1
            ready = prepare(k)  # while the judge works with the one just handed out
        elif data[:5] in (b"reap ", b"drop "):  # drop: the same, without an answer
            pid = int(data[5:])
            try:
                status = os.waitpid(pid, 0)[1]
            except ChildProcessError:
                status = -1
            path = scratch.pop(pid, None)
            if path is not None:
                try:
                    os.rmdir(path)
                except OSError:  # not empty
                    rmtree(path)
            if data[:4] == b"reap":
                sock.send(b"%d" % status)
        else:
            os._exit(0)


class Spawner:
    def __init__(self, scratch_root, uids, load_seccomp):
        self.sock, child = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.sock.close()
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the judge is single-threaded
                set_name(b"passk-spawner")
                os.close(OWNER_IN)
                os.close(OWNER_OUT)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the judge's handler; SIGINT stays ignored
                if load_seccomp is not None:
                    load_seccomp()  # inherited by every candidate; the spawner needs none of the denied calls
                spawner_main(child, scratch_root, uids)
            finally:
                os._exit(0)
        child.close()

    def take(self):
        try:
            self.sock.send(b"take")
            data, anc, _, _ = self.sock.recvmsg(64, _socket.CMSG_SPACE(16))
            fds = list(struct.unpack("4i", anc[0][2])) if anc and len(anc[0][2]) == 16 else []
        except OSError:
            data, fds = b"", []
        if not data or len(fds) != 4:
            raise SystemExit("passk zygote: the spawner died")
        return int(data), fds

    def reap(self, pid, wait=True):
        try:
            self.sock.send(b"reap %d" % pid if wait else b"drop %d" % pid)
            data = self.sock.recv(64) if wait else b"-1"
        except OSError:
            data = b""
        if not data:
            raise SystemExit("passk zygote: the spawner died")
        status = int(data)
        return None if status < 0 else status


# ---- judge ---------------------------------------------------------------------------------------------
class Abort(BaseException):
    """Ends the tests at once; never swallowed by the per-assert units."""

    def __init__(self, reason, message=""):
        super().__init__(reason, message)
        self.reason, self.message = reason, message


class OwnerGone(Abort):
    pass


class UnencodableValue(AssertionError):
    """The candidate returned a value outside the exact builtin types: a failed check, not a crash."""


# Remote exceptions re-raised in the judge under their builtin name; the rest become RuntimeError.
# StopIteration would silently end a test's loop over map(candidate, ...), so it is excluded on purpose.
SAFE_EXCEPTIONS = {
    n: c for n, c in vars(builtins).items()
    if isinstance(c, type) and issubclass(c, Exception) and not issubclass(c, (StopIteration, StopAsyncIteration))
}


class Run:
    """One candidate process as seen from the judge: its pipes, its deadline, its captured output."""

    def __init__(self, spawner, deadline, cap):
        self.deadline, self.cap = deadline, cap
        self.out, self.err, self.buf = bytearray(), bytearray(), bytearray()
        self.pid, fds = spawner.take()
        self.req_w, self.rep_r, self.out_r, self.err_r = fds
        os.set_blocking(self.req_w, False)
        self.open = {self.rep_r, self.out_r, self.err_r}

    def _read(self, fd):
        data = os.read(fd, 1 << 16)
        if not data:
            self.open.discard(fd)
        elif fd == self.rep_r:
            self.buf += data
            if len(self.buf) > MAX_REPLY + 4:
                raise Abort("protocol_violation", "reply too large")
        else:
            (self.out if fd == self.out_r else self.err).extend(data)
            if len(self.out) + len(self.err) > self.cap:
                raise Abort("output_limit", f"output exceeded {self.cap} bytes")

    def _frame(self):
        if len(self.buf) < 4:
            return None
        (n,) = struct.unpack(">I", self.buf[:4])
        if n > MAX_REPLY:
            raise Abort("protocol_violation", "reply too large")
        if len(self.buf) < 4 + n:
            return None
        data, self.buf = bytes(self.buf[4 : 4 + n]), self.buf[4 + n :]
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            raise Abort("protocol_violation", "malformed reply") from None
        if type(obj) is not dict:
            raise Abort("protocol_violation", "malformed reply")
        return obj

    def send(self, obj):
        """Queue one request; it is written while waiting for replies (the pipe may be full)."""
        self.pending = memoryview(encode_frame(obj))
        self._write()

    def _write(self):
        try:
            self.pending = self.pending[os.write(self.req_w, self.pending) :]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            raise Abort("early_exit", "the program exited before the tests finished") from None

    def receive(self):
        """Wait for one reply frame within the deadline, draining stdout/stderr meanwhile."""
        while True:
            frame = self._frame()
            if frame is not None:
                return frame
            if self.rep_r not in self.open:
                raise Abort("early_exit", "the program exited before the tests finished")
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Abort("timeout", "wall-clock time limit exceeded")
            poller = select.poll()
            for fd in self.open:
                poller.register(fd, select.POLLIN)
            poller.register(OWNER_IN, select.POLLIN)
            if self.pending:
                poller.register(self.req_w, select.POLLOUT)
            for fd, _ in poller.poll(max(1, math.ceil(remaining * 1000))):
                if fd == OWNER_IN:
                    raise OwnerGone("owner_gone", "the owner went away")
                if fd == self.req_w:
                    self._write()
                else:
                    self._read(fd)

    def request(self, obj):
        self.send(obj)
        return self.receive()

    def wait_exit(self):
        """Exec mode: after the nonce, wait (within the deadline) for the process to end."""
        while self.rep_r in self.open:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Abort("timeout", "wall-clock time limit exceeded")
            ready, _, _ = select.select(list(self.open), [], [], remaining)
            for fd in ready:
                self._read(fd)

    def finish(self, spawner, wait=True):
        """Drain what is already written, SIGKILL the process group and have it reaped. With ``wait``, return
        its wait status; without, the spawner reaps it while the result travels (before its next hand-out)."""
        try:
            while self.open:
                ready, _, _ = select.select(list(self.open), [], [], 0)
                if not ready:
                    break
                for fd in ready:
                    self._read(fd)
        except Abort:
            pass
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for fd in (self.req_w, self.rep_r, self.out_r, self.err_r):
            os.close(fd)
        return spawner.reap(self.pid, wait)


class RemoteFunction:
    """Stands in the tests' namespace for a function of the candidate; only plain data crosses."""

    def __init__(self, name, run, verdict):
        self.__name__ = self.name = name
        self.run, self.verdict = run, verdict

    def __repr__(self):
        return f"<candidate function {self.name}>"

    def __call__(self, *args, **kwargs):
        try:
            a, k = encode_value(list(args)), encode_value(kwargs)
        except Unencodable as e:
            raise Abort("sandbox_error",
                        f"the tests pass a {e} to {self.name}(); run this task with mode='exec'") from None
        reply = self.run.request({"f": self.name, "a": a, "k": k})
        if "ret" in reply:
            try:
                return decode_value(reply["ret"])
            except (ValueError, TypeError, RecursionError):
                raise Abort("protocol_violation", "malformed value in reply") from None
        if "unencodable" in reply:
            self.verdict["flags"].add("unencodable_value")
            raise UnencodableValue(f"{self.name}() returned a value that is not plain data: {reply['unencodable']}")
        name, msg = reply.get("exc"), reply.get("msg")
        if type(name) is not str or type(msg) is not str:
            raise Abort("protocol_violation", "malformed reply")
        if name == "MemoryError":
            raise Abort("memory_exceeded", f"MemoryError in {self.name}()")
        try:
            exc = SAFE_EXCEPTIONS[name](msg)
        except (KeyError, TypeError):  # not a builtin, or one with another constructor (UnicodeDecodeError)
            exc = RuntimeError(f"{name}: {msg}")
        raise exc


class RemoteNames(dict):
    """The tests' builtins: a name the tests use but never define (the entry point, a prompt helper such as
    HumanEval's ``poly``) resolves to the candidate's function of that name, as in prompt + completion + test."""

    def __init__(self, run, verdict):
        super().__init__(vars(builtins))
        self.run, self.verdict = run, verdict

    def __missing__(self, name):
        if name.startswith("__"):
            raise KeyError(name)
        self[name] = RemoteFunction(name, self.run, self.verdict)
        return self[name]


class Units:
    """Counts the per-assert units of the tests."""

    def __init__(self, total):
        self.total, self.passed, self.failed, self.errors = total, 0, 0, 0
        self.first = None

    def ok(self):
        self.passed += 1

    def fail(self, line):
        self.failed += 1
        self.first = self.first or f"assertion failed (tests line {line})"

    def error(self, line, exc):
        if isinstance(exc, AssertionError):  # UnencodableValue and remote AssertionErrors
            return self.fail(line)
        self.errors += 1
        self.first = self.first or f"{type(exc).__name__}: {exc} (tests line {line})"


def _has_assert(node):
    import ast  # judge only: not imported before the spawner forks, so that candidates stay small

    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return False
    return any(_has_assert(child) for child in ast.iter_child_nodes(node))


def _unit(stmt):
    """try: <stmt> / except Abort: raise / except AssertionError: fail / except BaseException: error / else: ok"""
    import ast

    def at(node):
        return ast.copy_location(node, stmt)

    def name(n):
        return at(ast.Name(n, ast.Load()))

    def units(method, *args):
        func = at(ast.Attribute(name("__passk_units__"), method, ast.Load()))
        return at(ast.Expr(at(ast.Call(func, list(args), []))))

    line = at(ast.Constant(stmt.lineno))
    return at(ast.Try(
        body=[stmt],
        handlers=[at(ast.ExceptHandler(name("__passk_abort__"), None, [at(ast.Raise())])),
                  at(ast.ExceptHandler(name("AssertionError"), None, [units("fail", line)])),
                  at(ast.ExceptHandler(name("BaseException"), "__passk_e",
                                       [units("error", line, name("__passk_e"))]))],
        orelse=[units("ok")], finalbody=[]))


_prepared = {}


def prepare_tests(tests):
    """Compile the tests with each top-level statement that asserts (in ``check``, else in the module)
    wrapped as one counted unit. Cached: RL batches repeat the same tests many times."""
    import ast

    if tests in _prepared:
        return _prepared[tests]
    tree = ast.parse(tests, "<tests>")
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    owner = check if check is not None else tree
    is_unit = [_has_assert(stmt) for stmt in owner.body]
    owner.body = [_unit(stmt) if unit else stmt for stmt, unit in zip(owner.body, is_unit)]
    total = sum(is_unit)
    prepared = (compile(tree, "<tests>", "exec"), total, check is not None)
    if len(_prepared) >= 1024:
        _prepared.clear()
    _prepared[tests] = prepared
    return prepared


def judge_rpc(run, task, verdict):
    run.send({"mode": "rpc", "program": task["program"], "timeout": task["timeout"],
              "memory_mb": task["memory_mb"]})
    try:
        code, total, has_check = prepare_tests(task["tests"])  # while the candidate loads the program
    except (SyntaxError, ValueError) as e:
        raise Abort("sandbox_error", f"the tests do not compile: {e}") from None
    verdict["asserts_total"] = total
    reply = run.receive()
    if reply.get("load") != "ok":
        return load_failure(reply, verdict)
    units = verdict["units"] = Units(total)
    ns = {"__name__": "__passk_tests__", "__builtins__": RemoteNames(run, verdict), "__passk_units__": units,
          "__passk_abort__": Abort}
    try:
        exec(code, ns)
        if has_check:
            ns["check"](RemoteFunction(task["entry_point"], run, verdict))
    except Abort:
        raise
    except AssertionError as e:
        return "failed", str(e) or "assertion failed"
    except BaseException as e:
        return "runtime_error", f"{type(e).__name__}: {e}"
    if units.errors:
        return "runtime_error", units.first
    if units.failed:
        return "failed", f"{units.failed}/{total} assert units failed; first: {units.first}"
    return "passed", f"{units.passed}/{total} assert units passed"


def load_failure(reply, verdict):
    if reply.get("load") == "syntax_error":
        return "syntax_error", f"{reply.get('type')}: {reply.get('msg')}"
    if reply.get("load") == "error":
        name = reply.get("type")
        if name == "MemoryError":
            return "memory_exceeded", "MemoryError"
        if name == "SystemExit":
            verdict["flags"].add("early_exit")
        return ("failed" if name == "AssertionError" else "runtime_error"), f"{name}: {reply.get('msg')}"
    raise Abort("protocol_violation", "unexpected reply")


def judge_exec(run, task, verdict):
    nonce = os.urandom(16).hex()
    reply = run.request({"mode": "exec", "program": task["program"], "tests": task["tests"],
                         "entry_point": task["entry_point"], "nonce": nonce, "timeout": task["timeout"],
                         "memory_mb": task["memory_mb"]})
    if reply.get("nonce") == nonce:
        run.wait_exit()
        return "passed", "program and tests ran to the end"
    if "nonce" in reply:
        verdict["flags"].add("forged_verdict")
        return "failed", "wrong nonce"
    return load_failure(reply, verdict)


def describe_exit(status):
    if status is None:
        return "not reaped"
    if os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


def run_task(task, spawner):
    t0 = time.monotonic()
    verdict = {"flags": set(), "asserts_total": 0, "units": None}
    run = Run(spawner, t0 + task["timeout"], task["max_output"])
    status = message = "sandbox_error"
    try:
        signal.setitimer(signal.ITIMER_REAL, task["timeout"] + 1.0)  # backstop for the tests' own code
        try:
            status, message = (judge_rpc if task["mode"] == "rpc" else judge_exec)(run, task, verdict)
        except OwnerGone:
            raise
        except Abort as a:
            status, message = a.reason, a.message
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        # The exit status matters only when the candidate ended on its own (or in exec mode).
        wait = task["mode"] == "exec" or status not in ("passed", "failed", "runtime_error", "timeout",
                                                          "output_limit", "memory_exceeded")
        exit_status = run.finish(spawner, wait)

    flags = verdict["flags"]
    if status == "early_exit":
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
    units = verdict["units"]
    return {
        "status": status,
        "asserts_passed": units.passed if units else 0,
        "asserts_total": verdict["asserts_total"],
        "duration": time.monotonic() - t0,
        "stdout": run.out.decode("utf-8", "replace"),
        "stderr": run.err.decode("utf-8", "replace"),
        "message": message,
        "flags": sorted(flags),
    }


PROBE = r"""
import json, os
r = {"uid": os.getuid(), "env": sorted(os.environ)}
with open("/proc/self/status") as f:
    r["seccomp"] = "Seccomp:\t2" in f.read()
try:
    pid = os.fork()
except OSError:
    r["fork"] = False
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    r["fork"] = True
with open("/proc/net/dev") as f:
    r["ifaces"] = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
def writable(path):
    try:
        with open(os.path.join(path, ".passk_probe"), "w"):
            pass
    except OSError:
        return False
    os.unlink(os.path.join(path, ".passk_probe"))
    return True
r["tmp_writable"] = writable("/tmp")
r["scratch_writable"] = writable(".")
print(json.dumps(r))
"""


def probe(spawner, owner_uid):
    """Run a probe candidate through the real path and report the layers it observed."""
    task = {"mode": "exec", "program": PROBE, "tests": "", "entry_point": None, "timeout": 10.0,
            "memory_mb": 512, "max_output": 1 << 16}
    res = run_task(task, spawner)
    try:
        r = json.loads(res["stdout"])
    except ValueError:
        raise SystemExit(f"passk zygote: probe failed: {res}") from None
    return {
        "separate_process": True,
        "rlimits": True,
        "separate_uid": r["uid"] not in (0, owner_uid),
        "no_new_processes": not r["fork"],
        "network_namespace": set(r["ifaces"]) <= {"lo"},
        "private_tmp": not r["tmp_writable"] and r["scratch_writable"],
        "seccomp": r["seccomp"],
        "clean_env": set(r["env"]) <= {"PATH", "LANG"},
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
    compiler's, the JSON codec's, method caches) then happen here once, not in every candidate. Measured:
    a trivial candidate costs ~1 ms less CPU."""
    g = {"__name__": "__warm__", "__builtins__": builtins}
    exec(compile(WARM_PROGRAM, "<warm>", "exec"), g)
    prctl(3)  # PR_GET_DUMPABLE: the ctypes call path, as used for PR_SET_PDEATHSIG
    frame = encode_frame({"f": "solve", "a": encode_value([[1, 2, 3], 1]), "k": encode_value({})})
    call = json.loads(frame[4:])
    encode_frame({"ret": encode_value(g["solve"](*decode_value(call["a"]), **decode_value(call["k"])))})
    _flush()


def main():
    cfg = json.loads(sys.argv[1])
    off = set(cfg.get("disable", ()))
    os.dup2(0, OWNER_IN)
    os.dup2(1, OWNER_OUT)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # the tests may print; the protocol lives on OWNER_OUT
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the trainer: the owner decides
    set_name(b"passk-judge")

    def on_alarm(signum, frame):
        raise Abort("timeout", "wall-clock time limit exceeded (in the tests)")

    signal.signal(signal.SIGALRM, on_alarm)
    for name in cfg.get("preimport", PREIMPORT):
        __import__(name)
    if cfg.get("warm", True):
        warm_up()
    if cfg.get("pin") is not None:  # judge, spawner and candidates ping-pong: keep them on one CPU
        os.sched_setaffinity(0, {cfg["pin"]})
    done, scratch_root = isolate(cfg)
    load_seccomp = None
    if "seccomp" not in off:
        try:
            load_seccomp = build_seccomp()
        except OSError as e:
            print(f"passk zygote: no seccomp ({e})", file=sys.stderr)
    # Never run candidates as root: RLIMIT_NPROC does not bind root, and root may signal every process.
    uids = (cfg["uid"], cfg["uid"] + 1) if os.geteuid() == 0 else (None, None)
    gc.collect()
    gc.freeze()  # forked children then do not touch these pages through the collector
    libc.malloc_trim(0)  # fewer pages to copy at every fork
    spawner = Spawner(scratch_root, uids, load_seccomp)
    try:
        layers = probe(spawner, cfg.get("owner_uid", os.getuid()))
        write_all(OWNER_OUT, encode_frame({"hello": {"layers": layers, "pid": os.getpid(),
                                                     "spawner": spawner.pid, "python": sys.version.split()[0]}}))
        while True:
            task = read_frame(OWNER_IN)
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

                result = {"status": "sandbox_error", "message": traceback.format_exc(limit=5)[-2000:]}
            write_all(OWNER_OUT, encode_frame(result))
    finally:
        if not done["mountns"]:
            rmtree(scratch_root)


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
