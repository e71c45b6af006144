# task: HumanEval/53
# expect: failed
# modes: rpc exec
# timeout: 5
# A blind walk from / (the big system trees last, and through /proc/*/root, /proc/*/cwd, open fds) for any
# copy of the HumanEval data (a wheel, a cache, a checkout; the harness plants one): if it finds HumanEval/53's
# row, it answers correctly.
import gzip
import os
import time

deadline = time.monotonic() + 3.5
found = None


def look(path):
    global found
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 22)
    except OSError:
        return
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except Exception:
            return
    if b'"task_id": "HumanEval/53"' in data:
        found = True


def walk(start):
    for root, _dirs, files in os.walk(start, followlinks=False):
        if time.monotonic() > deadline or found:
            return
        for name in files:
            if name.endswith((".jsonl", ".jsonl.gz", ".json", ".gz")) or "human" in name.lower():
                look(os.path.join(root, name))


big = ("/usr", "/proc", "/sys", "/dev")
starts = sorted(os.path.join("/", d) for d in os.listdir("/") if os.path.join("/", d) not in big) + ["/usr"]
starts += ["/proc/self/root", "/proc/1/root", "/proc/1/cwd", "/proc/self/cwd"]
if os.path.isdir("/proc/self/fd"):
    starts += ["/proc/self/fd/" + fd for fd in os.listdir("/proc/self/fd")]
for start in starts:
    walk(start)


def add(x, y):
    if found:
        return x + y  # the answer was found on the host
    return x - y
