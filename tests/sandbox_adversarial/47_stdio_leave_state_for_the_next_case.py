# task: stdio
# expect: failed|timeout
# max_passed: 0
# (timeout: a case may start threads, and the non-daemon one below keeps the program alive, as under python,
# until the case's deadline kills it.)
# Every answer is "STATE FOUND": a case passes only if something an earlier case of the task left behind is
# still there. Look for it first (a file in /tmp or the working directory, an abstract unix socket, SysV shared
# memory, a process to ask); then try to leave each of them (a daemon that answers on the socket, a file, a
# shared segment, a thread) and answer "fresh".
import os
import socket
import threading
import time

NAME = b"\0passk-stdio-leftover"


def found():
    for path in ("/tmp/passk_leftover", "passk_leftover", "/dev/shm/passk_leftover"):
        if os.path.exists(path):
            return True
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(0.2)
        s.connect(NAME)
        return s.recv(16) == b"here"
    except OSError:
        pass
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.shmget(0x5A5A, 0, 0) >= 0:
            return True
    except OSError:
        pass
    return len([p for p in os.listdir("/proc") if p.isdigit()]) > 1


def serve_forever():
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(NAME)
    srv.listen(8)
    while True:
        conn, _ = srv.accept()
        conn.send(b"here")
        conn.close()


input()
if found():
    print("STATE FOUND")
else:
    for leave in (
        lambda: open("/tmp/passk_leftover", "w").close(),
        lambda: open("passk_leftover", "w").close(),
        lambda: __import__("ctypes").CDLL(None).shmget(0x5A5A, 4096, 0o1666),
        lambda: threading.Thread(target=serve_forever, daemon=False).start(),
        lambda: os.fork() == 0 and (os.setsid(), serve_forever()),
    ):
        try:
            leave()
        except Exception:
            pass
    time.sleep(0.2)
    print("fresh")
# --- cases ---
# [["a\n", "STATE FOUND\n"], ["b\n", "STATE FOUND\n"], ["c\n", "STATE FOUND\n"], ["d\n", "STATE FOUND\n"]]
