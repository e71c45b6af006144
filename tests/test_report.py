"""write_report on synthetic run directories: numbers, skipped metrics, determinism, console table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments.evaluation import EvalResult, ProblemResult, summarize
from experiments.report import build_report, console_table, write_report

N = 5
TASKS = [f"HumanEval/{i}" for i in range(30)]


def _eval(correct: list[int], greedy: list[bool], seed: int = 0) -> dict:
    problems = [
        ProblemResult(t, N, c, [1.0] * c + [0.0] * (N - c), g, "    return x\n", 0)
        for t, c, g in zip(TASKS, correct, greedy)
    ]
    passk, g, avg = summarize(problems, ks=(1, 5), seed=seed)
    res = EvalResult(passk, g, avg, len(problems), N, [1, 5], 1000, 10.0, 1.0, problems)
    return res.to_dict()


def _log_history(steps: int, rng: np.random.Generator, *, kl: bool, slope: float) -> list[dict]:
    hist = []
    for s in range(1, steps + 1):
        e = {
            "step": s,
            "loss": 0.0,
            "reward": float(0.3 + slope * s / steps + rng.normal(0, 0.05)),
            "entropy": float(0.5 - 0.2 * s / steps),
            "completions/mean_length": float(40 + rng.normal(0, 3)),
            "frac_reward_zero_std": float(0.4 - 0.1 * s / steps),
        }
        if kl:
            e["kl"] = float(0.01 * s)
        hist.append(e)
        if s % 10 == 0:
            hist.append({"step": s, "eval/pass@1": 0.4 + slope * s / steps, "eval/avg_reward": 0.4})
    hist.append({"step": steps, "train_runtime": 12.5, "train_loss": 0.0})
    return hist


def _write_run(
    path: Path,
    method: str,
    seed: int,
    before: dict | None,
    after: dict | None,
    log_history: list[dict] | None,
    wall: float = 100.0,
) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(
        json.dumps(
            {"method": method, "seed": seed, "wall_time_s": wall, "tokens_per_s": 250.0, "model": "tiny"}
        )
    )
    if before is not None:
        (path / "eval_before.json").write_text(json.dumps(before))
    if after is not None:
        (path / "eval_after.json").write_text(json.dumps(after))
    if log_history is not None:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": 40, "log_history": log_history}))
    return path


# The seed's baseline shape: 65 of 150 samples pass (pass@1 43.3%), 19 of 30 problems at least once (pass@5 63.3%).
BEFORE_C = [5] * 11 + [2] * 2 + [1] * 6 + [0] * 11
BEFORE_G = [True] * 13 + [False] * 17
AFTER_C = [5] * 16 + [2] * 6 + [0] * 8
AFTER_G = [True] * 17 + [False] * 13


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    before = _eval(BEFORE_C, BEFORE_G)
    return [
        _write_run(
            tmp_path / "runs" / "grpo",
            "grpo",
            0,
            before,
            _eval(AFTER_C, AFTER_G),
            _log_history(40, rng, kl=True, slope=0.3),
            wall=120.0,
        ),
        _write_run(
            tmp_path / "runs" / "vanilla_pg",
            "vanilla_pg",
            0,
            before,
            _eval(BEFORE_C, BEFORE_G),
            _log_history(40, rng, kl=False, slope=0.05),
            wall=80.0,
        ),
    ]


def test_report_numbers_match_the_evals(runs: list[Path], tmp_path: Path) -> None:
    md = write_report(runs, tmp_path / "out", title="Synthetic")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    grpo, pg = report["methods"]
    assert grpo["method"] == "grpo" and pg["method"] == "vanilla_pg"
    assert grpo["before"]["pass@1"]["value"] == pytest.approx(65 / 150)
    assert grpo["before"]["pass@5"]["value"] == pytest.approx(19 / 30)
    assert grpo["before"]["avg_reward"]["value"] == pytest.approx(65 / 150)
    assert grpo["after"]["pass@1"]["value"] == pytest.approx((16 * 5 + 12) / 150)
    assert grpo["after"]["pass@5"]["value"] == pytest.approx(22 / 30)
    assert grpo["after"]["greedy_pass@1"]["value"] == pytest.approx(17 / 30)
    assert grpo["delta"]["pass@5"] == pytest.approx(3 / 30)
    assert pg["delta"]["pass@1"] == pytest.approx(0.0)
    assert pg["delta_ci"]["pass@1"] == [0.0, 0.0]  # paired: identical evals leave no spread
    # Paired pass@5 differences are 0 except +1 on problems 19-21: the CI excludes negative changes.
    lo, hi = grpo["delta_ci"]["pass@5"]
    assert 0.0 <= lo <= 0.1 <= hi
    # The eval curve starts with the starting model's score at step 0.
    curve = report["curves"]["eval_pass_at_1"]["series"][0]
    assert curve["steps"][:2] == [0.0, 10.0] and curve["values"][0] == pytest.approx(65 / 150)
    for name in ("pass@1", "pass@5", "avg_reward", "greedy_pass@1"):
        est = grpo["after"][name]
        assert est["ci"][0] <= est["value"] <= est["ci"][1]
    assert (grpo["n"], grpo["k"], grpo["num_problems"], grpo["seeds"]) == (5, 5, 30, [0])
    assert grpo["wall_time_s"] == 120.0 and grpo["train_tokens_per_s"] == 250.0
    assert grpo["eval_tokens_per_s"] == pytest.approx(100.0)

    text = md.read_text()
    assert "| grpo | Pass@1 | 43.3% [" in text
    assert "| Pass@5 | 63.3% [" in text and "73.3% [" in text and "+10.0 pp [" in text
    for png in ("pass_at_k", "reward", "kl", "entropy", "completion_length", "frac_reward_zero_std"):
        assert (tmp_path / "out" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"({png}.png)" in text


def test_missing_metric_is_skipped_and_named(runs: list[Path], tmp_path: Path) -> None:
    write_report(runs, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert any("kl" in s and "vanilla_pg" in s for s in report["skipped"])
    kl_methods = {s["method"] for s in report["curves"]["kl"]["series"]}
    assert kl_methods == {"grpo"}
    assert "## Skipped" in (tmp_path / "out" / "report.md").read_text()


def test_missing_files_do_not_crash(tmp_path: Path) -> None:
    only_after = _write_run(tmp_path / "r1", "reinforce", 1, None, _eval(AFTER_C, AFTER_G), None)
    bare = tmp_path / "r2"
    bare.mkdir()
    md = write_report([only_after, bare], tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    skipped = "\n".join(report["skipped"])
    assert "eval_before.json missing" in skipped and "trainer_state.json missing" in skipped
    assert "run.json missing" in skipped
    reinforce = report["methods"][0]
    assert reinforce["before"] == {} and reinforce["after"]["pass@1"]["value"] == pytest.approx(92 / 150)
    assert report["methods"][1]["method"] == "r2"  # directory name stands in for the method
    assert report["curves"] == {}
    assert "—" in md.read_text()


def test_report_is_byte_identical_across_calls(runs: list[Path], tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_report(runs, a)
    write_report(runs, b)
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert "report.md" in files and "report.json" in files and len(files) >= 8
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_seeds_of_one_method_are_pooled_over_problems(tmp_path: Path) -> None:
    # Seed 0 solves problems 0-14 every time, seed 1 solves 15-29: pooled pass@1 is 0.5 on every problem.
    c0 = [5] * 15 + [0] * 15
    c1 = [0] * 15 + [5] * 15
    g = [False] * 30
    dirs = [
        _write_run(tmp_path / "s0", "rloo", 0, _eval(c0, g), _eval(c0, g), None),
        _write_run(tmp_path / "s1", "rloo", 1, _eval(c1, g), _eval(c1, g), None),
    ]
    report = build_report(dirs, tmp_path)
    (rloo,) = report["methods"]
    assert rloo["seeds"] == [0, 1]
    est = rloo["after"]["pass@1"]
    assert est["value"] == pytest.approx(0.5) and est["n_seeds"] == 2
    assert est["ci"] == [0.5, 0.5]  # every problem's pooled estimate is 0.5: no spread left to resample


def test_console_table(runs: list[Path]) -> None:
    table = console_table(runs)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["method", "seeds"]
    assert lines[2].startswith("grpo") and "43.3% -> 61.3%" in lines[2] and "(k=5) 63.3% -> 73.3%" in lines[2]
    assert lines[3].startswith("vanilla_pg")
    assert not any(math.isnan(float(x.rstrip("%"))) for x in lines[2].split() if x.endswith("%"))
