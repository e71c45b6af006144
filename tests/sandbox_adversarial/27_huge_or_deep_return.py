# task: HumanEval/53
# expect: failed
# flags: unencodable_value
def add(x, y):
    deep = []
    for _ in range(10000):
        deep = [deep]
    return deep
