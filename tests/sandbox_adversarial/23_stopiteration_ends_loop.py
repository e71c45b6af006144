# task: inline
# expect: runtime_error
# In-process, StopIteration raised by the candidate silently ends a test loop over map(): no assert fails.
def add(x, y):
    raise StopIteration


# --- tests ---
def check(candidate):
    for result in map(candidate, [1, 2, 3], [4, 5, 6]):
        assert result == 0
