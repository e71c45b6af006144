"""The README's reuse examples run as written: the Python example (rewards scored through `.score`, two
GRPOTrainer steps) prints what the README says it prints, and the `trl grpo` command line trains on its output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Reusing the rewards in another TRL project"


def _blocks(lang: str) -> list[str]:
    """The fenced blocks of `lang` in the README's reuse section, in order."""
    text = (REPO / "README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"^```{lang}\n(.*?)^```$", section, flags=re.S | re.M)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1"
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def test_the_readme_shows_the_async_rule_and_the_trl_command_line() -> None:
    (example,) = [b for b in _blocks("python") if "unit_test_reward.score(" in b]
    assert "GRPOTrainer(" in example and "build_tiny_model(" in example
    (command,) = [b for b in _blocks("bash") if "trl grpo" in b]
    assert "--reward_funcs rewards.unit_test_reward" in command
    text = (REPO / "README.md").read_text()
    assert "returns a coroutine" in text and "`unit_test_reward.score(...)` is the synchronous form" in text


@pytest.mark.slow  # ~20 s of CPU for the example (a sandbox pool, two GRPO steps), ~30 s for `trl grpo`
def test_the_reuse_examples_run_as_written(tmp_path: Path) -> None:
    (example,) = [b for b in _blocks("python") if "unit_test_reward.score(" in b]
    (printed,) = [b for b in _blocks("") if b.startswith("canonical, unit_test:")]
    (tmp_path / "example.py").write_text(example)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.split(":")[0] in ("canonical, unit_test", "broken,    unit_test",
                                                             "broken,    partial")] == printed.splitlines()  # fmt: skip
    assert "GRPO steps: 2" in lines
    assert (tmp_path / "data" / "train.jsonl").is_file()

    (command,) = [b for b in _blocks("bash") if "trl grpo" in b]
    command = command.replace("\\\n", " ")
    if shutil.which("trl") is None:  # the console script of an editable install in another environment
        command = command.replace("trl grpo", f"{sys.executable} -m trl.cli.main grpo", 1)
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "rewards/unit_test_reward/mean" in out  # TRL resolved the dotted path and logged our reward
    assert (tmp_path / "trl-out" / "model.safetensors").is_file()
