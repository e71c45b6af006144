"""Dataset rows in every shape the formats (``sandbox.formats``) accept, not only the tidy one: APPS / TACO,
CodeContests, open-r1 / PrimeIntellect rows with optional keys absent or null, JSON strings, bytes, dicts, lists
of lines, numbers where text belongs, call-based rows and their comparison (int vs float, tuple vs list, a
one-element list), which cases a prompt shows, and the sandbox task each becomes. Pure Python: the generated
call-based checks are exec'd here on trusted test functions, never on a model's program."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.formats import (
    CALL_HELPERS,
    HIDDEN_SPLITS,
    CallTests,
    StdioTests,
    _find,
    _literal,
    _norm,
    call_tests_source,
    detect_format,
    format_name,
    hide_shown,
    problem_id,
    prompt_text,
    read_tests,
    shown_cases,
    task_for,
)

SETTINGS = settings(max_examples=50, deadline=None)


def io_row(inputs, outputs, **extra) -> dict:
    return {"input_output": json.dumps({"inputs": inputs, "outputs": outputs, **extra})}


# ---- choosing the format ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("columns", "name"),
    [
        (["input_output"], "apps"),
        (["question", "input_output", "fn_name"], "apps"),
        (["public_tests"], "code_contests"),
        (["private_tests"], "code_contests"),
        (["generated_tests", "name"], "code_contests"),
        (["verification_info"], "verification_info"),
        (["input_output", "public_tests"], "apps"),  # the first format in FORMATS' order wins
        (["public_tests", "verification_info"], "code_contests"),
    ],
)
def test_each_test_column_selects_its_format(columns: list[str], name: str) -> None:
    assert detect_format(columns) == name
    assert detect_format(iter(columns)) == name  # any iterable, read once


def test_a_row_in_no_format_names_its_columns_and_the_formats() -> None:
    with pytest.raises(ValueError) as e:
        detect_format(["question", "solutions"])
    msg = str(e.value)
    assert "(it has: question, solutions)" in msg and "\n" not in msg
    assert (
        "apps: input_output" in msg and "code_contests: public_tests / private_tests / generated_tests" in msg
    )
    assert "verification_info: verification_info" in msg
    with pytest.raises(ValueError, match=r"it has: nothing"):
        detect_format([])


@pytest.mark.parametrize(
    ("given_name", "name"),
    [
        ("apps", "apps"),
        ("APPS", "apps"),
        ("taco", "apps"),
        ("TACO", "apps"),
        ("code_contests", "code_contests"),
        ("CodeContests", "code_contests"),
        ("verification_info", "verification_info"),
        ("open_r1", "verification_info"),
        ("open-r1", "verification_info"),
        ("Open-R1", "verification_info"),
        ("PrimeIntellect", "verification_info"),
    ],
)
def test_format_names_and_aliases_in_any_case(given_name: str, name: str) -> None:
    assert format_name(given_name) == name


def test_an_unknown_format_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown test format 'leetcode'; use one of apps, code_contests, "):
        format_name("leetcode")
    with pytest.raises(ValueError, match=r"taco, codecontests, open_r1, open-r1, primeintellect"):
        format_name("x")


def test_a_null_column_does_not_choose_the_format() -> None:
    # datasets fill a column a row lacks with None: the column that has a value decides
    row = {"input_output": None, "public_tests": {"input": ["1\n"], "output": ["2\n"]}}
    assert read_tests(row) == StdioTests((("1\n", "2\n"),))
    row = {"public_tests": None, "verification_info": {"test_cases": [{"input": "1", "output": "2"}]}}
    assert read_tests(row) == StdioTests((("1", "2"),))
    # every test column null: the row has no case (not an error)
    assert read_tests({"input_output": None, "question": "q"}) is None
    assert read_tests({"public_tests": None, "private_tests": None}) is None
    assert read_tests({"verification_info": None}) is None
    with pytest.raises(ValueError, match="no stdin/stdout test columns"):
        read_tests({"question": "q"})


def test_a_named_format_reads_its_columns_even_beside_another_formats() -> None:
    row = {**io_row(["a\n"], ["b\n"]), "public_tests": {"input": ["c\n"], "output": ["d\n"]}}
    assert read_tests(row) == StdioTests((("a\n", "b\n"),))
    assert read_tests(row, "codecontests") == StdioTests((("c\n", "d\n"),))
    assert read_tests(row, "TACO") == StdioTests((("a\n", "b\n"),))
    with pytest.raises(ValueError, match="unknown test format"):
        read_tests(row, "nope")


# ---- APPS / TACO --------------------------------------------------------------------------------------------
def test_apps_input_output_as_json_string_bytes_or_dict() -> None:
    want = StdioTests((("1 2\n", "3\n"), ("5 5\n", "10\n")))
    payload = {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}
    assert read_tests({"input_output": json.dumps(payload)}) == want
    assert read_tests({"input_output": json.dumps(payload).encode()}) == want
    assert read_tests({"input_output": payload}) == want
    assert read_tests({"input_output": "  \n"}) is None  # TACO's blank input_output: no case
    assert read_tests({"input_output": ""}) is None
    assert read_tests({"input_output": b""}) is None
    assert read_tests(io_row([], [])) is None


def test_apps_lists_of_lines_are_joined_one_line_each() -> None:
    row = io_row([["3", "1 2 3"]], [["6"]])
    assert read_tests(row) == StdioTests((("3\n1 2 3\n", "6\n"),))
    assert read_tests(io_row([[]], [["x"]])) == StdioTests((("\n", "x\n"),))


@pytest.mark.parametrize(
    ("inputs", "outputs", "match"),
    [
        (["1\n"], [3], r"input_output output 1 is a int, not text"),
        ([5], ["5\n"], r"input_output input 1 is a int, not text"),
        (["1\n", "2\n"], ["1\n", ["a", 2]], r"input_output output 2 is a list, not text"),
        (["1\n", "2\n"], ["1\n"], r"input_output has 2 inputs but 1 outputs"),
        (["1\n"], [None], r"output 1 is a NoneType"),
    ],
)
def test_apps_stdio_values_that_are_not_text_are_one_line_errors(inputs, outputs, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        read_tests(io_row(inputs, outputs))


@pytest.mark.parametrize(
    "value",
    ['{"inputs": ["1"]}', '{"outputs": []}', '["1", "2"]', '{"inputs": "1", "outputs": ["1"]}', "3"],
)
def test_apps_input_output_of_the_wrong_shape(value: str) -> None:
    with pytest.raises(ValueError, match=r'input_output must hold \{"inputs": \[...\], "outputs": \[...\]\}'):
        read_tests({"input_output": value})


def test_apps_invalid_json_is_named() -> None:
    with pytest.raises(ValueError, match=r"^input_output is not valid JSON: "):
        read_tests({"input_output": "{'inputs': []}"})


def test_apps_call_based_rows_fn_name_inside_or_in_its_own_column() -> None:
    inside = io_row([[1, 2], [3, 4]], [3, 7], fn_name="add")
    column = {**io_row([[1, 2], [3, 4]], [3, 7]), "fn_name": "add"}
    want = CallTests("add", (((1, 2), 3), ((3, 4), 7)))
    assert read_tests(inside) == want
    assert read_tests(column) == want
    # inside wins over the column; an empty or null fn_name means a stdin/stdout row
    assert read_tests({**io_row([[1]], [1], fn_name="f"), "fn_name": "g"}).fn_name == "f"
    assert read_tests({**io_row(["1\n"], ["1\n"]), "fn_name": ""}) == StdioTests((("1\n", "1\n"),))
    assert read_tests({**io_row(["1\n"], ["1\n"]), "fn_name": None}) == StdioTests((("1\n", "1\n"),))
    with pytest.raises(ValueError, match=r"input_output input 1 is a list, not text"):
        read_tests(io_row([[1]], [1], fn_name=""))


def test_apps_call_arguments_a_list_is_the_arguments_anything_else_one_argument() -> None:
    tests = read_tests(io_row([[[1, 2]], [5], "ab", {"k": 1}, []], [1, 2, 3, 4, 5], fn_name="f"))
    assert tests.calls == (
        (([1, 2],), 1),
        ((5,), 2),
        (("ab",), 3),
        (({"k": 1},), 4),
        ((), 5),
    )
    assert read_tests(io_row([], [], fn_name="f")) is None


@pytest.mark.parametrize("fn_name", ["two words", "1st", "a-b", 3, ["f"]])
def test_a_call_based_fn_name_must_be_an_identifier(fn_name) -> None:
    with pytest.raises(ValueError, match=r"input_output: fn_name .* is not a Python identifier"):
        read_tests({**io_row([[1]], [1]), "fn_name": fn_name})


def test_call_based_length_mismatch() -> None:
    with pytest.raises(ValueError, match=r"input_output has 1 inputs but 2 outputs"):
        read_tests(io_row([[1]], [1, 2], fn_name="f"))


# ---- CodeContests -------------------------------------------------------------------------------------------
def cc_row(**splits) -> dict:
    return {
        name: {"input": [i for i, _ in cases], "output": [o for _, o in cases]}
        for name, cases in splits.items()
    }


def test_code_contests_reads_all_three_splits_in_order_by_default() -> None:
    row = cc_row(
        generated_tests=[("g\n", "G\n")],
        public_tests=[("p\n", "P\n"), ("q\n", "Q\n")],
        private_tests=[("r\n", "R\n")],
    )
    assert read_tests(row).cases == (("p\n", "P\n"), ("q\n", "Q\n"), ("r\n", "R\n"), ("g\n", "G\n"))
    assert read_tests(row, splits=HIDDEN_SPLITS).cases == (("r\n", "R\n"), ("g\n", "G\n"))
    assert read_tests(row, splits=("generated_tests", "public_tests")).cases == (
        ("g\n", "G\n"),
        ("p\n", "P\n"),
        ("q\n", "Q\n"),
    )
    assert read_tests(row, splits=()) is None


def test_code_contests_splits_absent_null_empty_or_json_strings() -> None:
    row = {
        "public_tests": json.dumps({"input": ["1\n"], "output": ["2\n"]}),
        "private_tests": {"input": [], "output": []},
        "generated_tests": None,
    }
    assert read_tests(row) == StdioTests((("1\n", "2\n"),))
    assert read_tests(row, splits=HIDDEN_SPLITS) is None  # the hidden splits are empty: no case
    assert read_tests({"private_tests": {"input": [], "output": []}}) is None
    assert read_tests({"public_tests": " "}) is None


@pytest.mark.parametrize(
    "tests",
    [
        {"input": ["1"]},
        {"output": ["1"]},
        {"input": "1", "output": ["1"]},
        ["1"],
        {"input": ["1"], "output": 1},
    ],
)
def test_code_contests_split_of_the_wrong_shape_names_the_split(tests) -> None:
    with pytest.raises(
        ValueError, match=r'^private_tests must hold \{"input": \[...\], "output": \[...\]\}$'
    ):
        read_tests({"private_tests": tests})


def test_code_contests_errors_name_the_split_and_the_case() -> None:
    with pytest.raises(ValueError, match=r"generated_tests has 2 inputs but 1 outputs"):
        read_tests({"generated_tests": {"input": ["1", "2"], "output": ["1"]}})
    with pytest.raises(ValueError, match=r"public_tests output 2 is a int"):
        read_tests({"public_tests": {"input": ["1", "2"], "output": ["1", 2]}})
    with pytest.raises(ValueError, match=r"unknown CodeContests splits \['test'\]; use public_tests, "):
        read_tests({"public_tests": {"input": [], "output": []}}, splits=("public_tests", "test"))


# ---- open-r1 / PrimeIntellect verification_info ---------------------------------------------------------------
def vi(cases, **extra) -> dict:
    return {"verification_info": json.dumps({"test_cases": cases, **extra})}


def test_verification_info_stdin_stdout_with_the_type_absent_or_given() -> None:
    want = StdioTests((("1\n", "2\n"), ("3\n", "4\n")))
    cases = [{"input": "1\n", "output": "2\n"}, {"input": "3\n", "output": "4\n", "type": "stdin_stdout"}]
    assert read_tests(vi(cases, language="python")) == want
    assert read_tests(vi(cases)) == want  # language absent: Python
    assert read_tests(vi(cases, language=None)) == want
    assert read_tests(vi(cases, language="Python3")) == want
    assert read_tests({"verification_info": {"test_cases": cases}}) == want  # a dict, not a JSON string
    assert read_tests(vi([{"input": ["1", "2"], "output": ["3"]}])) == StdioTests((("1\n2\n", "3\n"),))


def test_verification_info_without_cases_is_no_case_not_an_error() -> None:
    assert read_tests(vi([])) is None
    assert read_tests({"verification_info": json.dumps({"language": "python"})}) is None
    assert read_tests({"verification_info": json.dumps({"test_cases": None})}) is None
    assert read_tests({"verification_info": ""}) is None


@pytest.mark.parametrize(
    ("info", "match"),
    [
        ({"language": "cpp", "test_cases": [{"input": "1", "output": "1"}]}, r"is for cpp; only Python rows"),
        ({"language": "C++", "test_cases": []}, r"is for c\+\+"),
        ({"test_cases": "x"}, r'must hold \{"test_cases": \[...\]\}'),
        (["x"], r'must hold \{"test_cases": \[...\]\}'),
        ({"test_cases": ["1"]}, r"test_cases must be objects with input and output"),
        ({"test_cases": [{"input": 1, "output": "1"}]}, r"verification_info input 1 is a int"),
        (
            {
                "test_cases": [
                    {"input": "1", "output": "1"},
                    {"input": "[1]", "output": "1", "type": "function_call"},
                ]
            },
            r"of types \['function_call', 'stdin_stdout'\]; supported",
        ),
        (
            {
                "test_cases": [
                    {"input": "[1]", "output": "1", "type": "function_call", "fn_name": "f"},
                    {"input": "[1]", "output": "1", "type": "function_call", "fn_name": "g"},
                ]
            },
            r"all function_call with one fn_name",
        ),
        ({"test_cases": [{"input": "[1]", "output": "1", "type": "function_call"}]}, r"fn_name None is not"),
    ],
)
def test_verification_info_malformed_rows(info, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        read_tests({"verification_info": json.dumps(info)})


def test_verification_info_function_calls_with_json_encoded_or_plain_values() -> None:
    cases = [
        {"type": "function_call", "fn_name": "f", "input": "[1, 2]", "output": "3"},
        {"type": "function_call", "fn_name": "f", "input": [4, 5], "output": 9},
        {"type": "function_call", "fn_name": "f", "input": "[[1, 2]]", "output": "[1, 2]"},
        {"type": "function_call", "fn_name": "f", "input": '"ab"', "output": '"ba"'},
    ]
    assert read_tests(vi(cases)) == CallTests(
        "f", (((1, 2), 3), ((4, 5), 9), (([1, 2],), [1, 2]), (("ab",), "ba"))
    )
    with pytest.raises(ValueError, match=r"verification_info output is not valid JSON"):
        read_tests(vi([{"type": "function_call", "fn_name": "f", "input": "[1]", "output": "{x"}]))


# ---- the prompt's text and the cases it shows ------------------------------------------------------------------
def test_prompt_text_of_strings_chats_and_parts() -> None:
    assert prompt_text("abc") == "abc"
    assert prompt_text([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]) == "a\nb"
    parts = [{"type": "text", "text": "x"}, {"type": "image"}, "loose", {"text": 3}, {"text": "y"}]
    assert prompt_text([{"role": "user", "content": parts}]) == "x\ny"
    assert prompt_text(["plain", {"content": None}, {"role": "user"}]) == "plain"
    assert prompt_text(None) == "" and prompt_text(3) == ""


def test_norm_collapses_whitespace_and_drops_it_around_punctuation() -> None:
    assert _norm("  a \n\t b  ") == "a b"
    assert _norm("f( 1 , 2 )") == "f(1,2)"
    assert _norm("[1, 2]") == "[1,2]"
    assert _norm("x  =  y") == "x=y"


def test_find_matches_whole_words_only() -> None:
    assert _find("n >= 0", "0") == 5
    assert (
        _find("10", "0") == -1
        and _find("a0", "0") == -1
        and _find("0a", "0") == -1
        and _find("_0", "0") == -1
    )
    assert _find("0_", "0") == -1
    assert _find("10 0", "0") == 3  # the glued match is skipped, the next one found
    assert _find("x", "") == -1
    assert _find("0 0", "0", 1) == 2
    assert _find("(1)", "(1)") == 0 and _find("a(1)b", "(1)") == 1  # punctuation at the ends is never glued
    assert _find("ab", "b") == -1 and _find("b", "b") == 0


def test_a_stdio_case_is_shown_when_its_output_follows_its_input() -> None:
    tests = StdioTests((("3\n1 2 3\n", "6\n"), ("2\n5 5\n", "10\n"), ("7\n", "7\n")))
    prompt = "Example:\nInput:\n3\n1  2 3\nOutput:\n6\n\nNote: 10 comes before 2 5 5 here."
    assert shown_cases(tests, prompt) == (True, False, False)
    assert shown_cases(tests, [{"role": "user", "content": prompt}]) == (True, False, False)
    assert shown_cases(StdioTests((("1 2", "3"),)), "3 then 1 2") == (False,)  # output before input
    assert shown_cases(StdioTests((("1 2", "1"),)), "input 1 2") == (False,)  # the output after the input
    assert shown_cases(StdioTests((("12", "5"),)), "x12 5") == (False,)


def test_a_call_is_shown_when_each_argument_then_the_value_appear_in_json_or_python_spelling() -> None:
    tests = CallTests(
        "f",
        (
            ((True, None), [1, 2]),  # Python literal: True, None
            ((False,), "ok"),  # JSON: false, "ok"
            ((3,), [4]),  # an expected [x] also shown as x
            ((8, 9), 10),  # 10 not after the arguments
            ((), 11),
        ),
    )
    prompt = 'f(True, None) returns [1, 2]. f(false) == "ok". f(3) is 4. 10 is f(8, 9). 11'
    assert shown_cases(tests, prompt) == (True, True, True, False, True)
    assert hide_shown(tests, prompt) == (CallTests("f", (((8, 9), 10),)), False)
    assert shown_cases(CallTests("f", (((3,), [4, 5]),)), "f(3) is 4") == (False,)
    assert shown_cases(CallTests("f", (((3,), [4]),)), "4 then f(3)") == (False,)
    assert shown_cases(CallTests("f", (((3, 5), 4),)), "f(3) is 4") == (False,)  # 5 missing
    # the value may follow the earliest argument: f(7, 2) -> 9 with "2 ... 9 ... 7"
    assert shown_cases(CallTests("f", (((7, 2), 9),)), "with 2 we get 9; 7") == (True,)
    assert shown_cases(CallTests("f", (((object(),), 1),)), "1") == (False,)  # no JSON spelling


def test_hide_shown_keeps_the_hidden_cases_and_says_whether_all_were_shown() -> None:
    tests = StdioTests((("1 1", "2"), ("2 2", "4")))
    assert hide_shown(tests, "1 1 gives 2") == (StdioTests((("2 2", "4"),)), False)
    assert hide_shown(tests, "1 1 gives 2, 2 2 gives 4") == (None, True)
    assert hide_shown(tests, "nothing") == (tests, False)
    calls = CallTests("f", (((1,), 2),))
    assert hide_shown(calls, "f(1) = 2") == (None, True)
    assert hide_shown(calls, "") == (calls, False)


def test_problem_id_takes_the_first_id_column_that_is_set() -> None:
    assert problem_id({"task_id": "T", "problem_id": "P", "name": "N", "id": "I"}) == "T"
    assert problem_id({"task_id": None, "problem_id": "", "name": "N", "id": "I"}) == "N"
    assert problem_id({"problem_id": 0}) == "0"  # a numeric id, zero included
    assert problem_id({"id": 17}) == "17"
    assert problem_id({}, "row-3") == "row-3"
    assert problem_id({"task_id": ""}) == ""


# ---- the call-based comparison (APPS's) and the sandbox task ----------------------------------------------------
def run_check(tests: CallTests, candidate) -> list[bool]:
    """Each generated assert of ``call_tests_source``, on a trusted candidate function: True where it holds."""
    namespace: dict = {}
    exec(compile(call_tests_source(tests), "<check>", "exec"), namespace)
    out = []
    for n, (args, want) in enumerate(tests.calls):
        one = CallTests(tests.fn_name, ((args, want),))
        ns: dict = {}
        exec(compile(call_tests_source(one), f"<check {n}>", "exec"), ns)
        try:
            ns["check"](candidate)
            out.append(True)
        except AssertionError:
            out.append(False)
    return out


def test_returned_values_compare_as_apps_does() -> None:
    same = {}
    exec(CALL_HELPERS, same)
    passk_same = same["_passk_same"]
    assert passk_same(3, 3.0) and passk_same(3.0, 3)  # int vs float that compare equal
    assert passk_same((1, 2), [1, 2]) and passk_same([1, (2, 3)], [1, [2, 3]])  # tuples read as lists
    assert passk_same({"a": (1,)}, {"a": [1]})
    assert passk_same(5, [5]) and passk_same((5,), [5]) and passk_same([5], [5])  # an expected [x] accepts x
    assert passk_same(True, 1)  # Python equality, as APPS compares
    assert not passk_same(5, [5, 5]) and not passk_same([5], 5) and not passk_same(5, [[5]])
    assert not passk_same([1, 2], [2, 1]) and not passk_same(3, 3.5) and not passk_same("1", 1)
    assert not passk_same(None, []) and not passk_same([[]], [])
    assert passk_same([], [[]])  # the one-element rule: [x] accepts x = []


def test_generated_asserts_call_with_the_arguments_one_per_case() -> None:
    tests = CallTests(
        "f",
        (((1, 2), 3), ((2, 2), 4.0), (([1, 2],), [2, 1]), (("a", "b"), ["ab"]), ((), (7, 8)), ((0,), 99)),
    )

    def f(*args):
        if not args:
            return [7, 8]
        if isinstance(args[0], list):
            return tuple(reversed(args[0]))
        return args[0] + args[1] if len(args) == 2 else 0

    assert run_check(tests, f) == [True, True, True, True, True, False]
    source = call_tests_source(tests)
    assert source.count("    assert _passk_same(candidate(*") == len(tests.calls)
    assert source.startswith(CALL_HELPERS + "\ndef check(candidate):\n")


def test_literals_spell_every_json_value_and_the_floats_repr_cannot() -> None:
    values = [
        float("inf"),
        float("-inf"),
        [1, 2.5, "x", None, True],
        (1,),
        (),
        (1, [2, (3,)]),
        {"a": [1, {"b": float("-inf")}], "c": None},
        -0.0,
        1e300,
    ]
    for value in values:
        assert eval(_literal(value)) == value, _literal(value)  # noqa: S307 - our own literal
    assert eval(_literal((1,))) == (1,) and isinstance(eval(_literal((1,))), tuple)  # noqa: S307
    assert isinstance(eval(_literal([1])), list)  # noqa: S307
    assert _literal(float("inf")) == "float('inf')" and _literal(float("-inf")) == "float('-inf')"
    nan = eval(_literal(float("nan")))  # noqa: S307
    assert isinstance(nan, float) and math.isnan(nan)
    assert _literal({"k": (2,)}) == "{'k': (2, )}"


def test_task_for_stdio_passes_the_cases_and_the_options() -> None:
    tests = StdioTests((("1\n", "2\n"),))
    task = task_for("print(2)", tests, timeout=2.0, total_timeout=None, compare="tokens", float_tol=0.1)
    assert task == {
        "program": "print(2)",
        "cases": (("1\n", "2\n"),),
        "timeout": 2.0,
        "total_timeout": None,
        "compare": "tokens",
        "float_tol": 0.1,
    }


def test_task_for_calls_sets_one_overall_limit() -> None:
    tests = CallTests("solve", (((1,), 1), ((2,), 2), ((3,), 3)))
    task = task_for("def solve(x): return x", tests, timeout=2.0, total_timeout=None, compare="lines")
    assert task["timeout"] == 6.0  # per call x calls
    assert task["entry_point"] == "solve" and task["tests"] == call_tests_source(tests)
    assert "cases" not in task and "compare" not in task
    assert task_for("", tests, timeout=2.0, total_timeout=5.0)["timeout"] == 5.0
    assert task_for("", tests, timeout=2.0, total_timeout=0)["timeout"] == 0
    assert task_for("", tests, total_timeout=7)["timeout"] == 7
    assert "timeout" not in task_for("", tests)
    assert "timeout" not in task_for("", tests, timeout=None, total_timeout=None)


def test_task_for_calls_exposes_a_solution_method_only_when_there_is_no_function() -> None:
    tests = CallTests("twice", (((3,), 6),))
    method = "class Solution:\n    def twice(self, x):\n        return 2 * x\n"
    ns: dict = {}
    exec(task_for(method, tests)["program"], ns)  # trusted: the test's own program
    assert ns["twice"](3) == 6
    both = (
        "def twice(x):\n    return 'top'\n\nclass Solution:\n    def twice(self, x):\n        return 2 * x\n"
    )
    ns = {}
    exec(task_for(both, tests)["program"], ns)
    assert ns["twice"](3) == "top"
    ns = {}
    exec(task_for("x = 1\n", tests)["program"], ns)
    assert "twice" not in ns


def test_a_call_whose_value_equals_its_argument_needs_the_value_again_after_it() -> None:
    assert shown_cases(CallTests("f", (((5,), 5),)), "f(5)") == (False,)
    assert shown_cases(CallTests("f", (((5,), 5),)), "f(5) == 5") == (True,)
    assert shown_cases(CallTests("f", (((5,), [5]),)), "f(5)") == (False,)
    assert shown_cases(StdioTests((("7", "7"),)), "7") == (False,)
    assert shown_cases(StdioTests((("7", "7"),)), "7 -> 7") == (True,)


def test_a_format_named_in_any_case_reads_its_own_columns() -> None:
    row = {**io_row(["a\n"], ["b\n"]), "public_tests": {"input": ["c\n"], "output": ["d\n"]}}
    assert read_tests(row, "APPS") == StdioTests(
        (("a\n", "b\n"),)
    )  # "APPS".lower(): not the interned literal
    assert read_tests(row, "Code_Contests") == StdioTests((("c\n", "d\n"),))
    vi_row = {"verification_info": {"test_cases": [{"input": "e", "output": "f"}]}, **row}
    assert read_tests(vi_row, "Verification_Info") == StdioTests((("e", "f"),))


def test_punctuation_at_either_end_of_a_needle_is_never_glued() -> None:
    for char in "{}|~`[]()":
        assert _find(f"a{char}1{char}b", f"{char}1{char}") == 1, char
    assert _find("1{", "1") == 0 and _find("}1", "1") == 1 and _find("1~", "1") == 0 and _find("`1", "1") == 1
    assert (
        _find("1_", "1") == -1
        and _find("_1", "1") == -1
        and _find("x_", "_") == -1
        and _find("_x", "_") == -1
    )


def test_more_inputs_than_outputs_or_fewer_are_both_errors() -> None:
    for inputs, outputs in ((["1\n"], ["1\n", "2\n"]), (["1\n", "2\n"], ["1\n"])):
        with pytest.raises(ValueError, match=rf"has {len(inputs)} inputs but {len(outputs)} outputs"):
            read_tests(io_row(inputs, outputs))
    for inputs, outputs in (([[1]], [1, 2]), ([[1], [2]], [1])):
        with pytest.raises(ValueError, match=rf"has {len(inputs)} inputs but {len(outputs)} outputs"):
            read_tests(io_row(inputs, outputs, fn_name="f"))


def test_a_call_shown_at_the_very_start_of_the_prompt() -> None:
    assert shown_cases(CallTests("f", (((3,), 4),)), "3 gives 4") == (True,)
    assert shown_cases(CallTests("f", (((), 11),)), "11 is what f() returns") == (True,)
    assert shown_cases(StdioTests((("1 2", "3"),)), "1 2 -> 3") == (True,)


def test_a_needle_ending_in_an_underscore_is_glued_to_a_following_word() -> None:
    assert _find("ab_c", "ab_") == -1 and _find("ab_ c", "ab_") == 0
    assert _find("x_y", "x_") == -1 and _find("x_ y", "x_") == 0
    assert _find("a (", "(") == 2 and _find("a(", "(") == 1  # a one-character needle of punctuation


def test_the_tests_are_immutable_values() -> None:
    import dataclasses

    stdio, calls = StdioTests((("1", "2"),)), CallTests("f", (((1,), 2),))
    assert {stdio: 1, calls: 2}[StdioTests((("1", "2"),))] == 1  # hashable, equal by value
    for tests, field in ((stdio, "cases"), (calls, "fn_name")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(tests, field, ())


def test_a_needles_ends_are_read_each_on_its_own_side() -> None:
    assert _find("x(a_", "(a_") == 1  # punctuation first: nothing before it glues
    assert _find("1(x", "1(") == 0  # punctuation last: nothing after it glues
    assert _find("_(x", "_(") == 0


def test_the_output_may_follow_the_input_at_once_after_normalizing() -> None:
    assert shown_cases(StdioTests((("1", "(2)"),)), "1 (2)") == (True,)  # "1(2)" once normalized
    assert shown_cases(CallTests("f", (((3,), [4, 5]),)), "3 [4, 5]") == (True,)


def test_read_tests_takes_the_format_by_keyword_and_the_splits_only_by_keyword() -> None:
    row = {
        "public_tests": {"input": ["1"], "output": ["2"]},
        "private_tests": {"input": ["3"], "output": ["4"]},
    }
    assert read_tests(row, format="code_contests", splits=("private_tests",)) == StdioTests((("3", "4"),))
    with pytest.raises(TypeError):
        read_tests(row, "code_contests", ("private_tests",))


def test_long_rows_and_long_prompts() -> None:
    assert len(read_tests(io_row(["1\n"] * 300, ["1\n"] * 300)).cases) == 300
    assert _find("x" * 300 + " 5", "5") == 301  # a needle at the very end of a long text
    assert _find("a(1", "(1") == 1  # punctuation first, a digit last: nothing before it glues

    # Call-based rows as long: 300 inputs and 300 outputs are the same length (not the same int object).
    calls = {"inputs": [[i] for i in range(300)], "outputs": list(range(300)), "fn_name": "f"}
    assert len(read_tests({"input_output": calls}).calls) == 300
    many = [{"type": "function_call", "fn_name": "f", "input": [i], "output": i} for i in range(300)]
    assert len(read_tests(vi(many)).calls) == 300


def test_an_empty_list_as_the_expected_value_is_shown_or_not_without_failing() -> None:
    assert shown_cases(CallTests("f", (((3,), []),)), "f(3) returns nothing") == (False,)
    assert shown_cases(CallTests("f", (((3,), []),)), "f(3) == []") == (True,)


def test_a_one_element_list_whose_element_opens_the_prompt_of_a_call_without_arguments() -> None:
    # APPS wraps a returned value in a list; a call without arguments looks for it from the prompt's start.
    assert shown_cases(CallTests("f", (((), [11]),)), "11 is what f() returns") == (True,)


# ---- properties (last: the slowest) ----


@SETTINGS
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=3), inner, max_size=3)
            | st.tuples(inner, inner)
        ),
        max_leaves=8,
    )
)
def test_every_value_survives_its_literal(value) -> None:
    assert eval(_literal(value)) == value  # noqa: S307 - our own literal
