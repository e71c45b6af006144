"""Where a run resumes and where it stops (``experiments.run.train``'s helpers), without a model: the checkpoint
chosen (numbered, saved whole), the budget checks at their edges, the saves moved to the end of a generation
batch, the first and second Ctrl-C, the resume command printed, the model's sampling values applied, and the
log filters. The end-to-end resumes are in test_resume.py (slow)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from experiments.errors import ConfigError
from experiments.run import train
from experiments.run.argv import parse_config


def _save(folder: Path, step: int, state: str | None = None) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


def _whole(folder: Path, step: int) -> Path:
    return _save(folder, step, json.dumps({"global_step": step}))


def _configs(out: Path, *extra: str) -> tuple[Any, Any]:
    argv = ["--method", "grpo", "--model", "tiny", "--output_dir", str(out), "--max_steps", "6", *extra]
    return parse_config(argv, device_free=True)


# ---- which checkpoint --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("checkpoint-12", "12"),
        ("checkpoint-0", "0"),
        ("checkpoint-x", "?"),
        ("checkpoint-", "?"),
        ("ckpt-3", "?"),
        ("12", "?"),  # a resume_from_checkpoint folder of another name: its digits are no step
    ],
)
def test_the_step_of_a_checkpoint_folder_is_its_number(name: str, step: str) -> None:
    assert train._checkpoint_step(Path("/runs/a") / name) == step


def test_the_last_checkpoint_is_the_highest_step_saved_whole(tmp_path: Path) -> None:
    for step in (2, 9, 10):
        _whole(tmp_path, step)
    _save(tmp_path, 11, "{}")  # a state with nothing in it is no save
    _save(tmp_path, 12, '{"global_st')  # cut short mid-write
    _save(tmp_path, 13)  # cut short before it
    (tmp_path / "checkpoint-99.tmp").mkdir()
    # 10 after 9: by number, not by name.
    assert train.last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")
    assert train.last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")


def test_no_last_checkpoint_in_an_empty_missing_or_non_folder(tmp_path: Path) -> None:
    assert train.last_checkpoint(tmp_path) is None
    assert train.last_checkpoint(tmp_path / "missing") is None
    (tmp_path / "file").write_text("x")
    assert train.last_checkpoint(tmp_path / "file") is None


def test_resume_from_checkpoint_is_taken_as_given(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _whole(out, 4)  # not the last of output_dir: the one named
    chosen = _whole(tmp_path / "elsewhere", 2)
    exp, cfg = _configs(out, "--resume_from_checkpoint", str(chosen))
    assert train.find_resume_checkpoint(exp, cfg) == str(chosen)
    exp, cfg = _configs(out, "--resume_from_checkpoint", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"^resume_from_checkpoint: no such checkpoint folder .*absent$"):
        train.find_resume_checkpoint(exp, cfg)


def test_resume_takes_the_last_checkpoint_and_without_it_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _whole(out, 4)
    exp, cfg = _configs(out)
    assert train.find_resume_checkpoint(exp, cfg) is None  # no resume asked
    exp, cfg = _configs(out, "--resume", "true")
    assert train.find_resume_checkpoint(exp, cfg) == str(out / "checkpoint-4")
    exp, cfg = _configs(tmp_path / "empty", "--resume", "true")
    with pytest.raises(ConfigError, match=r"^resume: no checkpoint-\* folder saved whole"):
        train.find_resume_checkpoint(exp, cfg)


# ---- the budget at a resume ---------------------------------------------------------------------------------
def test_the_saved_step_is_the_states_global_step_else_zero(tmp_path: Path) -> None:
    assert train._saved_step(str(_save(tmp_path, 7, json.dumps({"global_step": 5})))) == 5
    assert train._saved_step(str(_save(tmp_path, 8, json.dumps({"epoch": 1.0})))) == 0


@pytest.mark.parametrize(
    ("step", "max_steps", "refused"),
    [(4, 6, False), (6, 6, False), (7, 6, True), (9, -1, False), (9, 0, False), (2, 1, True), (1, 1, False)],
)
def test_a_checkpoint_past_max_steps_is_refused(
    tmp_path: Path, step: int, max_steps: int, refused: bool
) -> None:
    path = str(_whole(tmp_path, step))
    cfg = SimpleNamespace(max_steps=max_steps)
    if refused:
        with pytest.raises(
            ConfigError, match=rf"^resume: .* is at step {step}, past this run's max_steps {max_steps};"
        ):
            train._check_resume_point(path, cfg)
    else:
        assert train._check_resume_point(path, cfg) == step


@pytest.mark.parametrize(
    ("record", "max_steps", "finished"),
    [
        ({"global_step": 6}, 6, True),
        ({"global_step": 5}, 6, False),
        ({"global_step": 6}, 0, False),  # no step budget: nothing says the run is over
        ({"global_step": 6}, -1, False),
        ({"global_step": None}, 6, False),
        ({}, 6, False),
        ({}, 1, False),  # a run.json without a step trained none, even of a one-step budget
        ({"global_step": 1}, 1, True),
        ({"global_step": 300}, 300, True),  # past CPython's small ints
    ],
)
def test_a_finished_run_is_one_whose_run_json_reached_max_steps(
    tmp_path: Path, record: dict, max_steps: int, finished: bool
) -> None:
    (tmp_path / "run.json").write_text(json.dumps(record))
    assert train.finished_run(tmp_path, max_steps) is finished


def test_a_broken_run_json_is_no_finished_run_and_a_larger_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"global_st')
    assert train.finished_run(tmp_path, 6) is False
    (tmp_path / "run.json").write_text(json.dumps({"global_step": 7}))
    with pytest.raises(ConfigError, match=r"^resume: .* trained 7 steps, past this run's max_steps 6;"):
        train.finished_run(tmp_path, 6)
    assert train.finished_run(tmp_path, 0) is False  # 0: no step budget to be past
    (tmp_path / "run.json").write_text(json.dumps({"global_step": 2}))
    with pytest.raises(ConfigError, match=r"past this run's max_steps 1;"):
        train.finished_run(tmp_path, 1)


# ---- saves and stops at the end of a generation batch ------------------------------------------------------
def _state(step: int, max_steps: int = 10) -> SimpleNamespace:
    return SimpleNamespace(global_step=step, max_steps=max_steps)


@pytest.mark.parametrize(
    ("step", "period", "max_steps", "end"),
    [
        (3, 3, 10, True),
        (4, 3, 10, False),
        (6, 3, 10, True),
        (10, 3, 10, True),
        (11, 3, 10, True),
        (5, 1, 10, True),
    ],
)
def test_a_generation_batch_ends_every_period_steps_and_at_max_steps(
    step: int, period: int, max_steps: int, end: bool
) -> None:
    assert train._at_generation_end(_state(step, max_steps), period) is end


def test_a_save_inside_a_generation_batch_moves_to_its_end() -> None:
    callback = train.save_at_generation_ends(3)
    asked = {2: True, 4: True, 8: True}  # save_steps' choice
    saved = []
    for step in range(1, 11):
        control = SimpleNamespace(should_save=asked.get(step, False))
        callback.on_step_end(None, _state(step, 10), control)
        if control.should_save:
            saved.append(step)
    # 2 -> 3; 4 -> 6; 8 -> 9; nothing saved where nothing was asked (1, 5, 7) or already moved (10)
    assert saved == [3, 6, 9]


def test_a_save_asked_at_the_end_of_a_batch_stays_there() -> None:
    callback = train.save_at_generation_ends(2)
    control = SimpleNamespace(should_save=True)
    callback.on_step_end(None, _state(4), control)
    assert control.should_save is True
    control = SimpleNamespace(should_save=False)
    callback.on_step_end(None, _state(6), control)
    assert control.should_save is False


class _Trainer:
    def __init__(self, step: int, max_steps: int) -> None:
        self.state = _state(step, max_steps)
        self.accelerator = SimpleNamespace(num_processes=1)
        self.callbacks: list = []

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def remove_callback(self, callback: Any) -> None:
        self.callbacks.remove(callback)


@pytest.mark.parametrize(
    ("step", "period", "max_steps", "stop"),
    [(4, 3, 10, 6), (5, 3, 10, 6), (8, 3, 10, 9), (9, 3, 10, 10), (4, 1, 10, 5), (4, 3, 0, 5)],
)
def test_the_first_ctrl_c_stops_at_the_end_of_the_batch_and_the_second_at_once(
    capsys: pytest.CaptureFixture[str], step: int, period: int, max_steps: int, stop: int
) -> None:
    trainer = _Trainer(step, max_steps)
    before = signal.getsignal(signal.SIGINT)
    with train.stop_at_step_end_on_ctrl_c(trainer, period) as callback:
        assert trainer.callbacks == [callback]
        handler = signal.getsignal(signal.SIGINT)
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        callback.on_step_end(None, _state(step + 1, max_steps), control)
        assert not control.should_training_stop  # nothing asked yet
        handler(signal.SIGINT, None)
        said = capsys.readouterr().err
        assert f"stopping at the end of step {stop} and saving a checkpoint there" in said
        for at in range(step + 1, stop):  # inside the batch: go on
            control = SimpleNamespace(should_save=False, should_training_stop=False)
            callback.on_step_end(None, _state(at, max_steps), control)
            assert not (control.should_save or control.should_training_stop or callback.stopped), at
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        callback.on_step_end(None, _state(stop, max_steps), control)
        assert control.should_save and control.should_training_stop and callback.stopped
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGINT, None)
    assert signal.getsignal(signal.SIGINT) is before and trainer.callbacks == []


def test_by_default_ctrl_c_stops_at_the_end_of_the_step_in_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trainer = _Trainer(4, 10)
    with train.stop_at_step_end_on_ctrl_c(trainer) as callback:
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert "stopping at the end of step 5 " in capsys.readouterr().err
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        callback.on_step_end(None, _state(5, 10), control)
        assert control.should_training_stop and control.should_save


class _TwoRanks:
    """An accelerator of two processes whose other rank asks to stop or not: `reduce` sums the two flags."""

    num_processes = 2
    device = "cpu"

    def __init__(self, other_asked: bool) -> None:
        self.other = float(other_asked)

    def reduce(self, tensor: Any, reduction: str) -> Any:
        assert reduction == "sum"
        return tensor + self.other


@pytest.mark.parametrize(
    ("here", "there", "stops"),
    [(False, False, False), (False, True, True), (True, False, True), (True, True, True)],
)
def test_every_rank_stops_when_any_rank_was_asked(here: bool, there: bool, stops: bool) -> None:
    trainer = _Trainer(1, 10)
    trainer.accelerator = _TwoRanks(there)
    with train.stop_at_step_end_on_ctrl_c(trainer, 1) as callback:
        if here:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        callback.on_step_end(None, _state(2, 10), control)
    assert (control.should_training_stop, control.should_save, callback.stopped) == (stops, stops, stops)


def test_outside_the_main_thread_no_handler_is_set() -> None:
    trainer = _Trainer(0, 4)
    seen: list = []

    def body() -> None:
        with train.stop_at_step_end_on_ctrl_c(trainer, 2) as callback:
            seen.append((callback, signal.getsignal(signal.SIGINT), list(trainer.callbacks)))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    ((callback, handler, callbacks),) = seen
    assert callback.stopped is False and handler is before and callbacks == []


# ---- what the user is told after Ctrl-C --------------------------------------------------------------------
def test_the_resume_command_drops_overwrite_and_resume_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _whole(out, 2)
    _, cfg = _configs(out)
    args = [
        "cpu",
        "--overwrite",
        "true",
        "--resume=false",
        "--seed",
        "3",
        "--overwrite=true",
        "--resume",
        "false",
    ]
    said = train.interrupted_message(args, cfg)
    assert said == (
        f"passk: interrupted; last checkpoint: {out / 'checkpoint-2'}; "
        "resume with: passk train cpu --seed 3 --resume true"
    )


@pytest.mark.parametrize(
    ("save", "when"),
    [
        (("--save_strategy", "no"), "save_strategy is 'no'"),
        (("--save_steps", "25"), "the first save comes at step 25"),
    ],
)
def test_without_a_checkpoint_the_message_says_why_and_to_overwrite(
    tmp_path: Path, save: tuple[str, ...], when: str
) -> None:
    _, cfg = _configs(tmp_path / "out", *save)
    said = train.interrupted_message(["cpu"], cfg)
    assert said == (
        f"passk: interrupted; no checkpoint in {tmp_path / 'out'} ({when}), so nothing to resume: run it again with "
        "--overwrite"
    )


# ---- the model's sampling values --------------------------------------------------------------------------
def test_without_model_generation_config_the_config_keeps_its_sampling(tmp_path: Path) -> None:
    exp, cfg = _configs(tmp_path / "out", "--temperature", "0.7", "--top_p", "0.9")
    got = train.apply_model_sampling(exp, cfg, str(tmp_path / "no-model"))
    assert got["from_model_generation_config"] is False
    assert got["source"] == {"top_k": "config", "min_p": "config", "repetition_penalty": "config"}
    assert (got["temperature"], got["top_p"], got["eval"]) == (0.7, 0.9, {})


def test_the_models_sampling_values_go_into_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = {
        "top_k": 20,
        "min_p": None,
        "repetition_penalty": 1.1,
        "source": {"top_k": "model generation_config", "min_p": "x", "repetition_penalty": "y"},
    }
    monkeypatch.setattr(train, "model_sampling", lambda path: dict(read))
    exp, _ = _configs(tmp_path / "out", "--model_generation_config", "true")
    cfg = SimpleNamespace(temperature=0.7, top_p=0.9, top_k=0, min_p=0.05, repetition_penalty=1.0)
    got = train.apply_model_sampling(exp, cfg, "m")
    assert (cfg.top_k, cfg.min_p, cfg.repetition_penalty) == (20, 0.05, 1.1)  # None keeps the config's
    assert got["from_model_generation_config"] is True
    assert (got["temperature"], got["top_p"]) == (0.7, 0.9)
    assert (got["top_k"], got["min_p"], got["repetition_penalty"]) == (20, 0.05, 1.1)
    assert got["source"] == read["source"]
    assert got["eval"] == {"top_k": 20, "repetition_penalty": 1.1}


def test_a_sampling_key_the_config_lacks_is_not_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = {"top_k": 20, "min_p": 0.1, "repetition_penalty": 1.1, "source": {}}
    monkeypatch.setattr(train, "model_sampling", lambda path: dict(read))
    exp, _ = _configs(tmp_path / "out", "--model_generation_config", "true")
    cfg = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=0)
    got = train.apply_model_sampling(exp, cfg, "m")
    assert cfg.top_k == 20 and not hasattr(cfg, "min_p") and got["min_p"] is None


# ---- log filters -----------------------------------------------------------------------------------------
def _record(name: str, level: int, message: str = "m") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


@pytest.mark.parametrize(
    ("name", "level", "kept"),
    [
        ("passk.train", logging.INFO, True),
        ("experiments.run", logging.DEBUG, True),
        ("transformers.trainer", logging.WARNING, False),
        ("passkx", logging.INFO, False),
        ("transformers", logging.ERROR, True),
        ("datasets", logging.CRITICAL, True),
    ],
)
def test_the_console_keeps_passks_records_and_everyones_errors(name: str, level: int, kept: bool) -> None:
    assert train._PasskOnly().filter(_record(name, level)) is kept


def test_the_tied_weights_filter_keeps_what_it_cannot_read() -> None:
    class _Model:  # torch's named_parameters: a tied tensor once, under its first name, unless remove_duplicate=False
        def named_parameters(self, remove_duplicate: bool = True):
            shared, other = object(), object()
            named = [("embed.weight", shared), ("lm_head.weight", shared), ("norm.weight", other)]
            return [named[0], named[2]] if remove_duplicate else named

    tied = train.TiedWeightsLoaded(_Model())
    assert tied.tied == {"embed.weight", "lm_head.weight"}
    prefix = train.TiedWeightsLoaded.PREFIX
    assert not tied.filter(_record("t", logging.WARNING, prefix + "['lm_head.weight', 'embed.weight']."))
    assert not tied.filter(_record("t", logging.WARNING, prefix + "['lm_head.weight']."))  # some of the tied
    assert tied.filter(_record("t", logging.WARNING, prefix + "['lm_head.weight', 'norm.weight']."))
    assert tied.filter(_record("t", logging.WARNING, prefix + "[]."))  # nothing named: nothing to drop
    assert tied.filter(_record("t", logging.WARNING, prefix + "[lm_head.weight"))  # unreadable
    assert tied.filter(_record("t", logging.WARNING, "Other: ['lm_head.weight']."))


def test_the_run_log_holds_records_until_it_is_opened(tmp_path: Path) -> None:
    log = train._RunLog()
    logger = logging.getLogger("passk-test.run-log")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(log)
    try:
        logger.info("early")
        logger.debug("below its level")
        path = tmp_path / "train.log"
        log.open(path)
        logger.warning("late")
        log.open(tmp_path / "second.log")  # opened once: the first file stays
    finally:
        logger.removeHandler(log)
        log.close()
    assert log.file.stream is None  # the file was closed
    train._RunLog().close()  # never opened: nothing to close
    lines = path.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "passk-test.run-log INFO: early",
        "passk-test.run-log WARNING: late",
    ]
    assert not (tmp_path / "second.log").exists() and log.held == []
