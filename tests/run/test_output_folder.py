"""An output folder that cannot be made or written is refused in one line before anything loads (experiments.run.
validation.check_writable_dir): `passk train --output_dir`, `passk compare --out`, `passk demo --out`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.run import cli
from experiments.run.validation import check_writable_dir

REPO = Path(__file__).resolve().parents[2]
NO_MODEL = "/nonexistent-model"  # loading it would fail: the folder's error must come first


def _train(out: Path | str) -> list[str]:
    return ["train", "cpu", "--method", "grpo", "--model", NO_MODEL, "--output_dir", str(out)]


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2  # before the model (NO_MODEL) is looked for
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_output_dir_that_is_a_file_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    said = _error(capsys, _train(tmp_path / "taken"))
    assert said == (
        f"passk: error: output_dir: {tmp_path / 'taken'} is a file, not a folder; give another output_dir"
    )


def test_an_output_dir_below_a_file_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    said = _error(capsys, _train(tmp_path / "taken" / "run" / "grpo"))
    assert said == (
        f"passk: error: output_dir: cannot make {tmp_path / 'taken' / 'run' / 'grpo'}: {tmp_path / 'taken'} is a "
        "file, not a folder; give another output_dir"
    )


def test_an_output_dir_in_proc_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    said = _error(capsys, _train("/proc/passk-run"))
    assert said.startswith("passk: error: output_dir: cannot make /proc/passk-run in /proc (")
    assert said.endswith("); give a folder you can write to")


def _error_as_root_without_override(argv: list[str]) -> str:
    """`_error` for root, which writes in a read-only folder: passk in a child process run by `setpriv` without
    the capabilities that let root past a folder's permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root, and no setpriv (util-linux) to run passk without CAP_DAC_OVERRIDE")
    drop = [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--"]
    code = "import sys; from experiments.run import cli; sys.exit(cli.main(sys.argv[1:]))"
    proc = subprocess.run(
        [*drop, sys.executable, "-c", code, *argv],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]  # before the model (NO_MODEL) is looked for
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_read_only_folder_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.geteuid() == 0:  # as in CI
            said = _error_as_root_without_override(_train(locked / "run"))
        else:
            said = _error(capsys, _train(locked / "run"))
    finally:
        locked.chmod(0o755)
    assert said == (
        f"passk: error: output_dir: cannot make {locked / 'run'} in {locked} (Permission denied); give a folder "
        "you can write to"
    )


def test_compare_and_demo_refuse_an_out_they_cannot_make_before_anything_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    out = tmp_path / "taken" / "cmp"
    said = _error(capsys, ["compare", "cpu", "--methods", "grpo", "--model", NO_MODEL, "--out", str(out)])
    assert said == (
        f"passk: error: --out: cannot make {out}: {tmp_path / 'taken'} is a file, not a folder; give another --out"
    )
    said = _error(capsys, ["demo", "--methods", "grpo", "--out", str(tmp_path / "taken")])
    assert said == f"passk: error: --out: {tmp_path / 'taken'} is a file, not a folder; give another --out"


def test_the_check_leaves_nothing_behind_and_takes_a_folder_it_can_make(tmp_path: Path) -> None:
    check_writable_dir(tmp_path / "a" / "b" / "c")
    check_writable_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match=r"^out: "):
        (tmp_path / "f").write_text("x")
        check_writable_dir(tmp_path / "f", "out")
