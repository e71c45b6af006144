"""Every method on TRL's vLLM generation path (colocate and server), with vLLM replaced by a stand-in.

vLLM is GPU-only and not installed here, so `trl.generation.vllm_generation` is given stand-ins for what it
imports from vLLM (`LLM`, `SamplingParams`) and for its server client (`VLLMClient`), and told vLLM is available.
TRL's own `VLLMGeneration` code then runs unchanged: weight sync by parameter name into the engine, the colocate
and server request paths, the slicing of completions per process, GRPOTrainer's importance-sampling correction.

The stand-in engine behaves as vLLM does where the trainers can tell: it loads its own copy of the model from
the model's path and receives every later weight update by name (an unknown name fails, as vLLM's loader does);
it holds the weights in bf16 and samples from them with the requested temperature / top-p / top-k, returning
each sampled token's processed log-probability (`logprobs_mode=processed_logprobs`), which therefore differs
from the training policy's fp32 log-probability by a few 1e-3, as vLLM's does.

Checked per method, on each generation batch and against forward passes made before any update:
- completions come from the engine, whose weights equal the policy's at that moment (synced every step);
- log π_old (the KL penalty's and PPO's ratio's) is the policy's forward pass, not vLLM's sampling log-probs;
  the reference log-probs are the reference model's; PPO's values are the critic's;
- the REINFORCE family's advantages are its estimators over the rewards (KL-shaped with those log-probs);
- the REINFORCE family's and PPO's losses apply GRPOTrainer's vLLM importance weights (and π/π_old).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from experiments.learnable.tasks import train_rows
from experiments.trainers import METHODS, ORIGINAL_METHODS, build_config
from experiments.trainers.estimators import (
    batch_baseline_advantages,
    clipped_value_loss,
    kl_k1,
    masked_mean,
    ppo_clip_loss,
    rloo_advantages,
)

REINFORCE_ESTIMATORS = {
    "vanilla_pg": lambda r, g: r,
    "reinforce": lambda r, g: batch_baseline_advantages(r),
    "reinforce_kl": lambda r, g: batch_baseline_advantages(r),
    "reinforce_rloo": lambda r, g: rloo_advantages(r, g, normalize=True),
}


def length_reward(completions: list[str], **kwargs) -> list[float]:
    return [(len(c) % 7) / 6.0 for c in completions]


# ------------------------------------------------------------------------------------------- the stand-in vLLM


class StandInEngine:
    """vLLM's side: its own bf16 copy of the weights, updated by name, and a sampler returning processed logprobs."""

    def __init__(self, model_path: str):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16).eval()
        self.syncs = 0
        self.returned: list[list[int]] = []  # every completion handed back, in order
        eos = self.model.generation_config.eos_token_id
        self.eos = [eos] if isinstance(eos, int) else list(eos)
        self.pad = self.model.generation_config.pad_token_id

    def load_weights(self, weights) -> None:
        params = dict(self.model.named_parameters())
        for name, tensor in weights:
            if name not in params:
                raise KeyError(f"vLLM's model has no parameter {name!r}")
            params[name].data.copy_(tensor.to(torch.bfloat16))

    @torch.no_grad()
    def sample(self, prompts, n, temperature, top_p, top_k, max_tokens, logprobs, **ignored):
        """`n` completions per prompt, prompt-major: (token ids up to and including EOS, their log-probs or None)."""
        rows = [p for p in prompts for _ in range(n)]
        width = max(map(len, rows))
        ids = torch.tensor([[self.pad] * (width - len(r)) + list(r) for r in rows])
        attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        out = self.model.generate(
            input_ids=ids,
            attention_mask=attention,
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k or None,
            max_new_tokens=max_tokens,
            eos_token_id=self.eos,
            pad_token_id=self.pad,
            output_scores=True,
            return_dict_in_generate=True,
        )
        tokens = out.sequences[:, width:]
        # processed_logprobs: the log-softmax of the distribution actually sampled from (after temperature etc.)
        lps = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1).gather(
            2, tokens[..., None]
        )[..., 0]
        results = []
        for row_tokens, row_lps in zip(tokens.tolist(), lps.tolist(), strict=True):
            end = next((i + 1 for i, t in enumerate(row_tokens) if t in self.eos), len(row_tokens))
            self.returned.append(row_tokens[:end])
            results.append((row_tokens[:end], row_lps[:end] if logprobs is not None else None))
        return results


ENGINES: list[StandInEngine] = []


class StandInSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class StandInLLM:
    """`vllm.LLM` in colocate mode: what VLLMGeneration reads of it."""

    def __init__(self, model: str, **kwargs):
        self.engine = StandInEngine(model)
        ENGINES.append(self.engine)
        runner = SimpleNamespace(model=self.engine)
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner)),
            model_config=SimpleNamespace(max_model_len=kwargs.get("max_model_len") or 2048),
        )

    def reset_prefix_cache(self) -> None:
        self.engine.syncs += 1  # VLLMGeneration resets the cache after every weight sync

    def generate(self, prompts, sampling_params, use_tqdm=False):
        p = sampling_params
        samples = self.engine.sample(
            [x["prompt_token_ids"] for x in prompts],
            p.n,
            p.temperature,
            p.top_p,
            p.top_k,
            p.max_tokens,
            p.logprobs,
        )
        outputs = []
        for prompt, (ids, lps) in zip(prompts, samples, strict=True):
            logprobs = (
                None if lps is None else [{t: SimpleNamespace(logprob=lp, rank=1)} for t, lp in zip(ids, lps)]
            )
            completion = SimpleNamespace(token_ids=ids, logprobs=logprobs)
            outputs.append(SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=[completion]))
        return outputs


class StandInClient:
    """`VLLMClient`, talking to a `trl vllm-serve --model <path>` server; `model_path` is what the server serves."""

    model_path: str = ""

    def __init__(self, base_url=None, group_port=None, connection_timeout=None, **kwargs):
        self.engine = StandInEngine(self.model_path)
        ENGINES.append(self.engine)

    def init_communicator(self, device=None) -> None:
        pass

    def get_server_info(self) -> dict:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def update_named_params(self, metadata, params) -> None:
        self.engine.load_weights(params)

    def reset_prefix_cache(self) -> None:
        self.engine.syncs += 1

    def generate(
        self,
        prompts,
        features=None,
        n=1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_tokens=16,
        logprobs=0,
        **kwargs,
    ):
        samples = self.engine.sample(prompts, n, temperature, top_p, top_k, max_tokens, logprobs)
        completion_ids = [ids for ids, _ in samples]
        if logprobs is None:
            return {"prompt_ids": prompts, "completion_ids": completion_ids, "logprobs": None}
        return {
            "prompt_ids": prompts,
            "completion_ids": completion_ids,
            "logprobs": [[[lp] for lp in lps] for _, lps in samples],
            "logprob_token_ids": [[[t] for t in ids] for ids in completion_ids],
        }


@pytest.fixture
def stand_in_vllm(monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path):
    import trl.generation.vllm_generation as vllm_generation

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "LLM", StandInLLM, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", StandInSamplingParams, raising=False)
    monkeypatch.setattr(vllm_generation, "VLLMClient", StandInClient)
    monkeypatch.setattr(StandInClient, "model_path", str(tiny_model_dir))
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)  # colocate mode sets them; undone after the test
    ENGINES.clear()
    yield ENGINES
    ENGINES.clear()


# ------------------------------------------------------------------------------------------------------ tests


def _forward_logps(trainer, model, out) -> torch.Tensor:
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, attention, out["completion_ids"].size(1)
        )
    return logps


@pytest.mark.parametrize("mode", ["colocate", "server"])
# The original seven (ORIGINAL_METHODS): the checks below are written per trainer of those rows.
@pytest.mark.parametrize("method", list(ORIGINAL_METHODS))
def test_method_on_the_vllm_path(method, mode, stand_in_vllm, tiny_model_dir, tmp_path, tiny_train_args):
    from transformers import AutoTokenizer

    args = build_config(
        method,
        output_dir=str(tmp_path / method),
        vllm_mode=mode,
        **(tiny_train_args | {"learning_rate": 1e-2, "use_vllm": True}),
    )
    trainer = METHODS[method].trainer_cls(
        model=str(tiny_model_dir),
        reward_funcs=[length_reward],
        args=args,
        train_dataset=train_rows(32),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    assert len(stand_in_vllm) == 1
    engine = stand_in_vllm[0]
    rollouts, batches = [], []
    generate_and_score = trainer._generate_and_score_completions

    def rollout(inputs):
        out = generate_and_score(inputs)
        policy = trainer.accelerator.unwrap_model(trainer.model)
        synced = all(
            torch.equal(p.data, policy.get_parameter(n).data.to(torch.bfloat16))
            for n, p in engine.model.named_parameters()
        )
        seen = {
            "out": out,
            "synced": synced,
            "policy_logps": _forward_logps(trainer, trainer.model, out),
            "rewards": trainer._last_rewards_per_func[:, 0].clone()
            if hasattr(trainer, "_last_rewards_per_func")
            else None,
        }
        if getattr(trainer, "ref_model", None) is not None:
            seen["ref_logps"] = _forward_logps(trainer, trainer.ref_model, out)
        if hasattr(trainer, "critic"):
            with torch.no_grad():
                seen["values"] = trainer._critic_values(trainer.accelerator.unwrap_model(trainer.critic), out)
        rollouts.append(seen)
        return out

    trainer._generate_and_score_completions = rollout
    if hasattr(trainer, "_compute_loss"):
        compute_loss = trainer._compute_loss
        trainer._compute_loss = lambda model, inputs: batches.append(inputs) or compute_loss(model, inputs)
    trainer.train()

    assert trainer.state.global_step == 2 and rollouts
    assert engine.syncs >= len(rollouts) and all(
        r["synced"] for r in rollouts
    )  # weights pushed before sampling
    returned = iter(engine.returned)
    for r in rollouts:
        out = r["out"]
        mask = out["completion_mask"].bool()
        for ids, row_mask in zip(out["completion_ids"].tolist(), mask.tolist(), strict=True):
            assert [t for t, m in zip(ids, row_mask) if m] == next(returned)  # completions are the engine's
        if method == "rloo":
            continue  # TRL's RLOO asks vLLM for no log-probs and computes its own
        sampling = out["sampling_per_token_logps"]
        assert (sampling - r["policy_logps"])[
            mask
        ].abs().max() > 1e-4  # vLLM's numerics differ from the policy's
        if method == "grpo":
            continue
        # Ours: log π_old is the policy's forward pass (GRPOTrainer's, for its importance-sampling correction).
        assert torch.allclose(out["old_per_token_logps"][mask], r["policy_logps"][mask], atol=1e-5)
        if "ref_logps" in r:
            assert torch.allclose(out["ref_per_token_logps"][mask], r["ref_logps"][mask], atol=1e-5)
        if method in REINFORCE_ESTIMATORS:
            rewards = r["rewards"]
            if trainer.args.kl_coef > 0:
                rewards = rewards - trainer.args.kl_coef * kl_k1(r["policy_logps"], r["ref_logps"], mask).sum(
                    1
                )
            expected = REINFORCE_ESTIMATORS[method](rewards, trainer.num_generations)
            assert torch.allclose(out["advantages"], expected, atol=1e-5)
        if method == "ppo":
            assert torch.allclose(out["old_values"], r["values"] * out["completion_mask"], atol=1e-5)

    if method in ("grpo", "rloo"):
        return
    # The loss of the last micro-batch, by hand: the policy's forward log-probs, weighted by GRPOTrainer's vLLM
    # importance weights (and, for REINFORCE, π/π_old, != 1 now that the policy moved).
    inputs = batches[-1]
    weights = inputs["importance_sampling_ratio"]
    assert (weights - 1).abs().max() > 1e-4
    mask = inputs["completion_mask"].float()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, inputs["completion_ids"].size(1), compute_entropy=True
        )
        got = compute_loss(trainer.model, inputs).item()
    if method == "ppo":
        args = trainer.args
        mask = mask * inputs["scorable"][:, None].float()
        critic = trainer.accelerator.unwrap_model(trainer.critic)
        with torch.no_grad():
            values = trainer._critic_values(critic, inputs)
        pg, _ = ppo_clip_loss(
            logps,
            inputs["old_per_token_logps"],
            inputs["advantages"],
            mask,
            args.epsilon,
            args.epsilon,
            weights=weights,
        )
        vf, _ = clipped_value_loss(
            values, inputs["old_values"], inputs["returns"], mask, args.cliprange_value
        )
        expected = pg + vf - args.entropy_coef * masked_mean(entropies, mask)
    else:
        ratio = torch.exp(logps - inputs["old_per_token_logps"])
        expected = -(inputs["advantages"][:, None] * logps * ratio * weights * mask).sum(1).mean()
    assert got == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
