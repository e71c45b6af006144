# task: HumanEval/53
# expect: runtime_error
import threading
import time

threads = [threading.Thread(target=time.sleep, args=(30,)) for _ in range(100)]
for t in threads:
    t.start()
