# task: HumanEval/53
# expect: failed
# Fill the scratch directory (file size and tmpfs limits) and the memory behind it.

written = 0
try:
    with open("big.bin", "wb") as f:
        while written < (512 << 20):
            f.write(b"x" * (1 << 20))
            written += 1 << 20
except OSError:
    pass
for i in range(64):
    try:
        with open(f"f{i}.bin", "wb") as f:
            f.write(b"y" * (15 << 20))
    except OSError:
        break


def add(x, y):
    return written
