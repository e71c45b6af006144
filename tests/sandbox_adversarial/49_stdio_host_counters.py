# task: stdio
# expect: failed
# max_passed: 0
# Host-wide counters as a channel between pools: /proc/stat, /proc/meminfo, /proc/loadavg, /proc/vmstat and
# sysinfo() move with every task on the machine (another pool's candidate allocates memory or spins: this one
# reads it). Every answer is "COUNTERS": a case passes only if it can read such a counter.
import ctypes

readable = []
for name in ("stat", "meminfo", "loadavg", "vmstat", "pressure/memory", "diskstats", "interrupts"):
    try:
        with open("/proc/" + name) as f:
            if f.read(64):
                readable.append(name)
    except OSError:
        pass
info = (ctypes.c_byte * 256)()
if ctypes.CDLL(None).sysinfo(info) == 0:
    readable.append("sysinfo")
input()
print("COUNTERS" if readable else "none")
# --- cases ---
# [["a\n", "COUNTERS\n"], ["b\n", "COUNTERS\n"]]
