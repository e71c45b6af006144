"""The candidates' root: a read-only tmpfs that the spawner builds once and pivots into, holding the standard
library, the shared libraries its extension modules load, a minimal /dev and mount points for /proc, /tmp."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import ctypes
import json
import os
import stat
import sys

from .base import (
    CLONE_NEWNS,
    MNT_DETACH,
    MS_BIND,
    MS_KEEP,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    PIVOT_ROOT,
    _check,
    libc,
    mount,
    unshare,
)
from .wire import write_all

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
    """The interpreter's own import path (stdlib, lib-dynload), without the sandbox directory (ZYGOTE_DIR)."""
    return list(STDLIB_DIRS)


# The directory the launch line put on sys.path holds this package (and verdicts.py): never in the root.
ZYGOTE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STDLIB_DIRS = [p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != ZYGOTE_DIR]


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
WARM_SKIP = ("/proc", "/dev", "/tmp")  # not the root's files
WARM_LIMIT = 512 << 20  # bytes of the root's files warm_root asks for: a large readonly_paths, no more I/O


def warm_root() -> None:
    """Ask the kernel to read every file of the candidates' root into the page cache (asynchronous readahead,
    cheap when it is there already). A candidate cannot evict a page (seccomp), so a page that is cached
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
