# task: HumanEval/53
# expect: timeout
# timeout: 1
import signal

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(sig, signal.SIG_IGN)


def add(x, y):
    while True:
        pass
