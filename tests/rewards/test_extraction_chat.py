"""Extraction of chat completions at the edges: conversations with several turns (which one is read), every
fence tag and case a model writes, the block chosen among several, and each of EXTRACT_RULES (closing_fence,
own_tests, open_fence) just inside and just outside its condition. Nothing is executed."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.extraction import (
    EXTRACT_FAILURE_REASONS,
    EXTRACT_RULES,
    _body_indent,
    _cut_after_function,
    _drop_own_tests,
    _fenced_blocks,
    _join,
    _parseable_prefix,
    _split_block,
    completion_text,
    extract_code,
    has_implemented_function,
)

PROMPT = 'def add(a, b):\n    """Add two numbers."""\n'
GOOD = "def add(a, b):\n    return a + b\n"
SETTINGS = settings(max_examples=40, deadline=None)


def chat(content) -> list[dict]:
    return [{"role": "assistant", "content": content}]


def fenced(code: str, tag: str = "python") -> str:
    return f"Here you go:\n```{tag}\n{code}```\nDone."


# ---- which turn of a conversation is read -------------------------------------------------------------------
def test_the_last_assistant_turn_is_read() -> None:
    convo = [
        {"role": "system", "content": "You write Python."},
        {"role": "user", "content": fenced("def add(a, b):\n    return 0\n")},
        {"role": "assistant", "content": fenced("def add(a, b):\n    return 1\n")},
        {"role": "user", "content": "Try again."},
        {"role": "assistant", "content": fenced(GOOD)},
        {"role": "tool", "content": fenced("def add(a, b):\n    return 2\n")},
    ]
    assert completion_text(convo) == fenced(GOOD)
    ex = extract_code(PROMPT, convo, "add")
    assert ex.ok and ex.snippet == GOOD and ex.style == "chat"
    assert completion_text(tuple(convo)) == fenced(GOOD)


def test_a_message_without_a_role_is_the_assistants_and_non_messages_are_skipped() -> None:
    assert completion_text([{"content": "a"}]) == "a"
    assert completion_text({"role": "assistant", "content": "b"}) == "b"
    assert completion_text(["loose text", {"role": "assistant", "content": "c"}, 3]) == "c"
    assert completion_text([{"role": "user", "content": "d"}]) is None
    assert completion_text([]) is None
    assert completion_text([{"role": "assistant", "content": "e"}, {"content": "f"}]) == "f"


def test_content_parts_and_odd_content() -> None:
    parts = [{"type": "text", "text": "```python\n"}, {"type": "image"}, "def add(a, b):\n", {"text": 7}]
    parts += [{"type": "text", "text": "    return a + b\n```"}]
    assert completion_text(chat(parts)) == "```python\n" + GOOD + "```"
    assert extract_code(PROMPT, chat(parts), "add").snippet == GOOD
    assert completion_text(chat(None)) is None
    assert completion_text(chat(5)) is None
    assert completion_text(chat([])) == ""
    assert completion_text(7) is None
    assert completion_text(b"x") == b"x" and completion_text(None) is None


@pytest.mark.parametrize(
    ("completion", "reason", "style"),
    [
        (None, "empty", "completion"),
        (chat(None), "empty", "chat"),
        ([{"role": "user", "content": GOOD}], "empty", "chat"),
        (chat(""), "empty", "chat"),
        (chat(" \n\t"), "empty", "chat"),
        ("", "empty", "completion"),
        (b"\xff\xfe", "bad_encoding", "completion"),
        (chat("def f():\x00\n"), "nul_byte", "chat"),
        (chat("x = '\ufffd'\n"), "bad_encoding", "chat"),
        (chat("x = '\ud800'\n"), "bad_encoding", "chat"),
    ],
)
def test_unreadable_turns_are_named(completion, reason: str, style: str) -> None:
    ex = extract_code(PROMPT, completion, "add")
    assert (ex.ok, ex.reason, ex.style, ex.code) == (False, reason, style, "")
    assert reason in EXTRACT_FAILURE_REASONS


# ---- fences: every tag and case ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tag",
    [
        "python",
        "Python",
        "PYTHON",
        "py",
        "Py",
        "python3",
        "Python3",
        "py3",
        "pycon",
        "ipython",
        " python",
        "python ",
    ],
)
def test_every_python_tag_in_any_case_is_a_python_block(tag: str) -> None:
    text = f"```{tag}\ndef add(a, b):\n    return 0\n```\n" + fenced(GOOD, "text")
    # a Python block wins over a later block of another language
    ex = extract_code(PROMPT, chat(text), "add")
    assert ex.ok and ex.snippet == "def add(a, b):\n    return 0\n", tag
    assert _split_block(f"{tag}\nx = 1\n") == (tag.strip().lower(), "x = 1\n", True)


def test_the_last_python_block_wins_over_earlier_ones_and_over_untagged_ones() -> None:
    wrong = "def add(a, b):\n    return 0\n"
    assert extract_code(PROMPT, chat(fenced(wrong) + fenced(GOOD)), "add").snippet == GOOD
    assert extract_code(PROMPT, chat(fenced(GOOD) + fenced(wrong, "")), "add").snippet == GOOD  # tagged first
    assert extract_code(PROMPT, chat(fenced(wrong, "") + fenced(GOOD, "")), "add").snippet == GOOD
    assert extract_code(PROMPT, chat(fenced(GOOD, "") + fenced(wrong, "bash")), "add").snippet == GOOD


def test_blocks_of_other_languages_only_are_no_code() -> None:
    for tag in ("bash", "javascript", "text", "c++", "output"):
        ex = extract_code(PROMPT, chat(fenced("echo hi\n", tag)), "add")
        assert (ex.ok, ex.reason, ex.style) == (False, "no_code", "chat"), tag


def test_a_bare_fence_line_and_a_one_line_block() -> None:
    assert extract_code(PROMPT, chat(fenced(GOOD, "")), "add").snippet == GOOD
    one_line = extract_code(None, chat("Answer: ```print(int(input()) * 2)``` ok"), None)
    assert one_line.ok and one_line.snippet == "print(int(input()) * 2)"
    assert _split_block("print(1)") == ("", "print(1)", False)
    assert _split_block("python") == ("", "python", False)  # a tag with no line after it is the code
    assert _split_block("two words\nx\n") == ("", "two words\nx\n", False)


def test_tildes_and_html_code_tags_are_not_fences() -> None:
    # Only ``` fences are read: a ~~~ or <code> answer that begins with prose is prose (no_code).
    for text in (f"Sure:\n~~~python\n{GOOD}~~~\n", f"Sure:\n<code>\n{GOOD}</code>\n"):
        ex = extract_code(PROMPT, chat(text), "add")
        assert (ex.ok, ex.reason) == (False, "no_code")


def test_an_empty_block_is_no_code() -> None:
    ex = extract_code(PROMPT, chat("```python\n```"), "add")
    assert (ex.ok, ex.reason, ex.style) == (False, "no_code", "chat")
    ex = extract_code(PROMPT, chat("```python\n   \n```"), "add")
    assert (ex.ok, ex.reason) == (False, "no_code")


# ---- what a block becomes -----------------------------------------------------------------------------------------
def test_a_block_defining_the_function_runs_after_the_whole_prompt() -> None:
    prompt = "import math\n\n" + PROMPT  # no trailing blank line
    ex = extract_code(prompt, chat(fenced(GOOD)), "add")
    assert ex.code == prompt + "\n" + GOOD
    assert _join(prompt.rstrip("\n"), "x\n") == prompt.rstrip("\n") + "\n\nx\n"
    assert _join("", "x\n") == "x\n"


@pytest.mark.parametrize("header", ["def add(", "async def add(", "def  add (", "def\tadd\t("])
def test_any_spelling_of_the_definition_counts(header: str) -> None:
    ex = extract_code(PROMPT, chat(fenced(f"{header}a, b):\n    return a + b\n")), "add")
    assert ex.ok and ex.code.startswith(PROMPT + "\n") and ex.snippet.startswith(header)


def test_a_definition_of_another_name_or_inside_a_class_is_not_the_entry_point() -> None:
    for code in ("def adder(a, b):\n    return a + b\n", "class K:\n    def add(a, b):\n        return 1\n"):
        ex = extract_code(None, chat(fenced(code)), "add")
        assert (ex.ok, ex.reason) == (False, "no_signature"), code


def test_a_body_block_is_indented_as_the_prompts_body() -> None:
    tab_prompt = "def add(a, b):\n\t'''Add.'''\n"
    ex = extract_code(tab_prompt, chat(fenced("return a + b\n")), "add")
    assert ex.code == tab_prompt + "\treturn a + b\n"
    two = "def add(a, b):\n  '''Add.'''\n\n"
    assert extract_code(two, chat(fenced("    return a + b\n")), "add").code == two + "  return a + b\n"
    assert (
        _body_indent("") == "    " and _body_indent("def f():\n") == "    " and _body_indent("\n\n") == "    "
    )
    assert _body_indent("def f():\n        x = 1\n\n") == "        "


def test_flush_left_code_without_return_runs_after_the_prompt_as_written() -> None:
    code = "import sys\nadd = lambda a, b: a + b\n"
    ex = extract_code(PROMPT, chat(fenced(code)), "add")
    assert ex.ok and ex.code == PROMPT + "\n" + code and not ex.cut
    # a flush-left `return` makes it a body
    ex = extract_code(PROMPT, chat(fenced("x = a\nreturn x + b\n")), "add")
    assert ex.code == PROMPT + "    x = a\n    return x + b\n"
    # "returns" is not a return statement
    ex = extract_code(PROMPT, chat(fenced("returns = 1\n")), "add")
    assert ex.code == PROMPT + "\nreturns = 1\n"


# ---- the rules: closing_fence ------------------------------------------------------------------------------------
def test_closing_fence_just_inside_and_just_outside() -> None:
    body = "    return a + b\n"
    ex = extract_code(PROMPT, body + "```\nThis adds.", "add")
    assert ex.ok and ex.rules == ("closing_fence",) and ex.code == PROMPT + body
    ex = extract_code(PROMPT, body + "  ```\nThis adds.", "add")  # an indented fence line is a fence too
    assert ex.rules == ("closing_fence",) and ex.code == PROMPT + body
    # a fence inside the line is not a line-start fence: no closing fence rule
    assert "closing_fence" not in extract_code(PROMPT, "    return a + b  # ```\n", "add").rules
    # flush-left text before the fence does not continue the prompt: the fence opens a block
    ex = extract_code(PROMPT, "Sure.\n```python\n" + GOOD + "```\n", "add")
    assert ex.rules == () and ex.style == "chat" and ex.snippet == GOOD
    # only comments before it: not a continuation
    ex = extract_code(PROMPT, "# comment\n```python\n" + GOOD + "```\n", "add")
    assert ex.rules == () and ex.snippet == GOOD
    # no prompt: nothing to continue
    ex = extract_code(None, "    x = 1\n```\n", None)
    assert "closing_fence" not in ex.rules
    # blank before the fence: it opens
    ex = extract_code(PROMPT, "\n\n```python\n" + GOOD + "```\n", "add")
    assert ex.rules == () and ex.snippet == GOOD


def test_closing_fence_after_a_prompt_that_ends_mid_line() -> None:
    prompt = "def add(a, b):\n    return"
    ex = extract_code(prompt, " a + b\n```\nDone", "add")
    assert ex.ok and ex.rules == ("closing_fence",) and ex.code == prompt + " a + b\n"


def test_closing_fence_is_not_applied_in_chat_style() -> None:
    ex = extract_code(PROMPT, "    return a + b\n```\nThis adds.", "add", style="chat")
    assert ex.reason == "unbalanced_fence"


# ---- the rules: open_fence ------------------------------------------------------------------------------------------
def test_open_fence_keeps_the_longest_parseable_prefix() -> None:
    cut = "Sure:\n```python\n" + GOOD + "\nprint(add(1,"
    ex = extract_code(PROMPT, chat(cut), "add")
    assert ex.ok and ex.rules == ("open_fence",) and ex.snippet == GOOD
    # untagged open block
    ex = extract_code(PROMPT, chat("Sure:\n```\n" + GOOD + "x = (1,"), "add")
    assert ex.ok and ex.rules[0] == "open_fence" and ex.snippet == GOOD
    # the whole open block parses: kept whole
    ex = extract_code(None, chat("```python\nprint(1)\nprint(2)"), None)
    assert ex.ok and ex.rules == ("open_fence",) and ex.snippet == "print(1)\nprint(2)\n"


def test_open_fence_just_outside() -> None:
    # an open block of another language, a fence with no line after it, nothing that parses: unbalanced
    for text in ("```bash\necho hi\n", "text ```python", "```python\n(((\n", "```python\n\n\n"):
        ex = extract_code(PROMPT, chat(text), "add")
        assert (ex.ok, ex.reason) == (False, "unbalanced_fence"), text
    # three fences, the last one opening a Python block: the earlier closed block is not the open one
    text = fenced("def add(a, b):\n    return 0\n") + "\n```python\n" + GOOD
    ex = extract_code(PROMPT, chat(text), "add")
    assert ex.snippet == GOOD and ex.rules == ("open_fence",)
    # ...and when the closed Python block is chosen (the open one is untagged), no open_fence rule
    text = fenced(GOOD) + "\n```\nx = 1\n"
    ex = extract_code(PROMPT, chat(text), "add")
    assert ex.snippet == GOOD and ex.rules == ()


def test_fenced_blocks_pairs_and_the_open_block() -> None:
    assert _fenced_blocks("a ```python\nx\n``` b") == ([("python", "x\n")], False)
    assert _fenced_blocks("```\nx\n```\n```py\ny\n```") == ([("", "x\n"), ("py", "y\n")], False)
    assert _fenced_blocks("```python\nx = 1\ny = (") == ([("python", "x = 1\n")], True)
    assert _fenced_blocks("```js\nx\n") is None
    assert _fenced_blocks("no fences") == ([], False)


def test_parseable_prefix_edges() -> None:
    assert _parseable_prefix("x = 1\ny = 2") == "x = 1\ny = 2\n"
    assert _parseable_prefix("x = 1\ny = (") == "x = 1\n"
    assert _parseable_prefix("x = (") is None
    assert _parseable_prefix("\n\n") is None
    assert (
        _parseable_prefix("    x = 1\n    y = 2\n    z = (") == "    x = 1\n    y = 2\n"
    )  # dedented to parse
    assert _parseable_prefix("if x:\n    y = 1\n    z") == "if x:\n    y = 1\n    z\n"


# ---- the rules: own_tests ---------------------------------------------------------------------------------------------
def test_own_tests_edges() -> None:
    assert _drop_own_tests(GOOD) == GOOD  # nothing to drop: unchanged, byte for byte
    assert _drop_own_tests("def f(:\n") == "def f(:\n"  # does not parse: as it is
    code = "X = 1\nY = X + 1\nZ: int = 3\nW = 4\n\ndef add(a, b):\n    return a + b + Y + Z\nadd(1, 2)\n"
    # Y is read by add, X by Y (transitively); W is read by nothing
    assert _drop_own_tests(code) == "X = 1\nY = X + 1\nZ: int = 3\ndef add(a, b):\n    return a + b + Y + Z\n"
    cls = "class A:\n    pass\n\nprint(A())\n"
    assert _drop_own_tests(cls) == "class A:\n    pass\n"
    deco = "import functools\n\n@functools.cache\ndef add(a, b):\n    return a + b\nassert add(1, 1) == 2"
    assert _drop_own_tests(deco) == "import functools\n@functools.cache\ndef add(a, b):\n    return a + b\n"
    unpack = "A, (B, C) = 1, (2, 3)\ndef f():\n    return C\nf()\n"
    assert _drop_own_tests(unpack) == "A, (B, C) = 1, (2, 3)\ndef f():\n    return C\n"
    from_import = "from math import pi\nr = 1\nprint(pi)\n"
    assert _drop_own_tests(from_import) == "from math import pi\n"
    async_def = "async def g():\n    return K\nK = 1\nawait_me = g()\n"
    assert _drop_own_tests(async_def) == "async def g():\n    return K\nK = 1\n"


def test_own_tests_only_with_an_entry_point_and_named_in_the_rules() -> None:
    block = GOOD + "print(add(1, 2))\n"
    ex = extract_code(PROMPT, chat(fenced(block)), "add")
    assert ex.rules == ("own_tests",) and ex.snippet == GOOD
    ex = extract_code(None, chat(fenced(block)), None)
    assert ex.rules == () and ex.snippet == block
    ex = extract_code(PROMPT, block, "add")  # bare code rewriting the function
    assert ex.style == "bare" and ex.rules == ("own_tests",) and ex.snippet == GOOD
    assert set(EXTRACT_RULES) == {"closing_fence", "open_fence", "own_tests"}


# ---- completion style and the cut -------------------------------------------------------------------------------------
def test_cut_after_function_edges() -> None:
    assert _cut_after_function(PROMPT, "    return a + b\n") == ("    return a + b\n", False)
    assert _cut_after_function(PROMPT, "    return a + b\nx = 1\n") == ("    return a + b\n", True)
    assert _cut_after_function("", "x = 1\ny = 2\n") == ("x = 1\n", True)  # no prompt: first statement kept
    assert _cut_after_function("", "x = 1\n") == ("x = 1\n", False)
    mid = "def add(a, b):\n    return"
    assert _cut_after_function(mid, " a\nz = 3\n") == (" a\n", True)
    # a column-0 token on the prompt's own last line does not cut
    assert _cut_after_function("x = 1", "\ny = 2\n") == ("\n", True)


def test_completion_and_chat_styles_forced() -> None:
    text = fenced(GOOD)
    forced = extract_code(PROMPT, text, "add", style="completion")
    assert forced.style == "completion" and forced.ok
    ex = extract_code(PROMPT, GOOD, "add", style="chat")
    assert ex.style == "bare" and ex.snippet == GOOD
    ex = extract_code(PROMPT, "not python at all (", "add", style="chat")
    assert (ex.reason, ex.style) == ("no_code", "bare")
    ex = extract_code(PROMPT, "# only a comment\n", "add")
    assert (ex.reason, ex.style) == ("no_code", "completion")
    ex = extract_code(PROMPT, "Just prose here.", "add")
    assert (ex.reason, ex.style) == ("no_code", "completion")
    with pytest.raises(ValueError, match="style must be"):
        extract_code(PROMPT, GOOD, "add", style="markdown")


def test_carriage_returns_are_line_breaks() -> None:
    ex = extract_code(PROMPT, chat("```python\r\ndef add(a, b):\r\n    return a + b\r\n```"), "add")
    assert ex.snippet == GOOD
    ex = extract_code(PROMPT.replace("\n", "\r\n"), "    return a + b\r\nprint(1)\r", "add")
    assert ex.code == PROMPT + "    return a + b\n" and ex.cut


# ---- has_implemented_function --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (GOOD, True),
        ('def add(a, b):\n    """Doc."""\n    return a + b\n', True),
        ('def add(a, b):\n    """Doc."""\n', False),
        ("def add(a, b):\n    pass\n", False),
        ("def add(a, b):\n    ...\n", False),
        ('def add(a, b):\n    """Doc."""\n    pass\n    ...\n', False),
        ("def add(a, b):\n    1\n", False),  # a leading constant reads as the docstring
        ("def add(a, b):\n    1\n    return 2\n", True),
        ("async def add(a, b):\n    return a\n", True),
        (GOOD + "\n" + GOOD, False),  # written twice
        ("def add2(a, b):\n    return a\n", False),
    ],
)
def test_has_implemented_function_edges(code: str, expected: bool) -> None:
    ex = extract_code(None, chat(fenced(code)), "add")
    assert has_implemented_function(ex, "add") is expected
    if ex.ok:
        assert not has_implemented_function(ex, None) and not has_implemented_function(ex, "")


def test_has_implemented_function_needs_an_ok_parseable_program() -> None:
    bad = extract_code(None, chat(fenced("def add(a, b):\n    return (\n")), "add")
    assert bad.ok and not has_implemented_function(bad, "add")
    assert not has_implemented_function(extract_code(PROMPT, "", "add"), "add")
    # the prompt's stub plus the model's body: the last definition counts
    ex = extract_code(PROMPT, "    return a + b\n", "add")
    assert has_implemented_function(ex, "add")
    nested = extract_code(None, chat(fenced("class K:\n    def add(a, b):\n        return 1\n")), None)
    assert not has_implemented_function(nested, "add")


# ---- properties -----------------------------------------------------------------------------------------------------------
names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: s not in {"def", "if", "or", "in", "is", "as"}
)


def test_the_last_kept_statement_ends_with_a_newline_when_the_text_does_not() -> None:
    assert _drop_own_tests("print(1)\ndef add(a, b):\n    return a + b") == GOOD
    ex = extract_code(None, chat("```python\nprint(1)\ndef add(a, b):\n    return a + b```"), "add")
    assert ex.snippet == GOOD and ex.rules == ("own_tests",)


def test_a_body_block_after_a_prompt_without_a_final_newline() -> None:
    prompt = "def add(a, b):\n    '''Add.'''"
    ex = extract_code(prompt, chat(fenced("return a + b\n")), "add")
    assert ex.code == prompt + "\n    return a + b\n"
    ast.parse(ex.code)


def test_a_style_read_from_a_config_file_is_the_same_style() -> None:
    chat_style = "".join(["ch", "at"])  # built at run time, as a YAML-read value is: not the interned literal
    ex = extract_code(PROMPT, GOOD, "add", style=chat_style)
    assert ex.style == "bare" and ex.snippet == GOOD
    ex = extract_code(PROMPT, "    return a + b\n```\nThis adds.", "add", style=chat_style)
    assert ex.reason == "unbalanced_fence"


def test_the_closing_fence_rule_applies_in_completion_style_too() -> None:
    ex = extract_code(PROMPT, "    return a + b\n```\nThis adds.", "add", style="completion")
    assert ex.ok and ex.rules == ("closing_fence",) and ex.code == PROMPT + "    return a + b\n"


def test_open_fence_is_named_only_when_the_open_block_is_the_one_read() -> None:
    # the closed Python block is read; the open untagged block after it (whatever its text) is not
    for tail in ("a = 1\n", "x = 1\n", GOOD):
        ex = extract_code(PROMPT, chat(fenced(GOOD) + "\n```\n" + tail), "add")
        assert ex.snippet == GOOD and "open_fence" not in ex.rules, tail


def test_a_failed_extraction_never_has_an_implemented_function() -> None:
    from rewards.extraction import Extraction

    assert not has_implemented_function(Extraction(GOOD, "no_code", "chat", GOOD), "add")
    assert has_implemented_function(Extraction(GOOD, "ok", "chat", GOOD), "add")


def test_a_prompt_whose_last_line_is_a_top_level_header() -> None:
    assert _cut_after_function("x = 1\ndef f():\n", "    return x\n") == ("    return x\n", False)
    assert _cut_after_function("x = 1\ndef f():\n", "    return x\ny = 2\n") == ("    return x\n", True)


def test_a_one_space_indent_continues_the_prompt() -> None:
    ex = extract_code("def f():\n", " return 1\n", "f")
    assert ex.ok and ex.style == "completion" and ex.code == "def f():\n return 1\n"


def test_a_one_space_indented_body_in_a_fence_ends_at_the_flush_left_call_after_it() -> None:
    ex = extract_code("def add(a, b):\n", chat(fenced(" return a + b\nprint(add(1, 2))\n")), "add")
    assert ex.ok and ex.code == "def add(a, b):\n    return a + b\n" and ex.cut


def test_a_one_space_indented_completion_ends_at_a_closing_fence_it_never_opened() -> None:
    ex = extract_code("def f():\n", " return 1\n```\nThat is all.\n", "f")
    assert ex.ok and ex.code == "def f():\n return 1\n" and ex.rules == ("closing_fence",)


def test_extract_code_takes_its_first_three_by_keyword_and_the_style_only_by_keyword() -> None:
    ex = extract_code(prompt_code="def f():\n", completion="    return 1\n", entry_point="f")
    assert ex.ok and ex.code == "def f():\n    return 1\n"
    with pytest.raises(TypeError):
        extract_code("def f():\n", "    return 1\n", "f", "completion")


def test_an_auto_style_read_at_run_time_takes_flush_left_code_that_defines_the_function() -> None:
    auto = "".join(["au", "to"])  # built at run time, as a YAML-read value is
    code = "def f():\n    return 1\n"
    assert extract_code("def f():\n", code, "f", style=auto) == extract_code("def f():\n", code, "f")
    assert extract_code("def f():\n", code, "f", style=auto).style == "bare"


def test_three_hundred_top_level_statements_without_tests_are_kept_as_written() -> None:
    code = "".join(f"# helper {i}\ndef h{i}():\n    return {i}\n\n" for i in range(300))
    assert _drop_own_tests(code) == code
    dropped = _drop_own_tests(code + "print(h1())\n")
    assert "print(" not in dropped and dropped.count("def h") == 300


def test_an_indented_body_with_nothing_after_it_is_not_cut() -> None:
    ex = extract_code("def add(a, b):\n", chat(fenced("    return a + b\n")), "add")
    assert ex.ok and ex.code == "def add(a, b):\n    return a + b\n" and not ex.cut and ex.rules == ()


def test_only_the_assistant_role_is_read() -> None:
    turns = [
        {"role": "assistant", "content": "a"},
        {"role": "ai", "content": "b"},
        {"role": "agent", "content": "c"},
    ]
    assert completion_text(turns) == "a"


def test_only_the_entry_points_own_name_counts() -> None:
    stub_then_other = "def add(a, b):\n    pass\n\n\ndef a():\n    return 1\n"
    ex = extract_code(None, chat(fenced(stub_then_other)), "add")
    assert ex.ok and not has_implemented_function(ex, "add")


def test_completion_style_from_a_config_file_reads_fences_as_text() -> None:
    completion_style = "".join(["comple", "tion"])  # built at run time, as a YAML-read value is
    ex = extract_code(PROMPT, fenced(GOOD), "add", style=completion_style)
    assert (
        ex.style == "completion"
        and ex.code == extract_code(PROMPT, fenced(GOOD), "add", style="completion").code
    )


def test_a_closing_fence_after_a_badly_dedented_line_still_closes() -> None:
    prompt = "def f():\n    x = 1\n"
    ex = extract_code(prompt, "  y = 2\n```\nSome prose.", "f")  # tokenize: unindent does not match
    assert ex.rules == ("closing_fence",) and ex.code == prompt + "  y = 2\n"


def test_an_extraction_is_an_immutable_value() -> None:
    import dataclasses

    ex = extract_code(PROMPT, chat(fenced(GOOD)), "add")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.code = ""
    assert hash(ex) == hash(extract_code(PROMPT, chat(fenced(GOOD)), "add"))


def test_roles_and_reasons_read_from_data_compare_by_value() -> None:
    from rewards.extraction import Extraction

    role = "".join(["assis", "tant"])  # a role decoded from JSON is not the interned literal
    assert completion_text([{"role": role, "content": "x"}, {"role": "user", "content": "y"}]) == "x"
    assert Extraction(GOOD, "".join(["o", "k"]), "chat").ok


# ---- properties (last: the slowest) ----


@SETTINGS
@given(
    names,
    st.sampled_from(["python", "Python", "py", "python3", ""]),
    st.text(alphabet="abc .,!\n", max_size=30).filter(lambda s: "`" not in s),
    st.lists(st.sampled_from(["user", "system"]), max_size=3),
)
def test_any_wrapping_of_a_function_block_yields_it(
    name: str, tag: str, prose: str, before: list[str]
) -> None:
    code = f"def {name}(x):\n    return x\n"
    turns = [{"role": r, "content": fenced("def nope():\n    return 0\n")} for r in before]
    turns.append({"role": "assistant", "content": f"{prose}\n```{tag}\n{code}```\n{prose}"})
    ex = extract_code(None, turns, name)
    assert ex.ok and ex.snippet == code and ex.style == "chat" and ex.rules == ()
    assert has_implemented_function(ex, name)
    ast.parse(ex.code)


def test_nothing_to_drop_keeps_the_code_byte_for_byte() -> None:
    code = "import math\n\n# a helper\ndef add(a, b):\n    return a + b  # sum\n\n\nclass K:\n    pass"
    assert _drop_own_tests(code) == code
    ex = extract_code(None, chat(fenced(code + "\n")), "add")
    assert ex.snippet == code + "\n" and ex.rules == ()


def test_an_indented_body_followed_by_flush_left_code_ends_before_it() -> None:
    """A chat block holding the body at the prompt's indent, then the model's own call or assert at column 0:
    the body is the function's (indented once, not twice) and the top-level code after it is cut."""
    prompt = "def add(a, b):\n    '''Add.'''\n"
    for block in ("    return a + b\nprint(add(1, 2))\n", "    return a - b\nassert add(1, 2) == 3\n"):
        got = extract_code(prompt, [{"role": "assistant", "content": f"```python\n{block}```"}], "add")
        assert got.ok and got.cut, got
        assert got.code == prompt + block.splitlines(keepends=True)[0], got.code
        ast.parse(got.code)
    whole = "    def add(a, b):\n        return a + b\nassert add(1, 2) == 3\n"
    got = extract_code(prompt, [{"role": "assistant", "content": f"```python\n{whole}```"}], "add")
    assert got.ok and "assert" not in got.code and got.rules == ("own_tests",), got
