# task: HumanEval/53
# expect: runtime_error
# flags: early_exit
# C-level recursion past the stack: the candidate dies with SIGSEGV while the judge waits.
import sys

sys.setrecursionlimit(10**8)


def add(x, y):
    nested = []
    for _ in range(10**6):
        nested = [nested]
    return repr(nested)
