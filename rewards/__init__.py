"""passk rewards: unit-test and stdin/stdout reward functions for TRL trainers, importable by any TRL project.

Put our reward into someone else's ``GRPOTrainer`` (dataset columns: ``prompt``, ``code_prompt`` = the
HumanEval-style code prompt, ``test``, ``entry_point``)::

    from trl import GRPOConfig, GRPOTrainer
    from rewards import unit_test_reward
    trainer = GRPOTrainer(model="Qwen/Qwen2.5-Coder-1.5B-Instruct", reward_funcs=[unit_test_reward], args=GRPOConfig(output_dir="out"), train_dataset=ds)

or, with TRL's own script, ``reward_funcs: [rewards.unit_test_reward]`` in ``trl grpo --config cfg.yaml``.

What is here:

* ``unit_test_reward``: 1.0 iff all tests pass. ``partial_test_reward``: the fraction of asserts that pass.
  ``format_reward``: 1.0 when the completion holds one parseable function with the expected name.
* ``stdio_test_reward``: 1.0 iff the program passes every stdin/stdout case of an APPS/TACO, CodeContests or
  open-r1/PrimeIntellect row (the dataset's own columns; call-based rows through the function path).
  ``stdio_partial_reward``: the fraction of cases that pass.
* ``make_reward(kind, name=None, **config)``, and ``make_unit_test_reward(timeout=, memory_mb=, n_workers=,
  name=)`` and its siblings (the same factory with the kind filled in): configured copies with a stable
  ``__name__`` (TRL logs ``rewards/<__name__>/mean``).
* Every reward is an object with an ``async def __call__`` (TRL overlaps async rewards) and a synchronous
  ``.score(...)`` twin. Both take TRL 1.16's keywords: ``prompts``, ``completions``, ``completion_ids``,
  every dataset column as an aligned list, ``log_metric`` / ``log_extra`` when TRL passes them, ``**kwargs``.
* ``extract_code(prompt_code, completion, entry_point) -> Extraction``: the code-extraction rules.
* Hacking and health signals are logged through ``log_metric`` under ``<prefix>/...`` (see
  ``rewards.metrics``): timeouts, sandbox errors, caught forged exits, syntax errors, completion length and
  extraction failure reasons.
* Length, overlong and repetition penalties are TRL's own, re-exported unchanged (imported on first use):
  ``get_soft_overlong_punishment`` (DAPO overlong/length penalty) and ``get_repetition_penalty_reward``.
  TRL's ``get_cosine_scaled_reward`` is not re-exported: it grades correctness with ``math_verify`` against
  a ``solution`` column, so it does not apply to code.

This package never imports torch and never imports ``experiments``. It imports the ``sandbox`` package (stdlib
only) for its vocabulary and dataset formats; a sandbox pool starts on first use.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .code_rewards import (
    REWARDS,
    CodeReward,
    FormatReward,
    PartialTestReward,
    StdioPartialReward,
    StdioTestReward,
    UnitTestReward,
    make_format_reward,
    make_partial_test_reward,
    make_reward,
    make_stdio_partial_reward,
    make_stdio_test_reward,
    make_unit_test_reward,
)
from .extraction import EXTRACT_FAILURE_REASONS, EXTRACT_RULES, Extraction, completion_text, extract_code
from .metrics import FORGED_EXIT_FLAGS, STATUSES

__all__ = [
    "EXTRACT_FAILURE_REASONS",
    "EXTRACT_RULES",
    "FORGED_EXIT_FLAGS",
    "REWARDS",
    "STATUSES",
    "CodeReward",
    "Extraction",
    "FormatReward",
    "PartialTestReward",
    "StdioPartialReward",
    "StdioTestReward",
    "UnitTestReward",
    "completion_text",
    "extract_code",
    "format_reward",
    "make_format_reward",
    "make_partial_test_reward",
    "make_reward",
    "make_stdio_partial_reward",
    "make_stdio_test_reward",
    "make_unit_test_reward",
    "partial_test_reward",
    "stdio_partial_reward",
    "stdio_test_reward",
    "unit_test_reward",
]

unit_test_reward = make_reward("unit_test")
partial_test_reward = make_reward("partial_test")
stdio_test_reward = make_reward("stdio_test")
stdio_partial_reward = make_reward("stdio_partial")
format_reward = make_reward("format")

# Re-exported from trl.rewards on first access, so `import rewards` stays light; star-exported only where TRL is
# installed, so that `from rewards import *` works in the core install too.
_TRL_REEXPORTS = ("get_soft_overlong_punishment", "get_repetition_penalty_reward")
if importlib.util.find_spec("trl") is not None:
    __all__ += _TRL_REEXPORTS


def __getattr__(name: str) -> Any:
    if name in _TRL_REEXPORTS:
        import trl.rewards

        return getattr(trl.rewards, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
