# task: HumanEval/53
# expect: runtime_error
# flags: protocol_violation
# A forged reply frame: a dict whose 12,000 keys are tuples that all hash alike ((k * (2**61 - 1),) for any k),
# written straight to the reply pipe. Building it is quadratic in C code; the judge must refuse it at once.
import json
import os
import struct

M = 2**61 - 1


def add(x, y):
    tagged = ["d"] + [v for k in range(1, 12_001) for v in (["t", k * M], 1)]
    data = json.dumps(["ret", tagged]).encode()
    os.write(4, struct.pack(">I", len(data)) + data)
    return x + y
