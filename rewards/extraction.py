"""Turn a model completion into the program the sandbox runs, or into a named reason why not.

Brittle extraction silently injects noise into the reward (the seed experiment's warning; docs/provenance.md).
Every rule here is therefore explicit, and every failure carries a stable reason string that the reward functions count in their
metrics (``<prefix>/extract_<reason>_frac``). The reading is chosen by the content, the same for text and
conversational completions:

* **Chat style** (the completion contains a ```` ``` ```` fence): the last ```` ```python ```` block (an
  untagged block if there is no tagged one), dedented. If the block defines the entry point it runs after the
  whole code prompt, which keeps the prompt's imports and helpers (HumanEval/32's ``poly``). Otherwise, when it
  is indented or has a column-0 ``return``, it is the function's body and is appended to the prompt at the
  prompt's body indentation; other flush-left code runs after the prompt as written.
* **Completion style** (no fence, the first code line is indented): the program is ``code_prompt +
  completion``, cut at the first top-level statement after the prompt's function (the usual HumanEval stop
  rule, done with the tokenizer so that a column-0 line inside a multi-line string does not cut).
* **Bare code** (no fence, starts at column 0): taken like a chat block if it parses and defines the entry
  point; otherwise it is prose (``no_code``).
* **Garbage** scores 0.0 with a reason: ``empty``, ``no_code``, ``unbalanced_fence`` (an odd number of
  ```` ``` ```` that no rule below reads), ``nul_byte``, ``bad_encoding`` (bytes that are not UTF-8, lone
  surrogates, or U+FFFD left by a lossy byte decode) and ``no_signature`` (a block without the function and no
  code prompt to complete).

What instruct models write, read as the field's harnesses read it (:data:`EXTRACT_RULES`; each rule that changed
a reading is named in ``Extraction.rules``):

* ``closing_fence``: given a raw code prompt, an instruct model continues the body, then writes a closing
  ```` ``` ```` it never opened and prose. When the text before the first line-start fence continues the prompt
  (its first code line is indented, or the prompt ends mid-line and the two parse), that fence ends the code
  and the rest is dropped, as the ``"\n```"`` stop sequence of bigcode-evaluation-harness's HumanEval task does
  (beside the Codex paper's ``"\nclass"``, ``"\ndef"``, ``"\n#"``, ``"\nif"``, ``"\nprint"``, which the completion
  cut covers); then the completion cut applies.
* ``own_tests``: a block (or bare code) that defines the entry point loses the model's own test code, as
  evalplus's ``sanitize`` does: imports, functions and classes stay, top-level assignments stay when a function
  reads them, and so does a ``sys.setrecursionlimit(...)`` call (a deep recursion needs it); other calls,
  prints, asserts, loops, ``if __name__ == "__main__":`` and unread assignments go. A whole
  program (no entry point: stdio rows) keeps its top level.
* ``open_fence``: a chat answer cut off by the token limit inside its ```` ```python ```` block (an odd number of
  fences, the last opening a Python or untagged block) keeps that block up to its longest leading run of whole
  lines that parses, as evalplus's ``code_extract`` keeps the longest parseable span; then ``own_tests``.

Nothing here executes code; syntax errors of an extracted program are the sandbox's verdict.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "EXTRACT_FAILURE_REASONS",
    "EXTRACTION_VERSION",
    "EXTRACT_RULES",
    "CODE_END_STOP_STRINGS",
    "Extraction",
    "code_ended",
    "code_in_prompt",
    "completion_text",
    "extract_code",
    "has_empty_body",
    "has_implemented_function",
]

# Stable, so that metric names never change between steps.
EXTRACT_FAILURE_REASONS: tuple[str, ...] = (
    "empty",
    "no_code",
    "unbalanced_fence",
    "nul_byte",
    "bad_encoding",
    "no_signature",
)

# Bumped whenever a change here can change what some completion is read as (and so its verdict); stamped in every
# evaluation record. 1: before EXTRACT_RULES; 2: EXTRACT_RULES (7c28ff2); 3: a prompt without its final newline
# (f524e3f); 4: an indented body followed by flush-left code (00c00ec); 5: a top-level sys.setrecursionlimit(...)
# or sys.set_int_max_str_digits(...) call is kept (issue 51; committed in c04a8dc without its bump).
EXTRACTION_VERSION = 5

# The rules for what instruct models write (the module docstring says where each comes from).
EXTRACT_RULES: tuple[str, ...] = ("closing_fence", "open_fence", "own_tests")

_FENCE = "```"
_LINE_FENCE_RE = re.compile(r"^[ \t]*```", re.MULTILINE)
_PY_TAGS = frozenset({"python", "py", "python3", "py3", "pycon", "ipython"})
_TAG_RE = re.compile(r"[A-Za-z0-9_+#.\-]*")
_SKIP_TOKENS = frozenset(
    {
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.COMMENT,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
        tokenize.ENCODING,
    }
)


@dataclass(frozen=True)
class Extraction:
    """What :func:`extract_code` found.

    Attributes:
        code: the full program to run (code prompt included); ``""`` when extraction failed.
        reason: ``"ok"`` or one of :data:`EXTRACT_FAILURE_REASONS`.
        style: ``"completion"``, ``"chat"`` or ``"bare"`` (how the completion was read).
        snippet: the model's own code (the continuation, or the chosen block) before the prompt was added.
        cut: True when trailing top-level code after the function was dropped.
        rules: the instruct-answer rules of :data:`EXTRACT_RULES` that changed what was read, in order.
    """

    code: str
    reason: str
    style: str
    snippet: str = ""
    cut: bool = False
    rules: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


def completion_text(completion: Any) -> str | bytes | None:
    """The text of a TRL completion: a ``str``, or the last assistant message of a conversational completion.

    Conversational completions are ``[{"role": "assistant", "content": ...}]``; ``content`` may also be a list
    of ``{"type": "text", "text": ...}`` parts. Returns ``None`` when no text can be found.
    """
    if completion is None or isinstance(completion, str | bytes):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list | tuple):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        if not assistant:
            return None
        content = assistant[-1].get("content")
        if content is None or isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
            return "".join(p for p in parts if isinstance(p, str))
    return None


def _encoding_problem(text: str | bytes) -> tuple[str | None, str]:
    """Return ``(reason, text)``: a garbage reason or None, and the text decoded to ``str``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            return "bad_encoding", ""
    if "\x00" in text:
        return "nul_byte", text
    if "\ufffd" in text:  # left by bytes.decode(errors="replace"): the code is no longer what was sampled
        return "bad_encoding", text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return "bad_encoding", text
    return None, text


def _split_block(raw: str) -> tuple[str, str, bool]:
    """``(tag, body, has_info_line)`` of the text between two fences."""
    first, nl, rest = raw.partition("\n")
    tag = first.strip()
    if nl and _TAG_RE.fullmatch(tag):
        return tag.lower(), rest, True
    return "", raw, False  # no info string: the opening line is already code (or the block is one line)


def _fenced_blocks(text: str) -> tuple[list[tuple[str, str]], bool] | None:
    """``([(tag, body), ...], open)`` for each fenced block, or None when the fences do not pair up.

    An odd number of fences pairs up when the last one opens a code block (```` ```python ```` or a bare
    ```` ``` ```` line) that the text ends inside, as an answer cut off by the token limit does: that block
    runs to the end, trimmed to its longest prefix of whole lines that parses, and ``open`` is True.
    """
    pieces = text.split(_FENCE)
    raws = pieces[1::2]
    blocks = [_split_block(raw)[:2] for raw in raws]
    if len(pieces) % 2 == 1:
        return blocks, False
    tag, body, info_line = _split_block(raws[-1])
    if not info_line or (tag and tag not in _PY_TAGS):
        return None
    kept = _parseable_prefix(body)
    if kept is None:
        return None
    blocks[-1] = (tag, kept)
    return blocks, True


def _parseable_prefix(code: str) -> str | None:
    """The longest run of whole leading lines of ``code`` that parses (dedented), or None when none does.

    evalplus's sanitizer (``code_extract``) keeps the longest span of lines that parses; a cut-off answer's
    span starts where its block does, so only prefixes are tried.
    """
    lines = code.split("\n")
    for end in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:end]).rstrip() + "\n"
        if candidate.strip() and _parses(textwrap.dedent(candidate)):
            return candidate
    return None


def _pick_block(blocks: list[tuple[str, str]]) -> str | None:
    python = [body for tag, body in blocks if tag in _PY_TAGS]
    if python:
        return python[-1]
    untagged = [body for tag, body in blocks if tag == ""]
    return untagged[-1] if untagged else None


def _defines(code: str, entry_point: str | None) -> bool:
    if not entry_point:
        return True
    pattern = rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\("
    return re.search(pattern, code, flags=re.MULTILINE) is not None


def _first_code_line(text: str) -> str | None:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return line
    return None


def _cut_after_function(prompt: str, completion: str) -> tuple[str, bool]:
    """Cut ``completion`` at its first top-level statement, reading ``prompt + completion`` with the tokenizer.

    Returns ``(kept_completion, was_cut)``. A tokenizer error before any cut point keeps the whole completion
    (the sandbox will report the syntax error); an error after the cut point does not matter.
    """
    # Split on "\n" only (as tokenize does; str.splitlines would also split on \x0c, \u2028...), so that
    # token rows and the lines we cut are the same lines. extract_code already turned \r into \n.
    lines = io.StringIO(prompt + completion).readlines()
    # Rows are 1-based; tokens that start on or before the prompt's last line belong to the prompt.
    prompt_lines = prompt.count("\n") + (0 if prompt.endswith("\n") or not prompt else 1)
    cut_line = None
    started = bool(
        prompt
    )  # with no prompt, the completion's first statement starts the program: no cut there
    try:
        for tok in tokenize.generate_tokens(iter(lines).__next__):
            if tok.type in _SKIP_TOKENS:
                continue
            row, col = tok.start
            if row > prompt_lines and col == 0:
                if started:
                    cut_line = row
                    break
                started = True
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    if cut_line is None:
        return completion, False
    kept = "".join(lines[: cut_line - 1])
    return kept[len(prompt) :], True


def _universal_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _join(prompt: str, code: str) -> str:
    if not prompt:
        return code
    return prompt + ("" if prompt.endswith("\n") else "\n") + "\n" + code


def _body_indent(prompt: str) -> str:
    """The indentation of the prompt's function body: that of its last non-blank line (the docstring)."""
    for line in reversed(prompt.splitlines()):
        if line.strip():
            margin = line[: len(line) - len(line.lstrip())]
            return margin or "    "
    return "    "


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


# Calls that set up the interpreter for the solution rather than test it: a deep recursion needs its
# ``sys.setrecursionlimit(...)``, a huge integer its ``sys.set_int_max_str_digits(...)``.
_INTERPRETER_SETTINGS = frozenset({"setrecursionlimit", "set_int_max_str_digits"})


def _sets_the_interpreter(node: ast.stmt) -> bool:
    """Whether ``node`` is a top-level ``sys.setrecursionlimit(...)`` (or ``setrecursionlimit(...)``, imported
    from sys) or ``sys.set_int_max_str_digits(...)`` call."""
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return False
    func = node.value.func
    if isinstance(func, ast.Attribute):
        return (
            func.attr in _INTERPRETER_SETTINGS and isinstance(func.value, ast.Name) and func.value.id == "sys"
        )
    return isinstance(func, ast.Name) and func.id in _INTERPRETER_SETTINGS


def _drop_own_tests(code: str) -> str:
    """``code`` without the model's own test code, after evalplus's sanitizer: the imports, functions and
    classes stay, a ``sys.setrecursionlimit(...)`` call (``_sets_the_interpreter``), and the top-level
    assignments that a function, class or such call uses (through the names it reads);
    calls, prints, asserts, loops, ``if __name__ == "__main__":`` blocks and unused assignments (``result =
    f(3)``) go. Unlike evalplus, no function is dropped: defining one runs nothing, and a test may call a helper.
    Code that does not parse is returned as it is (the sandbox reports the error)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    assigns = (ast.Assign, ast.AnnAssign)
    kept = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom, *_DEFINITIONS)) or _sets_the_interpreter(n)
    ]
    binders: dict[str, list[ast.stmt]] = {}
    for node in kept:
        for name in _bound_names(node) if isinstance(node, assigns) else ():
            binders.setdefault(name, []).append(node)
    queue = [n for n in kept if isinstance(n, (*_DEFINITIONS, ast.Expr)) and not isinstance(n, assigns)]
    used: set[ast.stmt] = set()
    while queue:
        node = queue.pop()
        for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
            for binder in binders.pop(name, []):
                used.add(binder)
                queue.append(binder)
    kept = [n for n in kept if not isinstance(n, assigns) or n in used]
    if len(kept) == len(tree.body):
        return code
    lines = code.splitlines(keepends=True)
    spans = []
    for node in kept:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = "".join(lines[start - 1 : node.end_lineno])
        spans.append(span if span.endswith("\n") else span + "\n")
    return "".join(spans)


def _from_code(code: str, code_prompt: str | None, entry_point: str | None, style: str) -> Extraction:
    """A code block (or bare code): run it after the prompt, or complete the prompt's function with it."""
    if not code.strip():
        return Extraction("", "no_code", style, code)
    first = _first_code_line(code)
    indented = first is not None and first[:1].isspace()
    trailing_cut = False
    if indented:
        # A body followed by flush-left code (the model's own calls or asserts after it) ends there, as a
        # completion ends at its first top-level statement; left whole, no margin would come off the body.
        head, top_level = _split_at_top_level(code)
        if top_level.strip() and _parses("def _f():\n" + textwrap.indent(textwrap.dedent(head), "    ")):
            code, trailing_cut = head, True
        # Either a function body, or a whole block nested in a markdown list. (textwrap.dedent would also
        # blank whitespace-only lines, so it only runs when there is a margin to remove.)
        code = textwrap.dedent(code)
    if _defines(code, entry_point):
        clean = _drop_own_tests(code) if entry_point else code  # a whole program (stdio) keeps its top level
        rules = ("own_tests",) if clean != code or trailing_cut else ()
        return Extraction(_join(code_prompt or "", clean), "ok", style, clean, rules=rules)
    if not code_prompt:
        return Extraction("", "no_signature", style, code)
    if not indented and not re.search(r"^return\b", code, flags=re.MULTILINE):
        # Top-level code that does not define the function: run it after the prompt as written.
        return Extraction(_join(code_prompt, code), "ok", style, code)
    # A function body (indented, or flush-left with a `return`): indent it as the prompt's body.
    prompt = code_prompt if code_prompt.endswith("\n") else code_prompt + "\n"
    body = textwrap.indent(code, _body_indent(prompt))
    kept, cut = _cut_after_function(prompt, body)
    return Extraction(prompt + kept, "ok", style, body, cut or trailing_cut)


def _split_at_top_level(code: str) -> tuple[str, str]:
    """`code` cut before its first non-blank line at column 0: (the indented head, the rest)."""
    lines = code.splitlines(keepends=True)
    top = next((i for i, line in enumerate(lines) if line.strip() and not line[:1].isspace()), len(lines))
    return "".join(lines[:top]), "".join(lines[top:])


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def extract_code(
    prompt_code: str | None,
    completion: str | bytes | list[dict[str, Any]] | None,
    entry_point: str | None,
    *,
    style: str = "auto",
) -> Extraction:
    """Build the program to test from a code prompt and a completion.

    Args:
        prompt_code: the HumanEval-style code prompt (imports, helpers, signature and docstring), or None.
        completion: a text completion, or a conversational one (``[{"role": "assistant", "content": ...}]``).
        entry_point: the function the tests call, or None (then any code block is taken as complete).
        style: ``"auto"`` (default) picks by the content as described above; ``"completion"`` forces prompt +
            continuation (fences included); ``"chat"`` forces block or bare-code extraction.

    Returns:
        An :class:`Extraction`; ``.ok`` is False, with a reason, for garbage.
    """
    if style not in ("auto", "completion", "chat"):
        raise ValueError(f"style must be 'auto', 'completion' or 'chat', got {style!r}")
    text = completion_text(completion)
    read_as = "completion" if isinstance(completion, str | bytes | None) else "chat"
    if text is None:
        return Extraction("", "empty", read_as)
    reason, text = _encoding_problem(text)
    if reason is not None:
        return Extraction("", reason, read_as)
    if not text.strip():
        return Extraction("", "empty", read_as)
    # Python reads a lone \r as a line break; normalise so that the cut sees the lines the interpreter sees.
    text = _universal_newlines(text)
    prompt = _universal_newlines(prompt_code or "")
    prompt_code = prompt if prompt_code is not None else None
    rules: tuple[str, ...] = ()
    if style != "chat":
        head = _before_closing_fence(text, prompt)
        if head is not None:
            text, rules = head, ("closing_fence",)
    if _FENCE in text and style != "completion" and not rules:
        found = _fenced_blocks(text)
        if found is None:
            return Extraction("", "unbalanced_fence", "chat", text)
        blocks, open_block = found
        block = _pick_block(blocks)
        if block is None:
            return Extraction("", "no_code", "chat", text)
        ex = _from_code(block, prompt_code, entry_point, "chat")
        if open_block and block is blocks[-1][1]:
            ex = replace(ex, rules=("open_fence", *ex.rules))
        return ex
    if style == "chat":
        if not _parses(text):
            return Extraction("", "no_code", "bare", text)
        return _from_code(text, prompt_code, entry_point, "bare")

    # No fences, text or chat alike. An indented first line continues the prompt's function body; a
    # column-0 start either rewrites the whole function (bare code, if it parses) or is prose. When the
    # prompt ends mid-line, the completion's first line is the rest of that line: always a continuation.
    if not prompt or prompt.endswith("\n"):
        first = _first_code_line(text)
        if first is None:  # only comments
            return Extraction("", "no_code", "completion", text)
        if not first[:1].isspace() and style == "auto":
            if _defines(text, entry_point) and _parses(text):
                return _from_code(text, prompt_code, entry_point, "bare")
            return Extraction("", "no_code", "completion", text)
    kept, cut = _cut_after_function(prompt, text)
    return Extraction(prompt + kept, "ok", "completion", kept, cut, rules)


def _before_closing_fence(text: str, prompt: str) -> str | None:
    """The completion up to its first line-start fence outside a string, when that fence closes a block the
    prompt never opened: the text before it continues the prompt's function (it is indented, or the prompt
    ends mid-line and the prompt with it parses). What follows is prose. None when the first fence opens a block
    (or there is none)."""
    if not prompt:
        return None
    for match in _LINE_FENCE_RE.finditer(text):
        head = text[: match.start()]
        if _ends_inside_string(prompt + head):  # a fence inside a docstring is text, not markdown
            continue
        if not head.strip():
            return None
        if prompt.endswith("\n"):
            first = _first_code_line(head)
            if first is None or not first[:1].isspace():
                return None
        elif not _parses(prompt + head):  # prose after a prompt without its final newline ends no line of it
            return None
        return head
    return None


def _ends_inside_string(code: str) -> bool:
    try:
        for _ in tokenize.generate_tokens(io.StringIO(code).readline):
            pass
    except tokenize.TokenError as e:
        return "string" in str(e.args[0] if e.args else "")
    except (IndentationError, SyntaxError):
        return False
    return False


def _entry_point_defs(
    ex: Extraction, entry_point: str | None
) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The top-level definitions of ``entry_point`` in ``ex``'s program (none when it does not parse)."""
    if not ex.ok or not entry_point:
        return []
    try:
        tree = ast.parse(ex.code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point
    ]


def _body_is_trivial(definition: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Nothing beyond a docstring, ``pass`` or ``...``: a stub."""
    body = list(definition.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return all(
        isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis)
        for s in body
    )


_CODE_START_RE = re.compile(r"^(?:from|import|def|async[ \t]+def|class|@)\b", re.MULTILINE)


def code_in_prompt(prompt: Any, entry_point: str | None) -> str | None:
    """The code a chat prompt shows for ``entry_point`` (a HumanEval prompt inside a user message): the last
    ```` ```python ```` (or untagged) block of the user messages that defines it, else, unfenced, the longest run
    of whole lines from the first one that starts an import, a definition or a decorator, that parses and
    defines it. None when there is none (or no entry point). A text prompt is returned as it is.

    This is the trusted code of a chat-style row without a ``code_prompt`` column: the tests then call the
    prompt's own helpers (HumanEval/32's ``poly``), and the completion's block runs after them."""
    if isinstance(prompt, str) or prompt is None:
        return prompt
    if not entry_point:
        return None
    messages = [prompt] if isinstance(prompt, dict) else prompt if isinstance(prompt, list | tuple) else []
    texts = []
    for m in messages:
        if isinstance(m, dict) and m.get("role", "user") == "user":
            content = completion_text([dict(m, role="assistant")])
            if isinstance(content, str):
                texts.append(content)
    return _code_in_texts(tuple(texts), entry_point)


@functools.lru_cache(maxsize=256)  # a batch repeats each prompt once per completion
def _code_in_texts(texts: tuple[str, ...], entry_point: str) -> str | None:
    """``code_in_prompt`` on the user messages' texts."""
    for text in reversed(texts):
        text = _universal_newlines(text)
        found = _fenced_blocks(text) if _FENCE in text else None
        blocks = [body for tag, body in (found[0] if found else []) if tag in _PY_TAGS or tag == ""]
        for body in reversed(blocks):
            code = body if _parses(body) else textwrap.dedent(body)  # dedent blanks docstrings' blank lines
            if _defines(code, entry_point) and _parses(code):
                return code
        start = _CODE_START_RE.search(text)
        if start is not None:
            code = _parseable_prefix(text[start.start() :])
            if code is not None and _defines(code, entry_point):
                return code
    return None


def has_implemented_function(ex: Extraction, entry_point: str | None) -> bool:
    """True when ``ex`` is one parseable program whose ``entry_point`` is defined once by the model and has a
    body beyond a docstring, ``pass`` or ``...``. Used by the format reward."""
    defs = _entry_point_defs(ex, entry_point)
    if not defs:
        return False
    own = re.findall(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", ex.snippet, re.M)
    if len(own) > 1:  # the model wrote the function twice: not "one function"
        return False
    return not _body_is_trivial(defs[-1])


def has_empty_body(ex: Extraction, entry_point: str | None) -> bool:
    """True when the program that would run defines ``entry_point`` (its last definition, the one the tests
    call) with nothing beyond a docstring, ``pass`` or ``...``: the answer is the prompt's stub. A health signal
    (a policy that learns to write no body), logged as ``<prefix>/no_body_frac``."""
    defs = _entry_point_defs(ex, entry_point)
    return bool(defs) and _body_is_trivial(defs[-1])


# ---- where generation may stop: the end of the code, by the rules above -----------------------------------------

# A column-0 character that is not whitespace, on a line after the first: what every cut point of the completion
# rule needs (a cheap test before the tokenizer runs).
_COLUMN_0_RE = re.compile(r"\n[^ \t\f\n]")

# The completion rule as stop strings, for an engine that stops on strings only (vLLM's ``stop``): a closing fence,
# or a newline followed by what can start a top-level statement. Wider than :func:`code_ended`: it also stops at a
# column-0 line inside a multi-line string (which the tokenizer-based cut skips) and does not wait for a code
# block in chat style; bigcode-evaluation-harness's HumanEval stop sequences are the same idea ("\nclass",
# "\ndef", "\nif", "\nprint", "\n```").
CODE_END_STOP_STRINGS: tuple[str, ...] = (
    "\n```",
    *(f"\n{c}" for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_@([{'\"0123456789"),
)


def _code_block_closed(text: str) -> bool:
    """True when ``text`` holds a whole fenced block that :func:`extract_code` would read (tagged Python, or an
    untagged block of whole lines): the first such block has been closed. Inline triple backticks in prose
    (```` ```x``` ````, no line break after the opening fence) do not count."""
    pieces = text.split(_FENCE)
    for i in range(1, len(pieces) - 1, 2):  # piece i is a block when a fence follows it
        tag, _, lines = _split_block(pieces[i])
        if tag in _PY_TAGS or (tag == "" and lines):
            return True
    return False


def code_ended(code_prompt: str | None, text: str, style: str = "completion") -> bool:
    """True when generation may stop after ``text``: what follows cannot change the code :func:`extract_code`
    reads from it.

    * ``"completion"`` style, when ``text`` continues the prompt's function (its first code line is indented, or the
      prompt ends mid-line): the completion cut has a cut point (a first top-level statement after the function,
      found by the tokenizer, so a column-0 line inside a multi-line string or a column-0 comment does not end
      it), or the ``closing_fence`` rule applies. Both read only what comes before that point, so
      ``extract_code(code_prompt, text)`` equals the extraction of any longer completion that starts with ``text``.
      A completion that does not continue the function (one that writes the whole function at column 0, or
      prose) is read as chat.
    * ``"chat"`` style: the first fenced block that extraction would read (tagged Python, or untagged) is closed;
      stopping there, extraction reads that block.

    Text ending in U+FFFD (a character whose bytes are not all generated yet) never ends. Torch-free: the
    generation adapters (``experiments.evaluation.evaluate.CodeEndStop``) call it on the text decoded so far.
    """
    if style not in ("completion", "chat"):
        raise ValueError(f"style must be 'completion' or 'chat', got {style!r}")
    if not text or text.endswith("\ufffd") or "\x00" in text:
        return False
    text = _universal_newlines(text)
    fenced = _FENCE in text
    if style == "completion":
        prompt = _universal_newlines(code_prompt or "")
        if not fenced and not _COLUMN_0_RE.search(text):
            return False
        continues = bool(prompt) and not prompt.endswith("\n")
        if not continues:
            first = _first_code_line(text)
            if first is None:
                return False
            continues = first[:1].isspace()
        if continues:
            if fenced and _before_closing_fence(text, prompt) is not None:
                return True
            return _cut_after_function(prompt, text)[1]
    return fenced and _code_block_closed(text)
