# task: HumanEval/53
# expect: runtime_error
# flags: protocol_violation
# A reply frame tagging 100,000 ints that all hash alike (k * (2**61 - 1) hashes to 0) as a set: building it
# is quadratic in C code, where the judge's timer cannot interrupt it. Written straight to the reply pipe
# (the candidate itself could not build such a set in time); the judge must refuse it at once.
import json
import os
import struct

M = 2**61 - 1


def add(x, y):
    data = json.dumps(["ret", ["s"] + [k * M for k in range(1, 100_001)]]).encode()
    os.write(4, struct.pack(">I", len(data)) + data)
    return x + y
