"""Problems that give a signal: the screen keeps the training problems whose pass rate under the starting model lies
in a band (experiments.inputs.screening), with samples of its own, and the run records the kept set in run.json.

The tiny model passes nothing, so the scorer is a stub that passes a fixed number of each problem's samples; the
generation, the seeds and the runner's plumbing are real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.errors import ConfigError
from experiments.inputs.screening import (
    SCREEN_FILE,
    check_screen_options,
    keep_in_band,
    screen_problems,
    screen_seed,
    screen_training_rows,
)

CPU_YAML = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "cpu.yaml"


def test_the_band_keeps_problems_that_neither_always_pass_nor_always_fail() -> None:
    passes = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}
    assert keep_in_band(passes, 4, [0.1, 0.9]) == ["b", "c", "d"]  # 1-3 of 4
    assert keep_in_band(passes, 4, [0.25, 0.5]) == ["b", "c"]  # both ends included
    assert keep_in_band(passes, 4, [0.0, 1.0]) == list(passes)
    check_screen_options(0, [0.1, 0.9])
    for n, band, key in (
        (-1, [0.1, 0.9], "screen_n"),
        (4, [0.9, 0.1], "screen_band"),
        (4, [0.5], "screen_band"),
    ):
        with pytest.raises(ConfigError, match=rf"^{key}: "):
            check_screen_options(n, band)


def test_the_screens_seed_is_never_the_runs_own() -> None:
    # Evaluation (the "before" measurement) samples with the run's seed; the screen with another stream.
    assert all(screen_seed(s) != s for s in range(1000))
    assert screen_seed(42) == screen_seed(42)


class StubReward:
    """Passes the first `passes[task]` samples of each problem; records the completions it was given."""

    def __init__(self, passes: dict[str, int]) -> None:
        self.passes, self.seen = passes, []

    def score(self, prompts, completions, *, task_id, **columns):
        self.seen.append(list(completions))
        out, count = [], {}
        for task in task_id:
            count[task] = count.get(task, 0) + 1
            out.append(1.0 if count[task] <= self.passes.get(task, 0) else 0.0)
        return out


@pytest.fixture
def rows():
    from experiments.inputs.data import DataSpec, build_datasets

    train, _ = build_datasets(DataSpec(dataset="learnable", n_train=6, n_eval=2))
    return train


def test_the_screen_keeps_the_band_and_records_what_it_saw(tiny_model_dir, rows, monkeypatch) -> None:
    from experiments.evaluation import evaluate
    from experiments.inputs.models import load_model_and_tokenizer

    tasks = [str(t) for t in rows["task_id"]]
    stub = StubReward(dict(zip(tasks, [0, 1, 2, 3, 4, 2])))
    monkeypatch.setattr(evaluate, "_make_reward", lambda *a, **k: stub)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    kw = dict(n=4, band=[0.1, 0.9], seed=0, style="completion", temperature=1.0, top_p=1.0, max_new_tokens=6)
    result = screen_problems(model, tokenizer, rows, **kw)
    assert result.record["kept"] == [tasks[1], tasks[2], tasks[3], tasks[5]]
    assert list(result.rows["task_id"]) == result.record["kept"]
    assert result.record["passes"] == dict(zip(tasks, [0, 1, 2, 3, 4, 2]))
    assert result.record["seed"] == screen_seed(0) and result.record["n"] == 4
    screened = stub.seen[-1]
    # The "before" measurement on the same problems with the run's seed draws other samples.
    evaluate.evaluate_model(
        model,
        tokenizer,
        rows,
        n_samples=4,
        ks=(1,),
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=6,
        greedy=False,
        seed=0,
        progress=False,
        n_bootstrap=10,
    )
    assert stub.seen[-1] != screened


class OneProcess:
    is_main_process = True

    def wait_for_everyone(self) -> None:
        pass


def test_a_resumed_run_reads_its_screen_back_instead_of_screening_again(
    tiny_model_dir, rows, tmp_path, monkeypatch
) -> None:
    from experiments.inputs import screening
    from experiments.run.argv import parse_config

    exp, cfg = parse_config(
        [
            str(CPU_YAML),
            "--method",
            "grpo",
            "--screen_n",
            "2",
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--budget_prompts",
            "2",
        ]
    )
    tasks = [str(t) for t in rows["task_id"]]
    record = {"n": 2, "band": [0.1, 0.9], "problems": 6, "kept": tasks[:2], "passes": {}}
    (tmp_path / SCREEN_FILE).write_text(json.dumps(record))
    monkeypatch.setattr(screening, "screen_problems", lambda *a, **k: pytest.fail("screened again"))
    kept, got = screen_training_rows(exp, cfg, str(tiny_model_dir), rows, tmp_path, OneProcess(), resume=True)
    assert list(kept["task_id"]) == tasks[:2] and got == record
    (tmp_path / SCREEN_FILE).write_text(json.dumps({**record, "kept": []}))
    with pytest.raises(ConfigError, match=r"^screen_band: the screen kept 0 of 6 training problems"):
        screen_training_rows(exp, cfg, str(tiny_model_dir), rows, tmp_path, OneProcess(), resume=True)


def test_a_screened_run_trains_on_the_kept_problems_and_records_them(
    tiny_model_dir, tmp_path, monkeypatch
) -> None:
    from experiments.evaluation import evaluate
    from experiments.run import train
    from experiments.run.argv import parse_config

    calls: list[int] = []
    real = evaluate.evaluate_model

    def counted(*args, **kwargs):
        calls.append(kwargs["seed"])
        return real(*args, **kwargs)

    class OneOfTwo:  # every problem passes 1 of its 2 samples: all in the band
        def score(self, prompts, completions, *, task_id, **columns):
            return [float(i % 2 == 0) for i in range(len(completions))]

    monkeypatch.setattr(evaluate, "evaluate_model", counted)
    monkeypatch.setattr(evaluate, "_make_reward", lambda *a, **k: OneOfTwo())
    out = tmp_path / "run"
    argv = [
        str(CPU_YAML), "--method", "grpo", "--model", str(tiny_model_dir), "--dataset", "learnable",
        "--n_train", "4", "--n_eval", "2", "--eval_n", "2", "--eval_ks", "1", "--eval_max_new_tokens", "4",
        "--num_generations", "2", "--per_device_train_batch_size", "2", "--max_completion_length", "4",
        "--budget_prompts", "2", "--report_to", "none", "--save_strategy", "no", "--save_model", "false",
        "--disable_tqdm", "true", "--screen_n", "2", "--output_dir", str(out),
    ]  # fmt: skip
    train.run(*parse_config(argv))
    record = json.loads((out / "run.json").read_text())
    screen = record["screen"]
    assert screen["n"] == 2 and screen["kept_count"] == 4 and screen["seed"] == screen_seed(42)
    assert json.loads((out / SCREEN_FILE).read_text()) == screen
    # The screen, then eval_before and eval_after: the before measurement is its own sampling, at the run's seed.
    assert calls == [screen_seed(42), 42, 42]
    trained = {
        p
        for line in (out / "sampled_prompts.jsonl").read_text().splitlines()
        for p in json.loads(line)["prompts"]
    }
    assert trained <= set(screen["kept"])
    assert (out / "completion_ends.jsonl").is_file()  # item 1's per-completion record, on by default
