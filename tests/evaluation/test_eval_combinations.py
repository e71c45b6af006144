"""Each evaluation metric under every option combination the CLI allows, on fabricated results (no generation).

Greedy on and off, one and several seeds, eval_ks subsets (duplicates, k above n), n not a power of 2, problems
of different n, entropy measured or not: `experiments.evaluation.stats` against brute-force enumeration and sums written
out by hand.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from experiments.evaluation.stats import (
    Estimate,
    EvalResult,
    ProblemResult,
    bootstrap_ci,
    bootstrap_p_value,
    coverage_ks,
    hierarchical_bootstrap,
    holm,
    paired_interval,
    pass_at_k,
    percentile_interval,
    summarize,
)


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 3, 5, 6, 7])
def test_pass_at_k_is_the_share_of_subsets_with_a_pass(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n, c, k", [(3, -1, 1), (3, 4, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_refuses_counts_outside_their_range(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    "n, ks",
    [(1, [1]), (2, [1, 2]), (5, [1, 2, 4, 5]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (9, [1, 2, 4, 8, 9])],
)
def test_coverage_ks_for_n_a_power_of_two_or_not(n: int, ks: list[int]) -> None:
    assert coverage_ks(n) == ks


def _problem(
    task: str, rewards: list[float], greedy: bool | None, entropy: float | None = None
) -> ProblemResult:
    return ProblemResult(task, len(rewards), sum(r >= 1.0 for r in rewards), rewards, greedy, "", 0, entropy)


# n = 6 (not a power of 2): 0, 2 and 6 correct, partial rewards below 1 counting as failures.
REWARDS = [[0.0, 0.5, 0.0, 0.0, 0.25, 0.0], [1.0, 0.0, 0.0, 1.0, 0.5, 0.0], [1.0] * 6]


@pytest.mark.parametrize("greedy", [None, [True, False, True]])
@pytest.mark.parametrize("ks", [[1], [4, 1, 4], [1, 2, 6], [6, 7], [3, 5]])
def test_summarize_each_k_greedy_on_and_off(greedy, ks: list[int]) -> None:
    problems = [_problem(f"t{i}", r, None if greedy is None else greedy[i]) for i, r in enumerate(REWARDS)]
    passk, greedy_est, avg = summarize(problems, ks, n_bootstrap=200, seed=1)
    want_ks = sorted({k for k in ks if k <= 6})
    assert list(passk) == [f"pass@{k}" for k in want_ks]
    for k in want_ks:
        per_problem = [_brute_pass_at_k(6, c, k) for c in (0, 2, 6)]
        assert passk[f"pass@{k}"].value == pytest.approx(sum(per_problem) / 3)
        est = passk[f"pass@{k}"]
        assert est.ci_low <= est.value <= est.ci_high
    if greedy is None:
        assert greedy_est is None
    else:
        assert greedy_est.value == pytest.approx(2 / 3)
    assert avg.value == pytest.approx((0.75 / 6 + 2.5 / 6 + 1.0) / 3)


def test_summarize_with_problems_of_different_n_keeps_k_up_to_the_smallest() -> None:
    problems = [_problem("a", [1.0, 0.0, 0.0], True), _problem("b", [0.0] * 5 + [1.0], None)]
    passk, greedy, avg = summarize(problems, [1, 3, 5], n_bootstrap=50)
    assert list(passk) == ["pass@1", "pass@3"]
    assert passk["pass@3"].value == pytest.approx((1.0 + 0.5) / 2)  # pass@3 of 1 in 6: 1 - C(5,3)/C(6,3)
    assert greedy is None  # one problem was scored without a greedy completion
    assert avg.value == pytest.approx((1 / 3 + 1 / 6) / 2)


def test_summarize_of_no_problems() -> None:
    passk, greedy, avg = summarize([], [1, 5])
    assert passk == {} and greedy is None and math.isnan(avg.value)


def _result(problems: list[ProblemResult], ks: list[int], seed: int = 0) -> EvalResult:
    passk, greedy, avg = summarize(problems, ks, n_bootstrap=100, seed=seed)
    return EvalResult(
        passk,
        greedy,
        avg,
        len(problems),
        problems[0].n,
        sorted(set(ks)),
        120,
        2.0,
        1.0,
        problems,
        settings={"seed": seed},
        n_bootstrap=100,
    )


@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("entropy", [False, True])
def test_eval_result_metrics_and_json_for_each_option(greedy: bool, entropy: bool) -> None:
    problems = [
        _problem(f"t{i}", r, (i != 1) if greedy else None, (0.5 * i if entropy else None))
        for i, r in enumerate(REWARDS)
    ]
    result = _result(problems, [1, 2])
    names = ["pass@1", "pass@2", "first_sample_pass@1"] + (["greedy_pass@1"] if greedy else [])
    names += ["avg_reward"] + (["entropy"] if entropy else [])
    assert list(result.metrics) == names
    # The seed's pass@1: the first sample of each problem (0.0, 1.0, 1.0).
    assert result.metrics["first_sample_pass@1"].value == pytest.approx(2 / 3)
    if entropy:
        assert result.metrics["entropy"].value == pytest.approx(0.5)
    data = result.to_dict()
    assert list(data["metrics"]) == names
    assert data["n"] == 6 and data["ks"] == [1, 2] and data["num_problems"] == 3
    assert data["timing"]["tokens_per_s"] == pytest.approx(60.0)
    assert [p["first_sample_passed"] for p in data["problems"]] == [False, True, True]
    assert [p["correct"] for p in data["problems"]] == [0, 2, 6]
    assert result.scalars() == {f"eval/{k}": v["value"] for k, v in data["metrics"].items()}


def test_an_entropy_missing_for_one_problem_is_left_out() -> None:
    problems = [_problem("a", [1.0, 0.0, 1.0], None, 0.3), _problem("b", [0.0, 0.0, 1.0], None, None)]
    assert "entropy" not in _result(problems, [1]).metrics


# ---- bootstrap intervals -------------------------------------------------------------------------------------
def test_bootstrap_ci_resamples_problems_with_the_given_seed() -> None:
    values = [0.0, 1.0, 0.5, 0.25, 1.0]
    rng = np.random.default_rng(3)
    means = np.asarray(values)[rng.integers(0, 5, size=(400, 5))].mean(axis=1)
    lo, hi = np.quantile(means, [0.05, 0.95])
    assert bootstrap_ci(values, n_bootstrap=400, confidence=0.9, seed=3) == pytest.approx((lo, hi))
    assert bootstrap_ci([0.5] * 4) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    est = Estimate.from_values(values, n_bootstrap=400, confidence=0.9, seed=3)
    assert est.value == pytest.approx(0.55) and (est.ci_low, est.ci_high) == pytest.approx((lo, hi))


def test_hierarchical_bootstrap_with_one_seed_is_the_paired_problem_bootstrap() -> None:
    a = np.array([[0.0, 1.0, 0.5, 1.0]])
    b = np.array([[1.0, 1.0, 0.0, 0.5]])
    reps = hierarchical_bootstrap([a, b], n_bootstrap=300, seed=5)
    problems = np.random.default_rng(5).integers(0, 4, size=(300, 4))
    assert reps.shape == (300, 2)
    assert np.allclose(reps[:, 0], a[0, problems].mean(axis=1))
    assert np.allclose(reps[:, 1], b[0, problems].mean(axis=1))  # the same problems for both: paired


def test_hierarchical_bootstrap_with_several_seeds_resamples_them() -> None:
    row = np.array([0.0, 1.0, 0.5, 1.0, 0.25])
    one = hierarchical_bootstrap([row[None, :]], n_bootstrap=200, seed=2)
    same = hierarchical_bootstrap([np.stack([row, row, row])], n_bootstrap=200, seed=2)
    assert np.allclose(one, same)  # identical seeds: resampling them changes nothing
    # Two seeds a constant apart: each replicate is the problems' mean plus the mean of the resampled offsets.
    pair = hierarchical_bootstrap([np.stack([row, row + 1.0])], n_bootstrap=200, seed=2)
    rng = np.random.default_rng(2)
    problems = rng.integers(0, 5, size=(200, 5))
    seeds = rng.integers(0, 2, size=(200, 2))
    assert np.allclose(pair[:, 0], row[problems].mean(axis=1) + seeds.mean(axis=1))
    with pytest.raises(ValueError):
        hierarchical_bootstrap([np.ones((2, 3)), np.ones((2, 4))])


def test_paired_interval_p_value_and_holm() -> None:
    after = np.array([[1.0, 1.0, 0.5], [1.0, 0.5, 0.5]])
    before = np.array([[0.0, 1.0, 0.5], [0.5, 0.5, 0.0]])
    lo, hi = paired_interval(after, before, n_bootstrap=500, seed=0, confidence=0.9)
    reps = hierarchical_bootstrap([after - before], n_bootstrap=500, seed=0)[:, 0]
    assert [lo, hi] == pytest.approx(percentile_interval(reps, 0.9))
    assert 0 <= lo <= hi
    assert bootstrap_p_value([1.0, 2.0, 3.0]) == pytest.approx(2 * 1 / 4)
    assert bootstrap_p_value([-1.0, 0.0, 1.0, 2.0]) == pytest.approx(min(1.0, 2 * 3 / 5))
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.4]) == pytest.approx([0.8, 0.8])


# ---- the report over eval JSONs: rows or not, one seed or several, greedy or not --------------------------------
def _eval_json(correct: list[int], n: int, ks: list[int], greedy: bool, rows: bool) -> dict:
    problems = [
        _problem(f"t{i}", [1.0] * c + [0.0] * (n - c), (c > 1) if greedy else None)
        for i, c in enumerate(correct)
    ]
    data = _result(problems, ks).to_dict()
    if not rows:
        data.pop("problems")
    return data


BEFORE = [0, 1, 3]
AFTER = {0: [1, 2, 3], 1: [0, 3, 3]}


@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("seeds", [[0], [0, 1]])
@pytest.mark.parametrize("greedy", [False, True])
def test_report_metrics_for_each_combination(tmp_path, rows: bool, seeds: list[int], greedy: bool) -> None:
    import json

    from experiments.report import build_report

    n, ks = 3, [1, 3]
    dirs = []
    for s in seeds:
        run = tmp_path / f"run{s}"
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"method": "grpo", "seed": s}))
        (run / "eval_before.json").write_text(json.dumps(_eval_json(BEFORE, n, ks, greedy, rows)))
        (run / "eval_after.json").write_text(json.dumps(_eval_json(AFTER[s], n, ks, greedy, rows)))
        dirs.append(run)
    report = build_report(dirs, tmp_path)
    assert report["headline_k"] == 3
    (method,) = report["methods"]
    assert (method["k"], method["n"], method["num_problems"]) == (3, 3, 3)

    def per_seed(correct: list[int]) -> dict[str, float]:
        out = {
            "pass@1": sum(correct) / 9,
            "pass@3": sum(c > 0 for c in correct) / 3,
            "first_sample_pass@1": sum(c > 0 for c in correct) / 3,
            "avg_reward": sum(correct) / 9,
        }
        if greedy:
            out["greedy_pass@1"] = sum(c > 1 for c in correct) / 3
        return out

    want_after = [per_seed(AFTER[s]) for s in seeds]
    want_before = per_seed(BEFORE)
    assert sorted(method["after"]) == sorted(want_after[0])
    for name in want_after[0]:
        est = method["after"][name]
        values = [w[name] for w in want_after]
        assert est["value"] == pytest.approx(sum(values) / len(values), abs=1e-6), name
        assert [p["value"] for p in est["per_seed"]] == pytest.approx(values, abs=1e-6)
        assert est["n_seeds"] == len(seeds)
        if len(seeds) > 1:
            assert est["seed_sd"] == pytest.approx(float(np.std(values, ddof=1)), abs=1e-6)
            assert est["seed_range"] == pytest.approx([min(values), max(values)], abs=1e-6)
        else:
            assert "seed_sd" not in est
        if rows or len(seeds) == 1:
            assert est["ci"][0] <= est["value"] + 1e-9 and est["value"] <= est["ci"][1] + 1e-9
        else:
            assert est["ci"] is None  # several seeds without per-problem rows: no interval to pool
        assert method["before"][name]["value"] == pytest.approx(want_before[name], abs=1e-6)
        assert method["delta"][name] == pytest.approx(est["value"] - want_before[name], abs=1e-6)


def test_report_of_pass_at_1_only_and_of_rows_without_first_sample_passed(tmp_path) -> None:
    """eval_ks [1]: no headline k above 1. An older eval's rows lack `first_sample_passed`: read off rewards[0]."""
    import json

    from experiments.report import build_report

    rewards = [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    data = _result([_problem(f"t{i}", r, None) for i, r in enumerate(rewards)], [1]).to_dict()
    for row in data["problems"]:
        del row["first_sample_passed"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"method": "grpo", "seed": 0}))
    (run / "eval_after.json").write_text(json.dumps(data))
    report = build_report([run], tmp_path)
    assert report["headline_k"] is None
    (method,) = report["methods"]
    assert method["after"]["first_sample_pass@1"]["value"] == pytest.approx(2 / 3, abs=1e-6)
    assert method["after"]["pass@1"]["value"] == pytest.approx(4 / 9, abs=1e-6)
