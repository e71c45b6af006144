# task: HumanEval/53
# expect: memory_exceeded
chunks = []
while True:
    chunks.append(bytearray(64 << 20))
    chunks[-1][::4096] = b"x" * len(chunks[-1][::4096])
