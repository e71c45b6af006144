"""Pin the estimator math with the RL Fundamentals chapter's hand-checkable numbers (docs/provenance.md).

The chapter's two-armed bandit: logits (1, 0), so pi = (0.731, 0.269); arm 0 pays 1 and
arm 1 pays 2. The per-sample REINFORCE gradients with respect to the logits are (0.269, -0.269) and
(-1.462, 1.462), their mean is -0.197 in the first component and its variance is about 0.589.
"""

from __future__ import annotations

import math

import pytest
import torch

from experiments.trainers.estimators import (
    batch_baseline_advantages,
    clipped_value_loss,
    explained_variance,
    group_baseline_advantages,
    kl_k1,
    masked_gae,
    masked_mean,
    masked_var,
    masked_whiten,
    normalize_rollout_advantages,
    policy_gradient_loss,
    ppo_clip_loss,
    rloo_advantages,
)

BANDIT_LOGITS = (1.0, 0.0)
BANDIT_REWARDS = (1.0, 2.0)


def bandit_grad(action: int, reward: float, baseline: float = 0.0) -> torch.Tensor:
    """Gradient of the REINFORCE surrogate (A * log pi(a)) w.r.t. the logits, from our loss function."""
    logits = torch.tensor(BANDIT_LOGITS, requires_grad=True)
    logp = torch.log_softmax(logits, dim=-1)[action].view(1, 1)  # one completion of one token
    loss = policy_gradient_loss(logp, torch.tensor([reward - baseline]))
    (grad,) = torch.autograd.grad(loss, logits)
    return -grad  # the loss is the negative surrogate


def bandit_moments(baseline: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact mean and variance of the one-sample estimator, by enumerating both arms."""
    probs = torch.softmax(torch.tensor(BANDIT_LOGITS), dim=-1)
    grads = torch.stack([bandit_grad(a, BANDIT_REWARDS[a], baseline) for a in range(2)])
    mean = (probs[:, None] * grads).sum(0)
    var = (probs[:, None] * grads**2).sum(0) - mean**2
    return grads, mean, var


def test_bandit_per_sample_gradients_match_the_chapter():
    grads, _, _ = bandit_moments(baseline=0.0)
    assert grads[0].tolist() == pytest.approx([0.269, -0.269], abs=5e-4)
    assert grads[1].tolist() == pytest.approx([-1.462, 1.462], abs=5e-4)


def test_bandit_mean_and_variance_match_the_chapter():
    _, mean, var = bandit_moments(baseline=0.0)
    assert mean[0].item() == pytest.approx(-0.197, abs=5e-4)
    assert var[0].item() == pytest.approx(0.589, abs=1e-3)
    # The estimator is unbiased: its mean equals the exact gradient of J = sum_a pi(a) r(a).
    logits = torch.tensor(BANDIT_LOGITS, requires_grad=True)
    J = (torch.softmax(logits, -1) * torch.tensor(BANDIT_REWARDS)).sum()
    (true_grad,) = torch.autograd.grad(J, logits)
    assert torch.allclose(mean, true_grad, atol=1e-6)


@pytest.mark.parametrize("baseline", [0.5, 1.0, 1.269, 1.5])
def test_constant_baseline_keeps_the_mean_and_lowers_the_variance(baseline):
    _, mean0, var0 = bandit_moments(baseline=0.0)
    _, mean_b, var_b = bandit_moments(baseline=baseline)
    assert torch.allclose(mean_b, mean0, atol=1e-6)
    assert var_b[0] < var0[0]


def test_expected_reward_baseline_is_near_the_best_constant():
    # Var(b) is a quadratic in b; the chapter says the best constant is close to the expected reward.
    bs = torch.linspace(0.0, 3.0, 301)
    variances = torch.stack([bandit_moments(b.item())[2][0] for b in bs])
    best = bs[variances.argmin()].item()
    probs = torch.softmax(torch.tensor(BANDIT_LOGITS), -1)
    expected_reward = (probs * torch.tensor(BANDIT_REWARDS)).sum().item()
    assert abs(best - expected_reward) < 0.5
    assert variances.min() < 0.2 * bandit_moments(0.0)[2][0]


def test_policy_gradient_loss_sums_tokens_and_averages_sequences():
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([2.0, -1.0])
    # -(2 * -6 + -1 * -1) / 2 = 5.5
    assert policy_gradient_loss(logps, adv, mask).item() == pytest.approx(5.5)
    # Per-token advantages are accepted too.
    assert policy_gradient_loss(logps, adv[:, None].expand(2, 3), mask).item() == pytest.approx(5.5)


def seed_rloo_loop(rewards: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """`compute_rloo_advantages` from the seed experiment's post (docs/provenance.md), verbatim apart from the curly
    quotes."""
    G = len(rewards)
    if G == 1:
        return torch.zeros_like(rewards)
    advantages = []
    for i in range(G):
        other_rewards = torch.cat([rewards[:i], rewards[i + 1 :]])
        baseline_i = other_rewards.mean()
        advantage_i = rewards[i] - baseline_i
        advantages.append(advantage_i)
    advantages = torch.stack(advantages)
    if normalize and len(advantages) > 1:
        if advantages.std() > 1e-8:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return advantages


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_rloo_matches_the_seed_loop_on_random_rewards(normalize, group_size):
    gen = torch.Generator().manual_seed(group_size)
    for binary in (False, True):
        rewards = torch.rand(6 * group_size, generator=gen)
        if binary:  # unit-test rewards: includes all-pass and all-fail groups
            rewards = (rewards > 0.5).float()
            rewards[:group_size] = 1.0
        expected = torch.cat([seed_rloo_loop(g, normalize) for g in rewards.view(-1, group_size)])
        got = rloo_advantages(rewards, group_size, normalize=normalize)
        assert torch.allclose(got, expected, atol=1e-6)


def test_rloo_is_a_rescaled_group_mean_baseline():
    rewards = torch.rand(32, generator=torch.Generator().manual_seed(0))
    G = 8
    assert torch.allclose(
        rloo_advantages(rewards, G), G / (G - 1) * group_baseline_advantages(rewards, G), atol=1e-6
    )


def test_group_baseline_matches_the_seed_and_ignores_unscorable_rows():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, float("nan")])
    adv = group_baseline_advantages(rewards, 4)
    assert adv[:4].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # Group 2: the NaN row is out of the mean (2/3) and gets advantage 0.
    assert adv[4:].tolist() == pytest.approx([1 / 3, 1 / 3, -2 / 3, 0.0])


def test_batch_baseline_is_one_mean_over_the_batch():
    """The seed's REINFORCE baseline, `rewards.mean()` over the update's batch: one constant for every prompt."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, float("nan")])
    adv = batch_baseline_advantages(rewards)
    assert adv.tolist() == pytest.approx([4 / 7, -3 / 7, -3 / 7, -3 / 7, 4 / 7, 4 / 7, -3 / 7, 0.0])
    # It is the group mean only when the batch holds one group; here group 1 (mean 1/4) differs from group 2.
    assert not torch.allclose(adv, group_baseline_advantages(rewards, 4))
    assert torch.allclose(batch_baseline_advantages(rewards[:4]), group_baseline_advantages(rewards[:4], 4))


def test_token_normalized_loss_is_one_mean_over_the_batchs_tokens():
    """The seed: loss = sum(-log pi * A * mask) / sum(mask); the per-completion sum differs by B / tokens."""
    logps = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -2.0])
    seed = (-(logps * adv[:, None]) * mask).sum() / mask.sum()
    assert policy_gradient_loss(logps, adv, mask, num_tokens=mask.sum()).item() == pytest.approx(seed.item())
    per_sequence = policy_gradient_loss(logps, adv, mask)
    assert per_sequence.item() == pytest.approx(seed.item() * mask.sum().item() / 2)


def test_rloo_skips_unscorable_rows():
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0, float("nan"), float("nan")])
    adv = rloo_advantages(rewards, 3)
    # Baselines over scorable siblings only: r0 - r1 = 1, r1 - r0 = -1, the NaN row gets 0, and r3 has no
    # scorable sibling, so no baseline and advantage 0.
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.0])


def test_kl_k1_is_the_masked_log_ratio():
    logp = torch.tensor([[-1.0, -2.0], [-0.1, -5.0]])
    ref = torch.tensor([[-1.5, -1.0], [-0.1, -9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert kl_k1(logp, ref, mask).tolist() == [[0.5, -1.0], [0.0, 0.0]]


def test_gae_lambda_zero_is_the_td_error():
    gen = torch.Generator().manual_seed(1)
    rewards, values = torch.randn(4, 6, generator=gen), torch.randn(4, 6, generator=gen)
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    mask[2, 1:] = 0
    gamma = 0.9
    adv, ret = masked_gae(rewards, values, mask, gamma=gamma, lam=0.0)
    next_values = torch.cat([values[:, 1:] * mask[:, 1:], torch.zeros(4, 1)], dim=1)
    delta = (rewards + gamma * next_values - values) * mask
    assert torch.allclose(adv, delta, atol=1e-6)
    assert torch.allclose(ret, (adv + values) * mask, atol=1e-6)


def test_gae_lambda_one_is_return_minus_value():
    gen = torch.Generator().manual_seed(2)
    rewards, values = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float32)
    for gamma in (1.0, 0.95):
        adv, ret = masked_gae(rewards, values, mask, gamma=gamma, lam=1.0)
        # G_t = sum_{k >= t} gamma^(k - t) r_k over the valid tokens, computed the slow way.
        G = torch.zeros_like(rewards)
        for b in range(3):
            n = int(mask[b].sum())
            for t in range(n):
                G[b, t] = sum(gamma ** (k - t) * rewards[b, k] for k in range(t, n))
        assert torch.allclose(adv, (G - values) * mask, atol=1e-5)
        assert torch.allclose(ret, G, atol=1e-5)


def test_gae_terminal_reward_with_gamma_one():
    # The chapter's LLM case: gamma = 1, lam = 1, one reward at the end: every token's return is R.
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    values = torch.tensor([[0.2, 0.4, 0.6, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, ret = masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert ret.tolist() == [[1.0, 1.0, 1.0, 0.0]]
    assert adv[0].tolist() == pytest.approx([0.8, 0.6, 0.4, 0.0])


@pytest.mark.parametrize(
    "ratio, adv, expected_loss, expected_grad",
    [
        (1.0, 1.0, -1.0, -1.0),  # on-policy: plain -r*A, d/dlogp = -r*A
        (1.5, 1.0, -1.2, 0.0),  # above 1+eps with A > 0: clipped, no gradient
        (0.5, 1.0, -0.5, -0.5),  # below 1-eps with A > 0: unclipped term is smaller, gradient flows
        (1.5, -1.0, 1.5, 1.5),  # above 1+eps with A < 0: pessimistic unclipped term, gradient flows
        (0.5, -1.0, 0.8, 0.0),  # below 1-eps with A < 0: clipped, no gradient
        (1.1, 2.0, -2.2, -2.2),  # inside the band: unclipped
    ],
)
def test_ppo_clip_loss_hand_cases(ratio, adv, expected_loss, expected_grad):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, stats = ppo_clip_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), 0.2)
    (grad,) = torch.autograd.grad(loss, logp)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    # d/dlogp of -min(r A, clip(r) A) is -r*A when unclipped (r = exp(logp)), 0 when clipped.
    assert grad.item() == pytest.approx(expected_grad, abs=1e-6)
    assert stats["clipfrac"].item() == (1.0 if expected_grad == 0.0 else 0.0)
    assert stats["approx_kl"].item() == pytest.approx((ratio - 1) - math.log(ratio), abs=1e-6)


def test_ppo_clip_loss_asymmetric_and_masked():
    logp = torch.log(torch.tensor([[1.25, 1.25, 3.0]]))
    loss, _ = ppo_clip_loss(
        logp, torch.zeros(1, 3), torch.tensor([1.0]), torch.tensor([[1, 1, 0]]), 0.2, 0.28
    )
    assert loss.item() == pytest.approx(-1.25)  # 1.25 < 1.28: unclipped; the third token is masked out


def test_clipped_value_loss_hand_cases():
    old = torch.tensor([[0.0, 0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0, -1.0]])
    values = torch.tensor([[0.5, 0.1, 0.5]], requires_grad=True)
    loss, clipfrac = clipped_value_loss(values, old, returns, torch.ones(1, 3), clip=0.2)
    # token 0: max((0.5-1)^2, (0.2-1)^2) = 0.64 (clipped); token 1: inside the band, 0.81;
    # token 2: max((0.5+1)^2, (0.2+1)^2) = 2.25 (unclipped).
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.81 + 2.25) / 3)
    assert clipfrac.item() == pytest.approx(1 / 3)
    (grad,) = torch.autograd.grad(loss, values)
    assert grad[0, 0].item() == 0.0  # the clipped branch is constant in V


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.5), returns, mask) == pytest.approx(0.0)
    assert explained_variance(-returns, returns, mask) < 0
    assert math.isnan(explained_variance(returns, torch.ones(1, 4), mask))
    # Every completion scores 1: GAE's returns (A + V, summed over tokens) are equal but for float error, and
    # there is still nothing to explain (it logged -3e13 on SmolLM2 for a rollout where all 16 passed).
    g = torch.Generator().manual_seed(0)
    values = torch.randn(16, 48, generator=g) * 0.3 + 0.9
    lengths = torch.randint(15, 48, (16,), generator=g)
    m = (torch.arange(48)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(16, 48)
    rewards[torch.arange(16), lengths - 1] = 1.0
    _, equal_returns = masked_gae(rewards, values * m, m, 1.0, 1.0)
    assert 0 < masked_var(equal_returns, m).item() < 1e-12  # the error this guards against
    assert math.isnan(explained_variance(values * m, equal_returns, m))


def test_masked_whiten_and_mean():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert masked_mean(x, mask).item() == pytest.approx(2.0)
    w = masked_whiten(x, mask)
    assert w[0, :3].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-6)
    assert w[0, 3].item() == 0.0


# ------------------------------------------------------------------ PPO's advantage normalisation over a rollout


def _gae_of_groups(scores: torch.Tensor, value_noise: float, seed: int = 0, tokens: int = 6):
    """λ = γ = 1 GAE advantages (G - V per token) of completions scored `scores`, under a critic whose values are
    the true score level plus Gaussian noise of std `value_noise`; all tokens valid."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.zeros(len(scores), tokens)
    rewards[:, -1] = scores
    values = value_noise * torch.randn(len(scores), tokens, generator=gen)
    mask = torch.ones(len(scores), tokens)
    advantages, _ = masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    return advantages, mask


def test_a_rollout_without_reward_variance_gets_no_advantage_even_with_a_noisy_critic():
    """The failure mechanism of issue 27: one prompt x 4 completions all scored 0, a critic off by N(0, 0.9^2).
    Whitening that rollout blows the critic's noise up to unit std; the rollout normalisation gives 0."""
    advantages, mask = _gae_of_groups(torch.zeros(4), value_noise=0.9)
    assert masked_whiten(advantages, mask).std().item() == pytest.approx(1.0, rel=0.05)  # the old behaviour
    for mode in ("whiten", "center"):
        out, stats = normalize_rollout_advantages(advantages, mask, mode, rewards_vary=False)
        assert out.abs().max().item() == 0.0, mode
        assert stats["divisor"].item() == 0.0
        assert stats["std"].item() == pytest.approx(advantages.std().item(), rel=1e-5)  # the raw A's, logged
    raw, _ = normalize_rollout_advantages(advantages, mask, "none", rewards_vary=False)
    assert torch.equal(raw, advantages)  # "none" leaves GAE's advantages as they are


def test_a_flat_group_inside_a_many_prompt_rollout_keeps_its_small_scale():
    """16 prompts x 4 completions; prompt 0 scores 1, 1, 1, 1, the others vary. Whitened over the whole rollout, the
    flat group's advantages (only critic noise of std 0.05) stay small; whitened alone they would have std 1."""
    gen = torch.Generator().manual_seed(1)
    scores = (torch.rand(64, generator=gen) < 0.5).float()
    scores[:4] = 1.0
    advantages, mask = _gae_of_groups(scores, value_noise=0.05, seed=2)
    out, stats = normalize_rollout_advantages(advantages, mask, "whiten", rewards_vary=True)
    flat = out[:4]
    assert flat.std().item() < 0.2
    assert masked_whiten(advantages[:4], mask[:4]).std().item() == pytest.approx(1.0, rel=0.05)
    assert (out * mask).sum().item() == pytest.approx(0.0, abs=1e-4)  # zero mean over the rollout
    assert masked_var(out, mask).item() == pytest.approx(1.0, rel=1e-4)  # unit variance over the rollout
    assert stats["divisor"].item() == pytest.approx(
        math.sqrt(masked_var(advantages, mask).item() + 1e-8), rel=1e-6
    )


def test_rollout_normalisation_modes_and_statistics_across_processes():
    advantages = torch.tensor([[1.0, 2.0, 9.0], [3.0, 5.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    valid = advantages[mask.bool()]  # 1, 2, 3, 5, 0: mean 2.2
    centred, stats = normalize_rollout_advantages(advantages, mask, "center")
    assert centred[mask.bool()].tolist() == pytest.approx((valid - 2.2).tolist())
    assert centred[0, 2].item() == 0.0 and stats["divisor"].item() == 1.0
    assert stats["mean"].item() == pytest.approx(2.2) and stats["std"].item() == pytest.approx(
        valid.std().item()
    )
    whitened, _ = normalize_rollout_advantages(advantages, mask, "whiten")
    assert whitened[mask.bool()].tolist() == pytest.approx(((valid - 2.2) / valid.std()).tolist(), rel=1e-6)
    with pytest.raises(ValueError, match="'whiten', 'center' or 'none'"):
        normalize_rollout_advantages(advantages, mask, "batch")

    # Two processes holding one row each: `all_sum` adds the other's partial sums, and each gets the statistics of
    # the whole rollout, so the result is the one-process one.
    rows = [(advantages[i : i + 1], mask[i : i + 1]) for i in range(2)]
    for i, (adv, m) in enumerate(rows):
        other_adv, other_m = rows[1 - i]
        calls = []

        def all_sum(t, other_adv=other_adv, other_m=other_m, calls=calls):
            calls.append(len(calls))
            if len(calls) == 1:  # the sum and count, then the sum of squared deviations from the global mean
                return t + torch.stack([(other_adv * other_m).sum(), other_m.sum().float()])
            return t + ((other_adv - 2.2) ** 2 * other_m).sum()

        part, part_stats = normalize_rollout_advantages(adv, m.float(), "whiten", all_sum=all_sum)
        assert part[0].tolist() == pytest.approx(whitened[i].tolist(), rel=1e-6)
        assert part_stats["std"].item() == pytest.approx(valid.std().item(), rel=1e-6)
