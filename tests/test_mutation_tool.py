"""benchmarks/mutation.py's coverage baseline: the unmutated tests must pass before any mutant is judged by them.

`--select-by-coverage` maps, once, which tests run each line, by running them on the unmutated tree. A test that
already fails there would fail on every mutant it is given and count as killing it, so the map is refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("coverage")  # a dev dependency, as for running mutation.py itself

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
MAP = """
import sys
from pathlib import Path
sys.path.insert(0, {benchmarks!r})
import mutation
lines = mutation.coverage_map(Path({tree!r}), {tests!r}, ["pkg/m.py"], 120)
print(sorted(lines["pkg/m.py"]))
"""


def coverage_map(tree: Path, tests: list[str]) -> subprocess.CompletedProcess:
    """mutation.coverage_map in a process of its own (it forks, and runs pytest in the child)."""
    code = MAP.format(benchmarks=str(BENCHMARKS), tree=str(tree), tests=tests)
    return subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=300)


def test_the_coverage_map_is_refused_when_an_unmutated_test_fails(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "test_passes.py").write_text("from pkg.m import f\n\n\ndef test_f():\n    assert f(1) == 2\n")
    (tmp_path / "test_fails.py").write_text("from pkg.m import f\n\n\ndef test_f():\n    assert f(1) == 3\n")

    mapped = coverage_map(tmp_path, ["test_passes.py"])
    assert mapped.returncode == 0, mapped.stderr
    assert mapped.stdout.strip() == "[1, 2]"  # the def line at import, the body in the test

    refused = coverage_map(tmp_path, ["test_passes.py", "test_fails.py"])
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "the unmutated tree fails test_passes.py test_fails.py (pytest exit 1): fix the tests first, "
        "or every mutant they are given counts as killed"
    )
