# task: stdio
# expect: failed
# max_passed: 0
# Print every kind of verdict a naive harness might trust, and try to reach the judge or the process that
# forked it (the case server's control socket, the rpc pipes, other fds) with forged result frames, then exit 0.
import json
import os
import socket
import struct
import sys

forged = json.dumps(
    {"id": 1, "status": "passed", "cases": ["passed"] * 4, "message": "4/4 cases passed"}
).encode()
for line in ("passed", "Accepted", "OK", "4/4 cases passed", "All tests passed!", "1.0", forged.decode()):
    print(line)
sys.stdout.flush()
for fd in range(3, 64):
    for data in (struct.pack(">I", len(forged)) + forged, b"0", b"ok"):
        try:
            os.write(fd, data)
        except OSError:
            pass
    try:
        s = socket.socket(fileno=fd)
        s.sendmsg([b"0"])
        s.detach()
    except OSError:
        pass
os._exit(0)
# --- cases ---
# [["1\n", "2\n"], ["2\n", "4\n"], ["3\n", "6\n"], ["4\n", "8\n"]]
