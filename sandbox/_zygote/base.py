"""What every process of a zygote shares: the file descriptors they agree on, the kernel's flag values, thin
ctypes wrappers for the calls that the os module lacks (prctl, mount, unshare), and ``compile_source``."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import ctypes
import os
import resource
from typing import TYPE_CHECKING  # typing is pre-imported for the candidates anyway

if TYPE_CHECKING:
    import ast
    import types

OWNER_IN, OWNER_OUT = 3, 4  # private copies of the owner's pipes; fds 0/1 become /dev/null
RESERVED_FDS, MAX_FD = 16, resource.getrlimit(resource.RLIMIT_NOFILE)[0]

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
MOUNT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC  # the only flag set a mount may use after the root is built
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


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
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


def set_name(name: bytes) -> None:
    prctl(PR_SET_NAME, ctypes.cast(ctypes.c_char_p(name), ctypes.c_void_p).value)  # what ps and top show


def compile_source(source: str | ast.AST, filename: str) -> types.CodeType:
    """Compile as ``python file.py`` would: compile() otherwise inherits this module's ``from __future__ import
    annotations``, under which an annotation naming nothing would pass and annotations would be strings."""
    return compile(source, filename, "exec", dont_inherit=True)
