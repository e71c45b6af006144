# task: HumanEval/53
# expect: runtime_error
import os
import posix

children = []
for _ in range(300):
    children.append(posix.fork())
    if children[-1] == 0:
        import time

        time.sleep(8)
        os._exit(0)
while True:
    os.fork()
