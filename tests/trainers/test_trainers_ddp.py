"""PPO (and REINFORCE) under DDP: two CPU processes with gloo, launched by torchrun.

The test runs this file as a script on 2 ranks: each trains 2 optimizer steps with gradient accumulation, then
writes what it ends with. DDP must keep the policy and the critic identical on both ranks (the critic's gradients
are all-reduced like the policy's), and both must have moved. A rank ends its process group once its run is done
(experiments.run.train's main), as this script does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()


def length_reward(completions: list[str], **kwargs) -> list[float]:
    return [(len(c) % 7) / 6.0 for c in completions]


def _digest(model) -> dict[str, float]:
    return {k: float(v.double().sum()) + float(v.double().abs().sum()) for k, v in model.state_dict().items()}


def worker(method: str, model_dir: str, out_dir: str) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    from experiments.learnable.tasks import train_rows
    from experiments.trainers import CPU_ARGS, METHODS, build_config

    rank = int(os.environ["RANK"])
    args = build_config(
        method,
        output_dir=str(Path(out_dir) / "run"),
        **CPU_ARGS,
        logging_steps=1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-3,
        max_steps=2,
        seed=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = METHODS[method].trainer_cls(
        model=model_dir,
        reward_funcs=[length_reward],
        args=args,
        train_dataset=train_rows(64),
        processing_class=tokenizer,
    )
    start_policy = _digest(trainer.model)
    critic = getattr(trainer, "critic", None)
    start_critic = _digest(trainer.accelerator.unwrap_model(critic)) if critic is not None else None
    trainer.train()
    result = {
        "world_size": trainer.accelerator.num_processes,
        "policy": _digest(trainer.model),
        "policy_moved": _digest(trainer.model) != start_policy,
        "global_step": trainer.state.global_step,
    }
    if critic is not None:
        result["critic_is_ddp"] = isinstance(trainer.critic, DistributedDataParallel)
        result["critic"] = _digest(trainer.accelerator.unwrap_model(trainer.critic))
        result["critic_moved"] = result["critic"] != start_critic
        result["critic_grads_cleared"] = all(p.grad is None for p in trainer.critic.parameters())
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))


def test_a_rank_ends_its_process_group_after_a_finished_run_only(tmp_path, monkeypatch):
    """experiments.run.train's main destroys the group once the run is done (gloo's threads could otherwise abort the
    finished rank at exit), and leaves it after an error (a rank stopped mid-collective must exit, not wait)."""
    import torch.distributed as dist

    from experiments.errors import ConfigError
    from experiments.run import train

    def join_group(name: str) -> None:  # a one-rank gloo group, as a launcher's rank has
        dist.init_process_group("gloo", init_method=(tmp_path / name).as_uri(), rank=0, world_size=1)

    def bad_value(exp, cfg):
        raise ConfigError("a bad value")

    monkeypatch.setattr(train, "parse_config", lambda args: (None, None))
    monkeypatch.setattr(train, "run", lambda exp, cfg: tmp_path)
    join_group("rendezvous-1")
    try:
        assert train.main(["cfg"]) == 0
        assert not dist.is_initialized()
        monkeypatch.setattr(train, "run", bad_value)
        join_group("rendezvous-2")
        assert train.main(["cfg"]) == 2
        assert dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    train.end_process_group()  # no group: nothing to do, no error


def test_a_finished_rank_frees_its_cyclic_garbage_before_its_group_goes(tmp_path):
    """A trainer outlives its run in reference cycles (its FSDP/DDP state holding groups and tensors); left to
    interpreter exit, it is torn down after the group and beside gloo's threads. end_process_group frees it first."""
    import gc
    import weakref

    import torch.distributed as dist

    from experiments.run.train import end_process_group

    class Cycle:  # stands for the trainer: reachable only through a cycle, so only the collector frees it
        pass

    freed_with_group_up = []
    dist.init_process_group("gloo", init_method=(tmp_path / "rendezvous").as_uri(), rank=0, world_size=1)
    gc.disable()  # the collector runs only where end_process_group calls it
    try:
        garbage = Cycle()
        garbage.self = garbage
        weakref.finalize(garbage, lambda: freed_with_group_up.append(dist.is_initialized()))
        del garbage
        end_process_group()
        assert freed_with_group_up == [True] and not dist.is_initialized()
    finally:
        gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ppo", "reinforce_rloo"])
def test_ddp_two_cpu_ranks_stay_in_sync(method, tiny_model_dir, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", PYTHONPATH=str(HERE.parents[2]))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(HERE),
        method,
        str(tiny_model_dir),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["world_size"] == 2 and r["global_step"] == 2 and r["policy_moved"]
    assert ranks[0]["policy"] == ranks[1]["policy"]
    if method == "ppo":
        for r in ranks:
            assert r["critic_is_ddp"] and r["critic_moved"] and r["critic_grads_cleared"]
        assert ranks[0]["critic"] == ranks[1]["critic"]


if __name__ == "__main__":
    from experiments.run.train import end_process_group

    worker(*sys.argv[1:4])
    end_process_group()  # as experiments.run.train's main does at the end of a rank's run
