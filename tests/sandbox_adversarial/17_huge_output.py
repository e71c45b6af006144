# task: HumanEval/53
# expect: output_limit
# modes: rpc exec
import os

block = b"x" * (1 << 20)
for _ in range(120):
    os.write(1, block)
    os.write(2, block)
