"""Properties of pass@k and of the policy-gradient estimators, checked with hypothesis on generated inputs, and
the promise that the policy-gradient loss sends no gradient into its advantages.

pass@k is compared with the combinatorial formula and with brute-force enumeration of k-subsets of the samples;
the advantage estimators with the invariants their docstrings state (leave-one-out = G/(G-1) x group mean
baseline, advantages summing to zero per group, GRPO's whitened groups, NaN rewards left out). Example counts
are kept modest so that the file runs in seconds.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.evaluation.stats import pass_at_k, pass_at_k_per_problem
from experiments.trainers.estimators import (
    batch_baseline_advantages,
    group_baseline_advantages,
    policy_gradient_loss,
    ppo_clip_loss,
    rloo_advantages,
)

FAST = settings(max_examples=60, deadline=None)


# ---- pass@k ------------------------------------------------------------------------------------------------
@st.composite
def n_c_k(draw, max_n: int = 60):
    n = draw(st.integers(1, max_n))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@FAST
@given(n_c_k())
def test_pass_at_k_is_the_combinatorial_formula_and_a_probability(nck) -> None:
    n, c, k = nck
    value = pass_at_k(n, c, k)
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(float(exact), abs=1e-12)


@FAST
@given(n_c_k())
def test_pass_at_k_is_monotone_in_c_and_k(nck) -> None:
    n, c, k = nck
    if c < n:
        assert pass_at_k(n, c, k) <= pass_at_k(n, c + 1, k)
    if k < n:
        assert pass_at_k(n, c, k) <= pass_at_k(n, c, k + 1)
    assert (pass_at_k(n, c, k) == 0.0) == (c == 0)
    # 1.0 exactly when no k-subset can miss; otherwise below 1 whenever the chance of a miss is one a float can hold
    # next to 1 (e.g. n=58, c=29, k=29 misses with probability 3e-17: 1 - 3e-17 is the float 1.0).
    miss = Fraction(math.comb(n - c, k), math.comb(n, k))
    if n - c < k:
        assert pass_at_k(n, c, k) == 1.0
    elif miss > Fraction(1, 10**15):
        assert pass_at_k(n, c, k) < 1.0


@FAST
@given(st.lists(st.booleans(), min_size=1, max_size=9), st.data())
def test_pass_at_k_is_the_share_of_k_subsets_with_a_pass_in_any_sample_order(verdicts, data) -> None:
    """Brute force: over every k-subset of the samples, the share that holds at least one passing sample."""
    n = len(verdicts)
    k = data.draw(st.integers(1, n))
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(verdicts[i] for i in s) for s in subsets) / len(subsets)
    shuffled = data.draw(st.permutations(verdicts))
    assert pass_at_k(n, sum(verdicts), k) == pytest.approx(brute, abs=1e-12)
    assert pass_at_k(n, sum(shuffled), k) == pass_at_k(n, sum(verdicts), k)
    assert (
        pass_at_k_per_problem([n, n], [sum(verdicts), sum(shuffled)], k).tolist()
        == [pass_at_k(n, sum(verdicts), k)] * 2
    )


# ---- advantages ----------------------------------------------------------------------------------------------
def _groups(draw, *, nan: bool = False):
    g = draw(st.integers(2, 6))
    n_groups = draw(st.integers(1, 4))
    value = st.floats(-5, 5, allow_nan=False, width=32)
    if nan:
        value = st.one_of(value, st.just(float("nan")))
    rewards = draw(st.lists(value, min_size=g * n_groups, max_size=g * n_groups))
    return torch.tensor(rewards, dtype=torch.float64), g


rewards_groups = st.composite(lambda draw: _groups(draw))()
rewards_groups_nan = st.composite(lambda draw: _groups(draw, nan=True))()


@FAST
@given(rewards_groups)
def test_rloo_is_the_leave_one_out_mean_and_a_rescaled_group_baseline(rg) -> None:
    r, g = rg
    adv = rloo_advantages(r, g)
    grouped = r.view(-1, g)
    loo = torch.stack([grouped[:, i] - (grouped.sum(1) - grouped[:, i]) / (g - 1) for i in range(g)], dim=1)
    torch.testing.assert_close(adv.view(-1, g), loo)
    torch.testing.assert_close(adv, group_baseline_advantages(r, g) * g / (g - 1))
    torch.testing.assert_close(
        adv.view(-1, g).sum(1), torch.zeros(len(grouped), dtype=r.dtype), atol=1e-9, rtol=0
    )


@FAST
@given(rewards_groups, st.floats(-3, 3), st.floats(0.1, 10))
def test_baselines_ignore_a_shift_and_grpo_ignores_a_positive_scale(rg, shift, scale) -> None:
    r, g = rg
    for fn in (
        lambda x: rloo_advantages(x, g),
        lambda x: group_baseline_advantages(x, g),
        batch_baseline_advantages,
    ):
        torch.testing.assert_close(fn(r + shift), fn(r), atol=1e-9, rtol=1e-6)
    grpo = group_baseline_advantages(r, g, normalize=True)
    spread = r.view(-1, g).std(dim=1) > 1e-3  # groups clear of the "std <= 1e-8: left as is" branch
    if spread.any():
        # The seed's whitening divides by std + 1e-8, so a positive scale cancels exactly except in that epsilon,
        # and a whitened group's std is std / (std + 1e-8): 1 - 2e-6 for a group of std 0.0055.
        s = r.view(-1, g)[spread].std(dim=1, keepdim=True)
        scaled = group_baseline_advantages(r * scale + shift, g, normalize=True)
        torch.testing.assert_close(
            scaled.view(-1, g)[spread] * (scale * s + 1e-8) / scale,
            grpo.view(-1, g)[spread] * (s + 1e-8),
            atol=1e-9,
            rtol=1e-6,
        )
        whitened = grpo.view(-1, g)[spread]
        torch.testing.assert_close(
            whitened.mean(1), torch.zeros(len(whitened), dtype=r.dtype), atol=1e-9, rtol=0
        )
        torch.testing.assert_close(whitened.std(1), (s / (s + 1e-8)).squeeze(1), atol=1e-9, rtol=0)


@FAST
@given(rewards_groups, st.data())
def test_advantages_are_equivariant_to_reordering_a_group(rg, data) -> None:
    r, g = rg
    perm = torch.tensor(data.draw(st.permutations(range(g))))
    grouped = r.view(-1, g)
    for fn in (rloo_advantages, group_baseline_advantages):
        torch.testing.assert_close(
            fn(grouped[:, perm].reshape(-1), g).view(-1, g), fn(r, g).view(-1, g)[:, perm]
        )


@FAST
@given(rewards_groups_nan)
def test_unscorable_rewards_get_zero_and_stay_out_of_the_baselines(rg) -> None:
    r, g = rg
    adv = rloo_advantages(r, g).view(-1, g)
    mean_adv = group_baseline_advantages(r, g).view(-1, g)
    for row, a, m in zip(r.view(-1, g), adv, mean_adv):
        valid = ~torch.isnan(row)
        assert torch.all(a[~valid] == 0) and torch.all(m[~valid] == 0)
        assert torch.isfinite(a).all() and torch.isfinite(m).all()
        kept = row[valid]
        if len(kept) >= 2:  # the group without its unscorable rows
            torch.testing.assert_close(a[valid], rloo_advantages(kept, len(kept)))
        else:
            assert torch.all(a == 0)
        if len(kept) >= 1:
            torch.testing.assert_close(m[valid], kept - kept.mean())
    batch = batch_baseline_advantages(r)
    valid = ~torch.isnan(r)
    assert torch.all(batch[~valid] == 0)
    if valid.any():
        torch.testing.assert_close(batch[valid], r[valid] - r[valid].mean())


# ---- the policy-gradient loss and its advantages -----------------------------------------------------------
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("num_tokens", [None, 7.0])
def test_policy_gradient_loss_sends_no_gradient_into_advantages(per_token: bool, num_tokens) -> None:
    """Advantages that carry a graph (a critic's values, rewards from a differentiable model) are weights, not
    a quantity to optimise: the loss's gradient reaches log pi only, and equals -A x mask / (B or num_tokens)."""
    torch.manual_seed(0)
    logps = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    source = torch.randn(3, 4 if per_token else 1, dtype=torch.float64, requires_grad=True)
    advantages = (source * 2.0 + 1.0) if per_token else (source * 2.0 + 1.0).squeeze(1)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    loss = policy_gradient_loss(logps, advantages, mask, num_tokens=num_tokens)
    g_logps, g_adv, g_source = torch.autograd.grad(
        loss, [logps, advantages, source], allow_unused=True, retain_graph=True
    )
    assert g_adv is None and g_source is None
    weights = advantages.detach() if per_token else advantages.detach().unsqueeze(1)
    expected = -weights * mask / (num_tokens if num_tokens is not None else 3)
    torch.testing.assert_close(g_logps, expected.expand_as(g_logps))
    # Backpropagating the advantages' own graph with the loss: the source gets only its own gradient (2).
    (advantages.sum() + loss).backward()
    torch.testing.assert_close(source.grad, torch.full_like(source, 2.0))


def test_loss_and_value_agree_with_a_direct_sum() -> None:
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    direct = -np.mean([2.0 * (-1.0 - 2.0), -1.0 * (-0.5 - 0.5 + 0.0)])
    assert policy_gradient_loss(logps, adv, mask).item() == pytest.approx(direct)
    assert policy_gradient_loss(logps, adv, mask, num_tokens=5).item() == pytest.approx(
        -(2.0 * -3.0 + -1.0 * -1.0) / 5
    )


@FAST
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**16))
def test_per_sequence_advantages_broadcast_over_tokens(b: int, t: int, seed: int) -> None:
    """One advantage per completion (B,) is that completion's weight on each of its tokens, whatever B and T."""
    gen = torch.Generator().manual_seed(seed)
    logps, old = torch.randn(b, t, generator=gen), torch.randn(b, t, generator=gen)
    adv = torch.randn(b, generator=gen)
    mask = (torch.rand(b, t, generator=gen) > 0.3).double()
    per_token = adv[:, None].expand(b, t)
    torch.testing.assert_close(
        policy_gradient_loss(logps, adv, mask), policy_gradient_loss(logps, per_token, mask)
    )
    torch.testing.assert_close(
        ppo_clip_loss(logps, old, adv, mask)[0], ppo_clip_loss(logps, old, per_token, mask)[0]
    )
