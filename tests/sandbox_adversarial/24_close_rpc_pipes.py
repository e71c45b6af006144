# task: HumanEval/53
# expect: runtime_error
# flags: early_exit
import os

for fd in range(3, 64):
    try:
        os.close(fd)
    except OSError:
        pass


def add(x, y):
    return x + y
