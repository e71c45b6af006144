"""The `passk` command line at its edges, with nothing trained or loaded: a flag missing its value, the launch
through accelerate, `passk eval`'s unknown options, output path, device and dtype, the help screens' counts
and cut lines, the interrupted comparison's continue command and the demo's closing lines. The end-to-end runs
are in test_cli.py."""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from experiments.errors import CliError, ConfigError
from experiments.run import cli

REPO = Path(__file__).resolve().parents[2]
CPU_YAML = REPO / "experiments" / "configs" / "cpu.yaml"


# ---- flags -------------------------------------------------------------------------------------------------
def test_a_flag_pops_with_its_value_in_either_form_and_bare_flags_alone() -> None:
    args = ["cpu", "--out", "d", "--jobs=2", "--verbose", "--seed", "1"]
    assert cli._pop_flag(args, "out") == "d" and cli._pop_flag(args, "jobs") == "2"
    assert cli._pop_flag(args, "verbose", has_value=False) is True
    assert cli._pop_flag(args, "verbose", has_value=False) is None  # popped once
    assert args == ["cpu", "--seed", "1"]
    assert cli._pop_flag(["--verbose=x"], "verbose", has_value=False) is None  # a bare flag takes no value
    with pytest.raises(TypeError):
        cli._pop_flag(["--a"], "a", False)  # has_value is keyword-only


@pytest.mark.parametrize("args", [["--out"], ["cpu", "--seed", "1", "--out"]])
def test_a_flag_at_the_end_without_its_value_is_named(args: list[str]) -> None:
    with pytest.raises(CliError, match=r"^--out needs a value$"):
        cli._pop_flag(args, "out")


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_jobs_must_be_a_whole_number_of_at_least_one(value: str) -> None:
    with pytest.raises(CliError, match=rf"^--jobs: must be a whole number >= 1, got '{re.escape(value)}'$"):
        cli._jobs(value, 1)
    assert cli._jobs(None, 3) == 3 and cli._jobs("1", 3) == 1 and cli._jobs(4, 1) == 4


# ---- passk train through accelerate -------------------------------------------------------------------------
def test_train_with_an_accelerate_config_launches_the_module_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    launched: list = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, env: launched.append((cmd, env)) or 7)
    argv = ["cpu", "--method", "grpo", "--accelerate_config", "cpu", "--num_processes", "2", "--seed", "5"]
    assert cli.cmd_train(argv) == 7  # the launcher's own exit code
    ((cmd, env),) = launched
    config = str(CPU_YAML)
    assert cmd == [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO / "accelerate_configs" / "cpu.yaml"),
        "--num_processes",
        "2",
        "-m",
        "experiments.train",
        config,
        "--method",
        "grpo",
        "--seed",
        "5",
    ]
    assert env["PYTHONPATH"].split(":")[0] == str(REPO)
    assert capsys.readouterr().out == "passk: " + shlex.join(cmd) + "\n"


def test_num_processes_needs_an_accelerate_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.subprocess, "call", lambda *a, **k: pytest.fail("launched"))
    with pytest.raises(CliError, match=r"^--num_processes needs --accelerate_config$"):
        cli.cmd_train(["cpu", "--method", "grpo", "--num_processes", "2"])


# ---- passk eval ----------------------------------------------------------------------------------------------
@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`passk eval`'s loading, data and scoring replaced by recorders: what it was given and where it wrote."""
    import experiments.evaluation.evaluate as evaluate
    import experiments.inputs.data as data
    import experiments.inputs.models as models

    seen: dict[str, Any] = {}

    def load(path: str, dtype: Any, device: Any) -> tuple[Any, Any]:
        seen.update(path=path, dtype=dtype, device=device)
        return "net", "tokenizer"

    def score(net: Any, tokenizer: Any, rows: Any, exp: Any, seed: int, out: Path, generation: Any) -> dict:
        seen.update(rows=rows, out=out, seed=seed, generation=generation)
        return {"metrics": {"pass@1": {"value": 0.25}}}

    monkeypatch.setattr(models, "load_model_and_tokenizer", load)
    monkeypatch.setattr(data, "build_datasets", lambda spec: (["train row"], ["eval row"]))
    monkeypatch.setattr(evaluate, "evaluate_to_file", score)
    monkeypatch.setattr(
        models, "model_sampling", lambda path: {"top_k": 7, "min_p": None, "repetition_penalty": None}
    )
    return seen


def _model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_eval_writes_beside_a_model_folder_and_says_its_metrics(
    tmp_path: Path, evaluated: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    folder = _model(tmp_path)
    assert cli.cmd_eval([str(folder), "--device", "cpu"]) == 0
    out = folder / "eval.json"
    assert evaluated["out"] == out and evaluated["path"] == str(folder)
    assert evaluated["rows"] == ["eval row"] and evaluated["generation"] is None
    written = json.loads(out.read_text())
    assert (written["model"], written["dtype"], written["device"]) == (str(folder), "float32", "cpu")
    assert "model_source" not in written  # not a folder passk built
    assert (folder / "eval.log").is_file()  # the libraries' records, beside the result
    assert capsys.readouterr().out.endswith(f"passk: {out}  {{'pass@1': 0.25}}\n")


def test_eval_of_a_name_writes_here_and_of_the_train_split_scores_those_rows(
    tmp_path: Path, evaluated: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import experiments.learnable.warm_start as warm_start

    folder = _model(tmp_path)
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda name: str(folder))
    monkeypatch.chdir(tmp_path)
    assert cli.cmd_eval(["tiny", "--split", "train", "--model_generation_config", "true"]) == 0
    assert evaluated["out"] == Path("eval.json") and (tmp_path / "eval.json").is_file()
    assert evaluated["rows"] == ["train row"] and evaluated["generation"] == {"top_k": 7}


def test_eval_takes_the_dtype_and_device_asked(
    tmp_path: Path, evaluated: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    folder = _model(tmp_path)
    out = tmp_path / "e.json"
    for dtype, want in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("auto", torch.float32)):
        assert cli.cmd_eval([str(folder), "--out", str(out), "--dtype", dtype, "--device", "cpu"]) == 0
        assert (evaluated["dtype"], evaluated["device"]) == (want, torch.device("cpu")), dtype
    # auto is bfloat16 on a GPU only: not on another device named (meta sorts after cuda)
    assert cli.cmd_eval([str(folder), "--out", str(out), "--device", "meta"]) == 0
    assert (evaluated["dtype"], evaluated["device"]) == (torch.float32, torch.device("meta"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.cmd_eval([str(folder), "--out", str(out)]) == 0  # auto on a GPU machine: cuda in bfloat16
    assert (evaluated["dtype"], evaluated["device"]) == (torch.bfloat16, torch.device("cuda"))
    assert (
        cli.cmd_eval([str(folder), "--out", str(out), "--device", "cpu"]) == 0
    )  # the CPU asked, beside a GPU
    assert (evaluated["dtype"], evaluated["device"]) == (torch.float32, torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"^dtype: must be auto, float32 or bfloat16, got 'half'$"):
        cli.cmd_eval([str(folder), "--out", str(out), "--dtype", "half"])


def test_eval_pins_threads_on_the_cpu_only(
    tmp_path: Path, evaluated: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    folder, pinned = _model(tmp_path), []
    monkeypatch.setattr(torch, "set_num_threads", pinned.append)
    args = [str(folder), "--out", str(tmp_path / "e.json"), "--num_threads", "3"]
    assert cli.cmd_eval([*args, "--device", "cpu"]) == 0 and pinned == [3]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.cmd_eval([*args, "--device", "cuda"]) == 0 and pinned == [3]  # not again for the GPU
    assert cli.cmd_eval(args) == 0 and pinned == [3]  # nor for auto, which takes the GPU
    assert cli.cmd_eval([*args, "--device", "cpu", "--num_threads", "0"]) == 0 and pinned == [3]


def test_eval_refuses_an_unknown_option_naming_the_closest_key(evaluated: dict, tmp_path: Path) -> None:
    folder = _model(tmp_path)
    with pytest.raises(ConfigError, match=r"^eval_nn: unknown option '--eval_nn' for passk eval.*'eval_n'"):
        cli.cmd_eval([str(folder), "--eval_nn", "3"])
    with pytest.raises(ConfigError, match=r"^split: must be eval or train, got 'test'$"):
        cli.cmd_eval([str(folder), "--split", "test"])


def test_eval_of_a_folder_without_weights_or_checkpoints_is_refused(tmp_path: Path, evaluated: dict) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        CliError, match=r"holds no model \(config\.json / adapter_config\.json\) and no saved"
    ):
        cli.cmd_eval([str(tmp_path / "empty")])
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    assert cli._model_folder(str(adapter)) == str(adapter)


# ---- help screens ---------------------------------------------------------------------------------------------
def test_a_help_line_cuts_its_first_sentence_at_100_characters_and_wraps_a_long_flag() -> None:
    line = cli._help_line("k", 1, "x" * 150 + ". Second.")
    assert line == f"{'  --k 1':<34} {'x' * 99}…"
    assert cli._help_line("k", 1, "y" * 100 + ". Second.") == f"{'  --k 1':<34} {'y' * 100}"
    long = cli._help_line("a_very_long_key_name_indeed", [1, 2], "Text. More.")
    assert long == f"  --a_very_long_key_name_indeed [1, 2]\n{'':<34} Text"


def test_config_help_counts_the_keys_it_does_not_list(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.trainers import METHODS

    assert cli.cmd_train(["cpu", "--method", "ppo", "--help"]) == 0
    said = capsys.readouterr().out
    listed = said.split("own hyperparameters", 1)[1]
    flags = {m.group(1) for m in re.finditer(r"^  --(\w+) ", listed, re.MULTILINE)}
    fields = {f.name for f in dataclasses.fields(METHODS["ppo"].config_cls) if f.init}
    assert flags <= fields
    match = re.search(r"^(\d+) more (\w+) keys at TRL / transformers defaults", said, re.MULTILINE)
    assert match and match.group(2) == METHODS["ppo"].config_cls.__name__
    assert int(match.group(1)) == len(fields) - len(flags)


# ---- comparisons and the demo ---------------------------------------------------------------------------------
def test_an_interrupted_comparison_says_how_to_continue_it() -> None:
    stopped = SimpleNamespace(done=["grpo"], left=["ppo", "rloo"])
    argv = [
        "cpu",
        "--overwrite",
        "--out",
        "old",
        "--seeds",
        "1,2",
        "--resume=false",
        "--jobs",
        "2",
        "--overwrite",
        "true",
    ]
    said = cli.compare_interrupted_message("compare", argv, Path("runs/x"), stopped)
    assert said == (
        "passk compare: interrupted; finished: grpo; not finished: ppo, rloo; continue with: "
        "passk compare cpu --seeds 1,2 --jobs 2 --out runs/x --resume true"
    )
    none = SimpleNamespace(done=[], left=[])
    assert cli.compare_interrupted_message("demo", [], Path("d"), none) == (
        "passk demo: interrupted; finished: none; not finished: none; continue with: "
        "passk demo --out d --resume true"
    )


def test_the_demo_says_how_long_it_took_and_where_its_report_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.learnable import warm_start

    clock = iter([1000.0, 1042.4])
    monkeypatch.setattr(cli.time, "time", lambda: next(clock))
    monkeypatch.setattr(warm_start, "warm_started_model", lambda *a, **k: "warm")
    monkeypatch.setattr(warm_start, "warm_start_cached", lambda *a, **k: True)
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda name: "base")
    monkeypatch.setattr(cli, "compare", lambda config, out, **kw: out / "report.md")
    assert cli.cmd_demo(["--out", str(tmp_path), "--methods", "grpo,ppo"]) == 0
    assert (tmp_path / "logs" / cli.PARENT_LOG).is_file()  # the libraries' records in this process
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["passk demo: 2 methods in 42s", f"passk demo: report: {tmp_path / 'report.md'}"]
    assert lines[0].startswith("passk demo: warm start (") and lines[0].endswith(" SFT steps) from the cache")


def test_train_help_shows_the_method_as_a_placeholder_and_a_yaml_by_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.cmd_train(["--help"]) == 0
    said = capsys.readouterr().out
    assert re.search(r"^  --method M +", said, re.MULTILINE)
    own = tmp_path / "budget.yaml"
    own.write_text(CPU_YAML.read_text())
    assert cli.cmd_train([str(own), "--help"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"usage: passk train {own} --method M")  # a file of the user's: its path
    assert cli.cmd_train(["cpu", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: passk train cpu --method M")  # a shipped one: its name


def test_methods_all_or_nothing_is_every_method_and_a_list_is_checked() -> None:
    from experiments.trainers import METHODS

    assert cli.parse_methods("all") == cli.parse_methods(None) == cli.parse_methods("") == list(METHODS)
    assert cli.parse_methods(" ppo, grpo ,") == ["ppo", "grpo"]
    with pytest.raises(CliError, match=r"^--methods: a method is listed twice in 'ppo,ppo'$"):
        cli.parse_methods("ppo,ppo")
    with pytest.raises(CliError, match=r"^--methods: "):
        cli.parse_methods("ppo,nope")


def test_print_config_takes_show_all_by_keyword_only() -> None:
    from experiments.run.argv import parse_config

    exp, cfg = parse_config([str(CPU_YAML), "--method", "grpo"], device_free=True)
    with pytest.raises(TypeError):
        cli._print_config(exp, cfg, True)


def test_compare_without_a_budget_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "compare", lambda *a, **k: pytest.fail("compared"))
    with pytest.raises(CliError, match=r"^compare takes one budget file .* got 0 config\(s\)$"):
        cli.cmd_compare(["--methods", "grpo"])
    with pytest.raises(CliError, match=r"got 2 config\(s\)$"):
        cli.cmd_compare(["cpu", "seed", "--methods", "grpo"])


def test_a_keys_default_comes_from_its_factory_or_is_missing() -> None:
    from experiments.run.config import ExperimentArgs

    fields = {f.name: f for f in dataclasses.fields(ExperimentArgs)}
    assert cli._field_default(fields["eval_ks"]) == ExperimentArgs().eval_ks  # a default_factory
    assert cli._field_default(fields["split_seed"]) == ExperimentArgs().split_seed

    @dataclasses.dataclass
    class _Required:
        x: int

    (required,) = dataclasses.fields(_Required)
    assert cli._field_default(required) is dataclasses.MISSING


@pytest.mark.parametrize("command", [cli.cmd_demo, cli.cmd_compare, cli.cmd_eval])
def test_help_prints_the_usage_and_runs_nothing(
    command: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "compare", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setattr(cli, "_evaluate", lambda *a, **k: pytest.fail("ran"))
    for flag in ("-h", "--help"):
        assert command([flag]) == 0
        assert capsys.readouterr().out.startswith("usage: passk ")


# ---- the rest of each command's options -------------------------------------------------------------------
def test_a_value_holding_an_equals_sign_is_kept_whole() -> None:
    assert cli._pop_flag(["--out=a=b"], "out") == "a=b"


def test_train_says_where_the_run_went_or_how_to_resume_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run import train

    monkeypatch.setattr(train, "run", lambda exp, cfg: Path("runs/x"))
    assert cli.cmd_train(["cpu", "--method", "grpo"]) == 0
    assert capsys.readouterr().out.endswith("passk: run written to runs/x\n")

    def interrupted(exp: Any, cfg: Any) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "run", interrupted)
    monkeypatch.setattr(train, "interrupted_message", lambda args, cfg: f"told {args}")
    assert cli.cmd_train(["cpu", "--method", "grpo"]) == 130
    assert capsys.readouterr().err == "told ['cpu', '--method', 'grpo']\n"  # the command as typed


def test_check_states_the_budget_and_where_sampling_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.cmd_train(["demo", "--method", "grpo", "--check"]) == 0
    said = capsys.readouterr().out
    assert re.search(r"^# budget: 320 fresh prompts, max_steps \d+, \d+ completions per prompt$", said, re.M)
    assert "# sampling:" not in said
    args = ["cpu", "--method", "grpo", "--check", "--budget_prompts", "0", "--max_steps", "6"]
    args += ["--model_generation_config", "true"]
    assert cli.cmd_train(args) == 0
    said = capsys.readouterr().out
    assert re.search(r"^# budget: max_steps 6, \d+ completions per prompt$", said, re.M)
    assert (
        "# sampling: top_k, min_p and repetition_penalty are read from the model's generation_config" in said
    )


def test_a_help_value_is_shown_as_json_for_lists_and_dicts_only() -> None:
    assert cli._help_line("k", {"a": 1}, "T").split()[:2] == ["--k", '{"a":']
    assert cli._help_line("k", "M", "T").split()[:2] == ["--k", "M"]


def test_the_methods_help_shows_each_methods_defaults_or_its_paper() -> None:
    from experiments.trainers import METHODS

    lines = cli._methods_help()[1:]
    assert len(lines) == len(METHODS)
    for line, (name, spec) in zip(lines, METHODS.items()):
        defining = ", ".join(f"{k}={v}" for k, v in spec.defaults.items())
        assert line.split()[:2] == [name, spec.trainer_cls.__name__]
        assert line.endswith(defining or spec.paper.split(",")[0]), line
    assert any(spec.defaults for spec in METHODS.values()) and any(not s.defaults for s in METHODS.values())


def test_help_of_the_gpu_budget_file_works_on_any_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.cmd_train(["seed", "--help"]) == 0
    assert cli.cmd_train(["seed", "--method", "grpo", "--help"]) == 0
    assert "usage: passk train seed" in capsys.readouterr().out


def test_config_help_lists_the_keys_passk_sets_and_max_steps(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.run.config import PASSK_TRAINER_DEFAULTS

    assert cli.cmd_train(["cpu", "--method", "grpo", "--help"]) == 0
    listed = capsys.readouterr().out.split("keys cpu or passk sets", 1)[1]
    flags = {m.group(1) for m in re.finditer(r"^  --(\w+) ", listed, re.MULTILINE)}
    assert {"max_steps", *PASSK_TRAINER_DEFAULTS} <= flags


def test_eval_without_arguments_prints_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.cmd_eval([]) == 0 and capsys.readouterr().out.startswith("usage: passk eval MODEL")
    assert cli.cmd_compare([]) == 0 and capsys.readouterr().out.startswith("usage: passk compare CONFIG")


def test_eval_takes_no_abbreviated_option(tmp_path: Path, evaluated: dict) -> None:
    with pytest.raises(ConfigError, match=r"^eval_temp: unknown option '--eval_temp'"):
        cli.cmd_eval([str(_model(tmp_path)), "--eval_temp", "0.5"])


def test_eval_names_the_config_file_whose_value_has_the_wrong_type(tmp_path: Path, evaluated: dict) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("eval_n: [1, 2]\n")
    with pytest.raises(ConfigError, match=re.escape(str(config))):
        cli.cmd_eval([str(_model(tmp_path)), "--config", str(config)])


def test_eval_makes_the_output_folder_and_writes_sorted_keys(tmp_path: Path, evaluated: dict) -> None:
    import json

    out = tmp_path / "a" / "b" / "e.json"
    assert cli.cmd_eval([str(_model(tmp_path)), "--out", str(out), "--device", "cpu"]) == 0
    keys = list(json.loads(out.read_text()))
    assert keys == sorted(keys) and keys != list(reversed(keys))


def test_compare_takes_bare_switches_and_keeps_the_next_option() -> None:
    configs, opts, rest = cli._parse_compare(["cpu", "--in_process", "--verbose", "--seed", "3", "--lr", "1"])
    assert configs == ["cpu"] and rest == ["--lr", "1"]
    assert (opts["in_process"], opts["verbose"], opts["seed"], opts["jobs"]) == (True, True, "3", 1)


def _demo(monkeypatch: pytest.MonkeyPatch) -> dict:
    from experiments.learnable import warm_start

    seen: dict = {}
    monkeypatch.setattr(warm_start, "warm_started_model", lambda *a, **k: "warm")
    monkeypatch.setattr(warm_start, "warm_start_cached", lambda *a, **k: False)
    monkeypatch.setattr(warm_start, "resolve_base_model", lambda name: "base")
    monkeypatch.setattr(cli, "compare", lambda config, out, **kw: seen.update(out=out, **kw) or out / "r.md")
    return seen


@pytest.mark.parametrize(("cores", "jobs"), [(4, 2), (1, 1), (None, 1)])
def test_the_demo_runs_two_at_a_time_where_there_are_two_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int | None, jobs: int
) -> None:
    seen = _demo(monkeypatch)
    monkeypatch.setattr(cli.os, "cpu_count", lambda: cores)
    out = tmp_path / "new" / "demo"  # its parents made too
    assert cli.cmd_demo(["--out", str(out), "--in_process", "--verbose", "--methods", "grpo"]) == 0
    assert (seen["jobs"], seen["in_process"], seen["verbose"], seen["methods"]) == (
        jobs,
        True,
        True,
        ["grpo"],
    )
    assert (out / "logs" / cli.PARENT_LOG).is_file()


def test_an_interrupted_demo_says_how_to_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run.compare import ComparisonInterrupted

    _demo(monkeypatch)

    def stopped(*a: Any, **k: Any) -> Path:
        raise ComparisonInterrupted(["grpo"], ["ppo"])

    monkeypatch.setattr(cli, "compare", stopped)
    assert cli.cmd_demo(["--out", str(tmp_path), "--methods", "grpo,ppo"]) == 130
    err = capsys.readouterr().err
    assert err.startswith(
        "passk demo: interrupted; finished: grpo; not finished: ppo; continue with: passk demo"
    )


def test_main_turns_ctrl_c_into_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(argv: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "eval", interrupted)
    assert cli.main(["eval", "x"]) == 130
    assert capsys.readouterr().err == "passk eval: interrupted\n"


# ---- the survivors of the first cli run that the tests above do not reach -------------------------------------
def test_a_first_sentence_of_101_characters_is_cut() -> None:
    assert cli._help_line("k", 1, "z" * 101).endswith("z" * 99 + "…")


def test_a_flag_as_wide_as_the_column_goes_on_its_own_line() -> None:
    flag = "  --" + "w" * 28 + " 1"  # 34 characters, the column's width
    assert cli._help_line("w" * 28, 1, "T") == f"{flag}\n{'':<34} T"
    assert cli._help_line("w" * 27, 1, "T") == f"{'  --' + 'w' * 27 + ' 1':<34} T"


def test_a_flag_without_its_value_is_named_past_256_arguments() -> None:
    with pytest.raises(CliError, match=r"^--out needs a value$"):
        cli._pop_flag([*(["x"] * 300), "--out"], "out")


def test_the_budget_files_help_keeps_90_characters_of_each_files_first_comment() -> None:
    from experiments.run.config import shipped_configs

    lines = cli._configs_help()[1:]
    for line, path in zip(lines, shipped_configs(), strict=True):
        first = next(ln.lstrip("# ").strip() for ln in path.read_text().splitlines() if ln.startswith("#"))
        assert len(first) > 90  # every shipped file's comment is cut here, after a whole word (issue 53)
        shown = cli._clip(first, 90)
        assert line == f"  {path.stem:<18} {shown}"
        assert len(shown) <= 90 and shown.endswith("…") and first[len(shown) - 1] in " ,;:(."


def test_only_the_method_is_shown_as_a_placeholder() -> None:
    lines = cli._passk_keys_help(None)
    assert any(re.match(r"  --method M +", line) for line in lines)
    # the other keys without a value, named on either side of "method"
    assert any(re.match(r"  --system_prompt None +", line) for line in lines)
    assert any(re.match(r"  --lora_target_modules None +", line) for line in lines)


def test_config_help_reads_the_method_from_the_file_when_not_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.cmd_train(["cpu", "--seed", "3", "--help"]) == 0
    said = capsys.readouterr().out
    assert (
        said.startswith("usage: passk train cpu --method M")
        and "The trainer's keys depend on the method" in said
    )


def test_passk_evals_own_seed_defaults_to_0() -> None:
    assert cli.EvalArgs().seed == 0 and cli.EvalArgs().split == "eval"


def test_eval_json_is_indented_by_two(tmp_path: Path, evaluated: dict) -> None:
    out = tmp_path / "e.json"
    assert cli.cmd_eval([str(_model(tmp_path)), "--out", str(out), "--device", "cpu"]) == 0
    assert out.read_text().splitlines()[1].startswith('  "') and not out.read_text().splitlines()[
        1
    ].startswith("   ")


def test_compare_names_the_first_seed_that_is_no_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "compare", lambda *a, **k: pytest.fail("compared"))
    with pytest.raises(CliError, match=r"^--seeds: 'x' is not an integer$"):
        cli.cmd_compare(["cpu", "--seeds", "1,x,y"])


def test_an_interrupted_compare_exits_130_saying_how_to_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.run.compare import ComparisonInterrupted

    def stopped(*a: Any, **k: Any) -> Path:
        raise ComparisonInterrupted([], ["grpo"])

    monkeypatch.setattr(cli, "compare", stopped)
    assert cli.cmd_compare(["cpu", "--methods", "grpo", "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err.startswith(
        "passk compare: interrupted; finished: none; not finished: grpo;"
    )


def test_the_demo_builds_its_warm_start_with_the_overrides_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _demo(monkeypatch)
    assert cli.cmd_demo(["--out", str(tmp_path), "--methods", "grpo", "--warm_start_steps", "7"]) == 0
    assert (
        "passk demo: building the warm start (7 SFT steps; cached for later runs)" in capsys.readouterr().out
    )
    assert seen["overrides"] == ["--warm_start_steps", "7"]


def test_main_help_lists_each_command_and_the_whole_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    said = capsys.readouterr().out
    assert (
        "train one method (--method) on a budget file" in said and "pass@k of a model, run directory" in said
    )
    assert said.rstrip().endswith(
        cli.__doc__.strip().splitlines()[-1].strip()
    )  # the docstring's last paragraph


def test_main_names_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nope", "x"]) == 2
    assert (
        "passk: error: unknown command 'nope'; choose one of train, eval, compare, demo"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("order", ["ppo,grpo", "grpo,ppo"])
def test_the_demo_parses_its_first_method_with_that_methods_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    seen = _demo(monkeypatch)
    assert (
        cli.cmd_demo(["--out", str(tmp_path), "--methods", order, "--lam", "0.9"]) == 0
    )  # --lam: ppo's only
    assert seen["methods"] == order.split(",")


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "MODEL", "--help"],
        ["compare", "cpu", "--methods", "grpo", "--help"],
        ["demo", "--methods", "grpo", "--help"],
    ],
)
def test_a_help_after_the_arguments_lists_every_key(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import experiments.run.progress

    monkeypatch.setattr(experiments.run.progress, "run_children", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setattr(cli, "_evaluate", lambda *a, **k: pytest.fail("evaluated"))
    if argv[0] == "demo":
        _demo(monkeypatch)
    if argv[0] == "eval":
        argv = ["eval", str(_model(tmp_path)), "--help"]
    if argv[0] == "compare":
        argv = [*argv[:-1], "--out", str(tmp_path / "c"), "--help"]
    with pytest.raises(SystemExit) as stopped:  # argparse's own help of the keys, then exit 0
        cli.COMMANDS[argv[0]](argv[1:])
    assert stopped.value.code == 0 and "--eval_n" in capsys.readouterr().out


def test_config_help_of_a_users_file_with_a_method_shows_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = tmp_path / "budget.yaml"
    own.write_text(CPU_YAML.read_text())
    assert cli.cmd_train([str(own), "--method", "grpo", "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: passk train {own} --method M")


def test_an_unknown_option_given_with_its_value_is_named_by_its_key(tmp_path: Path, evaluated: dict) -> None:
    with pytest.raises(ConfigError, match=r"^eval_nn: unknown option '--eval_nn=3' for passk eval"):
        cli.cmd_eval([str(_model(tmp_path)), "--eval_nn=3"])


def test_eval_pins_threads_by_default_on_a_machine_without_a_gpu(
    tmp_path: Path, evaluated: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    pinned: list = []
    monkeypatch.setattr(torch, "set_num_threads", pinned.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.cmd_eval([str(_model(tmp_path)), "--out", str(tmp_path / "e.json"), "--num_threads", "2"]) == 0
    assert pinned == [2]


def test_a_users_file_beside_no_shipped_one_is_shown_by_its_path_wherever_it_sorts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import experiments.run.config as config

    cpu = CPU_YAML.read_text()
    shipped, own = tmp_path / "z_shipped" / "cpu.yaml", tmp_path / "a_user" / "budget.yaml"
    for path in (shipped, own):
        path.parent.mkdir()
        path.write_text(cpu)
    monkeypatch.setattr(config, "shipped_configs", lambda: [shipped])
    assert cli.cmd_train([str(own), "--help"]) == 0  # its folder sorts before the shipped one's
    assert capsys.readouterr().out.startswith(f"usage: passk train {own} --method M")
