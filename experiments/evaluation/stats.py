"""The statistics of pass@k evaluation, numpy only (no torch, no transformers), so that reports and tests use them
without a model stack.

- `pass_at_k(n, c, k)` is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained
  on Code", arXiv:2107.03374): 1 - C(n-c, k) / C(n, k), computed as a running product so it never forms big
  binomials. `coverage_ks(n)` are the k of a coverage curve (powers of two up to n, and n).
- `bootstrap_ci(values)` resamples *problems* (not samples) with a fixed-seed numpy Generator and returns the
  percentile interval of the mean. `hierarchical_bootstrap` does the same for several methods at once, paired on
  problems and resampling each method's seeds; `percentile_interval` and `paired_interval` read intervals off its
  replicates, and `bootstrap_p_value` and `holm` turn them into tests of method A - method B that hold over all
  pairs.
- `Estimate`, `ProblemResult`, `EvalResult` and `summarize`: what an evaluation measured, and the JSON it writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with `n` samples of which `c` are correct (Chen et al. 2021).

    1 - C(n-c, k)/C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i), which stays in float range for any n.
    """
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_per_problem(ns: Sequence[int], cs: Sequence[int], k: int) -> np.ndarray:
    """Vector of per-problem unbiased pass@k estimates (mean it for the benchmark number)."""
    if len(ns) != len(cs):
        raise ValueError(f"ns and cs differ in length: {len(ns)} != {len(cs)}")
    return np.array([pass_at_k(int(n), int(c), k) for n, c in zip(ns, cs)], dtype=float)


def coverage_ks(n: int) -> list[int]:
    """The k of a coverage curve for n samples per problem: 1, 2, 4, ... up to n, and n itself."""
    if n < 1:
        raise ValueError(f"need n >= 1, got {n}")
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else [*ks, n]


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-problem `values`, resampling problems with replacement.

    Deterministic for a given seed. Constant inputs (e.g. every problem passes) give a zero-width interval.
    Empty input gives (nan, nan).
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return (math.nan, math.nan)
    if np.all(v == v[0]):
        # Every resample has the same mean; skip the float noise of averaging identical numbers.
        return (float(v[0]), float(v[0]))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n_bootstrap, v.size))
    means = v[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def hierarchical_bootstrap(
    groups: Sequence[np.ndarray], *, n_bootstrap: int = 10_000, seed: int = 0
) -> np.ndarray:
    """Bootstrap replicates of each group's mean, shape (n_bootstrap, len(groups)).

    A group is one method's (seeds x problems) array of per-problem values, every group over the same problems
    in the same column order. Each replicate resamples problems once for all groups (so differences between
    groups are paired: a problem is compared with itself) and, within each group, resamples its seeds (each seed
    is an independent training run, so seed-to-seed spread widens the interval). With one seed per group this is
    the paired problem bootstrap. With m seeds the seed part underestimates the variance by (m-1)/m, so read few
    seeds together with their per-seed values.
    """
    arrays = [np.atleast_2d(np.asarray(g, dtype=float)) for g in groups]
    if not arrays:
        return np.empty((n_bootstrap, 0))
    n = arrays[0].shape[1]
    if n == 0 or any(a.shape[1] != n or a.shape[0] == 0 for a in arrays):
        raise ValueError(
            f"every group needs >= 1 seed and the same {n} problems; got {[a.shape for a in arrays]}"
        )
    rng = np.random.default_rng(seed)
    out = np.empty((n_bootstrap, len(arrays)))
    chunk = max(1, 2_000_000 // (n * max(a.shape[0] for a in arrays)))  # bounds the (seeds, chunk, n) gather
    for start in range(0, n_bootstrap, chunk):
        b = min(chunk, n_bootstrap - start)
        problems = rng.integers(0, n, size=(b, n))
        for g, a in enumerate(arrays):
            per_seed = a[:, problems].mean(axis=2).T  # (b, seeds)
            m = a.shape[0]
            if m > 1:
                per_seed = np.take_along_axis(per_seed, rng.integers(0, m, size=(b, m)), axis=1)
            out[start : start + b, g] = per_seed.mean(axis=1)
    return out


def bootstrap_p_value(replicates: Sequence[float] | np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the mean difference is 0" from replicates of the difference: twice the
    smaller share of replicates on either side of 0 (counting 0 on both), with the +1 correction, capped at 1."""
    d = np.asarray(replicates, dtype=float)
    below = (np.sum(d <= 0) + 1) / (d.size + 1)
    above = (np.sum(d >= 0) + 1) / (d.size + 1)
    return float(min(1.0, 2 * min(below, above)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (Holm 1979): family-wise error <= alpha when adjusted p < alpha is
    called significant, for any dependence between the tests; uniformly more powerful than Bonferroni."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (p.size - rank) * p[i]))
        adjusted[i] = running
    return [float(x) for x in adjusted]


def percentile_interval(replicates: Sequence[float] | np.ndarray, confidence: float = 0.95) -> list[float]:
    """The central `confidence` percentile interval of bootstrap replicates, as [low, high]."""
    lo, hi = np.quantile(replicates, [(1 - confidence) / 2, (1 + confidence) / 2])
    return [float(lo), float(hi)]


def paired_interval(
    a: np.ndarray, b: np.ndarray, *, n_bootstrap: int, seed: int = 0, confidence: float = 0.95
) -> list[float]:
    """Interval of mean(a) - mean(b) for two (seeds x problems) arrays over the same problems in the same columns,
    paired run by run (row i of `a` with row i of `b`, e.g. a run's after and before): the per-problem
    differences are resampled by `hierarchical_bootstrap` (problems, then seeds)."""
    reps = hierarchical_bootstrap(
        [np.asarray(a, dtype=float) - np.asarray(b, dtype=float)], n_bootstrap=n_bootstrap, seed=seed
    )
    return percentile_interval(reps[:, 0], confidence)


@dataclass(frozen=True)
class Estimate:
    """A point estimate over problems with its bootstrap CI."""

    value: float
    ci_low: float
    ci_high: float

    @classmethod
    def from_values(
        cls, values: Sequence[float] | np.ndarray, *, n_bootstrap: int, confidence: float, seed: int
    ) -> Estimate:
        v = np.asarray(values, dtype=float)
        lo, hi = bootstrap_ci(v, n_bootstrap=n_bootstrap, confidence=confidence, seed=seed)
        return cls(float(v.mean()) if v.size else math.nan, lo, hi)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "ci": [self.ci_low, self.ci_high]}


# ---------------------------------------------------------------------------------------------------------------
# Result containers
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ProblemResult:
    """One problem's raw counts, enough to recompute any pass@k (k <= n) and to re-bootstrap."""

    task_id: str
    n: int
    correct: int
    rewards: list[float]
    greedy_passed: bool | None
    first_completion: str
    n_truncated: int  # samples that hit max_new_tokens without EOS
    # Mean entropy (nats per generated token) of the policy's next-token distribution along the n samples;
    # None when not measured.
    entropy: float | None = None

    @property
    def mean_reward(self) -> float:
        return float(np.mean(self.rewards)) if self.rewards else math.nan

    @property
    def first_sample_passed(self) -> bool | None:
        """Whether the first sample passed: the seed's per-problem pass@1."""
        return bool(self.rewards[0] >= 1.0) if self.rewards else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "n": self.n,
            "correct": self.correct,
            "rewards": list(self.rewards),
            "mean_reward": self.mean_reward,
            "greedy_passed": self.greedy_passed,
            "n_truncated": self.n_truncated,
            "first_sample_passed": self.first_sample_passed,
            "entropy": self.entropy,
            "first_completion": self.first_completion,
        }


@dataclass
class EvalResult:
    """Everything `evaluate_model` measured. `to_dict()` is the JSON written to eval_before/after.json.

    Wall-clock figures live under `timing` so that two runs with the same seed differ only there.
    """

    pass_at_k: dict[str, Estimate]
    greedy_pass_at_1: Estimate | None
    avg_reward: Estimate
    num_problems: int
    n_samples: int
    ks: list[int]
    tokens_generated: int
    generation_seconds: float
    scoring_seconds: float
    problems: list[ProblemResult]
    settings: dict[str, Any] = field(default_factory=dict)
    confidence: float = 0.95
    n_bootstrap: int = 1000
    # What scored it (experiments.evaluation.scorer.scorer_stamp): extraction and sandbox versions, commit.
    scorer: dict[str, Any] | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_generated / self.generation_seconds if self.generation_seconds > 0 else math.nan

    def _estimate(self, values: Sequence[float | None]) -> Estimate | None:
        if not values or any(v is None for v in values):
            return None
        seed = int(self.settings.get("seed", 0))
        return Estimate.from_values(
            values, n_bootstrap=self.n_bootstrap, confidence=self.confidence, seed=seed
        )

    @property
    def first_sample_pass_at_1(self) -> Estimate | None:
        """The seed experiment's pass@1: the share of problems whose first sample passes (noisier than pass@1)."""
        return self._estimate([p.first_sample_passed for p in self.problems])

    @property
    def entropy(self) -> Estimate | None:
        """Mean over problems of the policy's per-token entropy (nats) on the sampled completions."""
        return self._estimate([p.entropy for p in self.problems])

    @property
    def metrics(self) -> dict[str, Estimate]:
        """Flat name -> estimate map: pass@k..., first_sample_pass@1, greedy_pass@1 (if run), avg_reward,
        entropy (if measured)."""
        out = dict(self.pass_at_k)
        optional = {
            "first_sample_pass@1": self.first_sample_pass_at_1,
            "greedy_pass@1": self.greedy_pass_at_1,
            "avg_reward": self.avg_reward,
            "entropy": self.entropy,
        }
        out.update({name: est for name, est in optional.items() if est is not None})
        return out

    def scalars(self, prefix: str = "eval/") -> dict[str, float]:
        """Point values keyed for a trainer log, e.g. {"eval/pass@1": 0.4, "eval/avg_reward": 0.4}."""
        return {f"{prefix}{name}": est.value for name, est in self.metrics.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_problems": self.num_problems,
            "n": self.n_samples,
            "ks": list(self.ks),
            "confidence": self.confidence,
            "n_bootstrap": self.n_bootstrap,
            "metrics": {name: est.to_dict() for name, est in self.metrics.items()},
            "tokens_generated": self.tokens_generated,
            "settings": dict(self.settings),
            **({"scorer": dict(self.scorer)} if self.scorer is not None else {}),
            "timing": {
                "generation_s": self.generation_seconds,
                "scoring_s": self.scoring_seconds,
                "tokens_per_s": self.tokens_per_s,
            },
            "problems": [p.to_dict() for p in self.problems],
        }


def summarize(
    problems: Sequence[ProblemResult],
    ks: Iterable[int],
    *,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[dict[str, Estimate], Estimate | None, Estimate]:
    """pass@k (each k <= every problem's n), greedy pass@1 and average reward, each with a bootstrap CI."""
    ns = [p.n for p in problems]
    cs = [p.correct for p in problems]
    n_min = min(ns) if ns else 0
    kw = {"n_bootstrap": n_bootstrap, "confidence": confidence, "seed": seed}
    passk = {
        f"pass@{k}": Estimate.from_values(pass_at_k_per_problem(ns, cs, k), **kw)
        for k in sorted(set(ks))
        if 1 <= k <= n_min
    }
    greedy = None
    if problems and all(p.greedy_passed is not None for p in problems):
        greedy = Estimate.from_values([float(p.greedy_passed) for p in problems], **kw)
    # Mean over problems of the per-problem mean reward; with equal n per problem this equals the seed experiment's
    # mean over all samples, and it is the unit the bootstrap resamples.
    avg = Estimate.from_values([p.mean_reward for p in problems], **kw)
    return passk, greedy, avg
