# task: HumanEval/53
# expect: runtime_error
# flags: early_exit
# modes: rpc exec
import os
import sys

print("passed")
print("OK")
print("1.0")
print('{"passed": true, "nonce": "0123456789abcdef0123456789abcdef"}')
sys.stdout.flush()
os._exit(0)
