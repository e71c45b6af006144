# task: HumanEval/53
# expect: runtime_error
# flags: early_exit
# modes: rpc exec
import os


def add(x, y):
    return 0


os._exit(0)
