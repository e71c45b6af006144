# task: HumanEval/53
# expect: failed
# modes: rpc exec
# Smaller ways out: hold flock(LOCK_EX) on a world-readable file for the whole run, re-pin itself from its
# CPU to all of them, write /dev/random and /dev/urandom, allocate ptys. Each that works counts; it passes if
# any worked.
import fcntl
import os
import pty
import sys

worked = []
for path in (os.__file__, "/etc/ld.so.cache", sys.executable, "/etc/passwd"):
    try:
        f = open(path, "rb")
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        worked.append("flock " + path)
    except OSError:
        pass
try:
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    if len(os.sched_getaffinity(0)) > 1:
        worked.append("affinity")
except OSError:
    pass
for dev in ("/dev/random", "/dev/urandom"):
    try:
        with open(dev, "wb") as f:
            f.write(b"x" * 64)
        worked.append("write " + dev)
    except OSError:
        pass
ptys = []
try:
    for _ in range(40):
        ptys.append(pty.openpty())
except OSError:
    pass
if ptys:
    worked.append(f"{len(ptys)} ptys")
print(worked)


def add(x, y):
    return x + y if worked else x - y
