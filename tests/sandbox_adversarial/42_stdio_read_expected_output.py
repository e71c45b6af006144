# task: stdio
# expect: failed
# max_passed: 0
# timeout: 4
# Look for the expected output everywhere a case process can look: its environment and arguments, every open
# fd, every file of its root, /proc (any other process's memory, environ, cmdline), and its own memory, which
# it inherited from the process that forked it (checked by hand: an answer put in its input is found there).
# Each answer is a random token that only the judge holds; it prints what it found, so a find passes.
import os
import re
import sys
import time

deadline = time.monotonic() + 2.5
pattern = re.compile(rb"ANSWER-[0-9a-f]{12}")
found = set()
wanted = sys.stdin.read().strip()  # its own input: a random token too, unrelated to the answer


def scan(data):
    found.update(m.decode() for m in pattern.findall(data))


def look(path, limit=1 << 22):
    try:
        with open(path, "rb") as f:
            scan(f.read(limit))
    except (OSError, ValueError):
        pass


scan(repr(os.environ).encode() + repr(sys.argv).encode() + repr(sys.orig_argv).encode())
for fd in range(3, 64):
    try:
        scan(os.read(fd, 1 << 20))
    except OSError:
        pass
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pids = []
with open("/proc/self/maps") as maps:  # its own memory, all of it (ctypes: /proc/self/mem is closed to it)
    import ctypes

    for line in maps:
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        if line.split()[1].startswith("r") and end - start < 1 << 28 and "[vvar" not in line:
            scan(ctypes.string_at(start, end - start))
for pid in pids + ["1"]:
    for name in ("environ", "cmdline"):
        look(f"/proc/{pid}/{name}")
    try:  # readable memory of the process, region by region
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                if "r" not in line.split()[1] or end - start > 1 << 28:
                    continue
                try:
                    mem.seek(start)
                    scan(mem.read(end - start))
                except (OSError, ValueError, OverflowError):
                    pass
    except OSError:
        pass
for root, _dirs, files in os.walk("/", followlinks=False):
    if time.monotonic() > deadline:
        break
    if root.startswith(("/proc", "/sys")):
        continue
    for name in files:
        look(os.path.join(root, name), 1 << 16)
print(" ".join(sorted(found)) or "nothing found")
# --- cases ---
# [["IN-4f1c", "ANSWER-7c1e9a03b2d4"], ["IN-9a0b", "ANSWER-e05f2b9c1a77"], ["IN-77d2", "ANSWER-3b8d0c6e51f2"]]
