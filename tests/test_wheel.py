"""A wheel install (`pip install .`, not `-e`) holds what passk looks up beside its code: the accelerate configs
(`passk train --accelerate_config multi_gpu`) and the budget files. The wheel is built from a copy of the source
(the checkout and its development install stay as they are) and unpacked as pip would install it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = ("pyproject.toml", "README.md", "sandbox", "rewards", "experiments", "accelerate_configs")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src, dist = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for name in SOURCE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src)]
    proc = subprocess.run([*build, "-w", str(dist)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = dist.glob("passk-*.whl")
    return built


def test_the_wheel_holds_every_accelerate_config_beside_experiments(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = sorted(p.name for p in (REPO / "accelerate_configs").glob("*.yaml"))
    assert "multi_gpu.yaml" in configs
    missing = [c for c in configs if f"accelerate_configs/{c}" not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert "experiments/run/cli.py" in names and "experiments/configs/cpu.yaml" in names


def test_an_installed_wheel_finds_multi_gpu(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zipfile.ZipFile(wheel).extractall(site)  # what pip install puts in site-packages
    code = (
        "import experiments\n"
        "from experiments.run.cli import accelerate_config_path\n"
        "from experiments.run.config import config_path\n"
        "print(experiments.__file__)\n"
        "print(accelerate_config_path('multi_gpu'))\n"
        "print(config_path('cpu'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    package, multi_gpu, cpu = (Path(line) for line in proc.stdout.splitlines())
    assert package == site / "experiments" / "__init__.py"  # the wheel's code, not the checkout's
    assert multi_gpu == site / "accelerate_configs" / "multi_gpu.yaml"
    assert multi_gpu.read_text() == (REPO / "accelerate_configs" / "multi_gpu.yaml").read_text()
    assert cpu == site / "experiments" / "configs" / "cpu.yaml"
