# task: HumanEval/53
# expect: failed
# modes: rpc exec
# Leave work for whoever cleans up: as many directories as it can, a path longer than PATH_MAX, a tree 1,500
# levels deep, and files in it, all in its scratch directory. The next task must pass in its normal time.
import os

made = 0
try:
    for i in range(90_000):
        os.mkdir(f"d{i}")
        made += 1
except OSError:
    pass
base = os.getcwd()
try:
    os.chdir(base)
    for _ in range(1_500):
        os.mkdir("x" * 200)
        os.chdir("x" * 200)
except OSError:
    pass
try:
    os.chdir(base)
    for _ in range(1_500):
        os.mkdir("y")
        os.chdir("y")
        open("f", "w").close()
except OSError:
    pass


def add(x, y):
    return x - y
