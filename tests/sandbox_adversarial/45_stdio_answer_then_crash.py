# task: stdio
# expect: runtime_error
# flags: crash_after_output
# max_passed: 0
# Print the whole right answer, then crash (an exception, a signal, an abort): a harness that looks only at
# stdout would pass it. A non-zero exit is a runtime error whatever was printed.
import os
import signal
import sys

n = int(input())
print(n * 2, flush=True)
if n == 1:
    raise RuntimeError("cleanup failed")
if n == 2:
    os.kill(os.getpid(), signal.SIGKILL)
if n == 3:
    os.abort()
sys.exit(4)
# --- cases ---
# [["1\n", "2\n"], ["2\n", "4\n"], ["3\n", "6\n"], ["4\n", "8\n"]]
