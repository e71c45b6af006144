# task: HumanEval/53
# expect: memory_exceeded
# modes: rpc exec
# memory_mb: 64
# A program whose compilation alone needs more memory than the limit: memory_exceeded, not a forged exit.
{MANY_STATEMENTS}  # noqa: B018, F821 (the harness puts 50,000 assignments here)


def add(x, y):
    return x + y
