"""Activation memory PPO's critic keeps for its backward pass, with activation checkpointing on: in eval mode (the
baseline: passk's critic before 2026-12-06, which never left it, so transformers never checkpointed) and in
training mode (PPOTrainer.training_step now puts it there).

    python benchmarks/bench_critic_checkpointing.py
    python benchmarks/bench_critic_checkpointing.py --hidden 512 --layers 4 --rows 8 --tokens 256

The bytes are those torch's saved-tensor hooks see during one forward pass (what autograd holds until backward),
on bench_memory.py's model shape (hidden 256, 8 layers, 16 rows of 126 tokens) unless told otherwise.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForTokenClassification, Qwen2Config


def saved_mib(critic: torch.nn.Module, input_ids: torch.Tensor) -> float:
    """MiB held for backward by one forward pass of `critic`, in the mode it is in."""
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = critic(input_ids=input_ids).logits
    out.sum().backward()
    critic.zero_grad(set_to_none=True)
    return sum(saved) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=126)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=1,
    )
    critic = AutoModelForTokenClassification.from_config(config)
    critic.activation_checkpointing_enable()
    input_ids = torch.randint(0, config.vocab_size, (args.rows, args.tokens))
    before = saved_mib(critic.eval(), input_ids)
    after = saved_mib(critic.train(), input_ids)
    print(
        f"critic activations held for backward: eval mode (baseline) {before:.1f} MiB, training mode {after:.1f} MiB"
    )
    print(f"ratio training / eval: {after / before:.3f}")


if __name__ == "__main__":
    main()
