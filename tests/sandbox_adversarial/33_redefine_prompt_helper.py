# task: HumanEval/50
# expect: failed
# modes: rpc exec
# A chat answer that repeats the prompt's helper with another body: encode_shift becomes the identity, so
# the identity passes as decode_shift.
def encode_shift(s: str):
    return s


def decode_shift(s: str):
    return s
