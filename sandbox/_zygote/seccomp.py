"""The seccomp filters: the one every candidate inherits from the spawner, and the threads-only one stacked on
it in a stdin/stdout case; compiled by libseccomp in a throwaway child and exported as BPF."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import _socket
import ctypes
import os

from .base import (
    CLONE_NEWPID,
    CLONE_THREAD,
    MOUNT_FLAGS,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_SECCOMP,
    SECCOMP_MODE_FILTER,
    _check,
    prctl,
)
from .wire import write_all

# ---- seccomp: compiled once by libseccomp in the judge, attached once by the spawner ----------------------
# Candidates inherit the spawner's filter: attaching one per candidate would cost every task (the kernel
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
    "memfd_create memfd_secret "
    # Asynchronous I/O: io_setup takes from a host-wide budget (fs.aio-max-nr), so one case could hold all of
    # it (every other process of the host then gets EAGAIN) and its fill level is a channel between pools.
    # Nothing in the standard library uses it.
    "io_setup io_destroy io_submit io_cancel io_getevents io_pgetevents"
).split()
# Refused in the candidates only (a filter stacked by each, ``CANDIDATE``): the spawner and the case server
# make pidfds of their children. A pidfd's inode number is the process's id in a counter of every process the
# host ever started (pidfs), so it shows how many other pools' tasks started in between: a channel.
# Shared futexes (see compile_seccomp): futex_waitv and futex_requeue keep each futex's private flag in memory,
# where a filter cannot read it, so they are refused whole; futex, futex_wake and futex_wait unless private.
CANDIDATE_DENY = "pidfd_open futex_waitv futex_requeue".split()
FUTEX_PRIVATE_FLAG = 128  # futex(2) op bit; FUTEX2_PRIVATE in futex_wake/futex_wait's flags is the same bit
FUTEX2_FLAGS_ARG = {"futex_wake": 3, "futex_wait": 3}
SO_PASSPIDFD, SO_PEERPIDFD = 76, 77  # a pidfd of the socket's peer (itself, over a socketpair)
SOL_SOCKET = 1
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
CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND, CLONE_PIDFD = 0x100, 0x200, 0x400, 0x800, 0x1000

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


SPAWNER, CANDIDATE, THREADS = "spawner", "candidate", "threads"  # the three filters, by what loads them


def build_seccomp(kind: str = SPAWNER):
    """Compile a filter: ``SPAWNER``, the one every candidate inherits; ``CANDIDATE``, stacked on it by each
    rpc or exec candidate; ``THREADS``, stacked by a stdin/stdout case instead (the candidate's rules, and
    threads but no new process). Compiled with libseccomp in a throwaway child (so that neither the judge nor the spawner maps the library:
    one more thing every fork would copy) and export it as BPF; returns a function that installs it in the
    calling process with two prctl calls."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            write_all(w, compile_seccomp(kind))
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


def compile_seccomp(kind: str = SPAWNER):
    """The filter of that kind (``build_seccomp``) as BPF bytes, compiled by libseccomp."""
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

    if kind in (CANDIDATE, THREADS):
        for name in CANDIDATE_DENY:
            rule(name)
        # Shared futexes: their key is the inode and offset of a file page (any file mapping, the C library's
        # included), the same key in every process of the host that maps that file, so a wait in one pool and a
        # wake in another meet. Private futexes (what threads and locks use) are keyed by the process.
        rule("futex", ArgCmp(1, masked_eq, FUTEX_PRIVATE_FLAG, 0))
        for name, arg in FUTEX2_FLAGS_ARG.items():
            rule(name, ArgCmp(arg, masked_eq, FUTEX_PRIVATE_FLAG, 0))
    if kind == THREADS:
        # Stacked on the inherited filter in a stdin/stdout case, whose RLIMIT_NPROC then allows threads: no
        # fork, no vfork, no clone that is not a thread; clone3, whose flags a filter cannot read, looks
        # absent, so that the C library starts threads with clone. CLONE_PIDFD would give a pidfd (above).
        rule("fork")
        rule("vfork")
        for bit in (CLONE_THREAD, CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND):  # any one missing: refused
            rule("clone", ArgCmp(0, masked_eq, bit, 0))
        rule("clone", ArgCmp(0, masked_eq, CLONE_PIDFD, CLONE_PIDFD))
        rule("clone3", action=enosys)
    if kind != SPAWNER:
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
    # A pidfd of a socket's peer (``CANDIDATE_DENY`` says why not): neither asked for nor passed along.
    rule("getsockopt", ArgCmp(1, eq, SOL_SOCKET, 0), ArgCmp(2, eq, SO_PEERPIDFD, 0))
    rule("setsockopt", ArgCmp(1, eq, SOL_SOCKET, 0), ArgCmp(2, eq, SO_PASSPIDFD, 0))
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
