"""The judge's side of a task in rpc and exec mode: the owner's pipes (``OwnerLink``), one candidate as seen
from the judge (``Run``), the proxies the tests call (``RemoteFunction``), the per-assert units, the tests'
preparation (units, calls sent ahead) and the rpc and exec judges."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import _socket
import builtins
import collections
import json
import math
import os
import select
import signal
import struct
import time
from typing import TYPE_CHECKING  # typing is pre-imported for the candidates anyway

from .base import OWNER_IN, compile_source
from .candidate import prompt_source
from .wire import (
    MAX_FRAME,
    MAX_REPLY,
    TOO_LARGE,
    Malformed,
    Unencodable,
    _loads,
    decode_value,
    encode_frame,
    encode_value,
)

if TYPE_CHECKING:
    from .spawner import Spawner


# ---- judge ---------------------------------------------------------------------------------------------
class Abort(BaseException):
    """Ends the tests at once; never swallowed by the per-assert units."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(reason, message)
        self.reason, self.message = reason, message


class OwnerGone(Abort):
    pass


class UnencodableValue(AssertionError):
    """The candidate returned a value outside the exact builtin types: a failed check, not a crash."""


# Remote exceptions re-raised in the judge under their builtin name; the rest become RuntimeError.
# StopIteration would silently end a test's loop over map(candidate, ...), so it is excluded on purpose.
SAFE_EXCEPTIONS = {
    n: c
    for n, c in vars(builtins).items()
    if isinstance(c, type)
    and issubclass(c, Exception)
    and not issubclass(c, (StopIteration, StopAsyncIteration))
}


class OwnerLink:
    """The judge's end of the owner's pipes. Tasks may arrive while one runs (the owner keeps a few in
    flight): they are read and queued, and only EOF means the owner is gone."""

    def __init__(self):
        os.set_blocking(OWNER_IN, False)
        self.buf, self.tasks, self.eof = bytearray(), [], False

    def pump(self) -> bool:
        """Read what is there; returns False on EOF."""
        while True:
            try:
                data = os.read(OWNER_IN, 1 << 20)
            except BlockingIOError:
                break
            if not data:
                self.eof = True
                break
            self.buf += data
        while len(self.buf) >= 4:
            (n,) = struct.unpack(">I", self.buf[:4])
            if n > MAX_FRAME:
                raise SystemExit(f"passk zygote: owner frame of {n} bytes")
            if len(self.buf) < 4 + n:
                break
            self.tasks.extend(json.loads(self.buf[4 : 4 + n]))
            del self.buf[: 4 + n]
        return not self.eof

    def next_task(self) -> dict | None:
        while not self.tasks:
            if self.eof:
                return None
            select.select([OWNER_IN], [], [])
            self.pump()
        return self.tasks.pop(0)


OWNER = None  # the OwnerLink, once main() runs


def owner_alive() -> bool:
    """Read what the owner sent meanwhile (its next tasks); False once it is gone."""
    return OWNER.pump()


class Run:
    """One candidate process (or stdin/stdout case server) as seen from the judge: its pipes, its deadline,
    its captured output."""

    def __init__(self, spawner: Spawner, deadline: float, cap: int, server: bool = False):
        self.deadline, self.cap, self.own_pid_ns = deadline, cap, spawner.pid_namespace
        self.out, self.err, self.buf = bytearray(), bytearray(), bytearray()
        self.pid, fds = spawner.take(server)
        self.req_w, self.rep_r, self.out_r, self.err_r, self.pidfd = fds[:5]
        self.control = _socket.socket(fileno=fds[5]) if server else None
        os.set_blocking(self.req_w, False)
        self.open = {self.rep_r, self.out_r, self.err_r}
        self.pending = b""
        self.prefetched = collections.deque()  # (name, args, kwargs) of the calls sent ahead, in order
        self.poller = select.poll()
        for fd in self.open:
            self.poller.register(fd, select.POLLIN)
        self.poller.register(OWNER_IN, select.POLLIN)

    def _read(self, fd):
        data = os.read(fd, 1 << 16)
        if not data:
            self.open.discard(fd)
            self.poller.unregister(fd)
        elif fd == self.rep_r:
            self.buf += data
            if len(self.buf) > MAX_REPLY + 4:
                raise Abort("protocol_violation", "reply too large")
        else:
            (self.out if fd == self.out_r else self.err).extend(data)
            if len(self.out) + len(self.err) > self.cap:
                raise Abort("output_limit", f"output exceeded {self.cap} bytes")

    def _frame(self):
        if len(self.buf) < 4:
            return None
        (n,) = struct.unpack(">I", self.buf[:4])
        if n > MAX_REPLY:
            raise Abort("protocol_violation", "reply too large")
        if len(self.buf) < 4 + n:
            return None
        data = bytes(self.buf[4 : 4 + n])
        del self.buf[: 4 + n]
        if b"{" in data:  # an honest candidate never writes one (encode_reply): no dict is built from it
            raise Abort("protocol_violation", "malformed reply")
        try:
            obj = _loads(data.decode())
        except (ValueError, RecursionError):
            raise Abort("protocol_violation", "malformed reply") from None
        if type(obj) is not list or not obj or type(obj[0]) is not str:
            raise Abort("protocol_violation", "malformed reply")
        return obj

    def send(self, *objs: object) -> None:
        """Queue requests; they are written while waiting for replies (the pipe may be full)."""
        self.pending = memoryview(b"".join(encode_frame(obj) for obj in objs))
        self._write()

    def _write(self):
        try:
            self.pending = self.pending[os.write(self.req_w, self.pending) :]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            raise Abort("early_exit", "the program exited before the tests finished") from None
        if self.pending:
            self.poller.register(self.req_w, select.POLLOUT)
        else:
            try:
                self.poller.unregister(self.req_w)
            except KeyError:
                pass

    def receive(self) -> list:
        """Wait for one reply frame within the deadline, draining stdout/stderr meanwhile."""
        while True:
            frame = self._frame()
            if frame is not None:
                return frame
            if self.rep_r not in self.open:
                raise Abort("early_exit", "the program exited before the tests finished")
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Abort("timeout", "wall-clock time limit exceeded")
            for fd, _ in self.poller.poll(max(1, math.ceil(remaining * 1000))):
                if fd == OWNER_IN:
                    if not OWNER.pump():
                        raise OwnerGone("owner_gone", "the owner went away")
                elif fd == self.req_w:
                    self._write()
                else:
                    self._read(fd)

    def request(self, obj: object) -> list:
        self.send(obj)
        return self.receive()

    def wait_exit(self) -> None:
        """Exec mode: after the nonce, wait (within the deadline) for the process to end."""
        while self.rep_r in self.open:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise Abort("timeout", "wall-clock time limit exceeded")
            ready, _, _ = select.select(list(self.open), [], [], remaining)
            for fd in ready:
                self._read(fd)

    def finish(self, spawner: Spawner, wait: bool = True) -> int | None:
        """Drain what is already written, SIGKILL the candidate (PID 1 of its namespace: everything it started
        dies with it) and have it reaped. With ``wait``, return its wait status; without, the spawner reaps
        it while the result travels."""
        try:
            while self.open:
                ready, _, _ = select.select(list(self.open), [], [], 0)
                if not ready:
                    break
                for fd in ready:
                    self._read(fd)
        except Abort:
            pass
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            pass
        if not self.own_pid_ns:  # then the spawner's pid numbers are ours: kill the process group
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        for fd in (self.req_w, self.rep_r, self.out_r, self.err_r, self.pidfd):
            os.close(fd)
        if self.control is not None:
            self.control.close()
        return spawner.reap(self.pid, wait)


class RemoteFunction:
    """Stands in the tests' namespace for a function of the candidate; only plain data crosses."""

    def __init__(self, name: str, run: Run, verdict: Verdict):
        self.__name__ = self.name = name
        self.run, self.verdict = run, verdict

    def __repr__(self):
        return f"<candidate function {self.name}>"

    def __call__(self, *args, **kwargs):
        try:
            a, k = encode_value(list(args)), encode_value(kwargs)
        except Unencodable as e:
            raise Abort(
                "sandbox_error", f"the tests pass a {e} to {self.name}(); run this task with mode='exec'"
            ) from None
        prefetched = self.run.prefetched
        if prefetched:  # this call was sent with the task: its answer is next in the pipe
            if prefetched[0] != (self.name, a, k):
                raise Abort(
                    "sandbox_error", "internal error: the tests' calls differ from the ones sent ahead"
                )
            prefetched.popleft()
            reply = self.run.receive()
        else:
            reply = self.run.request([self.name, a, k])
        kind = reply[0]
        if kind == "ret" and len(reply) == 2:
            try:
                return decode_value(reply[1], self.run.deadline)
            except TimeoutError:
                raise Abort("timeout", "wall-clock time limit exceeded (decoding a reply)") from None
            except (Malformed, ValueError, TypeError, RecursionError, MemoryError) as e:
                raise Abort("protocol_violation", f"malformed value in reply ({e})") from None
        if kind == "unenc" and len(reply) == 2:
            if reply[1] == TOO_LARGE:  # plain data, only too much of it: a failed check, no hacking signal
                raise UnencodableValue(
                    f"{self.name}() returned a value over the sandbox's limits: {reply[1]}"
                )
            self.verdict.flags.add("unencodable_value")
            raise UnencodableValue(f"{self.name}() returned a value that is not plain data: {reply[1]}")
        if kind != "exc" or len(reply) != 3 or type(reply[1]) is not str or type(reply[2]) is not str:
            raise Abort("protocol_violation", "malformed reply")
        name, msg = reply[1], reply[2]
        if name == "MemoryError":
            raise Abort("memory_exceeded", f"MemoryError in {self.name}()")
        try:
            exc = SAFE_EXCEPTIONS[name](msg)
        except (KeyError, TypeError):  # not a builtin, or one with another constructor (UnicodeDecodeError)
            exc = RuntimeError(f"{name}: {msg}")
        raise exc


# Standard modules that plain asserts use without importing them (they lean on the program's import): pure
# computation, nothing with side effects on import.
TEST_MODULES = frozenset(
    "array bisect calendar cmath collections copy dataclasses datetime decimal enum fractions functools hashlib "
    "heapq itertools json math numbers operator random re statistics string struct sys textwrap time typing "
    "unicodedata".split()
)


class RemoteNames(dict):
    """The tests' builtins: a name that neither the trusted code nor the tests define resolves to the
    candidate's function of that name, as in prompt + completion + test. The name of a standard module of
    TEST_MODULES that the program does not define itself (plain asserts such as MBPP's ``math.isclose(f(x),
    y)`` lean on the program's ``import math``) is that module, imported here."""

    def __init__(self, run: Run, verdict: Verdict, program: str = ""):
        super().__init__(vars(builtins))
        self.run, self.verdict, self.program = run, verdict, program
        self.program_names: set[str] | None = None

    def __missing__(self, name):
        if name.startswith("__"):
            raise KeyError(name)
        if name in TEST_MODULES and name not in self.defined():
            try:
                self[name] = __import__(name)
                return self[name]
            except ImportError:
                pass
        self[name] = RemoteFunction(name, self.run, self.verdict)
        return self[name]

    def defined(self) -> set[str]:
        """Names the program binds at its top level other than by an import (parsed once, run never)."""
        if self.program_names is None:
            import ast

            try:
                tree = ast.parse(self.program)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = ast.Module([], [])
            names = set()
            for stmt in tree.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(stmt.name)
                elif not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    names.update(
                        n.id
                        for n in ast.walk(stmt)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                    )
            self.program_names = names
        return self.program_names


class Units:
    """Counts the per-assert units of the tests, and remembers the first failure and the first error apart:
    the message must name what made the status (a TypeError is not an assertion that failed)."""

    def __init__(self, total: int):
        self.total, self.passed, self.failed, self.errors = total, 0, 0, 0
        self.first_failure: str | None = None
        self.first_error: str | None = None

    def ok(self) -> None:
        self.passed += 1

    def fail(self, line: int) -> None:
        self.failed += 1
        self.first_failure = self.first_failure or f"assertion failed (tests line {line})"

    def error(self, line: int, exc: BaseException) -> None:
        if isinstance(exc, AssertionError):  # UnencodableValue and remote AssertionErrors
            return self.fail(line)
        self.errors += 1
        self.first_error = self.first_error or f"{type(exc).__name__}: {exc} (tests line {line})"

    def summary(self) -> tuple[str, str]:
        """(status, message) once the tests ran to their end."""
        if self.errors:
            failed = f", {self.failed} failed" if self.failed else ""
            return (
                "runtime_error",
                f"{self.first_error}; {self.errors}/{self.total} assert units raised{failed}",
            )
        if self.failed:
            return "failed", f"{self.failed}/{self.total} assert units failed; first: {self.first_failure}"
        return "passed", f"{self.passed}/{self.total} assert units passed"


class Verdict:
    """What the judge learns about a task besides its status and message."""

    __slots__ = ("flags", "units", "asserts_total", "cases", "stdout", "stderr")

    def __init__(self) -> None:
        self.flags: set[str] = set()  # names from verdicts.FLAGS
        self.units: Units | None = None  # rpc mode: the assert units
        self.asserts_total = 0  # assert units of the tests, or cases of a stdin/stdout task
        self.cases: list[str] | None = None  # stdin/stdout: each case's verdict, in the task's order
        self.stdout: bytes | None = None  # stdin/stdout: the failing case's output, instead of the server's
        self.stderr: bytes | None = None


def _has_assert(node):
    import ast  # judge only: not imported before the spawner forks, so that candidates stay small

    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return False
    return any(_has_assert(child) for child in ast.iter_child_nodes(node))


def _unit(stmt):
    """try: <stmt> / except Abort: raise / except AssertionError: fail / except BaseException: error / else: ok"""
    import ast

    def at(node):
        return ast.copy_location(node, stmt)

    def name(n):
        return at(ast.Name(n, ast.Load()))

    def units(method, *args):
        func = at(ast.Attribute(name("__passk_units__"), method, ast.Load()))
        return at(ast.Expr(at(ast.Call(func, list(args), []))))

    line = at(ast.Constant(stmt.lineno))
    return at(
        ast.Try(
            body=[stmt],
            handlers=[
                at(ast.ExceptHandler(name("__passk_abort__"), None, [at(ast.Raise())])),
                at(ast.ExceptHandler(name("AssertionError"), None, [units("fail", line)])),
                at(
                    ast.ExceptHandler(
                        name("BaseException"), "__passk_e", [units("error", line, name("__passk_e"))]
                    )
                ),
            ],
            orelse=[units("ok")],
            finalbody=[],
        )
    )


_prepared = {}
_trusted = {}


def _calls_at_load(tree):
    """Whether running this module calls anything (outside function bodies; decorators and defaults count)."""
    import ast

    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack += node.decorator_list if not isinstance(node, ast.Lambda) else []
            stack += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
            continue
        stack += list(ast.iter_child_nodes(node))
    return False


def _prefetch_plan(check):
    """The calls that check(candidate) is certain to make first, in order: those of its leading statements
    ``assert candidate(<literals>) <op> <literals>`` (or ``assert [not] candidate(<literals>)``), skipping
    statements that call nothing and do not name the candidate. Returns [(args, kwargs)] encoded."""
    import ast

    if len(check.args.args) != 1 or check.args.vararg or check.args.kwarg or check.args.kwonlyargs:
        return []
    param = check.args.args[0].arg

    def literal(node):
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True

    plan = []
    for stmt in check.body:
        nodes = list(ast.walk(stmt))
        names = {n.id for n in nodes if isinstance(n, ast.Name)}
        calls = [n for n in nodes if isinstance(n, ast.Call)]
        if not calls and param not in names and isinstance(stmt, (ast.Assert, ast.Expr, ast.Pass)):
            continue
        if not isinstance(stmt, ast.Assert) or len(calls) != 1 or names != {param}:
            break
        call, test = calls[0], stmt.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        first = test.left if isinstance(test, ast.Compare) else test
        others = [
            n
            for n in ([*test.comparators] if isinstance(test, ast.Compare) else []) + [stmt.msg]
            if n is not None
        ]
        if (
            first is not call
            or not isinstance(call.func, ast.Name)
            or any(isinstance(a, ast.Starred) for a in call.args)
            or not all(literal(a) for a in call.args)
            or not all(k.arg and literal(k.value) for k in call.keywords)
            or not all(literal(n) for n in others)
        ):
            break
        try:
            args = encode_value([ast.literal_eval(a) for a in call.args])
            kwargs = encode_value({k.arg: ast.literal_eval(k.value) for k in call.keywords})
        except Unencodable:
            break
        plan.append((args, kwargs))
    return plan


def prepare_tests(tests):
    """Compile the tests with each top-level statement that asserts (in ``check``, else in the module)
    wrapped as one counted unit, and find the calls to prefetch (``_prefetch_plan``; none if loading the
    tests calls anything). Cached: RL batches repeat the same tests many times."""
    import ast

    if tests in _prepared:
        return _prepared[tests]
    tree = ast.parse(tests, "<tests>")
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    plan = _prefetch_plan(check) if check is not None and not _calls_at_load(tree) else []
    owner = check if check is not None else tree
    is_unit = [_has_assert(stmt) for stmt in owner.body]
    owner.body = [_unit(stmt) if unit else stmt for stmt, unit in zip(owner.body, is_unit)]
    total = sum(is_unit)
    prepared = (compile_source(tree, "<tests>"), total, check is not None, plan)
    if len(_prepared) >= 1024:
        _prepared.clear()
    _prepared[tests] = prepared
    return prepared


def compile_trusted(source):
    """(code, whether loading it calls anything), cached."""
    import ast

    if source not in _trusted:
        if len(_trusted) >= 1024:
            _trusted.clear()
        tree = ast.parse(prompt_source(source), "<trusted>")
        _trusted[source] = (compile_source(tree, "<trusted>"), _calls_at_load(tree))
    return _trusted[source]


def trusted_failure(e):
    hint = (
        " (a module the judge cannot import: see Sandbox(readonly_paths=...))"
        if isinstance(e, ImportError)
        else ""
    )
    return Abort(
        "sandbox_error", f"the trusted code (the prompt) does not run: {type(e).__name__}: {e}{hint}"
    )


def judge_rpc(run: Run, task: dict, verdict: Verdict) -> tuple[str, str]:
    entry = task["entry_point"]
    try:
        code, total, has_check, plan = prepare_tests(task["tests"])
        trusted, trusted_calls = (
            compile_trusted(task["trusted"]) if task.get("trusted") is not None else (None, False)
        )
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise Abort("sandbox_error", f"the tests or the trusted code do not compile: {e}") from None
    verdict.asserts_total = total
    # The calls the tests are certain to make first go right behind the task: the candidate answers them one
    # after another, and the tests take the answers in the same order (one wake-up instead of one per call).
    if trusted_calls or entry is None:
        plan = []
    run.prefetched = collections.deque((entry, a, k) for a, k in plan)
    run.send(
        {
            "mode": "rpc",
            "program": task["program"],
            "timeout": task["timeout"],
            "memory_mb": task["memory_mb"],
        },
        *[[entry, a, k] for a, k in plan],
    )
    reply = run.receive()
    if reply != ["ok"]:
        return load_failure(reply, verdict)
    units = verdict.units = Units(total)
    ns = {"__name__": "__main__", "__builtins__": RemoteNames(run, verdict, task["program"])}  # as a script
    entry = task["entry_point"]
    if trusted is not None:
        # The dataset prompt's own definitions (helpers such as HumanEval's poly), executed here: a completion
        # that redefines or rebinds them changes its own copy only. The entry point is the candidate's.
        try:
            exec(trusted, ns)
        except Abort:
            raise
        except BaseException as e:
            raise trusted_failure(e) from None
    if entry is not None:
        ns[entry] = RemoteFunction(entry, run, verdict)
    ns.update(__passk_units__=units, __passk_abort__=Abort)
    try:
        exec(code, ns)
        if has_check:
            ns["check"](ns[entry] if entry is not None else None)
    except Abort:
        raise
    except AssertionError as e:
        return "failed", str(e) or "assertion failed"
    except BaseException as e:
        return "runtime_error", f"{type(e).__name__}: {e}"
    status, message = units.summary()
    if status == "passed":
        # The candidate can write to the reply pipe itself: frames written ahead of the real ones (a forged
        # "ok" and answers) would leave the harness's own frames unread. Only a pass can gain from that, so
        # only a pass pays one more round trip: the next frame must echo a nonce sent now.
        nonce = os.urandom(8).hex()
        if run.request([nonce]) != ["end", nonce]:
            raise Abort("protocol_violation", "frames the judge did not ask for")
    return status, message


def load_failure(reply: list, verdict: Verdict) -> tuple[str, str]:
    if len(reply) != 4 or reply[0] != "load" or not all(type(v) is str for v in reply):
        raise Abort("protocol_violation", "unexpected reply")
    _, kind, name, msg = reply
    if kind == "syntax_error":
        return "syntax_error", f"{name}: {msg}"
    if kind == "trusted":
        hint = " (see Sandbox(readonly_paths=...))" if name in ("ImportError", "ModuleNotFoundError") else ""
        raise Abort(
            "sandbox_error", f"the trusted code (the prompt) does not run in the sandbox: {name}: {msg}{hint}"
        )
    if name == "MemoryError":
        return "memory_exceeded", f"MemoryError: {msg}" if msg else "MemoryError"
    if name == "SystemExit":
        verdict.flags.add("early_exit")
    return ("failed" if name == "AssertionError" else "runtime_error"), f"{name}: {msg}"


def judge_exec(run: Run, task: dict, verdict: Verdict) -> tuple[str, str]:
    nonce = os.urandom(16).hex()
    reply = run.request(
        {
            "mode": "exec",
            "program": task["program"],
            "tests": task["tests"],
            "entry_point": task["entry_point"],
            "nonce": nonce,
            "timeout": task["timeout"],
            "memory_mb": task["memory_mb"],
            "trusted": task.get("trusted"),
        }
    )
    if reply == ["nonce", nonce]:
        run.wait_exit()
        return "passed", "program and tests ran to the end"
    if reply[0] == "nonce":
        verdict.flags.add("forged_verdict")
        return "failed", "wrong nonce"
    return load_failure(reply, verdict)
