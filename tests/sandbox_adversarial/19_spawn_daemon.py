# task: HumanEval/53
# expect: failed|runtime_error
# Leave something running after the task: a shell, a double-forked daemon, a thread.
import os
import subprocess
import threading

attempts = []
for spawn in (
    lambda: os.posix_spawn("/bin/sh", ["sh", "-c", "sleep 3; touch /tmp/passk_pwned_daemon"], {}),
    lambda: subprocess.Popen(
        ["/bin/sh", "-c", "sleep 3; touch /tmp/passk_pwned_daemon"], start_new_session=True
    ),
    lambda: os.system("(sleep 3; touch /tmp/passk_pwned_daemon) &"),
    lambda: threading.Thread(target=lambda: __import__("time").sleep(30), daemon=False).start(),
    lambda: os.fork() == 0 and (os.setsid(), __import__("time").sleep(30)),
):
    try:
        attempts.append(spawn())
    except Exception as e:
        attempts.append(e)


def add(x, y):
    return x - y
