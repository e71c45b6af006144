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
  ```` ``` ````), ``nul_byte``, ``bad_encoding`` (bytes that are not UTF-8, lone surrogates, or U+FFFD left by a
  lossy byte decode) and ``no_signature`` (a block without the function and no code prompt to complete).

Nothing here executes code; syntax errors of an extracted program are the sandbox's verdict.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXTRACT_FAILURE_REASONS",
    "Extraction",
    "completion_text",
    "extract_code",
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

_FENCE = "```"
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
    """

    code: str
    reason: str
    style: str
    snippet: str = ""
    cut: bool = False

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


def _fenced_blocks(text: str) -> list[tuple[str, str]] | None:
    """``[(tag, body), ...]`` for each fenced block, or None when the fences do not pair up."""
    pieces = text.split(_FENCE)
    if len(pieces) % 2 == 0:  # an odd number of fences
        return None
    blocks = []
    for raw in pieces[1::2]:
        first, nl, rest = raw.partition("\n")
        tag = first.strip()
        if nl and _TAG_RE.fullmatch(tag):
            blocks.append((tag.lower(), rest))
        else:  # no info string: the opening line is already code (or the block is one line)
            blocks.append(("", raw))
    return blocks


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


def _from_code(code: str, code_prompt: str | None, entry_point: str | None, style: str) -> Extraction:
    """A code block (or bare code): run it after the prompt, or complete the prompt's function with it."""
    if not code.strip():
        return Extraction("", "no_code", style, code)
    first = _first_code_line(code)
    indented = first is not None and first[:1].isspace()
    if indented:
        # Either a function body, or a whole block nested in a markdown list. (textwrap.dedent would also
        # blank whitespace-only lines, so it only runs when there is a margin to remove.)
        code = textwrap.dedent(code)
    if _defines(code, entry_point):
        return Extraction(_join(code_prompt or "", code), "ok", style, code)
    if not code_prompt:
        return Extraction("", "no_signature", style, code)
    if not indented and not re.search(r"^return\b", code, flags=re.MULTILINE):
        # Top-level code that does not define the function: run it after the prompt as written.
        return Extraction(_join(code_prompt, code), "ok", style, code)
    # A function body (indented, or flush-left with a `return`): indent it as the prompt's body.
    prompt = code_prompt if code_prompt.endswith("\n") else code_prompt + "\n"
    body = textwrap.indent(code, _body_indent(prompt))
    kept, cut = _cut_after_function(prompt, body)
    return Extraction(prompt + kept, "ok", style, body, cut)


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
    fenced = _FENCE in text
    if fenced and style != "completion":
        blocks = _fenced_blocks(text)
        if blocks is None:
            return Extraction("", "unbalanced_fence", "chat", text)
        block = _pick_block(blocks)
        if block is None:
            return Extraction("", "no_code", "chat", text)
        return _from_code(block, prompt_code, entry_point, "chat")
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
    return Extraction(prompt + kept, "ok", "completion", kept, cut)


def has_implemented_function(ex: Extraction, entry_point: str | None) -> bool:
    """True when ``ex`` is one parseable program whose ``entry_point`` is defined once by the model and has a
    body beyond a docstring, ``pass`` or ``...``. Used by the format reward."""
    if not ex.ok or not entry_point:
        return False
    try:
        tree = ast.parse(ex.code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    defs = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point
    ]
    if not defs:
        return False
    own = re.findall(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", ex.snippet, re.M)
    if len(own) > 1:  # the model wrote the function twice: not "one function"
        return False
    body = list(defs[-1].body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    trivial = all(
        isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis)
        for s in body
    )
    return bool(body) and not trivial
