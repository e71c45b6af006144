"""The reward callables a config names (`reward_funcs`): passk's built-in rewards or any TRL-style callable.

"unit_test", "partial" and "format" are the `rewards` package's factories, given the config's sandbox limits; on
stdin/stdout problems (`experiments.inputs.data.problem_kind`) "unit_test" and "partial" are their stdin/stdout twins.
Any other name is imported as `package.module.attr`, `package.module:attr` or `path/to/file.py:attr`. A name that
cannot be imported, or "format" on problems that name no function, is a `ConfigError`, raised before any model
is loaded. `build_reward_funcs` takes the config's reward keys as values (`RewardSpec`); `BUILTIN_REWARDS`, the
names a config may give, is what experiments.run.validation checks them against.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

__all__ = ["BUILTIN", "BUILTIN_REWARDS", "RewardSpec", "build_reward_funcs", "import_dotted"]


def import_dotted(path: str) -> Any:
    """`package.module.attr`, `package.module:attr` or `path/to/file.py:attr`."""
    module_name, _, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        if module_name.endswith(".py"):
            file = Path(module_name).expanduser().resolve()
            spec = importlib.util.spec_from_file_location(f"passk_reward_{file.stem}", file)
            if spec is None or spec.loader is None or not file.is_file():
                raise ImportError(f"no such file {file}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:  # as TRL's scripts do: a reward module next to the config works
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"reward_funcs: cannot import {path!r}: {e}") from None


# The reward each built-in name stands for, per kind of problem (`rewards.make_reward`'s names).
BUILTIN = {
    "function": {"unit_test": "unit_test", "partial": "partial_test", "format": "format"},
    "stdio": {"unit_test": "stdio_test", "partial": "stdio_partial"},
}
BUILTIN_REWARDS: tuple[str, ...] = tuple(BUILTIN["function"])  # the built-in names a config may give


@dataclass(frozen=True)
class RewardSpec:
    """What the rewards are built from: the config's reward keys, by the same names (see ExperimentArgs)."""

    reward_funcs: Sequence[str] = ("unit_test",)
    reward_timeout: float = 3.0
    reward_memory_mb: int = 1024
    reward_stdio_tests: str = "hidden"

    @classmethod
    def from_config(cls, config: Any) -> RewardSpec:
        """The reward keys of any object that has them (a parsed `ExperimentArgs`)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


def build_reward_funcs(spec: RewardSpec, kind: str = "function") -> list[Any]:
    """The reward callables named by `spec.reward_funcs`, for problems of `kind` ("function" or "stdio")."""
    import rewards

    sandbox = {"timeout": spec.reward_timeout, "memory_mb": spec.reward_memory_mb}
    funcs: list[Any] = []
    for name in spec.reward_funcs:
        if name in BUILTIN["function"]:
            reward = BUILTIN[kind].get(name)
            if reward is None:
                raise ConfigError(
                    f"reward_funcs: {name!r} scores a named function, and {kind} problems have none; use "
                    f"{' or '.join(repr(n) for n in BUILTIN[kind])}"
                )
            options = {} if reward == "format" else dict(sandbox)
            if kind == "stdio":  # which cases score: those the prompt does not show, by default
                options["tests"] = spec.reward_stdio_tests
            funcs.append(rewards.make_reward(reward, **options))
        else:
            funcs.append(import_dotted(name))
    return funcs
