# task: HumanEval/53
# expect: failed
# Raise the limits back, regain root, leave the namespaces.
import ctypes
import os
import resource

libc = ctypes.CDLL(None, use_errno=True)
for action in (
    lambda: resource.setrlimit(resource.RLIMIT_NPROC, (1000, 1000)),
    lambda: resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)),
    lambda: os.setuid(0),
    lambda: os.setresuid(0, 0, 0),
    lambda: libc.unshare(0x10000000 | 0x40000000),
    lambda: libc.setns(os.open("/proc/1/ns/net", os.O_RDONLY), 0),
    lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None),
    lambda: libc.umount2(b"/tmp", 2),
    lambda: libc.ptrace(16, os.getppid(), 0, 0),
    lambda: open(f"/proc/{os.getppid()}/mem", "rb").read(16),
    lambda: os.execv("/bin/sh", ["sh", "-c", "touch /tmp/passk_pwned_exec"]),
):
    try:
        action()
    except Exception:
        pass


def add(x, y):
    return x - y
