"""A dataset whose tests are not in a `test` column (`tests`, a typo) fails on a trainer's first batch in one line
naming the columns the function rewards read, as the stdin/stdout rewards do, instead of scoring None for every row
and training on nothing (issue 53 item 5). TRL passes `trainer_state` to a reward; a direct call without it keeps
scoring None per row (tests/rewards/test_rewards.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from rewards import format_reward, partial_test_reward, unit_test_reward

PROMPT = "def add(a, b):\n"
COLUMNS = {"tests": ["assert add(1, 2) == 3"], "entry_point": ["add"], "code_prompt": [PROMPT]}
NEEDS = re.escape(
    "reads the columns test (HumanEval's check(candidate) or plain asserts), entry_point and code_prompt; "
    "this dataset has no 'test' column (it has: entry_point, code_prompt, tests): rename yours"
)


@pytest.mark.parametrize("reward", [unit_test_reward, partial_test_reward], ids=lambda r: r.__name__)
def test_a_misnamed_test_column_is_named_in_one_line(reward) -> None:
    kwargs = {"prompts": [PROMPT], "completions": ["    return a + b\n"], **COLUMNS, "trainer_state": None}
    with pytest.raises(ValueError, match=rf"^{reward.__name__}: {NEEDS}") as sync:
        reward.score(**kwargs)
    with pytest.raises(ValueError, match=rf"^{reward.__name__}: {NEEDS}") as called:
        asyncio.run(reward(**kwargs))  # TRL's path
    assert "\n" not in str(sync.value) and str(sync.value) == str(called.value)


def test_format_reward_needs_only_an_entry_point_and_a_blank_test_is_still_a_none_row() -> None:
    kwargs = {"prompts": [PROMPT], "completions": ["    return a + b\n"], "code_prompt": [PROMPT]}
    kwargs["trainer_state"] = None  # as TRL calls it
    assert format_reward.score(**kwargs, entry_point=["add"]) == [1.0]
    with pytest.raises(ValueError, match=r"^format_reward: .* no 'entry_point' column "):
        format_reward.score(**kwargs, test=["assert add(1, 2) == 3"])
    # A column that is there, with a row that has no tests: that row alone is unscorable, as before.
    assert unit_test_reward.score(**kwargs, test=[""], entry_point=["add"]) == [None]
    del kwargs["trainer_state"]  # a direct call: None per row, as documented
    assert unit_test_reward.score(**kwargs, entry_point=["add"], tests=["assert add(1, 2) == 3"]) == [None]


def test_grpo_trainer_stops_on_its_first_batch(tiny_model_dir: Path, tmp_path: Path, tiny_train_args) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rows = [
        {"prompt": PROMPT, "code_prompt": PROMPT, "tests": "assert add(1, 2) == 3", "entry_point": "add"}
    ] * 8
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[unit_test_reward],
        train_dataset=Dataset.from_list(rows),
        args=GRPOConfig(output_dir=str(tmp_path), **(tiny_train_args | {"max_steps": 1})),
    )
    with pytest.raises(ValueError, match=r"^unit_test_reward: reads the columns test .* \(it has: .*tests"):
        trainer.train()
    assert trainer.state.global_step == 0
