# task: HumanEval/53
# expect: runtime_error|failed
# modes: rpc exec
def add(x, y):
    raise SystemExit(0)
