# task: stdio
# expect: failed
# max_passed: 1
# Every case has the same input and a different answer: the case's index. Guess the index from anything that
# could tell it (a counter left in /tmp or elsewhere, the pid, the process count, the environment, how long
# the machine or the parent has run) and answer it. The cases run in a random order, each in a fresh process
# and /tmp: at most the one case whose answer is the constant guess can pass.
import os

input()
guess = 0
for path in ("/tmp/passk_case_counter", "/dev/shm/passk_case_counter", "passk_case_counter"):
    try:
        with open(path) as f:
            guess = max(guess, int(f.read() or 0) + 1)
    except (OSError, ValueError):
        pass
    try:
        with open(path, "w") as f:
            f.write(str(guess))
    except OSError:
        pass
guess = max(guess, os.getpid() - 1, len([p for p in os.listdir("/proc") if p.isdigit()]) - 1)
guess = max(guess, int(os.environ.get("PASSK_CASE", "0") or 0))
print(f"case-{guess}")
# --- cases ---
# [["?\n", "case-0\n"], ["?\n", "case-1\n"], ["?\n", "case-2\n"], ["?\n", "case-3\n"], ["?\n", "case-4\n"], ["?\n", "case-5\n"]]
