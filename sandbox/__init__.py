"""Isolated, fast execution of untrusted completions, with a verdict the executed code cannot forge.

    from sandbox import Sandbox
    with Sandbox(timeout=3.0) as sb:
        result = sb.run(prompt + completion, tests, entry_point, trusted_code=prompt)   # Result(status=...)
        result = sb.run_stdio(program, [(input_text, expected_output), ...])          # stdin/stdout cases

Design. One small zygote (``python -I -S``, stdlib only, never torch/CUDA) per worker slot, started with
fork+exec and pinned to one CPU. It enters a private network namespace once; the tests (the "judge") run there.
A spawner forked from it (before it ever sees a test) builds, once, the candidates' root and keeps one
candidate forked and set up ahead of time: each task gets a fresh one, in namespaces of its own, killed and
reaped afterwards. The candidate only loads the program and answers calls. See ``_zygote.py`` for the
processes and ``executor.py`` for the pool.

Threat model: what is defended
------------------------------
Against a program that wants to harm the host or fake a pass (a model that learned reward hacking):

* **Forged verdicts.** In the default ``rpc`` mode the tests never run in the candidate's interpreter: a call
  sends JSON of exact builtin types (int, float, str, bool, None, list, tuple, dict, set, frozenset, bytes,
  bytearray, complex, and the standard library's ``Decimal`` and ``Fraction``; no pickle) to the candidate and
  gets the return value back the same way, rebuilt by the judge as a genuine value of that type; an instance
  of a subclass of one (``collections.Counter``, a namedtuple, an ``IntEnum``) crosses as the base type's
  value, read from its storage, so that what the subclass overrides stays in the candidate. So
  ``sys.exit(0)``, ``os._exit``, ``SystemExit``, atexit and ``__del__`` exits (the candidate died:
  ``early_exit``), fake "passed" prints, ``__eq__``-always-True objects (not plain data, subclasses of plain
  types that define their own equality included: ``unencodable_value``),
  patched builtins, ``sys.settrace``, reading the caller's frame or walking the stack (the tests are in another
  process), and reading the tests from memory (candidates are forked from a spawner that never held a test) all
  fail. ``passed`` means every assert unit ran and held.
* **Helpers taken from the candidate.** ``trusted_code`` (the dataset prompt; the rewards, the CLI and the
  metric module pass it) runs in the judge into the tests' namespace: a helper the tests call (HumanEval/32's
  ``poly``, /38's ``encode_cyclic``, /50's ``encode_shift``) is the prompt's own, so a completion that rebinds,
  redefines or wraps it changes only its copy. The entry point, and names the trusted code does not define, are
  the candidate's. Trusted code that cannot run in the judge (an import it lacks) is a ``sandbox_error``.
* **Stdin/stdout tasks** (``run_stdio``). The verdict of each case is decided in the judge, from the case
  process's exit status and by comparing its stdout with the expected output (``verdicts.compare_output``);
  the expected outputs never leave the judge, and nothing a case prints can be read as a verdict. Each case
  runs in a fresh process forked from the one that compiled the program (a process that never held an input
  or an output), with every layer below: its own PID, mount and IPC namespaces and /tmp (no file, process or
  IPC object of one case reaches the next), its uid, seccomp and rlimits, stdin a pipe holding only its
  input. The cases run one at a time, in an order drawn from os.urandom, so that recognising which case runs
  is worth nothing. A non-zero exit or a signal is a runtime error whatever was printed (``crash_after_output``
  when the output was right), and a prefix of the expected output is a wrong answer. ``float_tol`` applies to
  real-valued expected tokens only (a fraction or an exponent); an integer is matched exactly, however large.
* **The judge's own time.** The comparison is linear in the two sizes (a number pattern that cannot
  backtrack, numbers parsed within 64 characters, 64 MiB per side at most) and looks at every token even
  after a difference, so its time hardly depends on which tokens are right; it runs inside the task's budget
  (the judge's alarm, ``total_timeout`` + 1 s, ends it as a ``timeout``). The outputs are compared only after
  the task's last case has ended, so no case runs after a comparison it could time (with
  ``stop_on_failure`` each case is compared as it ends, and the next case learns that the last one passed;
  past 64 MiB of held output the held cases are compared before the next case runs).
* **Forged or hostile replies.** A candidate's frames are JSON without objects; a ``{`` is a protocol
  violation, so the judge's parser never builds a dict from them. Decoding is bounded in bytes (16 MiB), items
  (1M), depth (100) and hash work, and watches the task's deadline: sets and dicts are built only after
  counting equal hashes (the candidate shares the judge's hash secret and can craft collisions).
* **Seeing the host.** Each candidate runs in its own root: a read-only tmpfs (``pivot_root``) holding only the
  interpreter's standard library (site-packages/dist-packages covered), the shared libraries its extension
  modules still need, ``/etc/ld.so.cache``, a ``/dev`` with null, zero and a read-only urandom (no pts, no ptmx,
  no GPU nodes), its own ``/proc`` (where the command line that started the workers, which names host paths,
  is blanked) and a scratch ``/tmp``. No home directories, checkouts, caches, datasets, ``/srv``, ``/opt``,
  ``/mnt``. More only through ``Sandbox(readonly_paths=[...])``.
* **Tasks talking to tasks, leftovers.** Each candidate is PID 1 of its own PID namespace (whatever it starts
  dies with it; it can name no other process), has its own IPC namespace (SysV and POSIX IPC die with it;
  seccomp refuses them anyway) and mount namespace, and a fresh tmpfs ``/tmp`` limited in size (64 MiB) and
  inodes (4,096), discarded with the namespace and never walked. flock, record locks, inotify and leases are
  refused (the root's files are the host's inodes). The next task never depends on what the previous did.
* **State shared with later tasks and other pools.** The root's files are the host's, so their page cache is
  shared with every candidate of every pool: seccomp refuses what sets, evicts or reads its state without
  reading the data (fadvise, readahead, mincore, cachestat, remap_file_pages, preadv2/pwritev2 with
  RWF_NOWAIT, madvise other than advice 0-19 on its own pages, and WILLNEED, REMOVE and MERGEABLE among
  those), and the spawner asks the kernel to cache every file of the root (the first 512 MiB: a larger
  ``readonly_paths`` stays partly cold) before the first candidate runs, so that a read cannot flip a page
  from cold to cached either. A candidate's ``/proc`` is mounted
  ``subset=pid,hidepid=invisible``: its own processes and nothing host-wide (no ``stat``, ``meminfo``,
  ``loadavg``, ``vmstat``, ``pressure``); ``sysinfo()`` is refused for the same counters.
* **Host damage.** Each program runs in its own process, never the trainer's, SIGKILLed at a wall-clock
  deadline (a CPU limit alone never fires on a sleeping process) and reaped. rlimits: address space
  (``memory_mb``), CPU (``ceil(timeout) + 1`` s), file size 16 MiB, 64 fds, no core, no locked memory, no
  POSIX queue bytes, no new processes (RLIMIT_NPROC = 0; it does not bind root, so candidates never run as
  root: two uids per slot, claimed host-wide so that two pools never share one). A stdin/stdout case may
  start threads instead (the competitive-programming idiom of a big-stack thread for deep recursion): its
  RLIMIT_NPROC is 16 and a seccomp filter of its own refuses fork, vfork and any clone that does not share
  the address space, fs struct, file table and signal handlers (CLONE_THREAD|VM|FS|FILES|SIGHAND; only with
  seccomp and the case's own uid; otherwise no threads either), and ``unshare(CLONE_FILES|CLONE_FS)`` is
  refused, so RLIMIT_AS and the 64 fds bound the whole case, not each thread. Memory outside the address
  space is bounded: ``memfd_create`` and ``memfd_secret`` are refused (there is no memory cgroup per slot),
  SysV and POSIX shared memory too, ``/tmp`` is 64 MiB, pipe buffers are the kernel's per-uid quota
  (``pipe-user-pages-soft``, 64 MiB by default), fds in flight over SCM_RIGHTS at most RLIMIT_NOFILE per
  uid (the kernel's ``too_many_unix_fds``), and without memfds they are pipes and sockets. No network (network
  namespace; seccomp also refuses non-AF_UNIX sockets). seccomp refuses exec, ptrace, process_vm_*, other
  namespaces and mounts, bpf, io_uring, kexec, modules, keyctl, signals to anything but its own process group,
  fcntl(F_SETOWN/F_SETSIG), SysV/POSIX IPC and moving itself off its CPU or memory node. stdin is /dev/null,
  stdout and stderr are read with a size cap, and the environment holds only PATH and LANG. The owner, judge,
  spawner and candidates are non-dumpable (no ptrace, no /proc/<pid>/mem even for the same uid), and
  ``prctl(PR_SET_DUMPABLE)`` to anything but 0 is refused (a dumpable process's memory would reach a
  ``core_pattern`` pipe helper, as root, whatever RLIMIT_CORE says). Workers exit
  when their owner does, even when it is SIGKILLed (stdin EOF, then PR_SET_PDEATHSIG down the tree).

``Sandbox.layers`` reports each layer as a probe program observed it in a real candidate.

Without root
------------
The zygote enters a user namespace, which gives every namespace, the own root and the scratch tmpfs; the
candidate drops the namespace's capabilities. What it cannot give is a uid of the candidate's own
(``separate_uid`` and ``unique_uids`` are False): candidates run as the owner's uid. Namespaces keep them away
from the owner's processes and files, but per-user kernel quotas (processes, pipe buffers) are shared with the
owner, and an escape from the namespaces or seccomp would hold the owner's privileges. Without user namespaces
(or with ``disable=[...]``) the missing layers are reported and logged, never claimed.

What is not defended
--------------------
* **A kernel exploit, or a seccomp/namespace escape.** The candidates share the host kernel; the seccomp
  filter is a denylist. For a hostile model (not just a reward-hacking one), run the whole worker fleet inside
  gVisor, a microVM (Firecracker, E2B) or nsjail/bubblewrap; the per-task cost stays the fork.
* **Exec mode** (``mode="exec"``, for tests that cannot cross a process boundary) runs program and tests in
  one interpreter. Its verdict is a per-task nonce written only
  after the tests return, which stops exit-status tricks and fake prints, and the tests see the trusted code's
  namespace, not the program's globals; but in-process tricks (``__eq__``, patched builtins, ``sys.settrace``,
  stack walks that find the nonce) can beat it. Prefer rpc mode.
* **The tests and the trusted code must be trusted.** They run in the judge, as root when the trainer is root
  (without network). rpc mode also cannot see argument mutation, object identity, generators or callables
  passed to the candidate (a test that passes one is reported as ``sandbox_error``: run it with
  ``mode="exec"``).
* CPU time is shared with the host (no cgroup); the files of the candidate's root are the host's (read-only).
* **Timing channels that remain**, each bounded by the noise of a fork-per-case (tens of microseconds and
  more): the page cache's residency through read timing where the host itself evicts a page of the root's
  files under memory pressure (a task cannot evict one; a page read back is cached again for everyone, so
  each such bit is readable by one reader and writable once); contention for shared CPU caches, memory
  bandwidth and the kernel's locks with the tasks of other slots (the slots are pinned to CPUs, not
  isolated); the judge's comparison time of a previous task on the same slot, observable only against the
  clock (no state carries the previous task's end), and within the nanoseconds per token that byte
  comparisons stop early; with ``stop_on_failure``, the fact that a case runs at all; the inode numbers of a
  case's new namespaces (``/proc/self/ns/*``), which the kernel allocates lowest-free host-wide, so that they
  show roughly how many namespaces other tasks hold at that moment (a task moves that only by ending: a bit
  per task between concurrent tasks, nothing that outlives them). Host memory pressure from other tasks
  (allocations under RLIMIT_AS succeed or fail) is not isolated without a memory cgroup, and there is none:
  memfds are refused instead (the issue's alternative), so nothing a case can pin escapes the bounds above.
* Threads: the program of an rpc or exec task cannot start any (RLIMIT_NPROC = 0 counts them); a stdin/stdout
  case's threads share its CPU and its address-space limit, and unreaped tasks of its uid count against its 16.
  The process that forks the cases keeps the privileges their set-up needs and compiles the candidate's source
  (compile() runs none of it).
"""

from .executor import Result, Sandbox, Status, arun_batch, get_sandbox, run, run_batch
from .verdicts import CASE_VERDICTS, FLAGS, FORGED_FLAGS, STATUSES, compare_output

__all__ = [
    "CASE_VERDICTS",
    "FLAGS",
    "FORGED_FLAGS",
    "STATUSES",
    "Result",
    "Sandbox",
    "Status",
    "arun_batch",
    "compare_output",
    "get_sandbox",
    "run",
    "run_batch",
]
