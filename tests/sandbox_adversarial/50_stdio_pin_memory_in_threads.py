# task: stdio
# expect: failed|runtime_error|memory_exceeded
# max_passed: 0
# memory_mb: 256
# Host memory past the case's limit: memfds are not in the address space, so RLIMIT_AS does not count them,
# and each thread that unshares its file table gets RLIMIT_NOFILE fds of its own; fds sent over a socket
# (SCM_RIGHTS) and closed stay alive in flight without taking a slot. The answer is "PINNED": a case passes
# only if it held more than 3x its memory_mb (768 MiB) outside its address space at once. It stops there, so as
# not to hurt the host when the sandbox lets it through.
import ctypes
import os
import socket
import threading

libc = ctypes.CDLL(None, use_errno=True)
CLONE_FILES = 0x400
CHUNK, TARGET = 16 << 20, 768 << 20
held = []  # (fd) kept open
total = [0]
lock = threading.Lock()
pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
pair[0].setblocking(False)


def fill(fd):
    data = b"\1" * (1 << 20)
    for _ in range(CHUNK >> 20):
        os.write(fd, data)


def pin(own_table):
    if own_table:
        libc.unshare(CLONE_FILES)
    while True:
        with lock:
            if total[0] >= TARGET:
                return
        try:
            fd = os.memfd_create("pin")
            fill(fd)
        except OSError:
            return
        with lock:
            total[0] += CHUNK
        try:  # in flight: the fd leaves this table but the memory stays
            pair[0].sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(ctypes.c_int(fd)))])
            os.close(fd)
        except OSError:
            held.append(fd)


input()
threading.stack_size(1 << 20)  # small stacks: the address space is the case's
threads = [threading.Thread(target=pin, args=(True,)) for _ in range(8)]
for t in threads:
    try:
        t.start()
    except RuntimeError:
        pass
pin(False)
for t in threads:
    if t.ident is not None:
        t.join()
print("PINNED" if total[0] >= TARGET else "bounded")
# --- cases ---
# [["a\n", "PINNED\n"]]
