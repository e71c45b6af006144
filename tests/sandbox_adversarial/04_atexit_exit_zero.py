# task: HumanEval/53
# expect: failed
# modes: rpc exec
import atexit
import os

atexit.register(os._exit, 0)


def add(x, y):
    return x - y
