"""The smaller surprises of issue 53 (item 7): each message names what the user types, nothing is cut mid-word, and
nothing says "done" or "written" that was not."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.run import cli
from experiments.run.argv import parse_config, split_list_values
from experiments.run.config import config_path, shipped_configs

CPU = str(config_path("cpu"))


def test_a_batch_not_divisible_by_num_generations_names_the_flags_to_change() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config([CPU, "--method", "grpo", "--num_generations", "3"], device_free=True)
    assert str(info.value) == (
        "num_generations: the generation batch (2 completions = per_device_train_batch_size x processes x "
        "steps_per_generation) is not divisible by num_generations (3); change --num_generations or "
        "--per_device_train_batch_size"
    )


def test_list_flags_take_commas_as_methods_and_seeds_do() -> None:
    exp, _ = parse_config([CPU, "--method", "grpo", "--eval_ks", "1,2", "--eval_n", "4"], device_free=True)
    assert exp.eval_ks == [1, 2]
    exp, _ = parse_config([CPU, "--method", "grpo", "--eval_ks=1,4", "--eval_n", "4"], device_free=True)
    assert exp.eval_ks == [1, 4]
    exp, cfg = parse_config([CPU, "--method", "grpo", "--reward_funcs", "unit_test,format"], device_free=True)
    assert exp.reward_funcs == ["unit_test", "format"]
    # Space-separated lists, and a single value, as before; other flags untouched.
    exp, _ = parse_config([CPU, "--method", "grpo", "--eval_ks", "1", "2"], device_free=True)
    assert exp.eval_ks == [1, 2]
    assert split_list_values(["--eval_ks", "1,2", "--seed", "3,4"], {"eval_ks"}) == [
        "--eval_ks",
        "1",
        "2",
        "--seed",
        "3,4",
    ]


def test_a_run_stopped_before_its_last_step_does_not_say_done() -> None:
    from transformers.trainer_callback import TrainerControl, TrainerState

    from experiments.run.progress import ConsoleProgress

    out = io.StringIO()
    progress = ConsoleProgress("grpo", out)
    state, control = TrainerState(max_steps=8), TrainerControl()
    progress.on_train_begin(None, state, control)
    state.global_step = 3
    progress.on_train_end(None, state, control)
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("grpo step 3/8 stopped after ") and "done" not in last


def test_resuming_a_finished_run_does_not_say_it_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"global_step": 2}))
    argv = ["cpu", "--method", "grpo", "--model", "/nonexistent-model", "--budget_prompts", "0"]
    argv += ["--max_steps", "2", "--output_dir", str(out), "--resume", "true"]
    assert cli.cmd_train(argv) == 0
    said = capsys.readouterr().out
    assert said == f"passk: {out} already trained its 2 steps (run.json): nothing to resume\n"
    from experiments.run.train import main

    assert main([CPU, *argv[1:]]) == 0
    assert "written" not in capsys.readouterr().out


def test_a_second_demo_is_refused_before_the_warm_start_and_names_demos_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import experiments.learnable.warm_start as warm_start

    def built(*args, **kwargs):
        raise AssertionError("the warm start was built before the refusal")

    monkeypatch.setattr(warm_start, "resolve_base_model", built)
    (tmp_path / "grpo").mkdir()
    (tmp_path / "grpo" / "run.json").write_text("{}")
    assert cli.main(["demo", "--methods", "grpo", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"passk: error: output_dir: {tmp_path / 'grpo'} already holds files (run.json)")
    assert err.endswith("--resume true to continue that run, or another --out") and "--output_dir" not in err


def test_demo_help_says_which_methods_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--help"]) == 0
    said = capsys.readouterr().out
    assert "The seven original methods" in said and "Every method" not in said


def test_help_cuts_no_budget_description_mid_word(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("Budget files")))
    for path in shipped_configs():
        first = next(ln.lstrip("# ").strip() for ln in path.read_text().splitlines() if ln.startswith("#"))
        line = next(ln for ln in lines[start:] if ln.startswith(f"  {path.stem} "))
        shown = line[2 + 18 + 1 :]
        if shown != first:
            assert shown.endswith("…") and len(shown) <= 90, shown
            head = shown[:-1]
            assert first.startswith(head) and first[len(head)] in " ,;:(.", (head, first)
    assert cli._clip("one two three", 9) == "one two…" and cli._clip("short", 9) == "short"


def test_eval_of_a_missing_checkpoint_says_only_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "runs" / "grpo" / "checkpoint-9"
    assert cli.main(["eval", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and str(missing) in err


def test_compare_prints_the_verdict_after_the_reports_path(tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    report.write_text(
        "# Report\n\n## Verdict\n\n- **pass@1** (30 problems; before training 0.0%): best **grpo**, 10.0%.\n\n"
        "One training run per method.\n\n## What was trained\n\n- Task: x.\n"
    )
    assert cli.report_verdict(report) == [
        "verdict: pass@1 (30 problems; before training 0.0%): best grpo, 10.0%."
    ]
    assert cli.report_verdict(tmp_path / "absent.md") == []


def test_the_demo_ends_with_its_reports_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.learnable import warm_start

    monkeypatch.setattr(warm_start, "warm_started_model", lambda *a, **k: "warm")
    monkeypatch.setattr(warm_start, "warm_start_cached", lambda *a, **k: True)
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda name: "base")

    def compare(config, out, **kw):
        (out / "report.md").write_text("## Verdict\n\n- **pass@1** (8 problems): best **ppo**, 50.0%.\n")
        return out / "report.md"

    monkeypatch.setattr(cli, "compare", compare)
    assert cli.cmd_demo(["--out", str(tmp_path), "--methods", "grpo,ppo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        f"passk demo: report: {tmp_path / 'report.md'}",
        "verdict: pass@1 (8 problems): best ppo, 50.0%.",
    ]


def test_eval_ks_past_eval_n_names_the_flag_that_allows_it() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config([CPU, "--method", "grpo", "--eval_ks", "1,10"], device_free=True)
    assert str(info.value) == (
        "eval_ks: k=10 is outside 1..eval_n (2); raise --eval_n to 10 or leave k=10 out of --eval_ks"
    )
    exp, _ = parse_config([CPU, "--method", "grpo", "--eval_ks", "1,10", "--eval_n", "10"], device_free=True)
    assert exp.eval_ks == [1, 10]


def test_train_help_says_the_demo_runs_the_seven_original_methods(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--help"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  demo ")]
    assert "the seven original methods" in line and "every method" not in line, line
