"""The estimators at the edges their callers reach: one token, no token, two tokens (where Bessel's correction
is a factor of 2), a spread below the whitening threshold and exactly at it, options given as strings built at
run time, the defaults, and the masked mean along a dimension. Exact values, computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from experiments.trainers.estimators import (
    clipped_value_loss,
    masked_gae,
    masked_mean,
    masked_var,
    masked_whiten,
    max_at_k_estimate,
    normalize_rollout_advantages,
    pkpo_advantages,
    ppo_clip_loss,
    rloo_advantages,
)


def test_masked_mean_along_a_dimension_counts_each_rows_own_tokens() -> None:
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert masked_mean(x, mask, dim=1).tolist() == [1.5, 4.0, 0.0]  # a row without tokens is 0, not NaN
    assert masked_mean(x, mask).item() == pytest.approx(7.0 / 3.0)


def test_masked_var_with_one_and_two_entries() -> None:
    mask = torch.tensor([1.0, 1.0, 0.0])
    assert masked_var(torch.tensor([1.0, 3.0, 100.0]), mask).item() == 2.0  # ((1-2)^2 + (3-2)^2) / (2 - 1)
    assert masked_var(torch.tensor([1.0, 3.0, 100.0]), mask, unbiased=False).item() == 1.0
    assert (
        masked_var(torch.tensor([5.0, 100.0]), torch.tensor([1.0, 0.0])).item() == 0.0
    )  # one entry: no spread


def test_whitening_a_tiny_spread_divides_by_its_std_plus_eps() -> None:
    x = torch.tensor([0.0, 1e-5], dtype=torch.float64)
    mask = torch.ones(2, dtype=torch.float64)
    var = 5e-11  # ((5e-6)^2 * 2) / 1
    want = torch.tensor([-5e-6, 5e-6], dtype=torch.float64) / math.sqrt(var + 1e-8)
    torch.testing.assert_close(masked_whiten(x, mask), want)


def test_rollout_normalisation_reads_modes_given_at_run_time() -> None:
    adv = torch.tensor([[1.0, 3.0]])
    mask = torch.ones(1, 2)
    # Modes built at run time, as a YAML-read value is: equal to the literals but other objects.
    out, _ = normalize_rollout_advantages(adv, mask, mode="".join(["no", "ne"]))
    assert out.tolist() == [[1.0, 3.0]]
    out, stats = normalize_rollout_advantages(adv, mask, mode="".join(["cen", "ter"]))
    assert out.tolist() == [[-1.0, 1.0]] and stats["divisor"].item() == 1.0


def test_rollout_statistics_of_one_two_and_no_tokens() -> None:
    one, stats = normalize_rollout_advantages(
        torch.tensor([[4.0, 7.0]]), torch.tensor([[1.0, 0.0]]), mode="center"
    )
    assert stats["mean"].item() == 4.0 and stats["std"].item() == 0.0 and one.tolist() == [[0.0, 0.0]]
    _, stats = normalize_rollout_advantages(torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), mode="center")
    assert stats["std"].item() == pytest.approx(math.sqrt(2.0))  # Bessel: 2 / (2 - 1)
    out, stats = normalize_rollout_advantages(torch.tensor([[4.0, 7.0]]), torch.zeros(1, 2))
    assert out.tolist() == [[0.0, 0.0]] and all(math.isfinite(v.item()) for v in stats.values())


def test_a_group_spread_at_or_below_the_threshold_is_left_unwhitened() -> None:
    """The seed's loop whitens only when std(A) > 1e-8: a group that nearly ties keeps its raw advantages."""
    tiny = torch.tensor([0.0, 1e-9], dtype=torch.float64)  # std of its advantages: sqrt(2) * 1e-9
    assert torch.equal(rloo_advantages(tiny, 2, normalize=True), rloo_advantages(tiny, 2))
    at = torch.tensor([0.0, 7.071067811865475e-09], dtype=torch.float64)
    adv = rloo_advantages(at, 2)
    assert adv.pow(2).sum().sqrt().item() == 1e-8  # its advantages' std (mean 0, one degree of freedom): 1e-8
    assert torch.equal(rloo_advantages(at, 2, normalize=True), adv)
    above = torch.tensor([0.0, 1.0], dtype=torch.float64)  # and a real spread is whitened
    torch.testing.assert_close(
        rloo_advantages(above, 2, normalize=True),
        torch.tensor([-1.0, 1.0], dtype=torch.float64) / (math.sqrt(2.0) + 1e-8),
    )


def test_k_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="1 <= k <= n"):
        max_at_k_estimate(torch.tensor([0.0, 1.0]), 0)
    with pytest.raises(ValueError, match="1 <= k <= group_size"):
        pkpo_advantages(torch.tensor([0.0, 1.0]), 2, 0)


def test_gae_defaults_and_no_gradient() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25, 0.75]], requires_grad=True)
    mask = torch.ones(1, 3)
    adv, ret = masked_gae(rewards, values, mask)
    # gamma 1, lam 0.95: deltas (0.25 - 0.5, 0.75 - 0.25, 1 - 0.75) = (-0.25, 0.5, 0.25), A_t = delta_t + 0.95 A_{t+1}
    a2 = 0.25
    a1 = 0.5 + 0.95 * a2
    a0 = -0.25 + 0.95 * a1
    torch.testing.assert_close(adv, torch.tensor([[a0, a1, a2]]))
    torch.testing.assert_close(ret, adv + values.detach())
    assert not adv.requires_grad and not ret.requires_grad  # targets, never a path for the critic's gradient


def test_the_clip_defaults_are_schulmans_0_2() -> None:
    logps = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5 against pi_old = 1
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    adv = torch.tensor([1.0])
    default, _ = ppo_clip_loss(logps, old, adv, mask)
    explicit, _ = ppo_clip_loss(logps, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
    assert default.item() == pytest.approx(explicit.item()) == pytest.approx(-(1.2 + 0.5) / 2)
    values, old_values, returns = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]])
    loss, frac = clipped_value_loss(values, old_values, returns, torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.5 * 1.0) and frac.item() == 0.0  # unclipped (1 - 0)^2 beats 0.2^2
    loss, frac = clipped_value_loss(values, old_values, torch.tensor([[2.0]]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.5 * 1.8**2) and frac.item() == 1.0  # clipped to 0.2, 1.8 from 2
