"""Output comparison (``sandbox.verdicts.compare_output``) at the edges of each rule: every number notation the
judges read, the absolute and the relative tolerance exactly at their bound and just past it, zero and huge
expected values, overflow, the length limits, and the whitespace and line-end rules. Pure Python, no sandbox."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.verdicts import (
    MAX_COMPARE_BYTES,
    MAX_NUMBER_CHARS,
    _first_false,
    compare_output,
    is_real_token,
)

SETTINGS = settings(max_examples=60, deadline=None)


def same(got: bytes, want: bytes, mode: str = "lines", float_tol: float | None = None) -> bool:
    return compare_output(got, want, mode, float_tol) is None


# ---- which expected tokens are real-valued -----------------------------------------------------------------
@pytest.mark.parametrize(
    "token",
    [b"0.5", b"0.50", b"-0.5", b"+0.5", b".5", b"5.", b"-.5", b"1e5", b"1E5", b"1e-3", b"1E-3", b"1e+3"]
    + [b"-0.0", b"+1.5e+10", b"12345678901234567890.5", b"0" * (MAX_NUMBER_CHARS - 2) + b".5"],
)
def test_real_valued_tokens_in_every_notation_the_judges_read(token: bytes) -> None:
    assert is_real_token(token)


@pytest.mark.parametrize(
    "token",
    [b"0", b"-0", b"+0", b"12", b"-12", b"+12", b"123456789012345678901234567890"]  # integers: exact
    + [b"nan", b"inf", b"-inf", b"Infinity", b"1_000.5", b"0x1p3", b"e5", b"1e", b"1e+", b".", b"-", b"+"]
    + [b"--1.5", b"1.5.2", b"1.5e3.2", b" 1.5", b"1.5 ", b"", b"abc", b"1,5"]
    + [b"0" * (MAX_NUMBER_CHARS - 1) + b".5"],  # 65 characters: too long to be read as a number
)
def test_integers_words_and_overlong_tokens_are_not_real_valued(token: bytes) -> None:
    assert not is_real_token(token)


def test_the_longest_real_token_is_exactly_max_number_chars() -> None:
    at_limit = b"1." + b"0" * (MAX_NUMBER_CHARS - 2)
    assert len(at_limit) == MAX_NUMBER_CHARS and is_real_token(at_limit)
    assert not is_real_token(at_limit + b"0")
    # the program's token too: 64 characters are parsed, 65 are not
    assert same(at_limit, b"1.0", float_tol=1e-9)
    assert not same(at_limit + b"0", b"1.0", float_tol=1e-9)


# ---- tolerance: absolute below 1, relative above -----------------------------------------------------------
@pytest.mark.parametrize(
    ("want", "at_bound", "past_bound"),
    [
        (b"0.0", b"0.25", b"0.2500001"),  # |want| < 1: absolute error 0.25
        (b"-0.0", b"-0.25", b"-0.2500001"),
        (b"0.5", b"0.75", b"0.7500001"),
        (b"0.5", b"0.25", b"0.2499999"),
        (b"-0.5", b"-0.75", b"-0.7500001"),
        (b"1.0", b"1.25", b"1.2500001"),  # |want| = 1: either reading
        (b"1024.0", b"1280", b"1280.001"),  # |want| > 1: relative error 0.25 of 1024 = 256
        (b"1024.0", b"768", b"767.999"),
        (b"-1024.0", b"-1280", b"-1280.001"),  # the relative bound reads |want|, not want
        (b"-1024.0", b"-768.0", b"-767.999"),
        (b"1.0715086071862673e+301", b"1.3393857589828342e+301", b"1.339385866133695e+301"),  # 2**1000
        (b"-1.0715086071862673E+301", b"-8.036314553897005e+300", b"-8.0363e+300"),
        (b"1E-3", b"0.25", b"0.2511"),  # tiny want: still an absolute 0.25
    ],
)
def test_tolerance_is_inclusive_at_its_bound_and_fails_just_past_it(
    want: bytes, at_bound: bytes, past_bound: bytes
) -> None:
    assert same(at_bound, want, float_tol=0.25)
    assert not same(past_bound, want, float_tol=0.25)
    assert same(at_bound, want, mode="tokens", float_tol=0.25)
    assert not same(past_bound, want, mode="tokens", float_tol=0.25)


def test_the_programs_number_may_use_any_notation() -> None:
    for got in (b"0.5", b"0.50", b".5", b"+0.5", b"5e-1", b"5E-1", b"50e-2", b"0.5000000001"):
        assert same(got, b"0.5", float_tol=1e-6), got
    for got in (b"1", b"1.", b"+1", b"1e0", b"1.0E+0"):  # an integer form of a real value is fine
        assert same(got, b"1.0", float_tol=1e-6), got
    for got in (b"0", b"-0", b"0.0", b"-0.0", b"0e5"):  # zero's signs and forms
        assert same(got, b"-0.0", float_tol=1e-9), got
        assert same(got, b"0.0", float_tol=1e-9), got


def test_words_and_float_spellings_python_reads_are_not_numbers() -> None:
    for got in (b"nan", b"inf", b"-inf", b"1_000.0", b"0.5x", b"half", b"0x1p-1"):
        assert not same(got, b"0.5", float_tol=10.0), got


def test_overflow_never_passes_by_tolerance() -> None:
    # want overflows to inf: a finite program value is never within tolerance of it, however close in digits
    assert not same(b"1e308", b"1e400", float_tol=0.5)
    assert same(b"1e400", b"1e400", float_tol=0.5)  # the same bytes are the same answer
    assert not same(b"2e400", b"1e400", float_tol=0.5)
    # the program's value overflows: no tolerance, not even an infinite one, takes it
    assert not same(b"1e400", b"1.5", float_tol=float("inf"))
    assert same(b"1e300", b"1.5", float_tol=float("inf"))


def test_integers_are_exact_whatever_the_tolerance() -> None:
    for got, want in ((b"3", b"4"), (b"100", b"101"), (b"-0", b"0"), (b"+1", b"1"), (b"1.0", b"1")):
        assert not same(got, want, float_tol=0.5)
        assert not same(got, want, mode="tokens", float_tol=0.5)
    assert same(b"12345678901234567890", b"12345678901234567890", float_tol=0.5)
    assert not same(b"12345678901234567891", b"12345678901234567890", float_tol=0.5)


def test_without_a_tolerance_real_tokens_are_exact_bytes() -> None:
    assert not same(b"0.50", b"0.5")
    assert not same(b"0.5", b"0.5000001")
    assert same(b"0.5", b"0.5", float_tol=None)
    assert compare_output(b"0.50\n", b"0.5\n", "tokens") == "token 1: expected '0.5', got '0.50'"


# ---- token and line structure --------------------------------------------------------------------------------
def test_token_counts_must_match_and_the_message_says_so() -> None:
    assert compare_output(b"1 2", b"1 2 3", "tokens") == "expected 3 tokens, got 2"
    assert compare_output(b"1 2 3 4", b"1 2 3", "tokens", 0.1) == "expected 3 tokens, got 4"
    assert compare_output(b"1.0 2.0\n", b"1.0 2.0 3.0\n", "lines", 0.1) == "line 1: expected 3 tokens, got 2"


def test_the_first_differing_token_is_named_even_when_later_ones_differ() -> None:
    assert compare_output(b"1 9 9", b"1 2 3", "tokens") == "token 2: expected '2', got '9'"
    assert (
        compare_output(b"1.0 9.0 9.0", b"1.0 2.0 3.0", "tokens", 0.1) == "token 2: expected '2.0', got '9.0'"
    )
    assert compare_output(b"9 2 3", b"1 2 3", "tokens") == "token 1: expected '1', got '9'"
    assert (
        compare_output(b"a\n1.0 9.0\nz\n", b"a\n1.0 2.0\nb\n", "lines", 0.1)
        == "line 2: token 2: expected '2.0', got '9.0'"
    )


def test_first_false_is_the_index_of_the_first_difference() -> None:
    assert _first_false([True, True]) == -1
    assert _first_false([]) == -1
    assert _first_false([False, True]) == 0
    assert _first_false([True, False, False]) == 1


def test_tokens_mode_ignores_line_breaks_and_runs_of_spaces() -> None:
    assert same(b"1\n2\t3\r\n", b"1 2   3", mode="tokens")
    assert same(b"", b"\n \n", mode="tokens")
    assert not same(b"1 2", b"12", mode="tokens")
    assert not same(b"12", b"1 2", mode="tokens")


def test_lines_mode_forgives_trailing_whitespace_crlf_and_final_newlines_only() -> None:
    want = b"1 2\n3\n"
    for got in (b"1 2\n3", b"1 2 \n3\t\n", b"1 2\r\n3\r\n", b"1 2\n3\n\n\n", b"1 2\n3\n \n\t\n", b"1 2\r\n3"):
        assert same(got, want), got
    for got in (b" 1 2\n3\n", b"1  2\n3\n", b"1 2\n\n3\n", b"1 2\n", b"1 2 3\n", b"1\n2\n3\n", b"\n1 2\n3\n"):
        assert not same(got, want), got
    assert same(b"", b"") and same(b"\n\n", b"") and same(b"", b" \n")
    assert not same(b"x", b"")
    assert not same(b"", b"x")


def test_lines_mode_reports_the_first_differing_line_then_the_line_count() -> None:
    assert compare_output(b"a\nX\nY\n", b"a\nb\nc\n") == "line 2: expected 'b', got 'X'"
    assert compare_output(b"X\nb\n", b"a\nb\n") == "line 1: expected 'a', got 'X'"
    assert compare_output(b"a\nb\n", b"a\n") == "expected 1 lines, got 2"
    assert compare_output(b"a\n", b"a\nb\n") == "expected 2 lines, got 1"
    # a difference inside the common lines comes first, before the count
    assert compare_output(b"X\n", b"a\nb\n") == "line 1: expected 'a', got 'X'"
    assert compare_output(b"1.0\n2.0\n", b"1.0\n", "lines", 0.1) == "expected 1 lines, got 2"
    assert compare_output(b"1.0\n", b"1.0\n", "lines", 0.1) is None


def test_lines_mode_with_a_tolerance_keeps_every_line_and_its_words() -> None:
    assert same(b"x 0.5\n y\n", b"x 0.50001\ny\n", float_tol=1e-3)  # with a tolerance a line is its tokens
    assert same(b"x 0.5\ny\n", b"x 0.50001\ny\n", float_tol=1e-3)
    assert not same(b"x 0.5 y\n", b"x 0.50001\ny\n", float_tol=1e-3)
    assert not same(b"X 0.5\n", b"x 0.5\n", float_tol=1e-3)
    assert not same(b"0.5\n0.5\n", b"0.5\n0.7\n", float_tol=1e-3)
    assert not same(b"0.5\n0.7\n", b"0.5\n", float_tol=1e-3)


def test_a_long_differing_value_is_quoted_cut_at_forty_characters() -> None:
    forty, forty_one = b"a" * 40, b"b" * 41
    assert compare_output(forty, b"x") == f"line 1: expected 'x', got '{'a' * 40}'"
    assert compare_output(forty_one, b"x") == f"line 1: expected 'x', got '{'b' * 40}...'"
    assert compare_output(b"x", forty_one, "tokens") == f"token 1: expected '{'b' * 40}...', got 'x'"


def fresh(data: bytes) -> bytes:
    """An equal bytes object that is not the same object (as a program's output never is)."""
    return bytes(bytearray(data))


def test_values_built_at_run_time_compare_by_value() -> None:
    mode = "".join(["tok", "ens"])  # not the interned literal
    assert same(b"1\n2", b"1 2", mode=mode)
    assert same(fresh(b"1e400"), fresh(b"1e400"), float_tol=0.5)  # equal bytes, both overflowing
    assert same(fresh(b"1e400"), fresh(b"1e400"), mode=mode, float_tol=0.5)


def test_any_mode_but_tokens_compares_lines() -> None:
    for mode in ("lines", "words", "zzz", ""):
        assert not same(b"1\n2", b"1 2", mode=mode), mode


def test_many_tokens_and_many_lines() -> None:
    n = 300  # past the small integers CPython caches
    tokens = b" ".join(b"%d" % i for i in range(n))
    lines = b"\n".join(b"%d.5" % i for i in range(n))
    assert same(tokens, fresh(tokens), mode="tokens") and same(
        tokens, fresh(tokens), mode="tokens", float_tol=0.1
    )
    assert same(lines, fresh(lines)) and same(lines, fresh(lines), float_tol=0.1)
    assert compare_output(lines + b"\nx", lines) == f"expected {n} lines, got {n + 1}"
    assert compare_output(tokens + b" 1", tokens, "tokens") == f"expected {n} tokens, got {n + 1}"


def test_the_documented_sixty_four_character_limit() -> None:
    assert is_real_token(b"1." + b"0" * 62) and not is_real_token(b"1." + b"0" * 63)  # 64 and 65 characters
    assert same(b"1." + b"0" * 62, b"1.0", float_tol=1e-9)
    assert not same(b"1." + b"0" * 63, b"1.0", float_tol=1e-9)


# ---- properties (last: the slowest) ----


@SETTINGS
@given(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.floats(min_value=1e-9, max_value=0.5),
)
def test_a_value_passes_iff_its_error_is_within_tolerance(want: float, tol: float) -> None:
    want_b = repr(float(want)).encode()
    b = float(want_b)
    for got in (b + 2 * tol * max(1.0, abs(b)), b - 2 * tol * max(1.0, abs(b)), b):
        got_b = repr(got).encode()
        expect = abs(float(got_b) - b) <= tol * max(1.0, abs(b))
        assert same(got_b, want_b, float_tol=tol) is expect, (got_b, want_b, tol)


def test_inputs_over_the_size_limit_are_refused_and_at_it_compared() -> None:
    at_limit = b"1" * MAX_COMPARE_BYTES
    assert compare_output(at_limit, at_limit, "tokens") is None
    over = at_limit + b"1"
    reason = compare_output(over, b"1")
    assert (
        reason
        == f"the output ({MAX_COMPARE_BYTES + 1} bytes) is over the comparison's limit ({MAX_COMPARE_BYTES} bytes)"
    )
    assert compare_output(b"1", over) == reason.replace("the output", "the expected output")
    assert MAX_COMPARE_BYTES == 64 * 1024 * 1024


@SETTINGS
@given(
    st.lists(st.text(alphabet="ab1. ", max_size=6).map(str.strip), min_size=1, max_size=5),
    st.lists(st.sampled_from(["", " ", "\t", "\r", " \r"]), min_size=5, max_size=5),
    st.integers(min_value=0, max_value=3),
)
def test_invisible_trailing_whitespace_never_changes_a_lines_verdict(
    lines: list[str], pads: list[str], blank_lines: int
) -> None:
    want = "\n".join(lines).encode()
    got = ("\n".join(line + pad for line, pad in zip(lines, pads)) + "\n" * blank_lines).encode()
    assert same(got, want)
    assert same(got, want, float_tol=1e-6)
    assert same(got, want, mode="tokens")


@SETTINGS
@given(st.lists(st.integers(min_value=-(10**30), max_value=10**30), min_size=1, max_size=6), st.data())
def test_an_integer_off_by_one_is_always_wrong(values: list[int], data: st.DataObject) -> None:
    i = data.draw(st.integers(min_value=0, max_value=len(values) - 1))
    want = " ".join(map(str, values)).encode()
    wrong = values.copy()
    wrong[i] += data.draw(st.sampled_from([-1, 1]))
    got = " ".join(map(str, wrong)).encode()
    for mode in ("lines", "tokens"):
        assert compare_output(got, want, mode, 0.5) == (
            f"{'line 1: ' if mode == 'lines' else ''}token {i + 1}: expected '{values[i]}', got '{wrong[i]}'"
        )
        assert same(want, want, mode, 0.5)
