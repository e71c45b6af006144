# task: HumanEval/53
# expect: failed
# Delete and overwrite files outside the scratch directory.
import os
import shutil

for action in (
    lambda: os.unlink("{CANARY_DIR}/canary.txt"),
    lambda: open("{CANARY_DIR}/canary.txt", "w").write("pwned"),
    lambda: open("{CANARY_DIR}/pwned.txt", "w").write("pwned"),
    lambda: os.rename("{CANARY_DIR}/canary.txt", "{CANARY_DIR}/moved.txt"),
    lambda: os.chmod("{CANARY_DIR}", 0o700),
    lambda: shutil.rmtree("{CANARY_DIR}"),
    lambda: open("/tmp/passk_pwned_tmp", "w").write("pwned"),
    lambda: open("/var/tmp/passk_pwned_vartmp", "w").write("pwned"),
    lambda: open("/dev/shm/passk_pwned_shm", "w").write("pwned"),
    lambda: os.mkdir("/tmp/passk_pwned_dir"),
    lambda: os.symlink("/etc/passwd", "/tmp/passk_pwned_link"),
):
    try:
        action()
    except Exception:
        pass


def add(x, y):
    return x - y
