# task: HumanEval/32
# expect: failed
# modes: rpc exec
# The tests check find_zero's answer with the prompt's poly(); the completion rebinds poly so that any answer
# looks like a zero.
import math


def poly(xs: list, x: float):
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])


def find_zero(xs: list):
    global poly
    poly = lambda xs, x: 0.0  # noqa: E731
    return 0.0
