"""The `evaluate` metric module at experiments/evaluation/metrics/pass_at_k: offline loading and sandboxed pass@k."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.evaluation.stats import pass_at_k

REPO = Path(__file__).resolve().parents[2]
METRIC_DIR = REPO / "experiments" / "evaluation" / "metrics" / "pass_at_k"
BROKEN = "    return None\n"


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(METRIC_DIR))


@pytest.fixture(scope="module")
def three(humaneval):
    rows = humaneval.select(range(3))
    good = [p + c for p, c in zip(rows["prompt"], rows["canonical_solution"])]
    bad = [p + BROKEN for p in rows["prompt"]]
    return rows, good, bad


def test_canonical_vs_broken_programs(metric, three) -> None:
    rows, good, bad = three
    refs, eps = list(rows["test"]), list(rows["entry_point"])
    mixed = [[g, b] for g, b in zip(good, bad)]  # c=1 of n=2 on every problem
    assert metric.compute(predictions=mixed, references=refs, entry_point=eps, k=[1, 2, 5]) == {
        "pass@1": 0.5,
        "pass@2": 1.0,  # k=5 > n=2: skipped
    }
    assert metric.compute(predictions=[[g] for g in good], references=refs, entry_point=eps, k=[1]) == {
        "pass@1": 1.0
    }
    assert metric.compute(predictions=[[b, b] for b in bad], references=refs, entry_point=eps, k=[1, 2]) == {
        "pass@1": 0.0,
        "pass@2": 0.0,
    }
    # One problem right on 2 of 3 candidates, the others never: pass@1 = (2/3) / 3.
    uneven = [[good[0], good[0], bad[0]], [bad[1]] * 3, [bad[2]] * 3]
    got = metric.compute(predictions=uneven, references=refs, entry_point=eps, k=[1])
    assert got["pass@1"] == pytest.approx(2 / 9)


def test_plain_asserts_and_single_entry_point(metric) -> None:
    progs = [["def f(x):\n    return x + 1\n", "def f(x):\n    return x\n"]]
    got = metric.compute(predictions=progs, references=["assert f(1) == 2\n"], entry_point="f", k=[1])
    assert got == {"pass@1": 0.5}


def test_module_estimator_matches_ours(metric) -> None:
    estimate = sys.modules[type(metric).__module__]._estimate
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        c = int(rng.integers(0, n + 1))
        k = int(rng.integers(1, n + 1))
        assert estimate(n, c, k) == pytest.approx(pass_at_k(n, c, k), abs=1e-12)


def test_evaluate_load_offline_from_a_fresh_modules_cache(tmp_path: Path, humaneval) -> None:
    """evaluate copies the script into its modules cache; imports must resolve there, with no hub access."""
    row = humaneval[0]
    payload = {
        "predictions": [[row["prompt"] + row["canonical_solution"], row["prompt"] + BROKEN]],
        "references": [row["test"]],
        "entry_point": [row["entry_point"]],
    }
    script = (
        "import json, sys, evaluate\n"
        f"m = evaluate.load({str(METRIC_DIR / 'pass_at_k.py')!r})\n"
        "p = json.loads(sys.stdin.read())\n"
        "print(json.dumps(m.compute(k=[1, 2], **p)))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "PYTHONPATH": str(REPO),  # `sandbox` must be importable from the cached copy
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"pass@1": 0.5, "pass@2": 1.0}
    cached = list((tmp_path / "modules").rglob("pass_at_k.py"))
    assert cached, "evaluate did not copy the module into the fresh cache"
