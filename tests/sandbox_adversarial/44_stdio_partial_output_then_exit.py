# task: stdio
# expect: failed
# max_passed: 0
# Print the first line of the answer (cheap to get right), then leave with status 0 before the second line:
# a harness that compares line by line up to the shorter output (zip) would pass it.
import os
import sys

n = int(input())
print(n + 1)
sys.stdout.flush()
os._exit(0)
print(n * n)  # the expensive part, never reached
# --- cases ---
# [["2\n", "3\n4\n"], ["5\n", "6\n25\n"], ["10\n", "11\n100\n"]]
