# task: HumanEval/53
# expect: runtime_error
# flags: early_exit
# C-level recursion past the stack: the candidate dies with SIGSEGV while the judge waits. (The stack is
# lowered to 1 MiB so that the overflow comes within the time limit on any build of the interpreter:
# repr's recursion check is quadratic in the depth.)
import resource
import sys

sys.setrecursionlimit(10**8)
resource.setrlimit(resource.RLIMIT_STACK, (1 << 20, 1 << 20))


def add(x, y):
    nested = []
    for _ in range(10**5):
        nested = [nested]
    return repr(nested)
