"""Writes the offline stdin/stdout test set: 24 small problems, 8 in each dataset format, with four solutions
each (correct, wrong, slow, crashing).

    python tests/data/make_stdio_problems.py     # rewrites the four JSONL files next to this script

* ``stdio_apps.jsonl``: APPS/TACO rows (``problem_id``, ``question``, ``input_output`` as a JSON string,
  ``solutions``, ``starter_code``); two of them call-based (``fn_name`` inside ``input_output``).
* ``stdio_code_contests.jsonl``: CodeContests rows (``name``, ``description``, ``public_tests``,
  ``private_tests``, ``generated_tests``).
* ``stdio_verification_info.jsonl``: open-r1/PrimeIntellect rows (``problem_id``, ``prompt``,
  ``verification_info`` as a JSON string); one of them with ``function_call`` cases.
* ``stdio_solutions.jsonl``: ``task_id`` (the problem's id), ``format``, ``kind`` (correct, wrong, slow,
  crash), ``completion`` (the program, as
  ``python -m sandbox`` reads it) and ``status``, the sandbox's expected
  status for it.

The expected outputs come from a reference function written here beside each problem (never from running a
solution), so a correct solution passing in the sandbox checks both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass
class Problem:
    id: str
    statement: str
    inputs: list  # stdin texts, or argument lists for call-based problems
    reference: Callable  # input text -> output text, or *args -> value
    correct: str
    wrong: str  # passes some cases, fails at least one
    fn_name: str | None = None


def ints(text: str) -> list[int]:
    return [int(t) for t in text.split()]


STDIO = [
    Problem(
        "sum_two",
        "Read two integers a and b on one line; print a + b.",
        ["1 2\n", "-5 5\n", "100 23\n", "0 0\n", "999999 1\n"],
        lambda s: f"{sum(ints(s))}\n",
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "a, b = map(int, input().split())\nprint(a + b if a >= 0 else a - b)\n",
    ),
    Problem(
        "max_of_list",
        "The first line holds n, the second n integers; print the largest.",
        ["3\n1 5 2\n", "1\n-7\n", "4\n-1 -2 -3 -4\n", "5\n9 9 1 0 3\n"],
        lambda s: f"{max(ints(s)[1:])}\n",
        "input()\nprint(max(map(int, input().split())))\n",
        "input()\nxs = list(map(int, input().split()))\nprint(max(xs) if xs[0] >= 0 else 0)\n",
    ),
    Problem(
        "reverse_line",
        "Print the input line reversed.",
        ["abc\n", "racecar\n", "hello world\n", "a\n"],
        lambda s: s.rstrip("\n")[::-1] + "\n",
        "print(input()[::-1])\n",
        "s = input()\nprint(s[::-1] if ' ' not in s else s)\n",
    ),
    Problem(
        "count_vowels",
        "Print how many of the characters of the line are vowels (aeiou, either case).",
        ["hello\n", "AEIOU\n", "rhythm\n", "Programming Language\n"],
        lambda s: f"{sum(c in 'aeiouAEIOU' for c in s)}\n",
        "print(sum(c in 'aeiouAEIOU' for c in input()))\n",
        "print(sum(c in 'aeiou' for c in input()))\n",
    ),
    Problem(
        "fibonacci",
        "Print F(n), with F(0) = 0 and F(1) = 1.",
        ["0\n", "1\n", "10\n", "50\n", "90\n"],
        lambda s: f"{_fib(int(s))}\n",
        "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n",
        "n = int(input())\na, b = 1, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n",
    ),
    Problem(
        "is_prime",
        "Print YES if n is prime, else NO.",
        ["2\n", "1\n", "97\n", "100\n", "7919\n"],
        lambda s: "YES\n" if _prime(int(s)) else "NO\n",
        "n = int(input())\nprint('YES' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'NO')\n",
        "n = int(input())\nprint('YES' if all(n % d for d in range(2, n)) else 'NO')\n",
    ),
    Problem(
        "gcd",
        "Print the greatest common divisor of a and b.",
        ["12 18\n", "7 13\n", "100 10\n", "0 5\n"],
        lambda s: f"{__import__('math').gcd(*ints(s))}\n",
        "import math\nprint(math.gcd(*map(int, input().split())))\n",
        "a, b = map(int, input().split())\nprint(min(a, b))\n",
    ),
    Problem(
        "sort_numbers",
        "The first line holds n, the second n integers; print them in ascending order.",
        ["3\n3 1 2\n", "1\n5\n", "5\n5 -1 3 3 0\n", "4\n10 9 8 7\n"],
        lambda s: " ".join(map(str, sorted(ints(s)[1:]))) + "\n",
        "input()\nprint(*sorted(map(int, input().split())))\n",
        "input()\nprint(*sorted(map(int, input().split()))[:3])\n",
    ),
    Problem(
        "palindrome",
        "Print YES if the line reads the same backwards, else NO.",
        ["abba\n", "abc\n", "x\n", "Abba\n"],
        lambda s: "YES\n" if s.rstrip("\n") == s.rstrip("\n")[::-1] else "NO\n",
        "s = input()\nprint('YES' if s == s[::-1] else 'NO')\n",
        "s = input().lower()\nprint('YES' if s == s[::-1] else 'NO')\n",
    ),
    Problem(
        "factorial_mod",
        "Print n! modulo 1000000007.",
        ["0\n", "5\n", "20\n", "1000\n"],
        lambda s: f"{_fact_mod(int(s))}\n",
        "n = int(input())\nr = 1\nfor i in range(2, n + 1):\n    r = r * i % 1000000007\nprint(r)\n",
        "n = int(input())\nr = 1\nfor i in range(2, n + 1):\n    r = r * i\nprint(r)\n",
    ),
    Problem(
        "digit_sum",
        "Print the sum of the decimal digits of n (n >= 0).",
        ["123\n", "0\n", "99999\n", "1000000\n"],  # the example (public) fails the wrong program
        lambda s: f"{sum(map(int, s.strip()))}\n",
        "print(sum(map(int, input().strip())))\n",
        "print(sum(map(int, input().strip()[1:])))\n",
    ),
    Problem(
        "min_max",
        "The first line holds n, the second n integers; print the smallest and the largest.",
        ["3\n3 1 2\n", "1\n4\n", "4\n-3 8 0 8\n", "2\n5 -5\n"],
        lambda s: f"{min(ints(s)[1:])} {max(ints(s)[1:])}\n",
        "input()\nxs = list(map(int, input().split()))\nprint(min(xs), max(xs))\n",
        "input()\nxs = list(map(int, input().split()))\nprint(xs[0], max(xs))\n",
    ),
    Problem(
        "squares",
        "Print the squares of 1..n, one per line.",
        ["1\n", "3\n", "5\n", "10\n"],
        lambda s: "".join(f"{i * i}\n" for i in range(1, int(s) + 1)),
        "for i in range(1, int(input()) + 1):\n    print(i * i)\n",
        "for i in range(1, min(int(input()), 5) + 1):\n    print(i * i)\n",
    ),
    Problem(
        "average",
        "The first line holds n, the second n integers; print their mean with 6 decimals.",
        ["3\n1 2 4\n", "1\n5\n", "2\n1 2\n", "3\n-1 0 0\n"],
        lambda s: f"{sum(ints(s)[1:]) / ints(s)[0]:.6f}\n",
        "n = int(input())\nprint(f'{sum(map(int, input().split())) / n:.6f}')\n",
        "n = int(input())\nprint(f'{sum(map(int, input().split())) // n:.6f}')\n",
    ),
    Problem(
        "second_largest",
        "The first line holds n, the second n integers with at least two distinct values; "
        "print the second largest distinct value.",
        ["3\n1 2 3\n", "4\n5 5 4 1\n", "2\n-1 -2\n", "5\n7 7 7 3 3\n"],
        lambda s: f"{sorted(set(ints(s)[1:]))[-2]}\n",
        "input()\nprint(sorted(set(map(int, input().split())))[-2])\n",
        "input()\nprint(sorted(map(int, input().split()))[-2])\n",
    ),
    Problem(
        "binary",
        "Print n (n >= 0) in binary, without leading zeros.",
        ["0\n", "5\n", "255\n", "1024\n"],
        lambda s: f"{int(s):b}\n",
        "print(format(int(input()), 'b'))\n",
        "n = int(input())\nprint(format(n, 'b') if n else '')\n",
    ),
    Problem(
        "count_distinct",
        "The first line holds n, the second n integers; print how many distinct values there are.",
        ["3\n1 1 1\n", "4\n1 2 3 4\n", "5\n1 2 1 2 3\n", "1\n0\n"],
        lambda s: f"{len(set(ints(s)[1:]))}\n",
        "input()\nprint(len(set(input().split())))\n",
        "input()\nxs = input().split()\nprint(len(xs) - (xs[0] == xs[-1] and len(xs) > 1))\n",
    ),
    Problem(
        "running_sums",
        "The first line holds n, the second n integers; print the running sums, one per line.",
        ["3\n1 2 3\n", "1\n7\n", "4\n-1 1 -1 1\n", "2\n0 0\n"],
        lambda s: "".join(f"{sum(ints(s)[1 : i + 1])}\n" for i in range(1, ints(s)[0] + 1)),
        "input()\nt = 0\nfor x in map(int, input().split()):\n    t += x\n    print(t)\n",
        "input()\nt = 0\nfor x in map(int, input().split()):\n    print(t)\n    t += x\n",
    ),
    Problem(
        "leap_year",
        "Print YES if the year is a leap year in the Gregorian calendar, else NO.",
        ["2000\n", "1900\n", "2024\n", "2023\n"],
        lambda s: "YES\n" if (int(s) % 4 == 0 and int(s) % 100 != 0) or int(s) % 400 == 0 else "NO\n",
        "y = int(input())\nprint('YES' if y % 4 == 0 and y % 100 != 0 or y % 400 == 0 else 'NO')\n",
        "y = int(input())\nprint('YES' if y % 4 == 0 else 'NO')\n",
    ),
    Problem(
        "word_count",
        "Print the number of whitespace-separated words on the line.",
        ["one\n", "two words\n", "  spaced   out  words \n", "a b c d e\n"],
        lambda s: f"{len(s.split())}\n",
        "print(len(input().split()))\n",
        "print(input().count(' ') + 1)\n",
    ),
    Problem(
        "upper",
        "Print the line in upper case.",
        ["abc\n", "Hello, World\n", "123\n", "mIxEd\n"],
        lambda s: s.upper(),
        "print(input().upper())\n",
        "s = input()\nprint(s[0].upper() + s[1:])\n",
    ),
]

CALLS = [
    Problem(
        "add",
        "Write a function add(a, b) that returns a + b.",
        [[1, 2], [-1, 1], [10, 20], [0, 0]],
        lambda a, b: a + b,
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a - b if a > 5 else a + b\n",
        fn_name="add",
    ),
    Problem(
        "reverse_list",
        "Write a function reverse_list(xs) that returns the list reversed.",
        [[[1, 2, 3]], [[]], [[5]], [[1, 1, 2]]],
        lambda xs: xs[::-1],
        "class Solution:\n    def reverse_list(self, xs):\n        return xs[::-1]\n",
        "def reverse_list(xs):\n    return xs[:]\n",
        fn_name="reverse_list",
    ),
    Problem(
        "count_char",
        "Write a function count_char(s, c) that returns how often c occurs in s.",
        [["hello", "l"], ["", "a"], ["aaa", "a"], ["abc", "d"]],
        lambda s, c: s.count(c),
        "def count_char(s, c):\n    return s.count(c)\n",
        "def count_char(s, c):\n    return s.count(c) or 1\n",
        fn_name="count_char",
    ),
]


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _fact_mod(n: int) -> int:
    r = 1
    for i in range(2, n + 1):
        r = r * i % 1000000007
    return r


def slow(p: Problem) -> str:
    """Correct, but never within a time limit: a busy loop before the answer."""
    return "while True:\n    pass\n" + p.correct


def crash(p: Problem) -> str:
    """Reads its input, then fails with an exception (a call-based one when called)."""
    if p.fn_name:
        return f"def {p.fn_name}(*args):\n    return args[7]\n"
    return "import sys\ndata = sys.stdin.read().split()\nprint(int(data[0]) // 0 if data else data[1])\n"


def outputs(p: Problem) -> list:
    return [p.reference(*x) if p.fn_name else p.reference(x) for x in p.inputs]


def apps_row(p: Problem, n: int) -> dict:
    io = {"inputs": p.inputs, "outputs": outputs(p)}
    if p.fn_name:
        io["fn_name"] = p.fn_name
    return {
        "problem_id": f"apps/{n}",
        "question": p.statement,
        "input_output": json.dumps(io),
        "solutions": json.dumps([p.correct]),
        "starter_code": "",
        "difficulty": "introductory",
    }


def code_contests_row(p: Problem, n: int) -> dict:
    pairs = list(zip(p.inputs, outputs(p)))
    split = {"public_tests": pairs[:1], "private_tests": pairs[1:3], "generated_tests": pairs[3:]}
    row = {"name": f"code_contests/{n}", "description": p.statement}
    for column, some in split.items():
        row[column] = {"input": [i for i, _ in some], "output": [o for _, o in some]}
    return row


def verification_row(p: Problem, n: int) -> dict:
    if p.fn_name:
        cases = [
            {
                "type": "function_call",
                "fn_name": p.fn_name,
                "input": json.dumps(args),
                "output": json.dumps(want),
            }
            for args, want in zip(p.inputs, outputs(p))
        ]
    else:
        cases = [{"type": "stdin_stdout", "input": i, "output": o} for i, o in zip(p.inputs, outputs(p))]
    return {
        "problem_id": f"verification_info/{n}",
        "prompt": p.statement,
        "verification_info": json.dumps({"language": "python", "test_cases": cases}),
    }


def main() -> None:
    plan = {
        "apps": (STDIO[0:6] + CALLS[0:2], apps_row),
        "code_contests": (STDIO[6:14], code_contests_row),
        "verification_info": (STDIO[14:21] + CALLS[2:3], verification_row),
    }
    solutions = []
    for fmt, (problems, make_row) in plan.items():
        rows = [make_row(p, n) for n, p in enumerate(problems)]
        with open(HERE / f"stdio_{fmt}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        for p, row in zip(problems, rows):
            task_id = row.get("problem_id") or row["name"]
            for kind, code, status in (
                ("correct", p.correct, "passed"),
                ("wrong", p.wrong, "failed"),
                ("slow", slow(p), "timeout"),
                ("crash", crash(p), "runtime_error"),
            ):
                solutions.append(
                    {"task_id": task_id, "format": fmt, "kind": kind, "completion": code, "status": status}
                )
    with open(HERE / "stdio_solutions.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in solutions)
    print(f"wrote {sum(len(p) for p, _ in plan.values())} problems and {len(solutions)} solutions to {HERE}")


if __name__ == "__main__":
    main()
