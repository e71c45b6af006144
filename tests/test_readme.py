"""The README's examples run as written, and the docs it links to hold what they say.

- every fenced block of the README, in order, is one this file checks (a new block fails until it gets a check);
- the two set-up commands are the ones `.ci/run` runs, with extras and a console script pyproject.toml has;
- the first three quick starts (rewards scored through `.score`, two GRPOTrainer steps; PPOTrainer, ReinforceTrainer
  and a METHODS row in GRPOTrainer's place; two GRPO steps through the repair environment) print what the README
  says, and `trl grpo` trains on their output;
- the fourth quick start's `passk compare` writes its report;
- the methods table is `METHODS`, docs/methods.md's hyperparameters are `build_config`'s and its sources the
  papers `METHODS` names, the stdin/stdout reward example of docs/rewards.md prints the values in its comments;
- every relative link of the README and docs/ reaches a file (and its heading), and every path of the layout
  table in docs/README.md exists.

`passk demo` (the install line) is not run here: tests/run/test_cli.py checks what it launches.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)

INSTALL = "## Installation"
QS_REWARD = "### A passk reward in TRL's GRPOTrainer"
QS_DROP_IN = "### PPO and REINFORCE as drop-ins for GRPOTrainer"
QS_REPAIR = "### Multi-turn repair: the model runs its tests and tries again"
QS_COMPARE = "### Comparing methods: `passk compare`"
# The README's fenced blocks, in order, by section and language: each is checked by a test below.
EXPECTED_BLOCKS = [
    (INSTALL, "bash"),  # install + passk demo: test_the_set_up_commands_are_the_ones_ci_runs
    (INSTALL, "bash"),  # the test command: the same
    (QS_REWARD, "python"),  # test_the_quick_starts_run_as_written
    (QS_REWARD, ""),  # what it prints: the same
    (QS_REWARD, "bash"),  # trl grpo: the same
    (QS_DROP_IN, "python"),  # the same
    (QS_REPAIR, "python"),  # the same
    (QS_COMPARE, "bash"),  # test_passk_compare_runs_as_written
]


def _section(heading: str, path: Path = README) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    level = len(heading.split(" ", 1)[0])
    lines, inside, fenced = [], False, False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#+ ", line):  # a heading, not a comment in a code block
            if inside and len(line.split(" ", 1)[0]) <= level:
                break
            inside = inside or line == heading
        if inside:
            lines.append(line)
    assert lines, f"{path.name} has no heading {heading!r}"
    return "\n".join(lines[1:]) + "\n"


def _blocks(heading: str, lang: str, path: Path = README) -> list[str]:
    """The fenced blocks of `lang` under `heading`, in order."""
    return [body for fence_lang, body in FENCE.findall(_section(heading, path)) if fence_lang == lang]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1"
    )
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _command(block: str) -> str:
    return block.replace("\\\n", " ").strip()


def test_every_readme_block_is_one_this_file_checks() -> None:
    text = README.read_text().split("\n## Links\n", 1)[0]
    found = []
    for match in FENCE.finditer(text):
        headings = re.findall(r"^#{2,3} .*$", FENCE.sub("", text[: match.start()]), flags=re.M)
        found.append((headings[-1], match.group(1)))
    assert found == EXPECTED_BLOCKS


def test_the_readme_is_short_before_its_links() -> None:
    text = README.read_text()
    assert "\n## Links\n" in text
    assert text.split("\n## Links\n", 1)[0].count("\n") + 1 <= 150  # lines before the links section


def test_the_readme_shows_the_async_rule_and_the_trl_command_line() -> None:
    (example,) = [b for b in _blocks(QS_REWARD, "python") if "unit_test_reward.score(" in b]
    assert "GRPOTrainer(" in example and "build_tiny_model(" in example
    (command,) = [b for b in _blocks(QS_REWARD, "bash") if "trl grpo" in b]
    assert "--reward_funcs rewards.unit_test_reward" in command
    text = README.read_text().replace("\n", " ")
    assert "returns a coroutine" in text and "`unit_test_reward.score(...)` is the synchronous form" in text


def test_the_set_up_commands_are_the_ones_ci_runs() -> None:
    import tomllib

    install, tests = (_command(b) for b in _blocks(INSTALL, "bash"))
    ci = (REPO / ".ci" / "run").read_text()
    ci_installs = [line.strip() for line in ci.splitlines() if line.startswith("python -m pip install")]
    # The README's test command is CI's installs (pip for `python -m pip`) then CI's pytest line.
    assert tests.split(" && ") == [c.replace("python -m pip", "pip", 1) for c in ci_installs] + [
        "python -m pytest -q"
    ]
    assert re.search(r"^python -m pytest -q \|\| status=\$\?$", ci, flags=re.M)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert install.startswith(ci_installs[0].replace("python -m pip", "pip", 1) + " && ")
    for extras in re.findall(r'-e "\.\[([\w,-]+)\]"', install + " " + tests):
        assert set(extras.split(",")) <= set(project["optional-dependencies"]), extras
    assert install.endswith("&& passk demo") and "passk" in project["scripts"]


def test_the_methods_table_is_METHODS() -> None:
    from experiments.trainers import METHODS

    # A row names one method, or several that share a trainer (`a`, `b`).
    rows = re.findall(r"^\| (`\w+`(?:, `\w+`)*) \| `([\w.]+)` \|", _section("## Methods"), flags=re.M)
    names = [(name, trainer) for cell, trainer in rows for name in re.findall(r"`(\w+)`", cell)]
    assert [name for name, _ in names] == list(METHODS)
    for name, trainer in names:
        assert trainer.split(".")[-1] == METHODS[name].trainer_cls.__name__, name


def test_the_documented_sources_are_METHODS_papers() -> None:
    from experiments.trainers import METHODS

    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", _section("## Sources", DOCS / "methods.md"), flags=re.M)
    assert rows == [(name, spec.paper) for name, spec in METHODS.items()]


def test_the_documented_hyperparameters_are_build_configs() -> None:
    from experiments.trainers import METHODS, build_config

    rows = re.findall(
        r"^\| `(\w+)` \| (.*) \|$", _section("## Hyperparameters", DOCS / "methods.md"), flags=re.M
    )
    assert [name for name, _ in rows] == list(METHODS)
    for name, cell in rows:
        config = build_config(name, output_dir="unused", use_cpu=True, bf16=False)
        pairs = re.findall(r"`(\w+)=([^`]+)`", cell)
        assert {key for key, _ in pairs} == set(METHODS[name].hparams), name
        for key, value in pairs:
            assert getattr(config, key) == ast.literal_eval(value), (name, key)


def test_the_stdio_reward_example_prints_its_comments() -> None:
    (example,) = _blocks("## Stdin/stdout problems", "python", DOCS / "rewards.md")
    printed = re.findall(r"^print\(.*\)  # (\[.*\])$", example, flags=re.M)
    assert len(printed) == 2
    proc = subprocess.run(
        [sys.executable, "-c", example], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == printed


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_links_of_the_readme_and_docs_resolve() -> None:
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 5
    for page in pages:
        text = FENCE.sub("", page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.relative_to(REPO)}: {target}"
            if anchor:
                headings = re.findall(r"^#+ (.*)$", FENCE.sub("", dest.read_text()), flags=re.M)
                assert anchor in {_slug(h) for h in headings}, f"{page.relative_to(REPO)}: {target}"


def test_the_layout_table_names_paths_that_exist() -> None:
    paths = []
    for first in re.findall(r"^\| (`[^|]+) \|", _section("## Layout", DOCS / "README.md"), flags=re.M):
        paths += re.findall(r"`([^`]+)`", first)
    assert len(paths) > 10
    for path in paths:
        assert any((REPO / p).exists() for p in (path, f"{path}.py")), path


@pytest.mark.slow  # ~20 s of CPU for the examples (a sandbox pool, GRPO, PPO and two REINFORCE runs), ~30 s for `trl grpo`
def test_the_quick_starts_run_as_written(tmp_path: Path) -> None:
    (example,) = _blocks(QS_REWARD, "python")
    (drop_in,) = _blocks(QS_DROP_IN, "python")
    (repair,) = _blocks(QS_REPAIR, "python")
    (printed,) = _blocks(QS_REWARD, "")
    (tmp_path / "example.py").write_text(example + "\n" + drop_in + "\n" + repair)
    proc = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [
        line
        for line in lines
        if line.split(":")[0] in ("canonical, unit_test", "broken,    unit_test", "broken,    partial")
    ] == printed.splitlines()
    assert "GRPO steps: 2" in lines
    assert (tmp_path / "data" / "train.jsonl").is_file()
    # What the README says the drop-ins print.
    assert [line for line in lines if " steps: " in line and "Trainer" in line] == [
        "PPOTrainer steps: 2",
        "ReinforceTrainer steps: 2",
        "ReinforceTrainer steps: 2",
    ]
    section = _section(QS_DROP_IN).replace("\n", " ")
    assert "It prints `PPOTrainer steps: 2`, then `ReinforceTrainer steps: 2` twice." in section
    assert (
        (tmp_path / "ppo-out").is_dir()
        and (tmp_path / "rloo-out").is_dir()
        and (tmp_path / "kl-out").is_dir()
    )
    # The repair environment's two GRPO steps, through TRL's environment_factory.
    assert "repair steps: 2" in lines

    (command,) = [b for b in _blocks(QS_REWARD, "bash") if "trl grpo" in b]
    command = _command(command)
    if shutil.which("trl") is None:  # the console script of an editable install in another environment
        command = command.replace("trl grpo", f"{sys.executable} -m trl.cli.main grpo", 1)
    proc = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "rewards/unit_test_reward/mean" in out  # TRL resolved the dotted path and logged our reward
    assert (tmp_path / "trl-out" / "model.safetensors").is_file()


@pytest.mark.slow  # ~1 min of CPU: three runs of 4 prompts on the tiny model, each evaluated before and after
def test_passk_compare_runs_as_written(tmp_path: Path, passk_cache: Path) -> None:
    (command,) = _blocks(QS_COMPARE, "bash")
    command = _command(command)
    methods = re.search(r"--methods (\S+)", command).group(1).split(",")
    out_dir = tmp_path / re.search(r"--out (\S+)", command).group(1)
    if shutil.which("passk") is None:
        command = command.replace("passk", f"{sys.executable} -m experiments.run.cli", 1)
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=_env(PASSK_CACHE=str(passk_cache)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    for i, method in enumerate(methods, 1):
        assert f"passk compare [{i}/{len(methods)}] {method}: pass@1 " in console, console[-3000:]
    assert (out_dir / "report.md").is_file() and (out_dir / "report.json").is_file()
    assert sorted(p.name for p in out_dir.glob("*.png"))  # the plots
    report = (out_dir / "report.md").read_text()
    assert all(method in report for method in methods)
