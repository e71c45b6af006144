"""experiments.run.train around a run, with no model: the dtype and device evaluation loads with, the LoRA config,
the CPU thread pin, where the libraries' output goes during a run (and that everything is put back after), and
`main`'s exit codes and console lines for each way a run ends. `run` itself is stood in for: the end-to-end runs
are tests/run/test_cli.py's and tests/run/test_resume.py's.
"""

from __future__ import annotations

import logging
import os
import warnings
from types import SimpleNamespace

import pytest
import torch

from experiments.errors import ConfigError, DataError
from experiments.run import train

# ------------------------------------------------------------------------------------------------ the model


@pytest.mark.parametrize(
    "kwargs, dtype",
    [
        (None, torch.float32),  # TRL loads a model path in float32
        ({}, torch.float32),
        ({"dtype": "auto"}, torch.float32),
        ({"dtype": "bfloat16"}, torch.bfloat16),
        ({"torch_dtype": "float16"}, torch.float16),  # the older key
        ({"dtype": "bfloat16", "torch_dtype": "float16"}, torch.bfloat16),  # the current key wins
        ({"dtype": torch.float64}, torch.float64),
        ("bfloat16", torch.float32),  # not a dict of kwargs: ignored
    ],
)
def test_evaluation_loads_in_the_dtype_the_trainer_does(kwargs, dtype) -> None:
    assert train._dtype(SimpleNamespace(model_init_kwargs=kwargs)) == dtype
    assert train._dtype(SimpleNamespace()) == torch.float32


def test_evaluation_is_on_the_cpu_when_asked_or_without_cuda(monkeypatch) -> None:
    assert train._device(SimpleNamespace(use_cpu=True)) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train._device(SimpleNamespace(use_cpu=False)) == torch.device("cpu")
    assert train._device(SimpleNamespace()) == torch.device("cpu")


def test_evaluation_is_on_this_processs_gpu_otherwise(monkeypatch) -> None:
    import accelerate

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(accelerate, "PartialState", lambda: SimpleNamespace(local_process_index=1))
    assert train._device(SimpleNamespace(use_cpu=False)) == torch.device("cuda", 1)
    assert train._device(SimpleNamespace()) == torch.device(
        "cuda", 1
    )  # a config without use_cpu: not the CPU
    assert train._device(SimpleNamespace(use_cpu=True)) == torch.device("cpu")


def test_evaluation_loads_with_the_trainers_dtype_and_device(monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(train, "load_model_and_tokenizer", lambda *a: seen.append(a) or ("model", "tok"))
    cfg = SimpleNamespace(model_init_kwargs={"dtype": "bfloat16"}, use_cpu=True)
    assert train.load_for_eval("path", cfg) == ("model", "tok")
    assert seen == [("path", torch.bfloat16, torch.device("cpu"))]


def test_lora_is_configured_only_when_asked() -> None:
    exp = SimpleNamespace(use_peft=False)
    assert train.lora_config(exp) is None
    exp = SimpleNamespace(use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.1, lora_target_modules=None)
    config = train.lora_config(exp)
    assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.1)
    assert config.target_modules == "all-linear" and config.task_type == "CAUSAL_LM"
    exp.lora_target_modules = ["q_proj", "v_proj"]
    assert set(train.lora_config(exp).target_modules) == {"q_proj", "v_proj"}


@pytest.mark.parametrize(
    "fsdp, env, sharded",
    [
        ("", {}, False),
        ("full_shard", {}, True),
        ("", {"ACCELERATE_USE_FSDP": "true"}, True),
        ("", {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, True),
        ("", {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}, False),
    ],
)
def test_weights_are_sharded_by_the_config_or_the_launcher(monkeypatch, fsdp, env, sharded) -> None:
    for key in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert train._is_sharded(SimpleNamespace(fsdp=fsdp)) is sharded


@pytest.mark.parametrize(
    "use_cpu, cuda, threads, pinned",
    [
        (True, True, 3, True),
        (False, False, 3, True),
        (False, True, 3, False),
        (None, True, 3, False),  # a config without use_cpu, on a GPU machine
        (True, False, 0, False),
        (True, False, 1, True),
    ],
)
def test_torch_threads_are_pinned_on_the_cpu(monkeypatch, use_cpu, cuda, threads, pinned) -> None:
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cfg = SimpleNamespace() if use_cpu is None else SimpleNamespace(use_cpu=use_cpu)
    train.setup_torch(SimpleNamespace(num_threads=threads), cfg)
    assert calls == ([threads] if pinned else [])
    assert os.environ.get("OMP_NUM_THREADS") == (str(threads) if pinned else None)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the user's own setting stays
    train.setup_torch(SimpleNamespace(num_threads=threads), cfg)
    assert os.environ["OMP_NUM_THREADS"] == "7"


# ---------------------------------------------------------------------------------------- the libraries' output


@pytest.fixture
def console(monkeypatch):
    """A plain console handler on the root logger, as logging.basicConfig installs, at WARNING."""
    import io

    from experiments.run.progress import PROGRESS_FD_ENV

    monkeypatch.delenv(PROGRESS_FD_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    root = logging.getLogger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    saved_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    yield SimpleNamespace(stream=stream, handler=handler)
    root.removeHandler(handler)
    root.setLevel(saved_level)


def test_during_a_run_the_console_keeps_passks_lines_and_the_run_log_gets_the_libraries(
    console, tmp_path
) -> None:
    import transformers

    root = logging.getLogger()
    library = logging.getLogger("transformers")
    before = (library.handlers[:], library.propagate, root.level)
    shown_by = warnings.showwarning
    transformers.utils.logging.enable_progress_bar()
    with train.library_output_to_run_log() as run_log:
        assert run_log is not None and run_log in root.handlers and root.level == logging.INFO
        assert library.propagate is True and library.handlers == []
        assert not transformers.utils.logging.is_progress_bar_enabled()
        logging.getLogger("transformers.trainer").warning("library info")  # transformers logs at WARNING
        logging.getLogger("passk.train").info("passk info")
        warnings.warn("a library warning", UserWarning, stacklevel=1)
        assert [r.getMessage() for r in run_log.held][:2] == ["library info", "passk info"]
        assert any("a library warning" in r.getMessage() for r in run_log.held)  # warnings are records
        run_log.open(tmp_path / "train.log")
        logging.getLogger("datasets").warning("after open")
        assert run_log.held == []
    text = (tmp_path / "train.log").read_text()
    assert "library info" in text and "a library warning" in text and "after open" in text
    # The console saw passk's record, not the libraries'.
    assert "passk info" in console.stream.getvalue() and "library info" not in console.stream.getvalue()
    # Everything is put back: handlers, propagation, level, progress bars, the console's filters, warnings.
    assert (library.handlers, library.propagate, root.level) == before
    assert transformers.utils.logging.is_progress_bar_enabled()
    assert run_log not in root.handlers and console.handler.filters == []
    logging.getLogger("somelib").warning("after the run")  # the console filter is gone
    assert "after the run" in console.stream.getvalue()
    assert warnings.showwarning is shown_by  # captureWarnings is off again


def test_progress_bars_left_off_stay_off(console) -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    try:
        with train.library_output_to_run_log():
            pass
        assert not transformers.utils.logging.is_progress_bar_enabled()
    finally:
        transformers.utils.logging.enable_progress_bar()


def test_a_root_logger_at_debug_stays_at_debug_during_a_run(console) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    with train.library_output_to_run_log():
        assert logging.getLogger().level == logging.DEBUG


def test_an_unset_root_level_becomes_info_during_a_run(console) -> None:
    logging.getLogger().setLevel(logging.NOTSET)
    with train.library_output_to_run_log():
        assert logging.getLogger().level == logging.INFO
    assert logging.getLogger().level == logging.NOTSET


def test_other_ranks_keep_no_run_log(console, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    handlers = logging.getLogger().handlers[:]
    with train.library_output_to_run_log() as run_log:
        assert run_log is None and logging.getLogger().handlers == handlers
        assert console.handler.filters  # the console is still filtered
    assert console.handler.filters == []


def test_a_run_started_by_compare_is_left_alone(console, monkeypatch) -> None:
    from experiments.run.progress import PROGRESS_FD_ENV

    monkeypatch.setenv(PROGRESS_FD_ENV, "9")
    library = logging.getLogger("transformers")
    before = (library.handlers[:], library.propagate)
    with train.library_output_to_run_log() as run_log:
        assert run_log is None and (library.handlers, library.propagate) == before
        assert console.handler.filters == []


# --------------------------------------------------------------------------------------------------- main


@pytest.fixture
def stand_in_run(monkeypatch):
    """parse_config and run stood in for: the test sets what run does (`calls` records its arguments)."""
    monkeypatch.delenv("RANK", raising=False)
    state = SimpleNamespace(calls=[], effect=None, out="runs/x", ended=[])
    cfg = SimpleNamespace(output_dir="runs/x", save_strategy="no", save_steps=500)
    monkeypatch.setattr(train, "parse_config", lambda args: (SimpleNamespace(args=args), cfg))

    def run(exp, cfg):
        state.calls.append(exp.args)
        if state.effect is not None:
            raise state.effect
        return state.out

    monkeypatch.setattr(train, "run", run)
    monkeypatch.setattr(train, "end_process_group", lambda: state.ended.append(True))
    return state


def test_a_finished_run_says_where_it_is_and_ends_the_process_group(stand_in_run, capsys) -> None:
    assert train.main(["cpu.yaml", "--method", "grpo"]) == 0
    assert stand_in_run.calls == [["cpu.yaml", "--method", "grpo"]] and stand_in_run.ended == [True]
    assert capsys.readouterr().out == "passk: run written to runs/x\n"


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_module_docstring(stand_in_run, capsys, flag) -> None:
    assert train.main([flag, "ignored"]) == 0
    assert capsys.readouterr().out == train.__doc__ + "\n" and stand_in_run.calls == []


@pytest.mark.parametrize("error", [ConfigError("lam: must be in [0, 1]"), DataError("no rows")])
def test_a_users_error_is_one_line_and_exit_2(stand_in_run, capsys, error) -> None:
    stand_in_run.effect = error
    assert train.main(["cpu.yaml"]) == 2
    assert capsys.readouterr().err == f"passk: error: {error}\n" and stand_in_run.ended == []


def test_any_other_error_is_raised(stand_in_run) -> None:
    stand_in_run.effect = RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        train.main(["cpu.yaml"])


def test_ctrl_c_says_how_to_resume_and_exits_130(stand_in_run, capsys, monkeypatch) -> None:
    stand_in_run.effect = KeyboardInterrupt()
    monkeypatch.setattr(
        train, "interrupted_message", lambda args, cfg: f"resume {' '.join(args)} {cfg.output_dir}"
    )
    assert train.main(["cpu.yaml", "--x", "1"]) == 130
    assert capsys.readouterr().err == "resume cpu.yaml --x 1 runs/x\n" and stand_in_run.ended == []


def test_ctrl_c_before_the_config_is_read_says_only_interrupted(monkeypatch, capsys) -> None:
    monkeypatch.delenv("RANK", raising=False)

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "parse_config", interrupted)
    assert train.main(["cpu.yaml"]) == 130
    assert capsys.readouterr().err == "passk: interrupted\n"


def test_only_the_main_rank_prints(stand_in_run, capsys, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    assert train.main(["cpu.yaml"]) == 0
    stand_in_run.effect = KeyboardInterrupt()
    assert train.main(["cpu.yaml"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_main_reads_the_command_line_when_given_none(stand_in_run, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["experiments.train", "seed.yaml", "--method", "ppo"])
    assert train.main() == 0
    assert stand_in_run.calls == [["seed.yaml", "--method", "ppo"]]


def test_main_logs_at_info_on_the_main_rank_and_at_warning_on_the_others(stand_in_run, monkeypatch) -> None:
    """logging.basicConfig's level, seen with no handler installed yet (as in a fresh process)."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        for rank, level in (("0", logging.INFO), ("1", logging.WARNING)):
            monkeypatch.setenv("RANK", rank)
            root.handlers = []
            assert train.main(["cpu.yaml"]) == 0 and root.level == level
    finally:
        root.handlers, root.level = saved[0], saved[1]


@pytest.mark.filterwarnings(
    "ignore:.*found in sys.modules:RuntimeWarning"
)  # runpy, on a module imported already
def test_the_module_runs_as_a_script(monkeypatch, capsys) -> None:
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["experiments/run/train.py", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("experiments.run.train", run_name="__main__")
    assert done.value.code == 0 and capsys.readouterr().out == train.__doc__ + "\n"


def test_a_fresh_save_callback_owes_no_save() -> None:
    """A checkpoint is moved only after one was asked inside a generation batch: at the first batch end of a
    run, nothing was deferred."""
    callback = train.save_at_generation_ends(2)
    control = SimpleNamespace(should_save=False)
    callback.on_step_end(None, SimpleNamespace(global_step=2, max_steps=10), control)
    assert control.should_save is False
