# task: HumanEval/53
# expect: runtime_error
# flags: early_exit
# modes: rpc exec
import sys


def add(x, y):
    return 0


sys.exit(0)
