"""The first progress line after a resume shows what the interrupted run's last line showed: the held-out pass@1 of
the same step and the reward of the checkpoint's step (issue 53 item 7). An interrupted run is not evaluated at its
end: that evaluation came after its checkpoint was saved, so the resumed run showed the one before it, and it cost
the run its grace period."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from transformers import TrainerCallback

from experiments.run.argv import parse_config
from experiments.run.config import config_path
from experiments.run.stopping import Interrupted
from experiments.run.train import run


class _CtrlCInStep(TrainerCallback):
    """Ctrl-C while step `step` runs: the run stops at its end and saves a checkpoint there."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step - 1:
            signal.raise_signal(signal.SIGINT)


def _lines(said: str) -> list[str]:
    return [line for line in said.splitlines() if re.match(r"run step \d+/10", line)]


def test_the_first_line_after_a_resume_shows_the_interrupted_runs_last_pass_at_1(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = [str(config_path("cpu")), "--method", "reinforce", "--model", str(tiny_model_dir)]
    argv += ["--budget_prompts", "0", "--max_steps", "10", "--save_steps", "100", "--eval_every_n_steps", "3"]
    argv += ["--n_eval", "4", "--eval_n", "2", "--eval_ks", "1", "--eval_max_new_tokens", "8"]
    argv += ["--eval_before", "false", "--report_to", "none", "--output_dir", str(out)]
    exp, cfg = parse_config(argv)
    with pytest.raises(Interrupted):
        run(exp, cfg, callbacks=[_CtrlCInStep(5)])
    assert (out / "checkpoint-5").is_dir()
    last = _lines(capsys.readouterr().err)[-1]
    assert last.startswith("run step 5/10 reward ") and " stopped after " in last, last
    # The step-3 evaluation is the last one the checkpoint holds, and the last one the line showed.
    assert re.search(r" held-out pass@1 [\d.]+ \(step 3\) ", last), last

    exp, cfg = parse_config([*argv, "--resume", "true"])
    run(exp, cfg)
    first = _lines(capsys.readouterr().err)[0]
    assert first == last.split(" stopped after ")[0]
    # An uninterrupted run's evaluations, no more: the resumed run took step 6's on schedule.
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "eval/pass@1" in e] == [3, 6, 9, 10]
    # best/ is the uninterrupted run's: step 3's model, which no later evaluation beat (the first after the resume
    # replaced it).
    assert json.loads((out / "best" / "eval.json").read_text())["step"] == 3
