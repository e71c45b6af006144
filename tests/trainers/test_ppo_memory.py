"""PPO's memory layout leaves its math unchanged (tiny model, a few seconds each).

- the critic has no LM head: its output is one value per position, never vocabulary-sized;
- over a generation batch of several micro-batches (steps_per_generation=2) the critic runs one micro-batch of
  rows at a time, and the values, returns and advantages equal those of one unchunked pass;
- in the update, the critic's backward pass ends before the policy's forward pass begins, and the gradients and
  the loss equal those of one backward pass through the summed loss, computed by hand from the estimators.

The peak memory itself is measured by benchmarks/bench_memory.py (CPU) and benchmarks/gpu_check.py (GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experiments.learnable.tasks import train_rows
from experiments.trainers import build_config
from experiments.trainers.estimators import (
    clipped_value_loss,
    masked_gae,
    masked_mean,
    masked_whiten,
    ppo_clip_loss,
)

# A generation batch of 8 rows in 2 micro-batches of 4, so the chunked critic passes have two to get right.
TINY_SHAPE = {"per_device_train_batch_size": 4, "steps_per_generation": 2}


def length_reward(completions: list[str], **kwargs) -> list[float]:
    return [(len(c) % 7) / 6.0 for c in completions]


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, tiny_train_args):
    """A PPO trainer after 2 steps, with what it saw: rollouts, micro-batches, critic batch sizes, call order."""
    from transformers import AutoTokenizer

    from experiments.trainers import PPOTrainer

    args = build_config(
        "ppo",
        output_dir=str(tmp_path_factory.mktemp("ppo")),
        entropy_coef=0.01,
        kl_coef=0.05,  # the reference model and the KL in the reward: the most PPO holds
        **(tiny_train_args | TINY_SHAPE),
    )
    trainer = PPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[length_reward],
        args=args,
        train_dataset=train_rows(32),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    seen = {"rollouts": [], "batches": [], "critic_rows": [], "events": [], "recording": False}
    critic = trainer.accelerator.unwrap_model(trainer.critic)
    with torch.no_grad():  # the value head starts at 0; give it values for the chunked passes to get right
        critic.score.weight.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(0))

    def record_rows(module, args, kwargs):
        if seen["recording"]:
            seen["critic_rows"].append(kwargs["input_ids"].size(0))

    critic.register_forward_pre_hook(record_rows, with_kwargs=True)
    critic.score.weight.register_hook(lambda g: seen["events"].append("critic backward"))
    trainer.model.register_forward_pre_hook(lambda m, a: seen["events"].append("policy forward"))
    generate_and_score, compute_loss = trainer._generate_and_score_completions, trainer._compute_loss

    def rollout(inputs):
        seen["recording"] = True
        out = generate_and_score(inputs)
        seen["recording"] = False
        with torch.no_grad():  # one pass over all rows, before any update
            unchunked = trainer._critic_values(critic, out)
        seen["rollouts"].append(
            {
                "out": out,
                "unchunked_values": unchunked,
                "scores": trainer._last_rewards_per_func[:, 0].clone(),
            }
        )
        seen["events"].append("rollout")
        return out

    def loss(model, inputs):
        seen["batches"].append(inputs)
        seen["events"].append("loss")
        return compute_loss(model, inputs)

    trainer._generate_and_score_completions, trainer._compute_loss = rollout, loss
    trainer.train()
    return trainer, seen


def test_the_critic_has_no_lm_head(trained):
    trainer, _ = trained
    critic = trainer.accelerator.unwrap_model(trainer.critic)
    vocab = trainer.model.config.vocab_size
    assert not any(getattr(m, "out_features", None) == vocab for m in critic.modules())
    assert critic.score.out_features == 1


def test_rollout_values_are_chunked_and_equal_one_pass(trained):
    trainer, seen = trained
    assert len(seen["rollouts"]) == 1  # 2 steps, 1 generation of 8 rows
    rollout = seen["rollouts"][0]
    out = rollout["out"]
    rows, per_device = out["completion_ids"].size(0), trainer.args.per_device_train_batch_size
    assert rows == 2 * per_device
    assert seen["critic_rows"] == [per_device, per_device]  # never a pass over the whole generation batch

    args, mask = trainer.args, out["completion_mask"].float() * out["scorable"][:, None].float()
    assert torch.allclose(out["old_values"], rollout["unchunked_values"] * mask, atol=1e-6)
    assert out["old_values"].abs().max() > 0
    # The stored returns and advantages are GAE over those values, as one pass would give them.
    token_rewards = -args.kl_coef * (out["old_per_token_logps"] - out["ref_per_token_logps"]) * mask
    last = mask.sum(1).long() - 1
    token_rewards[torch.arange(rows), last] += rollout["scores"]
    adv, ret = masked_gae(token_rewards, rollout["unchunked_values"] * mask, mask, args.gamma, args.lam)
    assert torch.allclose(out["returns"], ret, atol=1e-5)
    assert torch.allclose(out["advantages"], masked_whiten(adv, mask), atol=1e-4)


def test_update_backpropagates_the_critic_before_the_policy_forward(trained):
    _, seen = trained
    events = seen["events"]
    steps = [i for i, e in enumerate(events) if e == "loss"]
    assert len(steps) == 2
    for i in steps:
        after = events[i + 1 :]
        assert after[:2] == ["critic backward", "policy forward"], events


def test_update_gradients_equal_one_backward_through_the_summed_loss(trained):
    trainer, seen = trained
    inputs, args = seen["batches"][-1], trainer.args
    policy, critic = trainer.model, trainer.accelerator.unwrap_model(trainer.critic)
    params = [p for p in [*policy.parameters(), *critic.parameters()] if p.requires_grad]
    policy.zero_grad(set_to_none=True)
    critic.zero_grad(set_to_none=True)

    # PPOTrainer's path: the value loss backpropagated inside _compute_loss, the rest by the caller.
    loss = trainer._compute_loss(policy, inputs)
    trainer.accelerator.backward(loss)
    got = [p.grad.clone() if p.grad is not None else None for p in params]
    policy.zero_grad(set_to_none=True)
    critic.zero_grad(set_to_none=True)

    # By hand: both forward passes, one summed loss, one backward.
    mask = inputs["completion_mask"].float() * inputs["scorable"][:, None].float()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    values = critic(input_ids=ids, attention_mask=attention).logits[
        :, inputs["prompt_ids"].size(1) - 1 : -1, 0
    ]
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
        policy, ids, attention, inputs["completion_ids"].size(1), compute_entropy=True
    )
    pg, _ = ppo_clip_loss(
        logps, inputs["old_per_token_logps"], inputs["advantages"], mask, args.epsilon, args.epsilon
    )
    vf, _ = clipped_value_loss(values, inputs["old_values"], inputs["returns"], mask, args.cliprange_value)
    expected_loss = (
        pg + vf - args.entropy_coef * masked_mean(entropies, mask)
    ) / trainer.current_gradient_accumulation_steps
    expected_loss.backward()
    expected = [p.grad for p in params]

    assert loss.item() == pytest.approx(expected_loss.item(), abs=1e-6)
    assert vf.item() > 0 and any(
        g is not None and g.abs().sum() > 0 for g in expected[-2:]
    )  # the value term is live
    for e, g in zip(expected, got, strict=True):
        assert (e is None) == (g is None)
        if e is not None:
            assert torch.allclose(e, g, atol=1e-6, rtol=1e-4)
