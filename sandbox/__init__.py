"""Isolated, fast execution of untrusted completions, with a verdict the executed code cannot forge.

    from sandbox import Sandbox
    with Sandbox(timeout=3.0) as sb:
        result = sb.run(prompt + completion, tests, entry_point)   # Result(status=..., passed=..., ...)

Design. One small zygote (``python -I -S``, stdlib only, never torch/CUDA) per worker slot, started with
fork+exec and pinned to one CPU. Once per zygote it enters a private network namespace (no interface up: no
network, not even loopback) and a private mount namespace, and compiles a seccomp filter. A spawner process
forked from it (before it ever sees a test) keeps one candidate process forked and set up ahead of time; each
task gets a fresh one, killed and reaped afterwards. The tests run in the zygote (the "judge"); the candidate
only loads the program and answers calls. See ``_zygote.py`` for the processes and ``executor.py`` for the
pool.

Threat model: what is defended
------------------------------
Against a program that wants to harm the host or fake a pass (a model that learned reward hacking):

* **Forged verdicts.** In the default ``rpc`` mode the tests never run in the candidate's interpreter: names
  the tests use but do not define resolve to proxies; a call sends JSON of exact builtin types (int, float,
  str, bool, None, list, tuple, dict, set, frozenset, bytes, complex; no pickle, no subclasses) to the candidate
  and gets the return value back the same way. So ``sys.exit(0)``, ``os._exit``, ``SystemExit``, atexit and
  ``__del__`` exits (the candidate died: ``early_exit``), fake "passed" prints, ``__eq__``-always-True objects
  (not plain data: ``unencodable_value``), patched builtins, ``sys.settrace``, reading the caller's frame or
  walking the stack (the tests are in another process), and reading the tests from memory (candidates are
  forked from a spawner that never held a test) all fail. ``passed`` means every assert unit ran and held.
* **Host damage.** Each program runs in its own process, never the trainer's, SIGKILLed with its process
  group at a wall-clock deadline (a CPU limit alone never fires on a sleeping process) and reaped. rlimits:
  address space (``memory_mb``), CPU (``ceil(timeout) + 1`` s), file size 16 MiB, 64 fds, no core, no new
  processes (RLIMIT_NPROC = 0; as root it is not enforced, so candidates never run as root: two uids per
  slot from 61000, ``uid_base``).
  No network (network namespace; seccomp also refuses non-AF_UNIX sockets). No writes outside a private
  scratch directory (mount namespace: an empty read-only tmpfs over /tmp, /var/tmp, /dev/shm, /run/lock; the
  scratch is a size-limited tmpfs, removed after each task). HumanEval's data and the HF cache are hidden.
  seccomp refuses execve, ptrace, process_vm_*, mount, unshare, setns, bpf, io_uring, kexec, module
  loading, keyctl, and signals to anything but the program's own process group. stdin is /dev/null, stdout
  and stderr are read with a size cap, and the environment holds only PATH and LANG (no HF_TOKEN,
  WANDB_API_KEY...). Workers exit when their owner does, even when it is SIGKILLed (stdin EOF, then
  PR_SET_PDEATHSIG down the tree). After a completed task the candidate is reaped while its result travels
  back (milliseconds), before the worker takes the next task.

Where a layer is unavailable (not root: a user namespace is tried; no user namespaces; no libseccomp), the
sandbox degrades, logs once which layers are active (``Sandbox.layers``, observed by a probe program in a
real candidate), and never claims isolation it lacks.

What is not defended
--------------------
* **A kernel exploit, or a seccomp/namespace escape.** The candidates share the host kernel; the seccomp
  filter is a denylist. For a hostile model (not just a reward-hacking one), run the whole worker fleet inside
  gVisor, a microVM (Firecracker, E2B) or nsjail/bubblewrap; the per-task cost stays the fork.
* **Exec mode** (``mode="exec"``, for whole programs and stdin/stdout tasks, or tests that cannot cross a
  process boundary) runs program and tests in one interpreter. Its verdict is a per-task nonce written only
  after the tests return, which stops exit-status tricks and fake prints, but in-process tricks (``__eq__``,
  patched builtins, ``sys.settrace``, stack walks that find the nonce) can beat it. Prefer rpc mode.
* **The tests must be trusted.** They run in the judge, as root when the trainer is root (without network).
  rpc mode also cannot see argument mutation, object identity, generators or callables passed to the candidate
  (a test that passes one is reported as ``sandbox_error``: run it with ``mode="exec"``).
* World-readable files stay readable (outside the hidden directories), filesystem AF_UNIX sockets stay
  reachable where their permissions allow, CPU time is shared with the host (no cgroup), and side channels
  (timing, /proc of other processes' command lines) are out of scope.
"""

from .executor import Result, Sandbox, Status, arun_batch, get_sandbox, run, run_batch

__all__ = ["Result", "Sandbox", "Status", "arun_batch", "get_sandbox", "run", "run_batch"]
