"""Each term of passk's trainers where it is not zero, against a hand computation on tiny fabricated tensors.

A term checked only where it vanishes (a KL at pi = pi_ref, a temperature of 1, a discount of 1, a padded
position that is also the last real token, an option in its default combination) survives a sign flip or a
dropped factor. Here every completion has its own length (so padding and the last real token differ), padded
positions hold garbage that must be masked out, and every option combination a method's config allows is run:
the estimators directly, and the trainers' seams (`_generate_and_score_completions` after GRPOTrainer's part,
`_compute_loss`) on trainer objects built without a model, their model calls replaced by fixed tensors.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from experiments.trainers import PKPOTrainer, PPOConfig, PPOTrainer, ReinforceTrainer
from experiments.trainers.estimators import (
    clipped_value_loss,
    explained_variance,
    group_baseline_advantages,
    masked_gae,
    masked_var,
    normalize_rollout_advantages,
    pkpo_advantages,
    policy_gradient_loss,
    ppo_clip_loss,
    rloo_advantages,
)
from experiments.trainers.sampling import SampledLogprobs, check_logprob_temperature
from experiments.trainers.seams import GRPOSeamsMixin

# Three completions of lengths 3, 2 and 4 in a (3, 4) batch; padding holds large garbage values.
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
LENGTHS = [3, 2, 4]
GARBAGE = 7.0


def _padded(rows: list[list[float]]) -> torch.Tensor:
    """A (3, 4) tensor from each row's valid values, padded with GARBAGE."""
    return torch.tensor([r + [GARBAGE] * (4 - len(r)) for r in rows], dtype=torch.float64)


def _hand_gae(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """GAE of one episode, written out: delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}."""
    n = len(rewards)
    adv = [0.0] * n
    for t in reversed(range(n)):
        next_v = values[t + 1] if t + 1 < n else 0.0
        next_a = adv[t + 1] if t + 1 < n else 0.0
        adv[t] = rewards[t] + gamma * next_v - values[t] + gamma * lam * next_a
    return adv


# ---- estimators ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma, lam", [(0.9, 0.8), (0.5, 0.0), (1.0, 0.7), (0.8, 1.0)])
def test_gae_with_discount_and_lambda_over_rows_of_different_lengths(gamma: float, lam: float) -> None:
    r = [[0.1, -0.2, 1.0], [0.3, 0.5], [-0.1, 0.0, 0.2, 2.0]]
    v = [[0.4, 0.2, -0.3], [1.0, -0.5], [0.2, 0.6, -0.1, 0.3]]
    adv, ret = masked_gae(_padded(r), _padded(v), MASK.double(), gamma, lam)
    for i, n in enumerate(LENGTHS):
        want = _hand_gae(r[i], v[i], gamma, lam)
        assert adv[i, :n].tolist() == pytest.approx(want, abs=1e-12)
        assert ret[i, :n].tolist() == pytest.approx([a + b for a, b in zip(want, v[i])], abs=1e-12)
        assert adv[i, n:].abs().sum() == 0 and ret[i, n:].abs().sum() == 0


def test_ppo_clip_loss_asymmetric_range_weights_and_padding() -> None:
    logp = torch.tensor([[0.5, -0.5, 0.05, GARBAGE]])
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, 2.0, GARBAGE]])
    weights = torch.tensor([[0.5, 2.0, 1.5, GARBAGE]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, stats = ppo_clip_loss(logp, old, adv, mask, epsilon_low=0.1, epsilon_high=0.3, weights=weights)
    # ratio e^0.5 = 1.65 > 1.3 with A > 0: clipped to 1.3. ratio e^-0.5 = 0.61 < 0.9 with A < 0: clipped to 0.9
    # (min(-0.61, -0.9) = -0.9). ratio e^0.05 inside: unclipped.
    terms = [0.5 * 1.3 * 1.0, 2.0 * 0.9 * -1.0, 1.5 * math.exp(0.05) * 2.0]
    assert loss.item() == pytest.approx(-sum(terms) / 3, rel=1e-6)
    assert stats["clipfrac"].item() == pytest.approx(2 / 3)
    r = [math.exp(0.5), math.exp(-0.5), math.exp(0.05)]
    assert stats["approx_kl"].item() == pytest.approx(sum((x - 1) - math.log(x) for x in r) / 3, rel=1e-5)


def test_clipped_value_loss_with_a_wide_clip_and_padding() -> None:
    values = torch.tensor([[1.0, -0.2, 0.3, GARBAGE]])
    old = torch.tensor([[0.0, 0.0, 0.0, GARBAGE]])
    returns = torch.tensor([[2.0, 1.0, 0.25, GARBAGE]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, frac = clipped_value_loss(values, old, returns, mask, clip=0.5)
    # 1.0 clips to 0.5: max((1-2)^2, (0.5-2)^2) = 2.25; -0.2 inside: 1.44; 0.3 inside: 0.0025.
    assert loss.item() == pytest.approx(0.5 * (2.25 + 1.44 + 0.0025) / 3, rel=1e-6)
    assert frac.item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("mode", ["whiten", "center", "none"])
@pytest.mark.parametrize("rewards_vary", [True, False])
def test_rollout_normalisation_with_padding_and_two_processes(mode: str, rewards_vary: bool) -> None:
    a = _padded([[1.0, 2.0, 4.0], [-1.0, 3.0], [0.5, 0.0, 2.0, 1.0]])
    valid = [x for i, n in enumerate(LENGTHS) for x in a[i, :n].tolist()]
    mean = sum(valid) / len(valid)
    var = sum((x - mean) ** 2 for x in valid) / (len(valid) - 1)
    out, stats = normalize_rollout_advantages(a, MASK.double(), mode, rewards_vary)
    # The same rollout split over two processes, summed by all_sum, gives the same statistics.
    halves = [(a[:1], MASK[:1].double()), (a[1:], MASK[1:].double())]
    calls = []

    def all_sum_for(index: int):
        def all_sum(t: torch.Tensor) -> torch.Tensor:
            calls.append(t)
            other = halves[1 - index]
            # The other process's contribution to the same reduction, recomputed here.
            if t.dim() == 1:
                return t + torch.stack([(other[0] * other[1]).sum(), other[1].sum()])
            return t + ((other[0] - mean) ** 2 * other[1]).sum()

        return all_sum

    part, part_stats = normalize_rollout_advantages(*halves[0], mode, rewards_vary, all_sum=all_sum_for(0))
    for i, n in enumerate(LENGTHS):
        row = a[i, :n].tolist()
        if mode == "none":
            want = row
        elif not rewards_vary:
            want = [0.0] * n
        elif mode == "center":
            want = [x - mean for x in row]
        else:
            want = [(x - mean) / math.sqrt(var + 1e-8) for x in row]
        assert out[i, :n].tolist() == pytest.approx(want, abs=1e-12)
        assert out[i, n:].abs().sum() == 0
    assert torch.allclose(out[:1], part, atol=1e-12, rtol=0)
    assert stats["mean"].item() == pytest.approx(mean) and part_stats["mean"].item() == pytest.approx(mean)
    assert stats["std"].item() == pytest.approx(math.sqrt(var))
    divisor = {"none": 1.0, "center": 1.0, "whiten": math.sqrt(var + 1e-8)}[mode]
    if mode != "none" and not rewards_vary:
        divisor = 0.0
    assert stats["divisor"].item() == pytest.approx(divisor)


def test_masked_var_biased_and_explained_variance_with_a_mask() -> None:
    x = torch.tensor([[1.0, 2.0, GARBAGE], [4.0, GARBAGE, GARBAGE]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert masked_var(x, m, unbiased=False).item() == pytest.approx(14 / 9)
    assert masked_var(x, m).item() == pytest.approx(7 / 3)
    values = torch.tensor([[1.5, 1.0, -GARBAGE], [3.0, GARBAGE, 0.0]])
    # R - V on the valid entries: -0.5, 1.0, 1.0; var 0.75 over var(R) 7/3.
    assert explained_variance(values, x, m) == pytest.approx(1 - 0.75 / (7 / 3))


@pytest.mark.parametrize("normalize", [False, True])
def test_group_baselines_with_an_unscorable_completion(normalize: bool) -> None:
    r = torch.tensor([1.0, 0.0, float("nan"), 0.5, 0.0, 1.0, 1.0, 0.25])
    groups = [[1.0, 0.0, None, 0.5], [0.0, 1.0, 1.0, 0.25]]

    def whiten(adv: list[float | None]) -> list[float]:
        got = [a for a in adv if a is not None]
        m = sum(got) / len(got)
        s = math.sqrt(sum((a - m) ** 2 for a in got) / (len(got) - 1))
        return [0.0 if a is None else ((a - m) / (s + 1e-8) if s > 1e-8 else a) for a in adv]

    mean_want, loo_want = [], []
    for g in groups:
        got = [x for x in g if x is not None]
        mean_adv = [None if x is None else x - sum(got) / len(got) for x in g]
        loo_adv = [None if x is None else x - (sum(got) - x) / (len(got) - 1) for x in g]
        if normalize:
            mean_adv, loo_adv = whiten(mean_adv), whiten(loo_adv)
        mean_want += [0.0 if a is None else a for a in mean_adv]
        loo_want += [0.0 if a is None else a for a in loo_adv]
    assert group_baseline_advantages(r, 4, normalize).tolist() == pytest.approx(mean_want, abs=1e-6)
    assert rloo_advantages(r, 4, normalize).tolist() == pytest.approx(loo_want, abs=1e-6)


def test_policy_gradient_loss_per_token_advantages_mask_and_token_count() -> None:
    logp = torch.tensor([[-1.0, -2.0, GARBAGE], [-0.5, GARBAGE, GARBAGE]], requires_grad=True)
    adv = torch.tensor([[1.0, 2.0, GARBAGE], [-3.0, GARBAGE, GARBAGE]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    per_seq = [1.0 * -1.0 + 2.0 * -2.0, -3.0 * -0.5]
    assert policy_gradient_loss(logp, adv, mask).item() == pytest.approx(-sum(per_seq) / 2)
    loss = policy_gradient_loss(logp, adv, mask, num_tokens=3.0)
    assert loss.item() == pytest.approx(-sum(per_seq) / 3)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 3, -2 / 3, 0.0, 1.0, 0.0, 0.0])


# ---- the sampling recorder and the seams ----------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_sampled_logprobs_at_a_temperature_with_rows_of_different_lengths(temperature: float) -> None:
    torch.manual_seed(0)
    scores = [torch.randn(2, 5) for _ in range(3)]
    completion = torch.tensor([[3, 1, 0], [4, 0, 0]])  # row 2 ends after one token; 0 is the pad token
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    rec = SampledLogprobs(temperature)
    prompt = torch.tensor([[9], [9]])
    for step, s in enumerate(scores):
        ids = torch.cat([prompt, completion[:, :step]], dim=1)
        assert rec(ids, s) is s  # the scores go on to generate unchanged
    got = rec.per_token_logps(completion, mask)
    want = torch.stack(
        [
            torch.log_softmax(s / temperature, -1).gather(1, completion[:, t : t + 1]).squeeze(1)
            for t, s in enumerate(scores)
        ],
        dim=1,
    )
    assert torch.allclose(got, want)
    # A recording of other tokens (at a real position) does not describe the completion.
    other = completion.clone()
    other[0, 1] = 2
    assert rec.per_token_logps(other, mask) is None
    # A different token at a padded position is fine: padding is not checked.
    padded = completion.clone()
    padded[1, 1] = 2
    assert rec.per_token_logps(padded, mask) is not None


def test_sampled_logprobs_pad_a_longer_completion_and_refuse_what_they_do_not_describe() -> None:
    torch.manual_seed(1)
    scores = [torch.randn(2, 5) for _ in range(2)]
    rec = SampledLogprobs(0.7)
    assert (
        rec.per_token_logps(torch.zeros(2, 2, dtype=torch.long), torch.ones(2, 2)) is None
    )  # nothing recorded
    completion = torch.tensor([[3, 1, 0, 0], [4, 2, 0, 0]])  # 2 sampled steps, right-padded to 4 columns
    for step, s in enumerate(scores):
        rec(torch.cat([torch.tensor([[9], [9]]), completion[:, :step]], dim=1), s)
    got = rec.per_token_logps(completion, torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]]))
    first = [
        torch.log_softmax(s / 0.7, -1).gather(1, completion[:, t : t + 1]).squeeze(1)
        for t, s in enumerate(scores)
    ]
    assert got.shape == (2, 4)
    assert (
        torch.allclose(got[:, :2], torch.stack(first, dim=1)) and got[:, 2:].eq(0).all()
    )  # padded after the steps
    mask = torch.ones(2, 4)
    assert rec.per_token_logps(completion[:, :1], mask[:, :1]) is None  # fewer positions than steps
    assert rec.per_token_logps(completion[:1], mask[:1]) is None  # other rows
    assert rec.per_token_logps(torch.cat([completion] * 2), torch.cat([mask] * 2)) is None  # more rows


def test_sampled_logprobs_describe_a_generation_batch_of_300_rows() -> None:
    """Row counts are compared by value: 300 is past the small integers CPython keeps one object for."""
    torch.manual_seed(2)
    scores = torch.randn(300, 5)
    rec = SampledLogprobs(1.0)
    rec(torch.zeros(300, 1, dtype=torch.long), scores)
    completion = torch.randint(0, 5, (300, 1))
    got = rec.per_token_logps(completion, torch.ones(300, 1))
    assert got is not None and torch.allclose(got, torch.log_softmax(scores, -1).gather(1, completion))


def test_completion_logps_pass_prompt_and_completion_and_policy_logps_the_modes_batch_size() -> None:
    """GRPOTrainer's log-prob pass sees the prompt followed by the completion and keeps the completion's
    positions; the no-gradient pass for log pi_old reads the batch size of the mode it runs in."""
    calls = []
    logps = torch.randn(2, 3)

    def per_token(model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False):
        calls.append((model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy))
        return logps, (torch.ones(2, 3) if compute_entropy else None), None

    seams = _fabricated(
        GRPOSeamsMixin, args=SimpleNamespace(per_device_train_batch_size=4, per_device_eval_batch_size=8)
    )
    seams._get_per_token_logps_and_entropies = per_token
    batch = {
        "prompt_ids": torch.tensor([[0, 5], [6, 7]]),
        "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 3], [4, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]),
    }
    got, entropies = seams._completion_logps("policy", batch, batch_size=3, compute_entropy=True)
    assert got is logps and torch.equal(entropies, torch.ones(2, 3))
    model, ids, attention, keep, size, entropy = calls.pop()
    assert model == "policy" and keep == 3 and size == 3 and entropy
    assert ids.tolist() == [[0, 5, 1, 2, 3], [6, 7, 4, 0, 0]]
    assert attention.tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    seams.model = "the policy"
    for mode, size in (("train", 4), ("eval", 8)):
        assert seams._policy_logps(batch, mode) is logps
        model, *_, size_seen, entropy = calls.pop()
        assert (model, size_seen, entropy) == (
            "the policy",
            size,
            False,
        )  # no entropy where only log pi is used


def test_logprob_temperature_reads_the_config_else_the_sampling_temperature() -> None:
    seams = GRPOSeamsMixin()
    seams.temperature = 0.8
    seams.args = SimpleNamespace(logprob_temperature=None)
    assert seams._logprob_temperature() == 0.8
    seams.args = SimpleNamespace(logprob_temperature=1.5)
    assert seams._logprob_temperature() == 1.5
    seams.args = SimpleNamespace()  # a config without the field (GRPO's)
    assert seams._logprob_temperature() == 0.8


@pytest.mark.parametrize(
    "t, use_vllm, correction, raises",
    [
        (None, True, True, False),
        (0.8, True, True, False),
        (1.0, True, True, True),
        (0.5, True, True, True),  # lower than the sampling temperature differs too
        (1.0, False, True, False),
        (1.0, True, False, False),
    ],
)
def test_check_logprob_temperature_combinations(t, use_vllm, correction, raises) -> None:
    args = SimpleNamespace(
        logprob_temperature=t,
        temperature=float("0.8"),  # parsed: equal to the 0.8 above, not the same object
        use_vllm=use_vllm,
        vllm_importance_sampling_correction=correction,
    )
    if raises:
        with pytest.raises(ValueError, match="^logprob_temperature"):
            check_logprob_temperature(args)
    else:
        check_logprob_temperature(args)


@pytest.mark.parametrize("process_index", [0, 1, 2])
def test_set_advantages_gives_each_process_its_slice_and_replaces_the_logged_batch(
    process_index: int,
) -> None:
    """Advantages over the gathered batch of 3 processes x 2 completions; the completions table holds an older
    batch's entries, then GRPOTrainer's 6 for this batch, which these replace."""
    seams = GRPOSeamsMixin()
    seams.accelerator = SimpleNamespace(process_index=process_index)
    seams._logs = {"advantages": [7.0, 7.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0]}
    advantages = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    out = seams._set_advantages({"completion_ids": torch.zeros(2, 3, dtype=torch.long)}, advantages)
    assert out["advantages"].tolist() == pytest.approx(
        advantages[2 * process_index : 2 * process_index + 2].tolist()
    )
    assert seams._logs["advantages"] == pytest.approx([7.0, 7.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    seams._logs = {"advantages": [9.0]}  # a table that keeps fewer rows than the batch
    seams._set_advantages({"completion_ids": torch.zeros(2, 3, dtype=torch.long)}, advantages)
    assert seams._logs["advantages"] == pytest.approx(advantages.tolist())


def test_loss_mask_drops_tool_tokens_and_rollout_bookkeeping() -> None:
    batch = {"completion_mask": torch.tensor([[1, 1, 1, 0]]), "tool_mask": torch.tensor([[1, 0, 1, 1]])}
    assert GRPOSeamsMixin._loss_mask(batch).tolist() == [[1, 0, 1, 0]]
    assert GRPOSeamsMixin._loss_mask({"completion_mask": batch["completion_mask"]}).tolist() == [[1, 1, 1, 0]]
    seams = GRPOSeamsMixin()
    seams.args = SimpleNamespace(steps_per_generation=2, gradient_accumulation_steps=4)
    seams.use_vllm, seams.vllm_importance_sampling_correction = False, True
    assert not seams._trl_computes_old_logps(2)  # 4 micro-steps per generation, one optimizer step of 4
    assert seams._trl_computes_old_logps(3)  # 6 micro-steps: the later ones are off-policy
    seams.use_vllm = True
    assert seams._trl_computes_old_logps(2)
    seams.use_vllm = False
    # 2 epochs x 2 minibatches: 4 optimizer steps of one micro-step each
    seams.args.gradient_accumulation_steps = 2
    assert seams._trl_computes_old_logps(2)
    assert not seams._trl_computes_old_logps(1)  # 2 minibatches, one optimizer step of both
    seams.args.gradient_accumulation_steps = 4
    seams._buffered_inputs, seams.num_iterations = [1], 2
    seams._step = 4
    assert not seams._inside_rollout()
    seams._step = 5
    assert seams._inside_rollout()
    seams._step = 6  # the second of the two optimizer steps' worth of the same rollout, not a new rollout
    assert seams._inside_rollout()
    seams.args.steps_per_generation, seams.num_iterations = 4, 1  # one epoch of 4 minibatches: 4 micro-steps
    assert [seams._inside_rollout() for seams._step in range(9)] == [False, True, True, True] * 2 + [False]
    seams._buffered_inputs = None  # nothing sampled yet
    assert not seams._inside_rollout()


class _Checkpoints:
    """What GRPOSeamsMixin's checkpoint hooks call up to: the Trainer's part, which does nothing here."""

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        pass


class _Resumer(GRPOSeamsMixin, _Checkpoints):
    accelerator = SimpleNamespace(process_index=0, device=torch.device("cpu"))
    _step, _buffered_inputs = 0, None


def test_a_resume_takes_the_rollout_only_from_the_checkpoint_that_holds_one(tmp_path, monkeypatch) -> None:
    """A checkpoint between rollouts holds no rollout file: the resume samples afresh. A rollout file elsewhere
    (here in the working directory) is never read when there is no checkpoint."""
    from experiments.trainers.seams import ROLLOUT_FILE

    between = tmp_path / "checkpoint-4"
    between.mkdir()
    trainer = _Resumer()
    trainer._load_optimizer_and_scheduler(str(between))
    assert (trainer._step, trainer._buffered_inputs) == (0, None)
    monkeypatch.chdir(tmp_path)
    torch.save({"step": 3, "buffered_inputs": [{"x": torch.ones(1)}]}, ROLLOUT_FILE.format(rank=0))
    trainer._load_optimizer_and_scheduler(None)
    assert (trainer._step, trainer._buffered_inputs) == (0, None)
    inside = tmp_path / "checkpoint-3"
    inside.mkdir()
    (tmp_path / ROLLOUT_FILE.format(rank=0)).rename(inside / ROLLOUT_FILE.format(rank=0))
    trainer._load_optimizer_and_scheduler(str(inside))
    assert trainer._step == 3 and torch.equal(trainer._buffered_inputs[0]["x"], torch.ones(1))


class _Generation:
    """GRPOTrainer's `_generate_single_turn`, reduced to noting whether the policy's generate was patched."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images):
        self.patched.append("generate" in vars(self.model))
        return "completions"


class _Policy:
    def generate(self, **kwargs):
        raise AssertionError("not called here")


class _Sampler(GRPOSeamsMixin, _Generation):
    def __init__(self, wants: bool, penalty: float) -> None:
        self.wants, self.repetition_penalty = wants, penalty
        self.use_vllm = self.use_transformers_continuous_batching = False
        self.temperature, self.args = 1.0, SimpleNamespace(logprob_temperature=None)
        self.model, self.patched = _Policy(), []
        self.accelerator = _Accelerator()

    def _wants_sampled_logps(self) -> bool:
        return self.wants


@pytest.mark.parametrize("wants", [True, False])
@pytest.mark.parametrize("penalty", [1.0, 1.2])
def test_sampling_records_log_pi_only_when_wanted_and_recordable(wants: bool, penalty: float) -> None:
    """The recorder is set, and generate patched with it, only when the method wants log π of the samples and
    generate can give it (no repetition penalty); either alone leaves sampling as GRPOTrainer's."""
    sampler = _Sampler(wants, penalty)
    assert sampler._generate_single_turn([[1]], None, None, 2) == "completions"
    record = wants and penalty == 1.0
    assert sampler.patched == [record]
    assert isinstance(sampler._sampling_recorder, SampledLogprobs) is record
    assert "generate" not in vars(sampler.model)  # the class's generate is back


# ---- fabricated trainers ----------------------------------------------------------------------------------------
class _Accelerator:
    process_index = 0
    num_processes = 1

    @staticmethod
    def reduce(t: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return t

    @staticmethod
    def gather(t: torch.Tensor) -> torch.Tensor:
        return t

    @staticmethod
    def unwrap_model(m):
        return m

    @staticmethod
    def backward(loss: torch.Tensor) -> None:
        loss.backward()


def _fabricated(cls: type, training: bool = True, **attrs):
    trainer = object.__new__(cls)
    trainer.model = SimpleNamespace(training=training)
    trainer.accelerator = _Accelerator()
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer._logs = {"advantages": []}
    trainer._sampling_recorder = None
    trainer.reward_weights = torch.tensor([1.0, 0.5])
    for key, value in attrs.items():
        setattr(trainer, key, value)
    return trainer


def _rollout(monkeypatch: pytest.MonkeyPatch, out: dict) -> None:
    """GRPOTrainer's part of `_generate_and_score_completions` replaced by a fixed batch."""
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", lambda self, inputs: dict(out))


# Four completions, two prompts of two; per function rewards (weights 1 and 0.5); the third is unscorable in
# training, so its group's baselines use one completion.
REWARDS_PER_FUNC = torch.tensor([[1.0, 0.0], [0.0, 1.0], [float("nan"), float("nan")], [0.5, 1.0]])
SCALAR = [1.0, 0.5, float("nan"), 1.0]


def _only_scorable(rows: list[int]) -> torch.Tensor:
    """REWARDS_PER_FUNC with every other row unscorable (NaN for every function)."""
    rewards = torch.full((4, 2), float("nan"))
    rewards[rows] = REWARDS_PER_FUNC[rows]
    return rewards


MASK4 = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
OLD = torch.tensor(
    [
        [-1.0, -0.5, -2.0, GARBAGE],
        [-0.2, -0.3, GARBAGE, GARBAGE],
        [-1.0, -1.0, -1.0, -1.0],
        [-0.7, GARBAGE, GARBAGE, GARBAGE],
    ]
)
REF = torch.tensor(
    [
        [-1.5, -0.5, -1.0, -GARBAGE],
        [-0.4, -0.1, -GARBAGE, 0.0],
        [-1.0, -2.0, -0.5, -1.0],
        [-0.2, 0.0, 0.0, 0.0],
    ]
)


def _batch() -> dict:
    return {
        "completion_ids": torch.ones(4, 4, dtype=torch.long),
        "completion_mask": MASK4.clone(),
        "old_per_token_logps": OLD.clone(),
        "ref_per_token_logps": REF.clone(),
    }


def _kl_sums() -> list[float]:
    return [float(((OLD[i] - REF[i]) * MASK4[i]).sum()) for i in range(4)]


def _reinforce_args(**kw) -> SimpleNamespace:
    base = {
        "kl_coef": 0.0,
        "baseline": "batch_mean",
        "normalize_advantages": False,
        "loss_normalization": "sequence",
        "steps_per_generation": 1,
    }
    return SimpleNamespace(**(base | kw))


def _reinforce_rollout(rewards_per_func: torch.Tensor = REWARDS_PER_FUNC, **args) -> ReinforceTrainer:
    """A REINFORCE trainer over the four completions in groups of two, for the rollout seam."""
    return _fabricated(
        ReinforceTrainer,
        num_generations=2,
        num_generations_eval=2,
        args=_reinforce_args(**args),
        _last_rewards_per_func=rewards_per_func.clone(),
    )


def _hand_reinforce(rewards: list[float], baseline: str, normalize: bool, group: int) -> list[float]:
    valid = [i for i, r in enumerate(rewards) if not math.isnan(r)]
    if baseline == "none":
        return [0.0 if math.isnan(r) else r for r in rewards]
    if baseline == "batch_mean":
        m = sum(rewards[i] for i in valid) / len(valid)
        adv = [0.0 if math.isnan(r) else r - m for r in rewards]
        if normalize:
            am = sum(adv[i] for i in valid) / len(valid)
            var = sum((adv[i] - am) ** 2 for i in valid) / (len(valid) - 1)
            adv = [0.0 if i not in valid else (a - am) / math.sqrt(var + 1e-8) for i, a in enumerate(adv)]
        return adv
    flat = torch.tensor(rewards)
    fn = group_baseline_advantages if baseline == "group_mean" else rloo_advantages
    return fn(flat, group, normalize).tolist()


@pytest.mark.parametrize("kl_coef", [0.0, 0.3])
@pytest.mark.parametrize(
    "baseline, normalize",
    [
        ("none", False),
        ("batch_mean", False),
        ("batch_mean", True),
        ("group_mean", False),
        ("group_mean", True),
        ("rloo", False),
        ("rloo", True),
    ],
)
def test_reinforce_advantages_with_the_kl_penalty_and_each_baseline(
    monkeypatch: pytest.MonkeyPatch, kl_coef: float, baseline: str, normalize: bool
) -> None:
    _rollout(monkeypatch, _batch())
    trainer = _fabricated(
        ReinforceTrainer,
        num_generations=2,
        num_generations_eval=4,
        # The baseline as a parsed config hands it over: an equal string, not the same object as the literal.
        args=_reinforce_args(
            kl_coef=kl_coef, baseline="".join(list(baseline)), normalize_advantages=normalize
        ),
        _last_rewards_per_func=REWARDS_PER_FUNC.clone(),
    )
    out = trainer._generate_and_score_completions([{}] * 4)
    shaped = [r - kl_coef * k for r, k in zip(SCALAR, _kl_sums())]
    want = _hand_reinforce(shaped, baseline, normalize, group=2)
    assert out["advantages"].tolist() == pytest.approx(want, abs=1e-5)
    assert trainer._logs["advantages"] == pytest.approx(want, abs=1e-5)
    metrics = trainer._metrics["train"]
    if kl_coef:
        kl_mean = sum(_kl_sums()) / float(MASK4.sum())
        assert metrics["kl"] == pytest.approx([kl_mean])
        penalties = [kl_coef * k for k in _kl_sums()]
        assert metrics["reinforce/kl_penalty"] == pytest.approx([sum(penalties) / 4])
    else:
        assert "kl" not in metrics
    # The logged baseline and advantage spread are over the three scorable completions.
    scorable = [0, 1, 3]
    a = [want[i] for i in scorable]
    mean = sum(a) / 3
    assert metrics["reinforce/advantage_mean"] == pytest.approx([mean], abs=1e-6)
    assert metrics["reinforce/advantage_std"] == pytest.approx(
        [math.sqrt(sum((x - mean) ** 2 for x in a) / 2)], abs=1e-6
    )
    if normalize:  # a normalised advantage is not reward minus a baseline
        assert "reinforce/baseline" not in metrics
    else:
        assert metrics["reinforce/baseline"] == pytest.approx(
            [sum(shaped[i] - want[i] for i in scorable) / 3], abs=1e-6
        )


@pytest.mark.parametrize("recorded", [True, False])
def test_reinforce_kl_penalty_reads_the_recorded_logps_else_a_forward_pass(
    monkeypatch: pytest.MonkeyPatch, recorded: bool
) -> None:
    """On-policy without vLLM, GRPOTrainer computes no log π_old: the KL shaping takes the log π recorded while
    sampling, or runs a forward pass of the policy when there is no usable recording."""
    batch = _batch()
    del batch["old_per_token_logps"]
    _rollout(monkeypatch, batch)
    calls = []
    trainer = _reinforce_rollout(kl_coef=0.5, baseline="none")
    if recorded:
        trainer._sampling_recorder = SimpleNamespace(per_token_logps=lambda ids, mask: OLD.clone())
    trainer._policy_logps = lambda out, mode: calls.append(mode) or OLD.clone()
    out = trainer._generate_and_score_completions([{}] * 4)
    shaped = [0.0 if math.isnan(r) else r - 0.5 * k for r, k in zip(SCALAR, _kl_sums())]
    assert out["advantages"].tolist() == pytest.approx(shaped, abs=1e-6)
    assert calls == ([] if recorded else ["train"])
    assert trainer._metrics["train"]["reinforce/kl_logps_recorded"] == [float(recorded)]
    assert trainer._sampling_recorder is None  # a recording describes one batch only


def test_reinforce_eval_groups_use_the_eval_group_size(monkeypatch: pytest.MonkeyPatch) -> None:
    _rollout(monkeypatch, _batch())
    trainer = _fabricated(
        ReinforceTrainer,
        training=False,
        num_generations=2,
        num_generations_eval=4,
        args=_reinforce_args(baseline="rloo"),
        _last_rewards_per_func=REWARDS_PER_FUNC.clone(),
    )
    out = trainer._generate_and_score_completions([{}] * 4)
    assert out["advantages"].tolist() == pytest.approx(rloo_advantages(torch.tensor(SCALAR), 4).tolist())
    assert trainer._metrics["eval"]["reinforce/advantage_mean"] and not trainer._metrics["train"]


LOGP = torch.tensor(
    [
        [-1.0, -0.5, -2.0, GARBAGE],
        [-0.2, -0.3, GARBAGE, GARBAGE],
        [-0.1, -0.4, -1.0, -0.6],
        [-0.7, GARBAGE, GARBAGE, GARBAGE],
    ]
)
ADV = torch.tensor([1.0, -0.5, 0.0, 2.0])


@pytest.mark.parametrize("normalization", ["sequence", "token"])
@pytest.mark.parametrize("off_policy", [False, True])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("processes", [1, 2])
def test_reinforce_loss_with_each_normalisation_and_off_policy_weights(
    normalization: str, off_policy: bool, training: bool, processes: int
) -> None:
    logp = LOGP.clone().requires_grad_(True)
    shift = torch.tensor([[0.1, -0.2, 0.3, GARBAGE]] * 4)
    shift[2, 3] = 0.2  # the one row that fills its last position: a real ratio there, below the padding's
    old = LOGP - shift
    trainer = _fabricated(
        ReinforceTrainer,
        training=training,
        current_gradient_accumulation_steps=2,
        # The option as a parsed config hands it over: an equal string, not the same object as the literal.
        args=_reinforce_args(loss_normalization="".join(list(normalization)), steps_per_generation=3),
    )
    trainer.accelerator.num_processes = processes  # this process's view: reduce and gather stay its own
    trainer._completion_logps = lambda model, inputs, compute_entropy=False: (
        logp,
        torch.full_like(logp, 0.25) if compute_entropy else None,  # as GRPOTrainer's pass: asked for, or None
    )
    inputs = {
        "completion_mask": MASK4.clone(),
        "advantages": ADV.clone(),
        "num_items_in_batch": torch.tensor(25.0),  # 12.5 on each of 2 processes; 25 x 2 / 3 is fractional
    }
    if off_policy:
        inputs["old_per_token_logps"] = old
        inputs["importance_sampling_ratio"] = torch.full_like(logp, 0.5)
    loss = trainer._compute_loss(None, inputs)
    w = torch.exp(LOGP - old) * 0.5 if off_policy else torch.ones_like(LOGP)
    m = MASK4.float()
    total = -(ADV[:, None] * LOGP * w * m).sum().item()
    ga = 2 if training else 1
    if normalization == "token":
        # The generation batch's tokens shared by the processes; in training, over one accumulation window of the
        # 3 steps the generation feeds (no whole number of tokens, and none is rounded).
        tokens = 25.0 / processes * (ga / 3 if training else 1)
        want, grad_scale = total / tokens, 1 / tokens
    else:
        want = total / 4 / ga
        grad_scale = 1 / 4 / ga
    assert loss.item() == pytest.approx(want, rel=1e-6)
    loss.backward()  # the weights are detached: d loss / d log pi = -A w / N
    assert torch.allclose(logp.grad, -(ADV[:, None] * w * m) * grad_scale, atol=1e-7, rtol=0)
    metrics = trainer._metrics["train" if training else "eval"]
    assert metrics["entropy"] == pytest.approx([0.25])
    if off_policy:  # the largest ratio pi / pi_old over the real tokens; the padding's garbage is not one
        assert metrics["reinforce/is_ratio_max"] == pytest.approx([math.exp(0.3)])
    else:
        assert "reinforce/is_ratio_max" not in metrics


@pytest.mark.parametrize("scorable", [[0, 1], [1], []])
def test_reinforce_rollout_metrics_with_few_scorable_completions_and_no_completion_tokens(
    monkeypatch: pytest.MonkeyPatch, scorable: list[int]
) -> None:
    """The logged advantage spread needs two scorable completions (else 0); a batch of empty completions (EOS
    first) has a KL of 0, not 0 / 0."""
    batch = _batch()
    batch["completion_mask"] = torch.zeros_like(MASK4)
    _rollout(monkeypatch, batch)
    rewards_per_func = _only_scorable(scorable)
    trainer = _reinforce_rollout(rewards_per_func, kl_coef=0.3, baseline="none")
    out = trainer._generate_and_score_completions([{}] * 4)
    want = [SCALAR[i] if i in scorable else 0.0 for i in range(4)]
    assert out["advantages"].tolist() == pytest.approx(want)
    metrics = trainer._metrics["train"]
    assert metrics["kl"] == [0.0]
    a = [SCALAR[i] for i in scorable]
    assert metrics["reinforce/advantage_mean"] == pytest.approx([sum(a) / len(a) if a else 0.0])
    assert metrics["reinforce/advantage_std"] == pytest.approx([statistics.stdev(a) if len(a) > 1 else 0.0])


def test_reinforce_kl_metric_of_a_single_completion_token(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = _batch()
    batch["completion_mask"] = torch.zeros_like(MASK4)
    batch["completion_mask"][1, 0] = 1
    _rollout(monkeypatch, batch)
    trainer = _reinforce_rollout(kl_coef=0.3, baseline="none")
    trainer._generate_and_score_completions([{}] * 4)
    assert trainer._metrics["train"]["kl"] == pytest.approx([float(OLD[1, 0] - REF[1, 0])])


def _reinforce_loss(inputs: dict, entropy: float = 0.25, **args) -> tuple[torch.Tensor, dict]:
    trainer = _fabricated(
        ReinforceTrainer, current_gradient_accumulation_steps=1, args=_reinforce_args(**args)
    )
    trainer._completion_logps = lambda model, inputs, compute_entropy=False: (
        LOGP.clone(),
        torch.full_like(LOGP, entropy) if compute_entropy else None,
    )
    return trainer._compute_loss(None, inputs), trainer._metrics["train"]


def test_reinforce_loss_weighs_by_vllms_ratio_alone_when_on_policy() -> None:
    """Sampled by vLLM with no update since (no log pi_old): the truncated pi / pi_vLLM ratio is the only weight."""
    ratio = torch.full_like(LOGP, 0.5)
    inputs = {"completion_mask": MASK4.clone(), "advantages": ADV.clone(), "importance_sampling_ratio": ratio}
    loss, metrics = _reinforce_loss(inputs)
    assert loss.item() == pytest.approx(-(ADV[:, None] * LOGP * 0.5 * MASK4).sum().item() / 4)
    assert "reinforce/is_ratio_max" not in metrics


def test_reinforce_loss_without_completion_tokens_is_zero_and_one_token_logs_its_entropy() -> None:
    empty = {
        "completion_mask": torch.zeros_like(MASK4),
        "advantages": ADV.clone(),
        "num_items_in_batch": torch.tensor(0.0),
    }
    loss, metrics = _reinforce_loss(empty, loss_normalization="token")
    assert loss.item() == 0.0 and metrics["entropy"] == [0.0]
    one = torch.zeros_like(MASK4)
    one[3, 0] = 1
    loss, metrics = _reinforce_loss(
        {"completion_mask": one, "advantages": ADV.clone(), "num_items_in_batch": torch.tensor(1.0)},
        entropy=0.8,
        loss_normalization="token",
    )
    assert loss.item() == pytest.approx(-2.0 * -0.7)
    assert metrics["entropy"] == pytest.approx([0.8])


# ---- PPO ------------------------------------------------------------------------------------------------------
VALUES = torch.tensor(
    [
        [0.2, -0.1, 0.4, GARBAGE],
        [0.5, 0.3, GARBAGE, GARBAGE],
        [0.0, 0.1, 0.2, 0.3],
        [-0.4, GARBAGE, GARBAGE, GARBAGE],
    ]
)


def _ppo_args(**kw) -> SimpleNamespace:
    base = {
        "kl_coef": 0.0,
        "gamma": 1.0,
        "lam": 1.0,
        "advantage_normalization": "whiten",
        "steps_per_generation": 1,
        "gradient_accumulation_steps": 1,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 8,  # not the training one, so that the chunk read shows which applies
        "kl_in": "reward",
        "cliprange_value": 0.2,
        "entropy_coef": 0.0,
        "critic_warmup_steps": 0,
    }
    return SimpleNamespace(**(base | kw))


def _ppo(training: bool = True, rewards_per_func: torch.Tensor = REWARDS_PER_FUNC, **args) -> PPOTrainer:
    trainer = _fabricated(
        PPOTrainer,
        training=training,
        args=_ppo_args(**args),
        num_iterations=1,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        use_transformers_continuous_batching=False,
        repetition_penalty=1.0,
        critic=None,
        _last_rewards_per_func=rewards_per_func.clone(),
        state=SimpleNamespace(global_step=0),
        epsilon_low=0.2,
        epsilon_high=0.2,
        current_gradient_accumulation_steps=1,
        _step=0,
    )
    return trainer


@pytest.mark.parametrize("kl_coef", [0.0, 0.25])
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.9, 0.7)])
@pytest.mark.parametrize("mode", ["whiten", "center", "none"])
def test_ppo_rollout_rewards_gae_and_normalisation(
    monkeypatch: pytest.MonkeyPatch, kl_coef: float, gamma: float, lam: float, mode: str
) -> None:
    _rollout(monkeypatch, _batch())
    trainer = _ppo(kl_coef=kl_coef, gamma=gamma, lam=lam, advantage_normalization=mode)
    seen = []
    trainer._critic_values = lambda critic, batch, batch_size=None: seen.append(batch_size) or VALUES.clone()
    out = trainer._generate_and_score_completions([{}] * 4)
    assert seen == [4]
    lengths = [3, 2, 0, 1]  # the unscorable third completion is out of the loss
    raw, all_adv = [], []
    for i, n in enumerate(lengths):
        r = [-kl_coef * float(OLD[i, t] - REF[i, t]) for t in range(n)]
        if n:
            r[-1] += SCALAR[i]
        v = VALUES[i, :n].tolist()
        a = _hand_gae(r, v, gamma, lam)
        raw.append(a)
        all_adv += a
        assert out["returns"][i, :n].tolist() == pytest.approx([x + y for x, y in zip(a, v)], abs=1e-6)
        assert out["old_values"][i, :n].tolist() == pytest.approx(v)
        assert out["old_values"][i, n:].abs().sum() == 0 and out["returns"][i, n:].abs().sum() == 0
    mean = sum(all_adv) / len(all_adv)
    std = math.sqrt(sum((a - mean) ** 2 for a in all_adv) / (len(all_adv) - 1))
    for i, n in enumerate(lengths):
        want = {
            "none": raw[i],
            "center": [a - mean for a in raw[i]],
            "whiten": [(a - mean) / math.sqrt(std**2 + 1e-8) for a in raw[i]],
        }[mode]
        assert out["advantages"][i, :n].tolist() == pytest.approx(want, abs=1e-5)
        assert out["advantages"][i, n:].abs().sum() == 0
    assert out["scorable"].tolist() == [True, True, False, True]
    metrics = trainer._metrics["train"]
    assert metrics["ppo/adv_raw_mean"] == pytest.approx([mean], abs=1e-6)
    assert metrics["ppo/no_reward_variance"] == [0.0]
    assert metrics["ppo/adv_raw_std"] == pytest.approx([std], abs=1e-6)
    divisor = {"none": 1.0, "center": 1.0, "whiten": math.sqrt(std**2 + 1e-8)}[mode]
    assert metrics["ppo/adv_divisor"] == pytest.approx([divisor], abs=1e-6)
    # Values and returns over the counted tokens only (not the unscorable row, not the padding).
    counted = [(i, t) for i, n in enumerate(lengths) for t in range(n)]
    value_mean = sum(float(VALUES[i, t]) for i, t in counted) / len(counted)
    returns = [raw[i][t] + float(VALUES[i, t]) for i, t in counted]
    assert metrics["ppo/value_mean"] == pytest.approx([value_mean], abs=1e-6)
    assert metrics["ppo/return_mean"] == pytest.approx([sum(returns) / len(returns)], abs=1e-6)
    if kl_coef:
        kl = [sum(float(OLD[i, t] - REF[i, t]) for t in range(n)) for i, n in enumerate(lengths)]
        assert metrics["kl"] == pytest.approx([sum(kl) / sum(lengths)])
        assert metrics["ppo/kl_penalty"] == pytest.approx([kl_coef * sum(kl) / 4])


def test_ppo_rollout_on_a_second_process_scores_its_own_rows_and_sees_the_whole_rollouts_variance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Process 1 of 2: the gathered rewards hold process 0's four rows (all 0.5, no variance) then this one's."""
    _rollout(monkeypatch, _batch())
    here = torch.tensor(
        [[0.0, 2.0], [0.0, 2.0], [float("nan"), float("nan")], [0.0, 2.0]]
    )  # scores 1, 1, -, 1
    gathered = torch.cat([torch.tensor([[0.5, 0.0]] * 4), here])
    trainer = _ppo(advantage_normalization="none", rewards_per_func=gathered)
    trainer.accelerator = SimpleNamespace(**{**vars(_Accelerator), "process_index": 1, "num_processes": 2})
    trainer._critic_values = lambda critic, batch, batch_size=None: torch.zeros(4, 4)
    out = trainer._generate_and_score_completions([{}] * 4)
    # gamma = lam = 1, V = 0, no KL: every counted token's advantage is its completion's score.
    want = MASK4.float() * torch.tensor([[1.0], [1.0], [0.0], [1.0]])
    assert torch.allclose(out["advantages"], want)
    assert out["scorable"].tolist() == [True, True, False, True]
    # The scores vary across the rollout (0.5 there, 1 here), though not on this process.
    assert trainer._metrics["train"]["ppo/no_reward_variance"] == [0.0]


@pytest.mark.parametrize(
    "kl_coef, epochs, spg, ga, needed",
    [
        (0.0, 1, 1, 1, False),
        (0.0, 2, 1, 1, True),
        (0.0, 1, 4, 1, True),
        (0.0, 1, 2, 2, False),
        (0.0, 1, 1, 2, False),  # two rollouts per optimizer step, both sampled by the policy that is trained
        (0.1, 1, 1, 1, True),
    ],
)
@pytest.mark.parametrize("recorded", [True, False])
def test_ppo_rollout_keeps_log_pi_old_only_when_a_ratio_or_the_kl_penalty_needs_it(
    monkeypatch: pytest.MonkeyPatch,
    kl_coef: float,
    epochs: int,
    spg: int,
    ga: int,
    needed: bool,
    recorded: bool,
) -> None:
    """log π_old is needed by the KL penalty and by every update after the first on a rollout (more epochs, or
    more minibatches than one optimizer step's); it comes from the recording, else from a forward pass."""
    batch = _batch()
    del batch["old_per_token_logps"]
    _rollout(monkeypatch, batch)
    trainer = _ppo(kl_coef=kl_coef, steps_per_generation=spg, gradient_accumulation_steps=ga)
    trainer.num_iterations = epochs
    calls = []
    if recorded:
        trainer._sampling_recorder = SimpleNamespace(per_token_logps=lambda ids, mask: OLD.clone())
    trainer._policy_logps = lambda out, mode: calls.append(mode) or OLD.clone()
    trainer._critic_values = lambda critic, batch, batch_size=None: VALUES.clone()
    out = trainer._generate_and_score_completions([{}] * 4)
    if needed:
        assert torch.equal(out["old_per_token_logps"], OLD)
    else:
        assert out.get("old_per_token_logps") is None
    assert calls == (["train"] if needed and not recorded else [])
    assert trainer._metrics["train"]["ppo/old_logps_recorded"] == [float(recorded)]
    assert (trainer.num_iterations, trainer.args.steps_per_generation) == (
        epochs,
        spg,
    )  # restored after sampling


@pytest.mark.parametrize("penalty, grpo_sees", [(1.0, (1, 1)), (1.3, (2, 4))])
def test_ppo_hides_the_rollouts_later_updates_from_grpo_only_while_sampling_records(
    monkeypatch: pytest.MonkeyPatch, penalty: float, grpo_sees: tuple[int, int]
) -> None:
    """2 epochs of 4 minibatches: GRPOTrainer would compute log π_old with a forward pass. While sampling records
    it, PPO shows GRPOTrainer one on-policy step; under a repetition penalty nothing can be recorded, and
    GRPOTrainer sees the rollout as it is (and computes log π_old itself)."""
    seen = []

    def grpo_part(self, inputs):
        seen.append((self.num_iterations, self.args.steps_per_generation))
        return _batch()

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", grpo_part)
    trainer = _ppo(steps_per_generation=4, gradient_accumulation_steps=1)
    trainer.num_iterations, trainer.repetition_penalty = 2, penalty
    trainer._critic_values = lambda critic, batch, batch_size=None: VALUES.clone()
    trainer._generate_and_score_completions([{}] * 4)
    assert seen == [grpo_sees]
    assert (trainer.num_iterations, trainer.args.steps_per_generation) == (2, 4)


@pytest.mark.parametrize("sync", [True, False])
def test_ppo_critic_gradients_are_reduced_only_on_the_steps_last_micro_batch(
    monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """As for the policy: the micro-batches before the last accumulate the critic's gradients without the
    all-reduce (accelerate's no_sync), and the last one reduces them."""
    entered = []

    @contextlib.contextmanager
    def no_sync(model):
        entered.append(model)
        yield

    trainer = _ppo()
    trainer.critic = torch.nn.Linear(1, 1).eval()
    trainer.accelerator = SimpleNamespace(sync_gradients=sync, no_sync=no_sync)
    monkeypatch.setattr(
        GRPOTrainer, "training_step", lambda self, model, inputs, n: entered.append("step") or "loss"
    )
    assert trainer.training_step(trainer.model, {}, 4) == "loss"
    assert entered == (["step"] if sync else [trainer.critic, "step"])
    assert trainer.critic.training


def test_ppo_rollout_without_reward_variance_zeroes_the_advantages(monkeypatch: pytest.MonkeyPatch) -> None:
    _rollout(monkeypatch, _batch())
    flat = torch.tensor([[1.0, 0.0]] * 4)
    for mode, zeroed in (("whiten", True), ("center", True), ("none", False)):
        trainer = _ppo(kl_coef=0.1, advantage_normalization=mode, rewards_per_func=flat)
        trainer._critic_values = lambda critic, batch, batch_size=None: VALUES.clone()
        out = trainer._generate_and_score_completions([{}] * 4)
        assert (out["advantages"].abs().sum() == 0) == zeroed
        assert trainer._metrics["train"]["ppo/no_reward_variance"] == [1.0]


@pytest.mark.parametrize(
    "rewards_per_func",
    [
        # Per function the rows differ, but weighted (1, 0.5) every completion scores 1: nothing to learn.
        [[1.0, 0.0], [0.0, 2.0], [0.5, 1.0], [1.0, 0.0]],
        [[float("nan")] * 2] * 4,  # nothing scorable at all
    ],
    ids=["equal-weighted-scores", "all-unscorable"],
)
def test_ppo_rollout_judges_variance_on_the_weighted_scores(
    monkeypatch: pytest.MonkeyPatch, rewards_per_func: list
) -> None:
    _rollout(monkeypatch, _batch())
    trainer = _ppo(advantage_normalization="whiten", rewards_per_func=torch.tensor(rewards_per_func))
    trainer._critic_values = lambda critic, batch, batch_size=None: VALUES.clone()
    out = trainer._generate_and_score_completions([{}] * 4)
    assert out["advantages"].abs().sum() == 0
    assert trainer._metrics["train"]["ppo/no_reward_variance"] == [1.0]


def test_ppo_rollout_a_spread_at_the_tolerance_is_no_variance(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores vary when max - min is more than 1e-8; a spread of exactly that (in float32) is none."""
    _rollout(monkeypatch, _batch())
    rewards = torch.tensor([[0.0, 0.0], [1e-8, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert rewards[1, 0].item() - rewards[0, 0].item() == torch.tensor(1e-8).item()
    trainer = _ppo(advantage_normalization="whiten", rewards_per_func=rewards)
    trainer._critic_values = lambda critic, batch, batch_size=None: VALUES.clone()
    trainer._generate_and_score_completions([{}] * 4)
    assert trainer._metrics["train"]["ppo/no_reward_variance"] == [1.0]


def test_ppo_rollout_two_scorable_completions_that_differ_are_variance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _rollout(monkeypatch, _batch())
    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [nan, nan], [nan, nan]])
    trainer = _ppo(advantage_normalization="whiten", rewards_per_func=rewards)
    trainer._critic_values = lambda critic, batch, batch_size=None: torch.zeros(4, 4)
    out = trainer._generate_and_score_completions([{}] * 4)
    assert trainer._metrics["train"]["ppo/no_reward_variance"] == [0.0]
    assert out["advantages"][:2].abs().sum() > 0 and out["advantages"][2:].abs().sum() == 0


def test_ppo_rollout_a_scorable_completion_without_counted_tokens_gets_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A completion whose every token is masked (a tool's output, say) but which still has a score: its row
    holds no reward, advantage or return anywhere, not its score on the last column."""
    batch = _batch()
    batch["completion_mask"][3] = 0
    _rollout(monkeypatch, batch)
    trainer = _ppo(advantage_normalization="none")
    trainer._critic_values = lambda critic, batch, batch_size=None: torch.zeros(4, 4)
    out = trainer._generate_and_score_completions([{}] * 4)
    assert out["advantages"][3].abs().sum() == 0 and out["returns"][3].abs().sum() == 0
    assert out["advantages"][0, :3].tolist() == pytest.approx([SCALAR[0]] * 3)  # gamma = lam = 1, V = 0


@pytest.mark.parametrize("shape", ["three-positions", "no-completion-tokens", "one-completion-token"])
def test_ppo_rollout_kl_metrics_per_token_and_per_completion(
    monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """The logged KL is a mean over completion tokens (0 when there are none), the penalty a mean over the
    completions' sums: on a batch as tall as it is wide the two axes cannot be told apart, so these are not."""
    batch = {k: v[:, :3].clone() for k, v in _batch().items()}
    if shape != "three-positions":
        batch["completion_mask"].zero_()
    if shape == "one-completion-token":
        batch["completion_mask"][1, 0] = 1
    _rollout(monkeypatch, batch)
    trainer = _ppo(kl_coef=0.5, advantage_normalization="none")
    trainer._critic_values = lambda critic, batch, batch_size=None: VALUES[:, :3].clone()
    trainer._generate_and_score_completions([{}] * 4)
    mask = batch["completion_mask"] * torch.tensor([[1], [1], [0], [1]])  # the unscorable row is not counted
    kl = ((OLD[:, :3] - REF[:, :3]) * mask).sum(dim=1)
    metrics = trainer._metrics["train"]
    assert metrics["kl"] == pytest.approx([kl.sum().item() / max(mask.sum().item(), 1)])
    assert metrics["ppo/kl_penalty"] == pytest.approx([0.5 * kl.sum().item() / 4])


class _ValueHead:
    """A critic whose output at each position is its token id plus half its attention bit (channel 0), with a
    decoy in channel 1; it records the rows of each call."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        self.rows.append(input_ids.size(0))
        value = input_ids.float() + 0.5 * attention_mask.float()
        return SimpleNamespace(logits=torch.stack([value, -value - 1000.0], dim=-1))


@pytest.mark.parametrize("batch_size", [None, 2, 1])
def test_critic_values_read_the_position_before_each_completion_token_in_chunks(
    batch_size: int | None,
) -> None:
    """V(s_t) is the critic's channel 0 at position P - 1 + t of prompt + completion, for 9 rows (more than
    the 7 positions) in chunks."""
    rows, prompt, completion = 9, 3, 4
    ids = torch.arange(rows * (prompt + completion)).view(rows, prompt + completion) * 10
    attention = (torch.rand(rows, prompt + completion) > 0.3).long()
    batch = {
        "prompt_ids": ids[:, :prompt],
        "prompt_mask": attention[:, :prompt],
        "completion_ids": ids[:, prompt:],
        "completion_mask": attention[:, prompt:],
    }
    trainer = _ppo()
    trainer.accelerator.autocast = contextlib.nullcontext
    critic = _ValueHead()
    values = trainer._critic_values(critic, batch, batch_size)
    want = (ids.float() + 0.5 * attention.float())[:, prompt - 1 : -1]
    assert values.shape == (rows, completion) and torch.equal(values, want)
    assert critic.rows == {None: [9], 2: [2, 2, 2, 2, 1], 1: [1] * 9}[batch_size]


def test_ppo_eval_rollout_reads_values_in_eval_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    _rollout(monkeypatch, _batch())
    trainer = _ppo(training=False, per_device_eval_batch_size=3)
    seen = []
    trainer._critic_values = lambda critic, batch, batch_size=None: seen.append(batch_size) or VALUES.clone()
    trainer._generate_and_score_completions([{}] * 4)
    assert seen == [3] and trainer._metrics["eval"]["ppo/value_mean"]


@pytest.mark.parametrize("ent_coef, clip, kl_coef", [(0.0, 0.2, 0.0), (0.01, 0.05, 0.0), (0.3, 1.0, 0.5)])
@pytest.mark.parametrize("training", [True, False])
def test_ppo_loss_terms_with_nonzero_coefficients(
    ent_coef: float, clip: float, kl_coef: float, training: bool
) -> None:
    """L = policy + value - c2 * H (+ β * k3 with kl_in="loss"), each term by hand over the counted tokens; the
    value loss has no weight (the critic's own AdamW would not see one)."""
    mask = MASK4.float()
    values = torch.tensor(
        [
            [0.5, -0.3, 0.1, GARBAGE],
            [0.2, 0.9, GARBAGE, GARBAGE],
            [0.0, 0.0, 0.0, 0.0],
            [1.2, GARBAGE, GARBAGE, GARBAGE],
        ],
        requires_grad=True,
    )
    old_values = torch.tensor([[0.3, 0.0, 0.1, 0.0], [0.2, 0.1, 0.0, 0.0], [0.0] * 4, [0.1, 0.0, 0.0, 0.0]])
    returns = torch.tensor([[1.0, -1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0] * 4, [2.0, 0.0, 0.0, 0.0]])
    adv = torch.tensor(
        [
            [1.0, -1.0, 0.5, GARBAGE],
            [2.0, -0.5, GARBAGE, GARBAGE],
            [1.0] * 4,
            [-1.0, GARBAGE, GARBAGE, GARBAGE],
        ]
    )
    logp = LOGP.clone().requires_grad_(True)
    old = LOGP - torch.tensor(
        [[0.5, -0.5, 0.05, 0.0], [0.0, 0.3, 0.0, 0.0], [0.0] * 4, [-0.4, 0.0, 0.0, 0.0]]
    )
    entropies = torch.tensor(
        [[1.0, 2.0, 3.0, GARBAGE], [0.5, 0.5, GARBAGE, GARBAGE], [9.0] * 4, [4.0, GARBAGE, GARBAGE, GARBAGE]]
    )
    trainer = _ppo(
        training=training, entropy_coef=ent_coef, cliprange_value=clip, kl_coef=kl_coef, kl_in="loss"
    )
    ref = LOGP + torch.tensor([[0.2, -0.1, 0.0, 0.0], [0.3, 0.0, 0.0, 0.0], [1.0] * 4, [-0.2, 0.0, 0.0, 0.0]])
    trainer.current_gradient_accumulation_steps = 2
    trainer._critic_values = lambda critic, batch, batch_size=None: values
    trainer._completion_logps = lambda model, inputs, compute_entropy=False: (
        logp,
        entropies if compute_entropy else None,
    )
    inputs = {
        "completion_mask": MASK4.clone(),
        "scorable": torch.tensor([True, True, False, True]),
        "old_values": old_values,
        "returns": returns,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
    }
    loss = trainer._compute_loss(None, inputs)
    m = mask * torch.tensor([1.0, 1.0, 0.0, 1.0])[:, None]
    n = m.sum()
    # Hand values of each term over the 6 counted tokens.
    v_clipped = old_values + (values.detach() - old_values).clamp(-clip, clip)
    vf = 0.5 * (torch.max((values.detach() - returns) ** 2, (v_clipped - returns) ** 2) * m).sum() / n
    ratio = torch.exp(LOGP - old)
    pg = (-torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * m).sum() / n
    ent = (entropies * m).sum() / n
    k3 = ((torch.exp(ref - LOGP) - (ref - LOGP) - 1) * m).sum() / n
    normalizer = 2 if training else 1
    want = (pg + vf - ent_coef * ent + kl_coef * k3) / normalizer
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    metrics = trainer._metrics["train" if training else "eval"]
    assert metrics["ppo/vf_loss"] == pytest.approx([vf.item()], rel=1e-5)
    assert metrics["ppo/policy_loss"] == pytest.approx([pg.item()], rel=1e-5)
    assert metrics["entropy"] == pytest.approx([ent.item()], rel=1e-5)
    assert metrics["kl"] == (pytest.approx([k3.item()], rel=1e-5) if kl_coef else [])
    if training:  # the value loss was backpropagated inside: its gradient carries 1 / accumulation
        grad = (
            torch.where(
                (values.detach() - returns) ** 2 >= (v_clipped - returns) ** 2,
                values.detach() - returns,
                torch.zeros_like(returns),
            )
            * m
            / n
        )
        assert torch.allclose(values.grad, grad / normalizer, atol=1e-6, rtol=0)


@pytest.mark.parametrize("on_policy", [True, False])
def test_ppo_loss_on_policy_ratio_and_the_two_sides_of_the_clip_range(on_policy: bool) -> None:
    """Two one-token completions, A = +1 and -1. On-policy (no log π_old) the ratio is 1 but still carries the
    gradient, weighted by the sampler's importance weights; off-policy, ratios e^0.25 and e^-0.15 against
    epsilon_low 0.1 / epsilon_high 0.3: the first is inside 1 + 0.3, the second outside 1 - 0.1 (clipped, no
    gradient)."""
    logp = torch.zeros(2, 1, requires_grad=True)
    trainer = _ppo(training=False)
    trainer.epsilon_low, trainer.epsilon_high = 0.1, 0.3
    trainer._critic_values = lambda critic, batch, batch_size=None: torch.zeros(2, 1)
    trainer._completion_logps = lambda model, inputs, compute_entropy=False: (
        logp,
        torch.zeros(2, 1) if compute_entropy else None,
    )
    inputs = {
        "completion_mask": torch.ones(2, 1),
        "scorable": torch.tensor([True, True]),
        "old_values": torch.zeros(2, 1),
        "returns": torch.zeros(2, 1),
        "advantages": torch.tensor([[1.0], [-1.0]]),
    }
    if on_policy:
        inputs["importance_sampling_ratio"] = torch.tensor([[0.5], [2.0]])
        want_loss, want_grad = -(0.5 - 2.0) / 2, [-0.5 / 2, 2.0 / 2]
    else:
        inputs["old_per_token_logps"] = torch.tensor([[-0.25], [0.15]])
        r0 = math.exp(0.25)  # the second token: -min(-e^-0.15, -0.9) = 0.9, the clipped term
        want_loss, want_grad = (-r0 + 0.9) / 2, [-r0 / 2, 0.0]
    loss = trainer._compute_loss(None, inputs)
    assert loss.item() == pytest.approx(want_loss, rel=1e-6)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx(want_grad, rel=1e-6)
    metrics = trainer._metrics["eval"]
    if on_policy:
        assert metrics["ppo/clipfrac"] == [0.0] and metrics["ppo/approx_kl"] == pytest.approx([0.0], abs=1e-7)
    else:  # the second token is clipped; approx KL is the mean of (r - 1) - log r
        kl = ((math.exp(0.25) - 1 - 0.25) + (math.exp(-0.15) - 1 + 0.15)) / 2
        assert metrics["ppo/clipfrac"] == [0.5] and metrics["ppo/approx_kl"] == pytest.approx([kl], rel=1e-5)


def _zero_rollout(zeros: torch.Tensor) -> dict:
    """A PPO minibatch of the four completions, every one scorable, with zero values, returns and advantages."""
    return {
        "completion_mask": MASK4.clone(),
        "scorable": torch.ones(4, dtype=torch.bool),
        "old_values": zeros,
        "returns": zeros,
        "advantages": zeros,
    }


def test_ppo_critic_warmup_trains_only_the_critic() -> None:
    values = torch.tensor([[0.5, 0.0, 0.0, 0.0]] * 4, requires_grad=True)
    zeros = torch.zeros(4, 4)
    trainer = _ppo(critic_warmup_steps=2)
    trainer.current_gradient_accumulation_steps = 2
    trainer.state.global_step = 1
    trainer._critic_values = lambda critic, batch, batch_size=None: values

    def no_policy(*a, **k):
        raise AssertionError("the policy's forward pass runs during the critic warm-up")

    trainer._completion_logps = no_policy
    inputs = _zero_rollout(zeros)
    loss = trainer._compute_loss(None, inputs)
    # 0.5 * mean over the 10 tokens of V^2 (0.25 on the 4 first tokens), over 2 micro-steps.
    assert loss.item() == pytest.approx(0.5 * (4 * 0.25) / 10 / 2)
    assert trainer._metrics["train"]["ppo/critic_warmup"] == [1.0]
    trainer.state.global_step = 2  # the warm-up is over
    trainer._completion_logps = lambda model, inputs, compute_entropy=False: (
        zeros.clone().requires_grad_(),
        zeros if compute_entropy else None,
    )
    trainer._compute_loss(None, inputs)
    assert trainer._metrics["train"]["ppo/critic_warmup"] == [1.0, 0.0]


def test_ppo_critic_warmup_lasts_exactly_its_optimizer_steps() -> None:
    trainer = _ppo(critic_warmup_steps=2)
    inside = []
    for step in range(5):
        trainer.state.global_step = step
        inside.append(trainer._in_critic_warmup())
    assert inside == [True, True, False, False, False]


def test_ppo_critic_warmup_is_for_training_only_evaluation_scores_the_policy_too() -> None:
    zeros = torch.zeros(4, 4)
    trainer = _ppo(training=False, critic_warmup_steps=2)
    trainer.state.global_step = 1  # inside the warm-up
    trainer._critic_values = lambda critic, batch, batch_size=None: zeros
    calls = []
    trainer._completion_logps = lambda model, inputs, compute_entropy=False: calls.append(1) or (zeros, zeros)
    inputs = _zero_rollout(zeros)
    trainer._compute_loss(None, inputs)
    assert calls == [1] and trainer._metrics["eval"]["ppo/critic_warmup"] == [0.0]


@pytest.mark.parametrize(
    "rollouts, spg, epochs, ga, steps",
    [(0, 4, 2, 1, 0), (1, 4, 2, 1, 8), (2, 4, 2, 2, 8), (3, 2, 1, 2, 3), (1, 6, 1, 3, 2)],
)
def test_critic_warmup_steps_are_whole_rollouts(tmp_path, rollouts, spg, epochs, ga, steps) -> None:
    cfg = PPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=ga,
        steps_per_generation=spg,
        num_iterations=epochs,
        critic_warmup_rollouts=rollouts,
    )
    assert cfg.critic_warmup_steps == steps


@pytest.mark.parametrize("critic_learning_rate, want", [(None, 10 * 2e-5), (1e-4, 1e-4), (1e-6, 1e-6)])
def test_critic_lr_is_its_own_else_the_scale_times_the_policys(tmp_path, critic_learning_rate, want) -> None:
    cfg = PPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        learning_rate=2e-5,
        critic_learning_rate=critic_learning_rate,
    )
    assert cfg.critic_lr == pytest.approx(want, rel=1e-9)


def test_critic_warmup_must_end_on_an_optimizer_step(tmp_path) -> None:
    with pytest.raises(ValueError, match="^critic_warmup_rollouts:"):
        PPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            report_to="none",
            num_generations=2,
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            steps_per_generation=3,
            num_iterations=1,
            critic_warmup_rollouts=1,
        )


# ---- PKPO -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "training, k, group, eval_group", [(True, 2, 2, 4), (True, 1, 2, 4), (False, 3, 2, 4), (False, 3, 4, 2)]
)
def test_pkpo_advantages_per_group_and_the_eval_group_size(
    monkeypatch: pytest.MonkeyPatch, training: bool, k: int, group: int, eval_group: int
) -> None:
    """k is capped by the group size in use: an eval group may be smaller than the training one."""
    per_func = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    _rollout(monkeypatch, _batch())
    trainer = _fabricated(
        PKPOTrainer,
        training=training,
        num_generations=group,
        num_generations_eval=eval_group,
        args=SimpleNamespace(pkpo_k=k),
        _last_rewards_per_func=per_func,
    )
    out = trainer._generate_and_score_completions([{}] * 4)
    scalar = torch.tensor([1.0, 0.0, 1.5, 0.5])
    size = group if training else eval_group
    assert out["advantages"].tolist() == pytest.approx(pkpo_advantages(scalar, size, min(k, size)).tolist())
    assert trainer._logs["advantages"] == pytest.approx(out["advantages"].tolist())


@pytest.mark.parametrize("scorable", [[0, 1], [1], []])
def test_pkpo_metrics_with_two_or_fewer_scorable_completions(
    monkeypatch: pytest.MonkeyPatch, scorable: list[int]
) -> None:
    """Two scorable completions in one group: an estimate and a spread. Fewer: no group has k = 2 scorable
    completions, so no estimate to log (0), and no spread of fewer than two (0)."""
    _rollout(monkeypatch, _batch())
    rewards_per_func = _only_scorable(scorable)
    trainer = _fabricated(
        PKPOTrainer,
        num_generations=2,
        num_generations_eval=2,
        args=SimpleNamespace(pkpo_k=2),
        _last_rewards_per_func=rewards_per_func,
    )
    out = trainer._generate_and_score_completions([{}] * 4)
    metrics = trainer._metrics["train"]
    if len(scorable) == 2:  # rewards 1 and 0.5: max@2 is 1; the advantages of the pair differ
        assert metrics["pkpo/pass_at_k"] == pytest.approx([1.0])
        a = out["advantages"][:2].tolist()
        assert a[0] != a[1] and metrics["pkpo/advantage_std"] == pytest.approx([statistics.stdev(a)])
        return
    assert out["advantages"].tolist() == [0.0] * 4
    assert metrics["pkpo/pass_at_k"] == [0.0]
    assert metrics["pkpo/advantage_std"] == [0.0]


@pytest.mark.parametrize(
    "k, advantages, pass_at_k, advantage_std",
    [
        # k = 1: RLOO's g_i - mean of the others; pass@1 is the mean of each group that has a scorable completion.
        (1, [0.5, -0.5, 0.0, 0.0], (0.75 + 1.0) / 2, 0.5),
        # k = n = 2: max - max of the others; only the first group has 2 scorable completions to estimate from.
        (2, [0.5, 0.0, 0.0, 0.0], 1.0, (1 / 12) ** 0.5),
    ],
)
def test_pkpo_leaves_an_unscorable_completion_out_of_its_group_and_its_metrics(
    monkeypatch: pytest.MonkeyPatch, k: int, advantages: list, pass_at_k: float, advantage_std: float
) -> None:
    """Rewards [1, 0.5 | NaN, 1]: the second group keeps one scorable completion, too few for any estimate."""
    _rollout(monkeypatch, _batch())
    trainer = _fabricated(
        PKPOTrainer,
        num_generations=2,
        num_generations_eval=2,
        args=SimpleNamespace(pkpo_k=k),
        _last_rewards_per_func=REWARDS_PER_FUNC.clone(),
    )
    out = trainer._generate_and_score_completions([{}] * 4)
    assert out["advantages"].tolist() == pytest.approx(advantages)
    metrics = trainer._metrics["train"]
    assert metrics["pkpo/pass_at_k"] == pytest.approx([pass_at_k])
    assert metrics["pkpo/advantage_std"] == pytest.approx([advantage_std])  # over the 3 scorable completions


def _two_passing_answers_of_different_lengths(monkeypatch: pytest.MonkeyPatch, **args) -> dict:
    """A rollout of four answers, V = 0: two pass with 4 and 1 tokens, one fails, one passes with 3; the policy
    has drifted from the reference by +0.5 nats on every token (a positive k1 KL). Returns the rollout's output."""
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    ref = torch.full((4, 4), -1.0)
    batch = {
        "completion_ids": torch.ones(4, 4, dtype=torch.long),
        "completion_mask": mask,
        "old_per_token_logps": ref + 0.5,
        "ref_per_token_logps": ref,
    }
    _rollout(monkeypatch, batch)
    passed = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    trainer = _ppo(rewards_per_func=passed, **args)
    trainer._critic_values = lambda critic, batch, batch_size=None: torch.zeros(4, 4)
    return trainer._generate_and_score_completions([{}] * 4)


def test_ppos_defaults_give_two_equally_rewarded_answers_the_same_advantage_whatever_their_length(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """The SmolLM2 collapse's mechanism, closed by the defaults: with the KL in the reward (the old default, β
    0.05, γ = 1) every token of a passing answer pays the penalty of every token after it, so the first token of
    the 1-token answer gets a larger advantage than that of the 4-token one: a preference for the shorter of two
    answers the tests cannot tell apart. PPOConfig's defaults (no KL term), and the KL in the loss, give both the
    same. Fails on the defaults before 27c3361 (kl_coef 0.05 in the reward)."""
    defaults = PPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    fields = ("kl_coef", "kl_in", "gamma", "lam", "advantage_normalization")
    out = _two_passing_answers_of_different_lengths(monkeypatch, **{k: getattr(defaults, k) for k in fields})
    adv = out["advantages"]
    assert adv[0, 0].item() == pytest.approx(adv[1, 0].item(), abs=1e-6)
    assert adv[0, 0].item() == pytest.approx(adv[3, 0].item(), abs=1e-6) and adv[0, 0] > 0 > adv[2, 0]
    in_loss = _two_passing_answers_of_different_lengths(monkeypatch, kl_coef=0.05, kl_in="loss")["advantages"]
    assert in_loss[0, 0].item() == pytest.approx(in_loss[1, 0].item(), abs=1e-6)
    in_reward = _two_passing_answers_of_different_lengths(monkeypatch, kl_coef=0.05, kl_in="reward")[
        "advantages"
    ]
    assert in_reward[1, 0] > in_reward[3, 0] > in_reward[0, 0] > 0  # the shorter, the larger
