"""Stdin/stdout problems as a run's `dataset:`: loading, the rows the trainer sees, the reward the run picks,
the evaluation's scoring, and `passk train` end to end on each of the three formats in `tests/data/`.

The reference programs of `tests/data/stdio_solutions.jsonl` (correct, wrong, slow, crashing) stand in for a
model's completions wherever a verdict is checked: a random tiny model writes no program that runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.errors import DataError
from experiments.inputs.data import DataSpec, build_datasets, load_problems, problem_kind, to_rl_rows
from experiments.inputs.reward_funcs import RewardSpec, build_reward_funcs
from experiments.run.argv import ConfigError, parse_config
from sandbox.formats import CODE_CONTESTS_SPLITS, read_tests

DATA = Path(__file__).resolve().parents[1] / "data"
FORMATS = ("apps", "code_contests", "verification_info")
CPU_CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "cpu.yaml"


def _file(fmt: str) -> Path:
    return DATA / f"stdio_{fmt}.jsonl"


@pytest.fixture(scope="module")
def solutions() -> dict[tuple[str, str], str]:
    """(task_id, kind) -> program."""
    rows = [json.loads(line) for line in (DATA / "stdio_solutions.jsonl").read_text().splitlines()]
    return {(r["task_id"], r["kind"]): r["completion"] for r in rows}


def _exp(fmt: str, *extra: str):
    return parse_config(
        [
            str(CPU_CONFIG),
            "--method",
            "grpo",
            "--dataset",
            str(_file(fmt)),
            "--n_train",
            "6",
            "--n_eval",
            "2",
            *extra,
        ]
    )


def _chat(program: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"Here it is.\n\n```python\n{program}```\n"}]


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_loads_as_stdio_problems(fmt: str) -> None:
    ds = load_problems(_file(fmt))
    assert len(ds) == 8 and problem_kind(ds.column_names) == "stdio"
    assert ds.column_names[:2] == ["task_id", "statement"]
    assert all(t.startswith(f"{fmt}/") for t in ds["task_id"])
    assert all(isinstance(s, str) and s.strip() for s in ds["statement"])


def test_function_problems_still_load_as_humaneval() -> None:
    ds = load_problems(None)
    assert len(ds) == 164 and problem_kind(ds.column_names) == "function"


def test_a_file_in_no_format_fails_in_one_line_naming_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "q", "answer": "42"}) + "\n")
    with pytest.raises(DataError) as info:
        load_problems(path)
    message = str(info.value)
    assert "\n" not in message and "id, question, answer" in message and "input_output" in message


def test_a_row_without_cases_or_statement_is_named(tmp_path: Path) -> None:
    io = json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})
    no_cases = tmp_path / "no_cases.jsonl"
    no_cases.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"problem_id": "p0", "question": "echo", "input_output": io},
                {
                    "problem_id": "p1",
                    "question": "echo",
                    "input_output": json.dumps({"inputs": [], "outputs": []}),
                },
            ]
        )
        + "\n"
    )
    with pytest.raises(DataError, match=r"row 1 \(task_id 'p1'\) has no test case"):
        load_problems(no_cases)
    no_statement = tmp_path / "no_statement.jsonl"
    no_statement.write_text(json.dumps({"problem_id": "p0", "question": " ", "input_output": io}) + "\n")
    with pytest.raises(DataError, match=r"row 0 \(task_id 'p0'\) has no 'question'"):
        load_problems(no_statement)


@pytest.mark.parametrize("style", ["chat", "completion"])
def test_rl_rows_ask_for_a_whole_program_and_prepend_nothing(style: str) -> None:
    rows = to_rl_rows(load_problems(_file("apps")), style=style)
    assert set(rows["code_prompt"]) == {""}  # a statement is not code
    by_id = {r["task_id"]: r for r in rows}
    text = lambda r: r["prompt"] if style == "completion" else r["prompt"][-1]["content"]  # noqa: E731
    assert "standard input" in text(by_id["apps/0"]) and "a + b" in text(by_id["apps/0"])
    assert "`add`" in text(by_id["apps/6"])  # a call-based row asks for its function
    if style == "completion":  # a docstring the program continues
        assert text(by_id["apps/0"]).startswith('"""') and text(by_id["apps/0"]).endswith('"""\n')


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_runs_reward_scores_its_rows_as_trl_calls_it(fmt: str, solutions) -> None:
    """The reward `passk train` builds for this file, called as TRL calls it (every column but `prompt` as a
    keyword), gives the reference programs their verdicts on the rows the trainer gets."""
    exp, _ = _exp(fmt, "--style", "chat", "--reward_funcs", "unit_test", "partial")
    train, evaluation = build_datasets(DataSpec.from_config(exp))
    assert len(train) == 6 and len(evaluation) == 2
    full, partial = build_reward_funcs(RewardSpec.from_config(exp), problem_kind(train.column_names))
    assert (full.__name__, partial.__name__) == ("stdio_test_reward", "stdio_partial_reward")
    columns = {c: train[c] for c in train.column_names if c != "prompt"}
    for kind, expected in (("correct", 1.0), ("wrong", 0.0)):
        completions = [_chat(solutions[(t, kind)]) for t in train["task_id"]]
        assert full.score(prompts=train["prompt"], completions=completions, **columns) == [expected] * 6
    crash = [_chat(solutions[(t, "crash")]) for t in train["task_id"]]
    assert all(r < 1.0 for r in partial.score(prompts=train["prompt"], completions=crash, **columns))


def test_the_format_reward_on_stdio_problems_is_a_config_error() -> None:
    exp, _ = _exp("apps", "--reward_funcs", "unit_test", "format")
    with pytest.raises(ConfigError, match=r"^reward_funcs: 'format' scores a named function"):
        build_reward_funcs(RewardSpec.from_config(exp), "stdio")


@pytest.mark.parametrize("kind,expected", [("correct", 1.0), ("wrong", 0.0)])
def test_evaluation_scores_stdio_rows_with_the_stdio_reward(kind, expected, solutions, monkeypatch) -> None:
    """`evaluate_model` on stdin/stdout rows, with generation replaced by the reference programs."""
    from experiments.evaluation import evaluate as evaluation

    rows = to_rl_rows(load_problems(_file("code_contests")), style="chat")
    programs = [f"```python\n{solutions[(t, kind)]}```" for t in rows["task_id"]]

    def generate(model, tokenizer, ids, *, num_return_sequences, **kwargs):
        texts = [[programs[i]] * num_return_sequences for i in range(len(ids))]
        hits = [[False] * num_return_sequences for _ in ids]
        return texts, 0, hits, 0.0, [None] * len(ids)

    class Model:  # what evaluate_model touches besides generation
        training = False

        def eval(self):
            return self

        def train(self, mode=True):
            return self

        def parameters(self):
            import torch

            yield torch.zeros(1)

    class Tokenizer:
        def __call__(self, text, **kwargs):
            return {"input_ids": [0]}

        def apply_chat_template(self, messages, **kwargs):
            return [0]

    monkeypatch.setattr(evaluation, "_generate", generate)
    result = evaluation.evaluate_model(
        Model(), Tokenizer(), rows, n_samples=2, ks=(1, 2), style="chat", n_bootstrap=10, progress=False
    )
    assert result.num_problems == 8
    assert result.pass_at_k["pass@1"].value == expected and result.greedy_pass_at_1.value == expected

    # A problem whose prompt shows every case has nothing hidden to score: it is left out and named, not a crash.
    first = rows[0]
    cases = read_tests({k: v for k, v in first.items() if k != "prompt"}, None, splits=CODE_CONTESTS_SPLITS)
    examples = "\n".join(f"Example input:\n{i}\nExample output:\n{o}" for i, o in cases.cases)
    prompt = [
        {**m, "content": m["content"] + "\n" + examples} if m["role"] == "user" else m
        for m in first["prompt"]
    ]
    rows = rows.map(lambda row, i: {"prompt": prompt} if i == 0 else {}, with_indices=True)
    result = evaluation.evaluate_model(
        Model(), Tokenizer(), rows, n_samples=2, ks=(1, 2), style="chat", n_bootstrap=10, progress=False
    )
    assert result.num_problems == 7 and result.settings["unscored_all_cases_shown"] == [first["task_id"]]
    assert result.pass_at_k["pass@1"].value == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    "fmt,style", [("apps", "completion"), ("code_contests", "chat"), ("verification_info", "chat")]
)
def test_passk_train_runs_end_to_end_on_each_format(fmt: str, style: str, tmp_path: Path) -> None:
    from experiments.run.cli import main

    out = tmp_path / "run"
    argv = [
        "train",
        str(CPU_CONFIG),
        "--method",
        "grpo",
        "--dataset",
        str(_file(fmt)),
        "--n_train",
        "6",
        "--n_eval",
        "2",
        "--budget_prompts",
        "2",
        "--style",
        style,
        "--report_to",
        "none",
        "--output_dir",
        str(out),
    ]
    assert main(argv) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [h for h in history if "rewards/stdio_test_reward/mean" in h]
    assert len(steps) == 2  # the stdin/stdout reward scored every step
    # Its metrics say where the tiny model's completions went: extraction or the sandbox, one fraction each.
    assert all("stdio_test/extract_no_code_frac" in h for h in steps)
    for name in ("eval_before.json", "eval_after.json"):
        ev = json.loads((out / name).read_text())
        assert ev["num_problems"] == 2 and {p["task_id"].split("/")[0] for p in ev["problems"]} == {fmt}
    assert json.loads((out / "run.json").read_text())["global_step"] == 2
