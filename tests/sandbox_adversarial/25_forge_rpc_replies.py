# task: HumanEval/53
# expect: runtime_error
# flags: protocol_violation
# Write forged replies to the reply pipe before the judge asks anything.
import json
import os
import struct

for obj in ({"ret": True}, {"load": "ok", "passed": True}, {"ret": 1}):
    data = json.dumps(obj).encode()
    os.write(4, struct.pack(">I", len(data)) + data)
os.write(4, struct.pack(">I", 5) + b"\xff\xfe{[(")
os.close(4)


def add(x, y):
    return x + y
