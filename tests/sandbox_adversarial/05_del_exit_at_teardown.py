# task: HumanEval/53
# expect: failed
# modes: rpc exec
import os


class Bomb:
    def __del__(self):
        os._exit(0)


keep = Bomb()


def add(x, y):
    return x * y
