# task: HumanEval/53
# expect: failed
import os
import sys

print(dict(os.environ))
print(os.environ.get("{SECRET}"), file=sys.stderr)
for path in ("/proc/1/environ", f"/proc/{os.getppid()}/environ", "/proc/self/environ"):
    try:
        with open(path, "rb") as f:
            print(f.read())
    except OSError:
        pass


def add(x, y):
    return os.environ.get("{SECRET}", "no secret here")
