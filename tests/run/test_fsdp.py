"""PPO under FSDP2: two CPU processes (gloo), the critic sharded like the policy, checkpointed and resumed.

accelerate 1.15 turns `ACCELERATE_USE_FSDP` into FSDP only on GPU-like devices: on CPU it leaves the state at
MULTI_CPU (DDP). torch 2.13's `fully_shard` itself runs on CPU over gloo, so this test lifts that one check
(`_fsdp_on_cpu`) and sets the environment `accelerate launch` derives from the repository's
accelerate_configs/fsdp2.yaml (mixed precision off: CPU). Everything else is the real path: accelerate's FSDP2
preparation of the policy, the reference model and the critic (with its optimizer), the Trainer's sharded
checkpointing, and PPOTrainer's gathered critic checkpoint.

Run as a script on 2 ranks, it trains PPO three times: 3 steps straight; 2 steps saving checkpoint-2; then from
checkpoint-2 to step 3. The test checks that both models were sharded (DTensor parameters, each rank holding
part of each), the critic checkpoint holds full tensors, and the resumed step 3 equals the straight one in every
logged number, the critic's included, with equal final critic weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def length_reward(completions: list[str], **kwargs) -> list[float]:
    return [(len(c) % 7) / 6.0 for c in completions]


def fsdp2_environment() -> dict[str, str]:
    """What `accelerate launch --config_file accelerate_configs/fsdp2.yaml` exports, for CPU (no mixed precision)."""
    config = yaml.safe_load((REPO / "accelerate_configs" / "fsdp2.yaml").read_text())
    env = {"ACCELERATE_USE_FSDP": "true", "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_CPU": "true"}
    for key, value in config["fsdp_config"].items():
        env[f"FSDP_{key.removeprefix('fsdp_').upper()}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    return env


def _fsdp_on_cpu() -> None:
    """Let accelerate's state become FSDP on CPU, where it would otherwise fall back to MULTI_CPU (DDP)."""
    import accelerate.state
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    original = accelerate.state.AcceleratorState.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if (
            self.distributed_type == DistributedType.MULTI_CPU
            and os.environ.get("ACCELERATE_USE_FSDP") == "true"
        ):
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = kwargs.get("fsdp_plugin") or FullyShardedDataParallelPlugin()

    accelerate.state.AcceleratorState.__init__ = init


def worker(model_dir: str, out_dir: str) -> None:
    import torch

    torch.set_num_threads(1)
    _fsdp_on_cpu()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.tensor import DTensor
    from transformers import AutoTokenizer

    from experiments.learnable.tasks import train_rows
    from experiments.trainers import PPOTrainer, build_config

    rank, out = int(os.environ["RANK"]), Path(out_dir)

    def train(name: str, max_steps: int, resume: str | None = None) -> PPOTrainer:
        args = build_config(
            "ppo",
            output_dir=str(out / name),
            use_cpu=True,
            bf16=False,
            activation_checkpointing=False,
            report_to="none",
            disable_tqdm=True,
            logging_steps=1,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=8,
            learning_rate=1e-3,
            critic_learning_rate=1e-2,
            lr_scheduler_type="constant",
            max_steps=max_steps,
            seed=0,
            save_strategy="steps" if name == "resumed" else "no",
            save_steps=2,
        )
        trainer = PPOTrainer(
            model=model_dir,
            reward_funcs=[length_reward],
            args=args,
            train_dataset=train_rows(64),
            processing_class=AutoTokenizer.from_pretrained(model_dir),
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    def sharding(module) -> dict:
        params = list(module.parameters())
        return {
            "dtensor": all(isinstance(p, DTensor) for p in params),
            "local_fraction": sum(p.to_local().numel() for p in params if isinstance(p, DTensor))
            / sum(p.numel() for p in params),
        }

    def step(trainer, n: int) -> dict:
        rows = [h for h in trainer.state.log_history if h.get("step") == n and "loss" in h]
        return {k: v for k, v in rows[0].items() if k not in TIMING_KEYS} if len(rows) == 1 else {}

    def critic_digest(trainer) -> dict:
        state = get_model_state_dict(
            trainer.critic, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return {k: [float(v.double().sum()), float(v.double().abs().sum())] for k, v in state.items()}

    straight = train("straight", 3)
    result = {
        "world_size": straight.accelerator.num_processes,
        "fsdp": straight.is_fsdp_enabled,
        "policy": sharding(straight.model_wrapped),
        "critic": sharding(straight.critic),
        "straight_step3": step(straight, 3),
        "straight_critic": critic_digest(straight),
    }
    train("resumed", 2)
    resumed = train("resumed", 3, resume=str(out / "resumed" / "checkpoint-2"))
    result |= {
        "resumed_step3": step(resumed, 3),
        "resumed_critic": critic_digest(resumed),
        "resumed_global_step": resumed.state.global_step,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))


@pytest.mark.slow
def test_ppo_trains_checkpoints_and_resumes_under_fsdp2_on_two_cpu_processes(tiny_model_dir, tmp_path):
    # faulthandler: a rank that aborts (SIGABRT) prints every thread's Python stack into the failure
    env = dict(
        os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", PYTHONPATH=str(REPO), **fsdp2_environment()
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(HERE),
        str(tiny_model_dir),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["world_size"] == 2 and r["fsdp"]
        for model in ("policy", "critic"):  # sharded: DTensor parameters, each rank holding about half
            assert r[model]["dtensor"] and 0.3 < r[model]["local_fraction"] < 0.7, (model, r[model])
        assert r["resumed_global_step"] == 3
    main = ranks[0]
    assert main["straight_step3"] and any(k.startswith("ppo/v") for k in main["straight_step3"])
    assert main["resumed_step3"] == main["straight_step3"]
    assert main["resumed_critic"] == main["straight_critic"]

    from safetensors.torch import load_file
    from transformers import AutoConfig

    critic_dir = tmp_path / "resumed" / "checkpoint-2" / "critic"
    weights = load_file(critic_dir / "model.safetensors")
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert weights["model.embed_tokens.weight"].shape == (
        config.vocab_size,
        config.hidden_size,
    )  # gathered, full
    assert weights["score.weight"].shape == (1, config.hidden_size)
    import torch

    optimizer = torch.load(critic_dir / "optimizer.pt", weights_only=True)
    assert set(optimizer["state"]) == set(weights)  # every parameter's AdamW state, by name
    assert optimizer["state"]["score.weight"]["exp_avg"].shape == (1, config.hidden_size)


if __name__ == "__main__":
    from experiments.run.train import end_process_group

    worker(*sys.argv[1:3])
    end_process_group()  # as experiments.run.train's main does at the end of a rank's run
