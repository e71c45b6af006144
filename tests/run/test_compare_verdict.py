"""The verdict `passk compare` leads its report with, when nothing passed: no "best" method, but the words that no
method (nor the starting model) solved a problem and that the budget is a smoke test (issue 53 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.evaluation.stats import EvalResult, ProblemResult, summarize
from experiments.report import build_report, render_markdown

N = 2
TASKS = [f"HumanEval/{i}" for i in range(30)]


def _eval(correct: list[int]) -> dict:
    problems = [
        ProblemResult(t, N, c, [1.0] * c + [0.0] * (N - c), c == N, "    pass\n", 0)
        for t, c in zip(TASKS, correct)
    ]
    passk, greedy, avg = summarize(problems, ks=(1, 2), seed=0)
    return EvalResult(passk, greedy, avg, len(problems), N, [1, 2], 1000, 10.0, 1.0, problems).to_dict()


def _runs(tmp_path: Path, before: list[int] | None, afters: dict[str, list[int]]) -> list[Path]:
    dirs = []
    for method, after in afters.items():
        path = tmp_path / method
        path.mkdir(parents=True)
        (path / "run.json").write_text(json.dumps({"method": method, "seed": 0, "model": "tiny"}))
        if before is not None:
            (path / "eval_before.json").write_text(json.dumps(_eval(before)))
        (path / "eval_after.json").write_text(json.dumps(_eval(after)))
        dirs.append(path)
    return dirs


def _verdict_lines(report: dict) -> list[str]:
    md = render_markdown(report)
    section = md.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- **")]


def test_when_nothing_passed_the_verdict_names_no_best_and_calls_the_budget_a_smoke_test(
    tmp_path: Path,
) -> None:
    zero = [0] * len(TASKS)
    report = build_report(_runs(tmp_path, zero, {m: zero for m in ("grpo", "ppo", "reinforce")}), tmp_path)
    assert report["verdict"] and all(v["none_solved"] and v["best"] is None for v in report["verdict"])
    lines = _verdict_lines(report)
    assert len(lines) == len(report["verdict"]) == 3
    for line in lines:
        assert "best" not in line and "grpo" not in line, line
        assert (
            "no problem solved by any of the 3 methods, nor by the starting model: nothing to rank. At this budget "
            "the comparison is a smoke test of the pipeline, not a result" in line
        ), line


def test_one_method_that_solved_nothing_and_no_starting_evaluation(tmp_path: Path) -> None:
    zero = [0] * len(TASKS)
    (line, *_) = _verdict_lines(build_report(_runs(tmp_path, None, {"grpo": zero}), tmp_path))
    assert "no problem solved by the method, (the starting model was not evaluated): nothing to rank." in line


def test_a_verdict_still_names_the_best_when_something_passed(tmp_path: Path) -> None:
    zero, some = [0] * len(TASKS), [2] * 10 + [0] * 20
    report = build_report(_runs(tmp_path, zero, {"grpo": some, "ppo": zero}), tmp_path)
    assert [v["best"] for v in report["verdict"]] == ["grpo"] * 3
    assert not any(v.get("none_solved") for v in report["verdict"])
    assert all("best **grpo**" in line for line in _verdict_lines(report))
    # The starting model solved some and the trained ones none: that is a result, not nothing.
    report = build_report(_runs(tmp_path / "lost", some, {"grpo": zero, "ppo": zero}), tmp_path / "lost")
    assert not any(v.get("none_solved") for v in report["verdict"])
