"""The pass@k objective (PKPO, Walder & Karkhanis 2025): the estimators against brute-force enumeration of every
k-subset of small groups, their limits (k = 1 is RLOO, k = n the leave-one-out pass@n advantage), the exact
unbiasedness of the gradient for Bernoulli rewards, and a two-step run of the `pkpo` row on the tiny model."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from experiments.trainers import METHODS, PKPOConfig, build_config
from experiments.trainers.estimators import max_at_k_estimate, pkpo_advantages, rloo_advantages

GROUPS = [
    [0.0, 0.0],
    [1.0, 1.0],
    [0.0, 1.0],
    [0.0, 0.0, 0.0, 0.0],
    [1.0, 1.0, 1.0, 1.0],
    [1.0, 0.0, 0.0, 0.0],
    [0.0, 1.0, 1.0, 0.0, 1.0],
    [1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
    [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    [0.3, 0.9, 0.1, 0.9, 0.5],  # not 0/1: PKPO's maxg@k, with a tie at the top
    [0.25, -1.0, 2.0, 0.0, 0.75, 0.5],
]


def brute_max_at_k(values: list[float], k: int) -> float:
    """The mean over all k-subsets of the subset's maximum."""
    subsets = list(itertools.combinations(values, k))
    return sum(max(s) for s in subsets) / len(subsets)


def brute_pkpo(values: list[float], k: int) -> list[float]:
    """(n/k) s_i - b_i with s_i = 1/C(n,k) sum_{|I|=k, i in I} max_I and b_i the max@k (max@(k-1) when k = n) of
    the others, every sum written out over the subsets."""
    n = len(values)
    out = []
    for i in range(n):
        holding_i = [s for s in itertools.combinations(range(n), k) if i in s]
        s_i = sum(max(values[j] for j in s) for s in holding_i) / math.comb(n, k)
        others = [values[j] for j in range(n) if j != i]
        b_i = brute_max_at_k(others, k if k < n else k - 1)
        out.append(n / k * s_i - b_i)
    return out


def cases() -> list[tuple[list[float], int]]:
    return [(g, k) for g in GROUPS for k in range(1, len(g) + 1)]


@pytest.mark.parametrize("values, k", cases())
def test_pkpo_advantages_equal_the_enumeration_of_all_k_subsets(values: list[float], k: int) -> None:
    got = pkpo_advantages(torch.tensor(values, dtype=torch.float64), len(values), k)
    assert got.tolist() == pytest.approx(brute_pkpo(values, k), abs=1e-12)


@pytest.mark.parametrize("values, k", cases())
def test_max_at_k_estimate_equals_the_enumeration(values: list[float], k: int) -> None:
    got = max_at_k_estimate(torch.tensor(values, dtype=torch.float64), k).item()
    assert got == pytest.approx(brute_max_at_k(values, k), abs=1e-12)
    if set(values) <= {0.0, 1.0}:  # Chen et al.'s pass@k estimator
        n, c = len(values), int(sum(values))
        assert got == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_binary_rewards_give_the_papers_closed_form() -> None:
    """0/1 rewards, c correct of n: a correct completion gets 1 - rho(n-1, c-1, k), an incorrect one
    rho(n-1, c, k-1) - rho(n-1, c, k) (k < n), with rho(n, c, k) = 1 - C(n-c, k)/C(n, k)."""

    def rho(n: int, c: int, k: int) -> float:
        return 1 - math.comb(n - c, k) / math.comb(n, k)

    values = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    n, c = len(values), 3
    for k in range(1, n):
        got = pkpo_advantages(torch.tensor(values, dtype=torch.float64), n, k).tolist()
        want = [1 - rho(n - 1, c - 1, k) if v else rho(n - 1, c, k - 1) - rho(n - 1, c, k) for v in values]
        assert got == pytest.approx(want, abs=1e-12), k
        # Correct completions are pushed up and incorrect ones down, until the others alone already pass at k
        # (k > n - c: every k-subset of the other 7 holds a correct one), where both get 0.
        correct, wrong = [a for a, v in zip(got, values) if v], [a for a, v in zip(got, values) if not v]
        if k > n - c:
            assert got == pytest.approx([0.0] * n, abs=1e-12), k
        else:
            assert min(correct) > 0 > max(wrong), k


def test_k_1_is_the_rloo_pass_at_1_advantage() -> None:
    rewards = torch.tensor([0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0.5, 0.25, 1, 0], dtype=torch.float64)
    assert torch.allclose(pkpo_advantages(rewards, 4, 1), rloo_advantages(rewards, 4), atol=1e-12)


def test_k_n_is_the_leave_one_out_pass_at_n_advantage() -> None:
    """Tang et al. 2025 (verl's grpo_passk): the best completion gets its margin over the runner-up, the others 0."""
    for values in ([0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.2, 0.7, 0.4, 0.1], [0.0, 0.0, 0.0, 0.0]):
        got = pkpo_advantages(torch.tensor(values, dtype=torch.float64), 4, 4).tolist()
        want = [max(values) - max(v for j, v in enumerate(values) if j != i) for i in range(4)]
        assert got == pytest.approx(want, abs=1e-12), values


@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_gradient_is_unbiased_for_bernoulli_rewards(n: int) -> None:
    """Policy p = sigmoid(theta) of a correct answer: E[sum_i A_i d/dtheta log pi(f_i)] over all 2^n outcomes is
    (n/k) d/dtheta pass@k = (n/k) k (1-p)^(k-1) p (1-p), exactly."""
    p = 0.3
    for k in range(1, n + 1):
        expected_gradient = 0.0
        for outcome in itertools.product([0.0, 1.0], repeat=n):
            prob = math.prod(p if f else 1 - p for f in outcome)
            adv = pkpo_advantages(torch.tensor(outcome, dtype=torch.float64), n, k).tolist()
            expected_gradient += prob * sum(
                a * (f - p) for a, f in zip(adv, outcome)
            )  # d log pi / d theta = f - p
        assert expected_gradient == pytest.approx(n / k * k * (1 - p) ** (k - 1) * p * (1 - p), abs=1e-12), k


def test_unscorable_completions_leave_their_group() -> None:
    """NaN rewards: the group is its scorable completions; fewer than max(2, k) of them give no estimate (0)."""
    nan = float("nan")
    rewards = torch.tensor([1.0, nan, 0.0, 0.0, nan, nan, nan, 1.0, 1.0, 0.0, nan, nan], dtype=torch.float64)
    got = pkpo_advantages(rewards, 4, 2).tolist()
    a, b, c = brute_pkpo([1.0, 0.0, 0.0], 2)
    assert got[:4] == pytest.approx([a, 0.0, b, c], abs=1e-12)
    assert got[4:8] == [0.0] * 4  # one scorable completion
    a, b = brute_pkpo([1.0, 0.0], 2)
    assert got[8:] == pytest.approx([a, b, 0.0, 0.0], abs=1e-12) and a == 1.0
    assert pkpo_advantages(rewards, 4, 3)[8:].tolist() == [0.0] * 4  # 2 scorable, fewer than k = 3


def test_k_is_checked_against_the_group() -> None:
    with pytest.raises(ValueError, match="1 <= k <= group_size"):
        pkpo_advantages(torch.zeros(4), 2, 3)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        max_at_k_estimate(torch.zeros(2), 3)


def test_pkpo_config_takes_k_up_to_num_generations(tmp_path: Path) -> None:
    base = {"output_dir": str(tmp_path), "use_cpu": True, "bf16": False, "per_device_train_batch_size": 4}
    assert PKPOConfig(**base, num_generations=4, pkpo_k=4).pkpo_k == 4
    for k in (0, 5):
        with pytest.raises(ValueError, match=f"pkpo_k: .*num_generations \\(4\\); got {k}"):
            PKPOConfig(**base, num_generations=4, pkpo_k=k)
    spec = METHODS["pkpo"]
    assert spec.defaults == {"beta": 0.04, "pkpo_k": 2} and "2505.15201" in spec.paper
    assert build_config("pkpo", **base, num_generations=2).pkpo_k == 2  # the smallest shared group


def binary_reward(completions: list[str], **kwargs) -> list[float]:
    """0/1, varying within groups (a random tiny model never passes a unit test)."""
    return [float(len(c) % 2) for c in completions]


def test_pkpo_trains_two_steps_with_its_advantages(
    tiny_model_dir: Path, tmp_path: Path, tiny_train_args
) -> None:
    from transformers import AutoTokenizer

    from experiments.learnable.tasks import train_rows

    args = build_config(
        "pkpo",
        output_dir=str(tmp_path),
        **(tiny_train_args | {"pkpo_k": 2}),
    )
    trainer = METHODS["pkpo"].trainer_cls(
        model=str(tiny_model_dir),
        reward_funcs=[binary_reward],
        args=args,
        train_dataset=train_rows(32),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    captured = []
    original = trainer._generate_and_score_completions

    def wrapped(inputs):
        out = original(inputs)
        captured.append((out["advantages"].clone(), trainer._last_rewards_per_func[:, 0].clone()))
        return out

    trainer._generate_and_score_completions = wrapped
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2 and len(captured) == 2
    for advantages, rewards_ in captured:
        assert torch.allclose(advantages, pkpo_advantages(rewards_, 4, 2), atol=1e-6)
    assert any(advantages.abs().sum() > 0 for advantages, _ in captured)  # the checks can fail
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(0.0 <= h["pkpo/pass_at_k"] <= 1.0 for h in logs)
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
