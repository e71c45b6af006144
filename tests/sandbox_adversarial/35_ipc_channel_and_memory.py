# task: HumanEval/53
# expect: failed
# modes: rpc exec
# SysV shared memory, message queues, semaphores and a POSIX message queue: leave 4 x 128 MiB segments
# filled behind, and read what an earlier task left under fixed keys. It passes only if an object of an
# earlier run is still there, i.e. if tasks can talk to each other.
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_CREAT, KEY = 0o1000, 0x5A5A0000
earlier = False
for i in range(4):
    if libc.shmget(KEY + i, 128 << 20, 0o666) >= 0:
        earlier = True
    shm = libc.shmget(KEY + i, 128 << 20, IPC_CREAT | 0o666)
    if shm >= 0:
        addr = libc.shmat(shm, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memset(addr, 1, 128 << 20)
            libc.shmdt(ctypes.c_void_p(addr))
earlier |= libc.msgget(KEY, 0o666) >= 0 or libc.semget(KEY, 0, 0o666) >= 0
libc.msgget(KEY, IPC_CREAT | 0o666)
libc.semget(KEY, 4, IPC_CREAT | 0o666)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
earlier |= libc.mq_open(b"/passk_channel", os.O_RDONLY, 0, None) >= 0
libc.mq_open(b"/passk_channel", os.O_RDWR | os.O_CREAT, 0o666, None)


def add(x, y):
    return x + y if earlier else x - y
