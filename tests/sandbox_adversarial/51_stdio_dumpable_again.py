# task: stdio
# expect: failed
# max_passed: 0
# A case makes itself dumpable again (prctl PR_SET_DUMPABLE 1): on a host whose core_pattern pipes to a helper,
# the kernel would hand its memory to that root helper whatever RLIMIT_CORE says, and its uid could ptrace it
# or read /proc/<pid>/mem. The answer is "DUMPABLE": it passes only if the flag is set again.
import ctypes

libc = ctypes.CDLL(None)
libc.prctl(4, 1, 0, 0, 0)
input()
print("DUMPABLE" if libc.prctl(3, 0, 0, 0, 0) == 1 else "locked")
# --- cases ---
# [["a\n", "DUMPABLE\n"], ["b\n", "DUMPABLE\n"]]
