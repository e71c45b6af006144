"""Policy-gradient estimators as small pure torch functions.

Every trainer in `experiments.trainers` computes its advantages and losses with these functions, and
`tests/trainers/test_estimators.py` pins them with the hand-checkable numbers of the RL Fundamentals chapter (two-armed
bandit, GAE limits, PPO clip cases) and against the seed experiment's loop implementation of RLOO (both documents:
docs/provenance.md). The pass@k objective (`max_at_k_estimate`, `pkpo_advantages`) is pinned against brute-force
enumeration of every k-subset by `tests/trainers/test_passk_objective.py`.

Conventions:
- `rewards` are one scalar per completion, laid out group by group: `rewards.view(-1, group_size)` gives one
  row per prompt (this is how TRL's `RepeatSampler` orders a generation batch).
- Per-token tensors are `(B, T)` with a `mask` of the same shape, 1 on completion tokens and 0 on padding.
  Completions are right-padded, so the valid tokens of a row are a prefix.
- Losses are returned as quantities to *minimise*; the sign flip from "maximise expected reward" is done here.
- NaN rewards mark unscorable completions (every reward function returned None). They are left out of the
  baselines and get advantage 0, as in TRL's GRPOTrainer and RLOOTrainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = [
    "batch_baseline_advantages",
    "clipped_value_loss",
    "explained_variance",
    "group_baseline_advantages",
    "kl_k1",
    "kl_k3",
    "masked_gae",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "max_at_k_estimate",
    "normalize_rollout_advantages",
    "pkpo_advantages",
    "policy_gradient_loss",
    "ppo_clip_loss",
    "rloo_advantages",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over the entries where `mask` is 1 (over all entries, or along `dim`)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `x` over the masked entries (Bessel-corrected by default)."""
    mean = masked_mean(x, mask)
    n = mask.to(x.dtype).sum()
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        var = var * n / (n - 1).clamp(min=1.0)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries; masked-out entries are set to 0."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    return whitened * mask.to(x.dtype)


def normalize_rollout_advantages(
    advantages: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "whiten",
    rewards_vary: bool = True,
    all_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
    eps: float = 1e-8,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's advantage normalisation over one rollout (all its prompts, on every process).

    - `"whiten"`: (A - mean) / sqrt(var + eps) over every masked token of the rollout;
    - `"center"`: A - mean, never divided (for a rollout too small for its std to mean anything);
    - `"none"`: A unchanged.

    Under `"whiten"` and `"center"`, a rollout whose rewards have no variance (`rewards_vary=False`) gets
    advantages 0: what is left in A there is the critic's error and the KL still to come, and whitening would
    scale that noise up to unit variance (GRPO's advantage is exactly 0 for such a group).

    `all_sum` sums a tensor over processes (`accelerator.reduce(t, "sum")`), so the statistics span the whole
    rollout; None for one process. Returns the advantages (0 on padding) and detached statistics of the raw A:
    `mean`, `std` (unbiased) and `divisor`, what A - mean was divided by (1 when it was not; 0 when zeroed).
    """
    all_sum = all_sum or (lambda t: t)
    m = mask.to(advantages.dtype)
    total, count = all_sum(torch.stack([(advantages * m).sum(), m.sum()])).unbind()
    count = count.clamp(min=1.0)
    mean = total / count
    square_dev = all_sum(((advantages - mean) ** 2 * m).sum())  # two passes: exact for small deviations
    var = square_dev / (count - 1).clamp(min=1.0)
    one = torch.ones_like(mean)
    if mode == "none":
        out, divisor = advantages, one
    elif mode not in ("whiten", "center"):
        raise ValueError(f"advantage normalisation must be 'whiten', 'center' or 'none'; got {mode!r}")
    elif not rewards_vary:
        out, divisor = torch.zeros_like(advantages), torch.zeros_like(mean)
    elif mode == "center":
        out, divisor = advantages - mean, one
    else:
        divisor = torch.sqrt(var + eps)
        out = (advantages - mean) / divisor
    stats = {"mean": mean.detach(), "std": var.sqrt().detach(), "divisor": divisor.detach()}
    return out * m, stats


def policy_gradient_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    num_tokens: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """REINFORCE surrogate loss, -E_y[ A(y) * log pi(y) ] with log pi(y) = sum_t log pi(y_t | y_<t).

    Williams (1992): grad J = E[ sum_t grad log pi(y_t | s_t) * A ]. The loss sums the log-probabilities over the
    tokens of each completion (the likelihood of the whole sequence) and averages over completions, so its
    gradient is the Monte-Carlo estimate of -grad J over the batch. No per-token length normalisation: a long
    completion carries as many gradient terms as it has tokens, exactly as in the estimator.

    Args:
        per_token_logps: `(B, T)` log pi(y_t | y_<t) of the sampled tokens.
        advantages: `(B,)` one weight per completion (broadcast over its tokens), or `(B, T)` per token.
        mask: `(B, T)`, 1 on completion tokens. None means all tokens count.
        num_tokens: divide the sum over every token of the batch by this instead of averaging the per-completion
            sums: the seed experiment's normalisation, `loss_per_token.sum() / shift_mask.sum()`, one mean over all the
            tokens of the batch (pass the batch's token count). Within one batch this only rescales the gradient,
            by completions / tokens, but the scale changes from batch to batch with the completions' lengths.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    weighted = advantages.detach() * per_token_logps
    if mask is not None:
        weighted = weighted * mask.to(weighted.dtype)
    if num_tokens is not None:
        return -weighted.sum() / num_tokens
    return -weighted.sum(dim=1).mean()


def _normalize_groups(adv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-group whitening of the seed experiment's RLOO loop: (A - mean) / (std + 1e-8) with the unbiased std over
    the scorable entries, left unchanged where std <= 1e-8 (a group whose rewards are all equal)."""
    count = valid.sum(dim=1, keepdim=True).to(adv.dtype)
    adv_valid = torch.where(valid, adv, torch.nan)
    mean = torch.nanmean(adv_valid, dim=1, keepdim=True)
    std = (((adv_valid - mean) ** 2).nansum(dim=1, keepdim=True) / (count - 1).clamp(min=1.0)).sqrt()
    return torch.where(std > 1e-8, (adv - mean) / (std + 1e-8), adv)


def batch_baseline_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE with a batch-average baseline: A_i = r_i - mean_j r_j over every scorable completion of the batch.

    The seed experiment's REINFORCE ("the simplest baselines are averages over the batch of rewards"; its loop takes
    `rewards.mean()` over the batch of one update). A constant baseline, the same for every prompt of the batch:
    it lowers the variance without using which prompt a completion answers, unlike the per-prompt group mean of
    `group_baseline_advantages` (the two coincide when a batch holds one prompt, as in the seed's loop).
    """
    adv = rewards - torch.nanmean(rewards)
    return torch.nan_to_num(adv, nan=0.0)


def group_baseline_advantages(
    rewards: torch.Tensor, group_size: int, normalize: bool = False
) -> torch.Tensor:
    """REINFORCE with a per-prompt mean baseline: A_i = r_i - mean_j r_j over the i-th completion's group.

    This is the seed experiment's baseline (`rewards - rewards.mean()` over the G completions of one prompt), i.e.
    GRPO's advantage without the division by the group standard deviation. The mean includes r_i itself, so the
    expected gradient is the true one scaled by (G-1)/G, a constant absorbed by the learning rate
    (`rloo_advantages` is the exactly unbiased leave-one-out variant: it equals this times G/(G-1)).
    `normalize=True` whitens each group as `rloo_advantages` does (then it is GRPO's scaled advantage).
    """
    grouped = rewards.view(-1, group_size)
    adv = grouped - torch.nanmean(grouped, dim=1, keepdim=True)
    if normalize:
        adv = _normalize_groups(adv, ~torch.isnan(grouped))
    return torch.nan_to_num(adv, nan=0.0).view(-1)


def rloo_advantages(rewards: torch.Tensor, group_size: int, normalize: bool = False) -> torch.Tensor:
    """REINFORCE Leave-One-Out (Ahmadian et al., 2024): A_i = r_i - 1/(G-1) * sum_{j != i} r_j.

    Vectorised form of the seed experiment's loop: the leave-one-out mean is (group_sum - r_i) / (G - 1). With
    `normalize=True`, each group's advantages are whitened as in that loop, `(A - mean(A)) / (std(A) + 1e-8)`
    with the unbiased std, and only when `std(A) > 1e-8`.

    Unscorable completions (NaN rewards) are left out of their siblings' baselines and get advantage 0; a group
    with fewer than two scorable completions has no baseline and gets advantage 0 throughout.
    """
    grouped = rewards.view(-1, group_size)
    if group_size == 1:
        return torch.zeros_like(rewards)
    valid = ~torch.isnan(grouped)
    count = valid.sum(dim=1, keepdim=True).to(grouped.dtype)
    total = torch.nansum(grouped, dim=1, keepdim=True)
    baseline = (total - grouped) / (count - 1)  # 0/0 = NaN for groups with one scorable completion
    adv = grouped - baseline
    if normalize:
        adv = _normalize_groups(adv, valid)
    return torch.nan_to_num(adv, nan=0.0).view(-1)


def _comb(n: int, r: int) -> float:
    """C(n, r), and 0 outside 0 <= r <= n (no such subsets)."""
    return float(math.comb(n, r)) if 0 <= r <= n else 0.0


def max_at_k_estimate(values: torch.Tensor, k: int) -> torch.Tensor:
    """Unbiased estimate of maxg@k = E[max(g(x_1), ..., g(x_k))], k i.i.d. draws, from n >= k draws `values`.

    The mean of the maximum over all C(n, k) subsets of size k (Walder & Karkhanis 2025, arXiv:2505.15201, eq. 12).
    With the values sorted ascending, v_(0) <= ... <= v_(n-1), the value at rank r is the maximum of C(r, k-1)
    subsets (itself and k-1 of the r below it), so

        rho(n, k) = 1/C(n, k) * sum_r C(r, k-1) * v_(r).

    For 0/1 rewards with c correct this is 1 - C(n-c, k)/C(n, k), the unbiased pass@k estimator of Chen et al. 2021.
    """
    n = values.numel()
    if not 1 <= k <= n:
        raise ValueError(f"max@k needs 1 <= k <= n draws; got k={k}, n={n}")
    v = torch.sort(values.double()).values
    weights = torch.tensor([_comb(r, k - 1) for r in range(n)], dtype=torch.float64)
    return (weights * v).sum() / _comb(n, k)


def _pkpo_group(g: torch.Tensor, k: int) -> torch.Tensor:
    """`pkpo_advantages` for the n scorable rewards `g` of one prompt (n >= 2, 1 <= k <= n), in float64."""
    n = g.numel()
    order = torch.argsort(g, stable=True)
    v = g[order].double()  # ascending; rank r = position in v
    ranks = range(n)

    def weights(fn) -> torch.Tensor:
        return torch.tensor([fn(r) for r in ranks], dtype=torch.float64)

    def after(x: torch.Tensor) -> torch.Tensor:  # sum over the ranks above each rank
        return x.flip(0).cumsum(0).flip(0) - x

    def before(x: torch.Tensor) -> torch.Tensor:  # sum over the ranks below each rank
        return x.cumsum(0) - x

    # s_i = 1/C(n, k) * sum over the k-subsets I holding i of max_I g. The maximum of I is either i itself
    # (k-1 of the i ranks below: C(i, k-1) subsets) or a higher rank j (i, j and k-2 of the j-1 other ranks below j:
    # C(j-1, k-2) subsets).
    own_max = weights(lambda r: _comb(r, k - 1)) * v
    higher_max = after(weights(lambda r: _comb(r - 1, k - 2)) * v)
    s = (own_max + higher_max) / _comb(n, k)

    # b_i: max@k' of the n-1 other completions, with k' = k (s^(loo)), or k-1 when k = n (s^(loo-1): there is no
    # k-subset of the others). Without i, a rank j < i keeps its rank, a rank j > i moves down to j-1.
    kb = k if k < n else k - 1
    lower = before(weights(lambda r: _comb(r, kb - 1)) * v)
    upper = after(weights(lambda r: _comb(r - 1, kb - 1)) * v)
    b = (lower + upper) / _comb(n - 1, kb)

    out = torch.empty_like(v)
    out[order] = (n / k) * s - b
    return out


def pkpo_advantages(rewards: torch.Tensor, group_size: int, k: int) -> torch.Tensor:
    """Pass@k Policy Optimization (Walder & Karkhanis 2025, arXiv:2505.15201): advantages whose policy gradient is
    an unbiased estimate of the gradient of pass@k (maxg@k for rewards that are not 0/1), k <= group_size.

    For one prompt's n completions with rewards g_1..g_n, the gradient of maxg@k = E[max of k draws] is estimated
    without bias by averaging max_I g * sum_{j in I} grad log pi(x_j) over all C(n, k) subsets I of size k. Each
    completion's coefficient is

        s_i = 1/C(n, k) * sum_{|I| = k, i in I} max_{j in I} g_j      (the paper's s_i; for 0/1 rewards with c
                                                                       correct: k/n if correct, else
                                                                       k/n * (1 - C(n-c-1, k-1)/C(n-1, k-1)))

    and any b_i that does not depend on x_i can be subtracted inside every subset term without bias. The baseline is
    the max@k estimate of the n-1 other completions (`max_at_k_estimate`; the paper's leave-one-out s^(loo)), or
    their max@(k-1) when k = n (the paper's s^(loo-1), which is defined for k = n, where no k-subset of the others
    exists). The advantage, scaled so that its mean over the group is the estimate up to the constant 1/k:

        A_i = (n/k) * s_i - b_i.

    - k = 1: s_i = g_i / n and b_i the mean of the others, so A_i = g_i - mean_{j != i} g_j: RLOO's pass@1
      advantage (`rloo_advantages`), as the paper notes.
    - k = n: A_i = max_j g_j - max_{j != i} g_j: only a strictly best completion gets a nonzero advantage (its
      margin over the runner-up), the leave-one-out pass@n advantage of Tang et al. 2025 (arXiv:2503.19595).
    - 0/1 rewards: a correct completion gets 1 - b_i >= 0, an incorrect one rho(n-1, c, k-1) - b_i <= 0.

    Rewards are laid out group by group. Unscorable completions (NaN) are left out of their group, which then has
    n < group_size; a group with fewer than max(2, k) scorable completions gets advantage 0 (no estimate).
    """
    if not 1 <= k <= group_size:
        raise ValueError(f"pass@k needs 1 <= k <= group_size; got k={k}, group_size={group_size}")
    grouped = rewards.view(-1, group_size)
    advantages = torch.zeros_like(grouped)
    for row, out in zip(grouped, advantages):
        valid = ~torch.isnan(row)
        if int(valid.sum()) >= max(2, k):
            out[valid] = _pkpo_group(row[valid], k).to(out.dtype)
    return advantages.view(-1)


def kl_k1(
    per_token_logps: torch.Tensor, ref_per_token_logps: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token k1 estimator of KL(pi || pi_ref): log pi(y_t) - log pi_ref(y_t), masked to 0 on padding.

    Unbiased for the KL of the sampled sequence (its sum over tokens is log pi(y)/pi_ref(y)), but not
    non-negative per sample; this is the estimator RLOO folds into the reward (Ahmadian et al., 2024), and the
    per-token penalty of RLHF-style PPO.
    """
    kl = per_token_logps - ref_per_token_logps
    if mask is not None:
        kl = kl * mask.to(kl.dtype)
    return kl


def kl_k3(
    per_token_logps: torch.Tensor, ref_per_token_logps: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1, masked
    to 0 on padding (Schulman 2020, "Approximating KL Divergence").

    Unbiased and non-negative per sample; its gradient pulls each sampled token's log pi towards log pi_ref. GRPO
    adds it to the loss (Shao et al. 2024, eq. 4; TRL's `beta`), as do verl's `use_kl_loss` (`low_var_kl`) and
    OpenRLHF's `--use_kl_loss --kl_estimator k3`: a loss term, not a reward, so it is no cost-to-go that grows with
    the tokens still to come.
    """
    log_ratio = ref_per_token_logps - per_token_logps
    kl = torch.exp(log_ratio) - log_ratio - 1
    if mask is not None:
        kl = kl * mask.to(kl.dtype)
    return kl


@torch.no_grad()
def masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al., 2015) over right-padded token sequences.

        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lam * A_{t+1}

    The episode ends after the last valid token: V and A beyond it are 0 (no bootstrap). At lam = 0 this is the
    one-step TD error; at lam = 1 it telescopes to G_t - V(s_t) with G_t = sum_{k>=t} gamma^(k-t) r_k.

    Args:
        rewards: `(B, T)` per-token rewards (for a terminal score, put it at the last valid token).
        values: `(B, T)` V(s_t), the critic's value before token t is emitted.
        mask: `(B, T)` 1 on valid tokens (a prefix of each row).

    Returns:
        `(advantages, returns)`, both `(B, T)` and 0 on padding; `returns = advantages + values`.
    """
    mask = mask.to(values.dtype)
    values = values * mask
    rewards = rewards * mask
    T = rewards.size(1)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = (delta + gamma * lam * next_adv) * mask[:, t]
        advantages[:, t] = adv_t
        # Padding positions reset the recursion, so the bootstrap after the last valid token is 0.
        next_value, next_adv = values[:, t], adv_t
    returns = (advantages + values) * mask
    return advantages, returns


def ppo_clip_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al., 2017), as a loss averaged over the masked tokens.

        r_t = pi(y_t) / pi_old(y_t)
        L   = -E_t[ w_t * min(r_t * A_t, clip(r_t, 1 - eps_low, 1 + eps_high) * A_t) ]

    `weights` w (broadcast to `(B, T)`; default 1) are per-token importance weights of the sampler, e.g.
    GRPOTrainer's pi_old / pi_vLLM correction; the mean is still over the masked tokens.

    Returns the loss and detached diagnostics: `clipfrac` (share of tokens where the clipped term is the
    active one) and `approx_kl` (the (r - 1) - log r estimator of KL(pi_old || pi), as in CleanRL).
    """
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = per_token_logps - old_per_token_logps
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * advantages
    per_token = -torch.min(unclipped, clipped)
    loss = masked_mean(per_token if weights is None else per_token * weights, mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((clipped < unclipped).to(ratio.dtype), mask),
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
        }
    return loss, stats


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss: 0.5 * E_t[ max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2) ].

    The clip keeps the critic from moving its predictions more than `clip` away from the values used to build
    the advantages, mirroring the policy clip. Returns the loss and the share of tokens where the clipped term
    is the larger one (`vf_clipfrac`).
    """
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    loss_unclipped = (values - returns) ** 2
    loss_clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(loss_unclipped, loss_clipped), mask)
    with torch.no_grad():
        clipfrac = masked_mean((loss_clipped > loss_unclipped).to(values.dtype), mask)
    return loss, clipfrac


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None
) -> float:
    """1 - Var[R - V] / Var[R]: 1 for a perfect critic, 0 for one that predicts a constant, < 0 if worse.

    Returns NaN when the returns have no variance (nothing to explain), rounding included: returns formed as
    A + V of equal scores differ by float error, and dividing by that variance logged -3e13 for a critic that
    was fine.
    """
    if mask is None:
        mask = torch.ones_like(returns)
    var_returns = masked_var(returns, mask)
    if var_returns.item() <= 1e-10:
        return float("nan")
    return (1.0 - masked_var(returns - values, mask) / var_returns).item()
