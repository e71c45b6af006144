# task: HumanEval/53
# expect: timeout
# timeout: 1
# modes: rpc exec
import signal
import time

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
time.sleep(30)
