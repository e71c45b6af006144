"""The statistics mean what they say: every interval in experiments.evaluation.evaluate and experiments.report is pinned
against an independent reference computation written here, on data where the choices give different answers.

The reference is a plain percentile bootstrap with numpy's legacy RandomState (not the module's Generator) and
many replicates; the module under test is run with enough replicates that its own Monte-Carlo noise is far
below the gaps between the right answer and the wrong ones. Each test also checks that the wrong answers (90%
instead of 95%, samples instead of problems, problems without seeds, seeds without problems, a sampled
completion instead of the greedy one) really are outside its tolerance, so the test can fail on them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.evaluation.stats import (
    EvalResult,
    ProblemResult,
    bootstrap_ci,
    bootstrap_p_value,
    hierarchical_bootstrap,
    holm,
    summarize,
)
from experiments.report import build_report, render_markdown

N = 5  # samples per problem
REPS = 40_000  # replicates of the reference bootstraps
RNG_SEED = 12345


# ---- independent references -----------------------------------------------------------------------------
def ref_interval(replicates: np.ndarray, level: float) -> np.ndarray:
    a = 100 * (1 - level) / 2
    return np.percentile(replicates, [a, 100 - a])


def ref_problem_bootstrap(values, level: float = 0.95) -> np.ndarray:
    """Percentile interval of the mean, resampling the given units with replacement."""
    v = np.asarray(values, dtype=float)
    rs = np.random.RandomState(RNG_SEED)
    means = v[rs.randint(0, v.size, size=(REPS, v.size))].mean(axis=1)
    return ref_interval(means, level)


def ref_seed_problem_replicates(mats: list[np.ndarray], reps: int = REPS) -> np.ndarray:
    """(reps, methods): each replicate draws the problems once for every method (paired), then, within each
    method, draws its seeds with replacement; the value is the mean over drawn seeds of the drawn problems."""
    rs = np.random.RandomState(RNG_SEED)
    n = mats[0].shape[1]
    out = np.empty((reps, len(mats)))
    for start in range(0, reps, 5000):
        b = min(5000, reps - start)
        problems = rs.randint(0, n, size=(b, n))
        for g, mat in enumerate(mats):
            per_seed = np.stack([row[problems].mean(axis=1) for row in mat], axis=1)  # (b, seeds)
            seeds = rs.randint(0, mat.shape[0], size=(b, mat.shape[0]))
            out[start : start + b, g] = np.take_along_axis(per_seed, seeds, axis=1).mean(axis=1)
    return out


def ref_holm(p: list[float]) -> list[float]:
    """Holm (1979) by hand: sort, multiply the i-th smallest (0-based) by m - i, carry the maximum, cap at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def close(a, b, tol: float) -> bool:
    return bool(np.all(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)) <= tol))


# ---- data where the choices differ -----------------------------------------------------------------------
def _problem(task: str, rewards: list[float], greedy: bool | None) -> ProblemResult:
    return ProblemResult(task, len(rewards), sum(r >= 1.0 for r in rewards), list(rewards), greedy, "", 0)


def _uneven_problems(n_problems: int = 40, seed: int = 0, shift: int = 0) -> list[ProblemResult]:
    """Problems with unequal spread (some always pass, some never, some in between), with a greedy verdict
    that disagrees with every sample on a third of the problems, and a first sample that is not typical."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_problems):
        c = int(min(N, max(0, [0, 0, 1, 2, 3, 5, 5][i % 7] + shift)))
        rewards = [1.0] * c + [float(rng.choice([0.0, 0.25, 0.5]))] * (N - c)
        rewards = rewards[::-1] if i % 3 == 0 else rewards  # the first sample fails on these
        if i % 3 == 1:
            greedy = c == 0  # the opposite of every sample when c is 0 or N
        else:
            greedy = c >= 3
        out.append(_problem(f"t{i:02d}", rewards, greedy))
    return out


def _to_eval(problems: list[ProblemResult], seed: int = 0) -> dict:
    passk, greedy, avg = summarize(problems, ks=(1, N), seed=seed)
    return EvalResult(
        passk, greedy, avg, len(problems), N, [1, N], 100, 1.0, 1.0, problems, settings={"seed": seed}
    ).to_dict()


def _pass1(problems: list[ProblemResult]) -> np.ndarray:
    return np.array([p.correct / p.n for p in problems])


def _write_run(path: Path, method: str, seed: int, before: dict | None, after: dict) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"method": method, "seed": seed, "model": "tiny"}))
    if before is not None:
        (path / "eval_before.json").write_text(json.dumps(before))
    (path / "eval_after.json").write_text(json.dumps(after))
    return path


# ---- evaluation ------------------------------------------------------------------------------------------
def test_bootstrap_ci_is_a_95_percent_problem_bootstrap_of_the_mean() -> None:
    values = np.random.default_rng(3).random(40) ** 2  # skewed, so the interval is not symmetric
    tol = 0.004
    right, ninety = ref_problem_bootstrap(values, 0.95), ref_problem_bootstrap(values, 0.90)
    assert not close(right, ninety, tol)  # the design tells the two levels apart
    assert close(bootstrap_ci(values, n_bootstrap=20_000), right, tol)  # the documented default: 95%
    assert close(bootstrap_ci(values, n_bootstrap=20_000, confidence=0.90), ninety, tol)
    assert close(bootstrap_ci(values, n_bootstrap=20_000, confidence=0.95, seed=5), right, tol)


def test_summarize_resamples_per_problem_values_at_95_percent() -> None:
    problems = _uneven_problems()
    passk, greedy, avg = summarize(problems, ks=(1, N), n_bootstrap=20_000)
    tol = 0.006
    per_problem = _pass1(problems)
    over_samples = np.concatenate([[r >= 1.0 for r in p.rewards] for p in problems]).astype(float)
    right = ref_problem_bootstrap(per_problem)
    assert not close(
        right, ref_problem_bootstrap(over_samples), tol
    )  # samples would give a narrower interval
    assert not close(right, ref_problem_bootstrap(per_problem, 0.90), tol)
    assert passk["pass@1"].value == pytest.approx(per_problem.mean())
    assert close((passk["pass@1"].ci_low, passk["pass@1"].ci_high), right, tol)

    mean_rewards = np.array([np.mean(p.rewards) for p in problems])
    assert avg.value == pytest.approx(mean_rewards.mean())
    assert close((avg.ci_low, avg.ci_high), ref_problem_bootstrap(mean_rewards), tol)
    flat = np.concatenate([p.rewards for p in problems])
    assert not close(ref_problem_bootstrap(mean_rewards), ref_problem_bootstrap(flat), tol)

    passk_n = np.array([float(p.correct > 0) for p in problems])  # pass@n is "any sample passed"
    assert passk[f"pass@{N}"].value == pytest.approx(passk_n.mean())
    assert close((passk[f"pass@{N}"].ci_low, passk[f"pass@{N}"].ci_high), ref_problem_bootstrap(passk_n), tol)


def test_greedy_and_first_sample_pass_at_1_read_their_own_completion() -> None:
    problems = _uneven_problems()
    greedy_bits = np.array([float(p.greedy_passed) for p in problems])
    first_bits = np.array([float(p.rewards[0] >= 1.0) for p in problems])
    # Greedy differs from every sample index, and from the per-problem pass rate.
    for j in range(N):
        assert not np.array_equal(greedy_bits, [float(p.rewards[j] >= 1.0) for p in problems])
    assert greedy_bits.mean() != pytest.approx(_pass1(problems).mean())
    assert first_bits.mean() != pytest.approx(_pass1(problems).mean())

    _, greedy, _ = summarize(problems, ks=(1,), n_bootstrap=20_000)
    assert greedy.value == pytest.approx(greedy_bits.mean())
    assert close((greedy.ci_low, greedy.ci_high), ref_problem_bootstrap(greedy_bits), 0.006)

    res = EvalResult({}, greedy, greedy, len(problems), N, [1], 0, 1.0, 1.0, problems, n_bootstrap=20_000)
    first = res.metrics["first_sample_pass@1"]
    assert first.value == pytest.approx(first_bits.mean())
    assert close((first.ci_low, first.ci_high), ref_problem_bootstrap(first_bits), 0.006)
    d = res.to_dict()
    assert d["confidence"] == 0.95
    assert [p["first_sample_passed"] for p in d["problems"]] == [bool(b) for b in first_bits]


def test_hierarchical_bootstrap_resamples_problems_and_seeds() -> None:
    """Two seeds with different means and problems of unequal spread: the interval is the two-level one, not
    the problems-only one (seed spread ignored) nor the seeds-only one (problem spread ignored)."""
    s0 = _pass1(_uneven_problems(seed=0))
    s1 = _pass1(_uneven_problems(seed=1, shift=2))
    mat = np.vstack([s0, s1])
    reps = hierarchical_bootstrap([mat], n_bootstrap=20_000, seed=0)[:, 0]
    tol = 0.008
    right = ref_interval(ref_seed_problem_replicates([mat])[:, 0], 0.95)
    problems_only = ref_problem_bootstrap(mat.mean(axis=0))
    seeds_only = ref_problem_bootstrap(mat.mean(axis=1))
    assert not close(right, problems_only, tol) and not close(right, seeds_only, tol)
    assert close(ref_interval(reps, 0.95), right, tol)
    assert reps.mean() == pytest.approx(mat.mean(), abs=0.005)


# ---- report ----------------------------------------------------------------------------------------------
def test_report_interval_of_pooled_seeds_is_the_problem_and_seed_bootstrap(tmp_path: Path) -> None:
    seeds = {0: _uneven_problems(seed=0), 1: _uneven_problems(seed=1, shift=2)}
    dirs = [_write_run(tmp_path / f"s{s}", "grpo", s, None, _to_eval(p, s)) for s, p in seeds.items()]
    report = build_report(dirs, tmp_path)
    (entry,) = report["methods"]
    for name, per_problem in (
        ("pass@1", _pass1),
        ("greedy_pass@1", lambda ps: np.array([float(p.greedy_passed) for p in ps])),
        ("first_sample_pass@1", lambda ps: np.array([float(p.rewards[0] >= 1.0) for p in ps])),
        ("avg_reward", lambda ps: np.array([np.mean(p.rewards) for p in ps])),
    ):
        mat = np.vstack([per_problem(seeds[0]), per_problem(seeds[1])])
        # The report draws 2,000 replicates; 0/1 values put the endpoints on a lattice of 1/80 steps.
        tol = 0.026 if set(np.unique(mat)) <= {0.0, 1.0} else 0.012
        est = entry["after"][name]
        right = ref_interval(ref_seed_problem_replicates([mat])[:, 0], 0.95)
        if name in ("pass@1", "avg_reward"):  # the design tells the wrong unit and the wrong level apart
            assert not close(right, ref_problem_bootstrap(mat.mean(axis=0)), tol), name  # seeds ignored
            assert not close(right, ref_interval(ref_seed_problem_replicates([mat])[:, 0], 0.90), tol), name
        assert est["value"] == pytest.approx(mat.mean(), abs=1e-6), name
        assert close(est["ci"], right, tol), (name, est["ci"], right)
        for i, s in enumerate(seeds):  # each seed's own interval is over its problems
            assert est["per_seed"][i]["value"] == pytest.approx(mat[i].mean(), abs=1e-6)
            assert close(est["per_seed"][i]["ci"], ref_problem_bootstrap(mat[i]), tol), (name, s)
    # What report.md prints is that interval, labelled 95%.
    text = render_markdown(report)
    lo, hi = entry["after"]["pass@1"]["ci"]
    assert f"{100 * entry['after']['pass@1']['value']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]" in text
    assert "95% bootstrap intervals" in text and "90%" not in text
    assert report["bootstrap"]["confidence"] == 0.95


def test_report_greedy_is_read_from_the_greedy_verdicts(tmp_path: Path) -> None:
    problems = _uneven_problems()
    d = _to_eval(problems)
    run = _write_run(tmp_path / "r", "grpo", 0, d, d)
    (entry,) = build_report([run], tmp_path)["methods"]
    greedy_bits = [float(p.greedy_passed) for p in problems]
    assert entry["after"]["greedy_pass@1"]["value"] == pytest.approx(np.mean(greedy_bits), abs=1e-6)
    first_bits = [float(p.rewards[0] >= 1.0) for p in problems]
    assert entry["after"]["first_sample_pass@1"]["value"] == pytest.approx(np.mean(first_bits), abs=1e-6)
    assert np.mean(greedy_bits) != pytest.approx(np.mean(first_bits))


def test_report_before_after_delta_is_paired(tmp_path: Path) -> None:
    """After = before plus one passing sample on every third problem: the paired interval is that of the
    per-problem differences (narrow), not the difference of two unpaired intervals (wide)."""
    before_p = _uneven_problems()
    after_p = [
        _problem(
            p.task_id,
            ([1.0] + p.rewards[:-1]) if i % 3 == 0 and p.correct < N else p.rewards,
            p.greedy_passed,
        )
        for i, p in enumerate(before_p)
    ]
    run = _write_run(tmp_path / "r", "grpo", 0, _to_eval(before_p), _to_eval(after_p))
    (entry,) = build_report([run], tmp_path)["methods"]
    diff = _pass1(after_p) - _pass1(before_p)
    right = ref_problem_bootstrap(diff)
    rs = np.random.RandomState(RNG_SEED)
    a, b = _pass1(after_p), _pass1(before_p)
    unpaired = ref_interval(
        a[rs.randint(0, 40, (REPS, 40))].mean(1) - b[rs.randint(0, 40, (REPS, 40))].mean(1), 0.95
    )
    tol = 0.01
    assert not close(right, unpaired, tol)
    assert entry["delta"]["pass@1"] == pytest.approx(diff.mean(), abs=1e-6)
    assert close(entry["delta_ci"]["pass@1"], right, tol), (entry["delta_ci"]["pass@1"], right)


def test_between_method_comparison_is_paired_over_problems_and_seeds_with_holm(tmp_path: Path) -> None:
    """Three methods with two seeds each. Every pair's interval and p-value match the reference paired
    bootstrap (problems shared by all methods, seeds resampled within each), and the Holm adjustment,
    significance calls and ranks match a hand computation from the raw p-values."""
    methods = {
        "a": [_uneven_problems(seed=0, shift=1), _uneven_problems(seed=1, shift=2)],
        "b": [_uneven_problems(seed=2, shift=0), _uneven_problems(seed=3, shift=1)],
        "c": [_uneven_problems(seed=4, shift=0), _uneven_problems(seed=5, shift=0)],
    }
    dirs = [
        _write_run(tmp_path / f"{m}{s}", m, s, None, _to_eval(ps, s))
        for m, runs in methods.items()
        for s, ps in enumerate(runs)
    ]
    report = build_report(dirs, tmp_path)
    comp = report["comparisons"]["pass@1"]
    mats = {m: np.vstack([_pass1(ps) for ps in runs]) for m, runs in methods.items()}
    names = list(mats)
    reps = ref_seed_problem_replicates([mats[m] for m in names])
    pairs = {(p["better"], p["worse"]): p for p in comp["pairs"]}
    assert len(pairs) == 3
    tol_ci, tol_p = 0.012, 0.012
    for (better, worse), pair in pairs.items():
        assert mats[better].mean() >= mats[worse].mean()
        d = reps[:, names.index(better)] - reps[:, names.index(worse)]
        assert pair["delta"] == pytest.approx(mats[better].mean() - mats[worse].mean(), abs=1e-6)
        assert close(pair["ci"], ref_interval(d, 0.95), tol_ci), (better, worse, pair["ci"])
        # Unpaired (each method's own problems drawn independently) would be wider: the design tells them apart.
        rs = np.random.RandomState(1)
        ub = mats[better].mean(0)[rs.randint(0, 40, (REPS, 40))].mean(1)
        uw = mats[worse].mean(0)[rs.randint(0, 40, (REPS, 40))].mean(1)
        assert not close(ref_interval(ub - uw, 0.95), ref_interval(d, 0.95), tol_ci)
        p_ref = min(1.0, 2 * min((np.sum(d <= 0) + 1) / (d.size + 1), (np.sum(d >= 0) + 1) / (d.size + 1)))
        assert pair["p"] == pytest.approx(p_ref, abs=tol_p), (better, worse)
    raw = [p["p"] for p in comp["pairs"]]
    expected = ref_holm(raw)
    for pair, adj in zip(comp["pairs"], expected):
        assert pair["p_holm"] == pytest.approx(adj, abs=5e-6)  # report.json rounds to 6 places
        assert pair["significant"] == (adj < 0.05)
    # The design has one pair significant after Holm, one not, so the correction and the calls are exercised.
    assert {p["significant"] for p in comp["pairs"]} == {True, False}
    for r in comp["ranking"]:
        above = [p["better"] for p in comp["pairs"] if p["worse"] == r["method"] and p["significant"]]
        assert r["rank"] == 1 + len(above) and sorted(r["worse_than"]) == sorted(above)


def test_bootstrap_p_value_and_holm_against_hand_computation() -> None:
    d = np.r_[np.full(70, 0.3), np.full(25, -0.1), np.zeros(5)]
    # 30 of 100 replicates <= 0 (25 below, 5 at zero), 75 >= 0: p = 2 * 31/101.
    assert bootstrap_p_value(d) == pytest.approx(2 * 31 / 101)
    assert bootstrap_p_value(-d) == pytest.approx(2 * 31 / 101)
    p = [0.04, 0.001, 0.03, 0.2, 0.012]
    assert holm(p) == pytest.approx(ref_holm(p))
    assert holm(p) == pytest.approx([0.09, 0.005, 0.09, 0.2, 0.048])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])  # monotone: the larger p never gets a smaller value


# ---- evaluate_model: which completion each figure reads ---------------------------------------------------
class _SampledVsGreedyModel:
    """A stand-in for a causal LM: sampling returns `sampled[prompt][j]` as the j-th sequence, greedy decoding
    returns `greedy[prompt]`, so the greedy verdict can differ from every sample's."""

    def __init__(self, sampled: dict, greedy: dict, pad_id: int) -> None:
        import torch

        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.sampled, self.greedy, self.pad_id, self.training = sampled, greedy, pad_id, False

    def parameters(self):
        yield self.weight

    def eval(self):
        return self

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def generate(self, input_ids, attention_mask, generation_config, logits_processor=None):
        import torch

        from experiments.evaluation.evaluate import _ArgmaxRows

        # As in a real model: a row that _ArgmaxRows makes one-hot samples the greedy token.
        greedy_last = any(isinstance(p, _ArgmaxRows) for p in logits_processor or ())
        n = generation_config.num_return_sequences
        outs = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = tuple(i for i, m in zip(ids, mask) if m)
            for j in range(n):
                greedy = not generation_config.do_sample or (greedy_last and j == n - 1)
                outs.append(ids + (self.greedy[prompt] if greedy else self.sampled[prompt][j]))
        width = max(map(len, outs))
        return torch.tensor([o + [self.pad_id] * (width - len(o)) for o in outs])


def test_evaluate_model_reads_greedy_from_the_greedy_completion(tiny_model_dir: Path, humaneval) -> None:
    from transformers import AutoTokenizer

    from experiments.evaluation.evaluate import _prompt_ids, evaluate_model
    from experiments.inputs.data import to_rl_rows

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    raw = humaneval.select(range(3))
    rows = to_rl_rows(raw, style="completion")
    right, wrong = list(raw["canonical_solution"]), "    return None\n"

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    # problem: (the three samples, the greedy completion); the greedy verdict differs from every sample index.
    plan = [
        ([right[0], wrong, wrong], wrong),  # first sample passes, greedy fails
        ([wrong, wrong, wrong], right[1]),  # no sample passes, greedy does
        ([wrong, right[2], right[2]], wrong),  # later samples pass, greedy fails
    ]
    prompts = [tuple(_prompt_ids(tok, row["prompt"])) for row in rows]
    model = _SampledVsGreedyModel(
        {p: [ids(t) for t in samples] for p, (samples, _) in zip(prompts, plan)},
        {p: ids(g) for p, (_, g) in zip(prompts, plan)},
        tok.pad_token_id,
    )
    res = evaluate_model(
        model, tok, rows, n_samples=3, ks=(1, 3), max_new_tokens=64, batch_size=2, progress=False
    )
    assert [p.correct for p in res.problems] == [1, 0, 2]
    assert [p.greedy_passed for p in res.problems] == [False, True, False]
    assert [p.first_sample_passed for p in res.problems] == [True, False, False]
    assert res.greedy_pass_at_1.value == pytest.approx(1 / 3)
    assert res.metrics["first_sample_pass@1"].value == pytest.approx(1 / 3)
    assert res.pass_at_k["pass@1"].value == pytest.approx((1 / 3 + 0 + 2 / 3) / 3)
    assert res.pass_at_k["pass@3"].value == pytest.approx(2 / 3)
    d = res.to_dict()
    assert [p["greedy_passed"] for p in d["problems"]] == [False, True, False]


def test_report_compares_greedy_pass_at_1_and_pass_at_k_and_only_on_the_same_problems(tmp_path: Path) -> None:
    """Between methods, the documented metrics (greedy pass@1, pass@1, pass@k of the headline k) and no other;
    a method evaluated on other problems is left out of the comparison and named."""
    same = _uneven_problems()
    other = [_problem(f"x{p.task_id}", p.rewards, p.greedy_passed) for p in _uneven_problems(seed=2)]
    fewer = _uneven_problems()[:-1]
    dirs = [
        _write_run(tmp_path / "a", "a", 0, None, _to_eval(same)),
        _write_run(tmp_path / "b", "b", 0, None, _to_eval(_uneven_problems(seed=1, shift=1))),
        _write_run(tmp_path / "c", "c", 0, None, _to_eval(other)),
        _write_run(tmp_path / "d", "d", 0, None, _to_eval(fewer)),
    ]
    report = build_report(dirs, tmp_path)
    assert set(report["comparisons"]) == {"greedy_pass@1", "pass@1", f"pass@{N}"}
    for comp in report["comparisons"].values():
        assert {r["method"] for r in comp["ranking"]} == {"a", "b"} and comp["problems"] == 40
    for method in ("c", "d"):
        assert any(f"{method} was evaluated on other problems" in s for s in report["skipped"]), method
