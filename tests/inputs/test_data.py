"""Tests for experiments.inputs.data: loading HumanEval, the pinned split, and RL rows."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from experiments.inputs.data import (
    CALL_INSTRUCTION,
    CHAT_REPLY,
    DEFAULT_INSTRUCTION,
    HUMANEVAL_COLUMNS,
    STDIO_INSTRUCTION,
    DataError,
    DataSpec,
    build_datasets,
    load_humaneval,
    load_problems,
    problem_kind,
    split_dataset,
    stdio_prompt,
    to_rl_rows,
)

STDIO_DATA = Path(__file__).resolve().parents[1] / "data"


def _parsed(text: str) -> str:
    """`text` as a parsed config hands it over: an equal string, not the same object as the literal."""
    return "".join(list(text))


# Seed 0, defaults (50 / 30 / 84). A change here means every reported number changes meaning: only update
# these together with a note in the changelog.
PINNED_TRAIN_HEAD = [
    "HumanEval/1",
    "HumanEval/2",
    "HumanEval/6",
    "HumanEval/14",
    "HumanEval/21",
    "HumanEval/24",
    "HumanEval/25",
    "HumanEval/32",
]
PINNED_EVAL_HEAD = [
    "HumanEval/26",
    "HumanEval/39",
    "HumanEval/45",
    "HumanEval/54",
    "HumanEval/57",
    "HumanEval/63",
    "HumanEval/64",
    "HumanEval/71",
]
PINNED_DIGESTS = {  # sha256 of ",".join(task ids of the split)
    "train": "4add444697c08c36a894f12f690a076721fccc98c78e74b1011f0cd721167373",
    "eval": "02bdbed8502fba114d678402ed9f50c812659d09ca1ab99e240858b15796e40e",
    "heldout": "ed65aa0190840ea823f10be8727be3550b5ad3b295afcbdda16c78aece970ad3",
}


def _write_jsonl(path, rows, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_bundled_humaneval_has_164_rows_and_columns(humaneval):
    assert len(humaneval) == 164
    assert humaneval.column_names == list(HUMANEVAL_COLUMNS)
    assert humaneval[0]["task_id"] == "HumanEval/0"
    assert humaneval[163]["task_id"] == "HumanEval/163"
    assert all(humaneval["test"]) and all(humaneval["entry_point"])
    assert "def check(candidate)" in humaneval[0]["test"]
    assert humaneval[0]["entry_point"] == "has_close_elements"


def test_split_is_pinned_and_repeatable(humaneval):
    a = split_dataset(humaneval, seed=0)
    b = split_dataset(humaneval, seed=0)
    assert {k: len(v) for k, v in a.items()} == {"train": 50, "eval": 30, "heldout": 84}
    for name in ("train", "eval", "heldout"):
        assert a[name]["task_id"] == b[name]["task_id"]
        digest = hashlib.sha256(",".join(a[name]["task_id"]).encode()).hexdigest()
        assert digest == PINNED_DIGESTS[name], name
    assert a["train"]["task_id"][:8] == PINNED_TRAIN_HEAD
    assert a["eval"]["task_id"][:8] == PINNED_EVAL_HEAD


def test_split_follows_the_documented_hash_rule(humaneval):
    seed = 7
    ranked = sorted(humaneval["task_id"], key=lambda t: hashlib.sha256(f"{seed}:{t}".encode()).hexdigest())
    split = split_dataset(humaneval, n_train=10, n_eval=5, seed=seed)
    assert set(split["train"]["task_id"]) == set(ranked[:10])
    assert set(split["eval"]["task_id"]) == set(ranked[10:15])
    # rows keep the dataset's order inside a split
    order = {t: i for i, t in enumerate(humaneval["task_id"])}
    assert split["heldout"]["task_id"] == sorted(ranked[15:], key=order.__getitem__)


def test_split_sizes_disjoint_and_seed_dependent(humaneval):
    split = split_dataset(humaneval, n_train=20, n_eval=10, seed=3)
    ids = {k: set(v["task_id"]) for k, v in split.items()}
    assert [len(ids[k]) for k in ("train", "eval", "heldout")] == [20, 10, 134]
    assert (
        not ids["train"] & ids["eval"]
        and not ids["train"] & ids["heldout"]
        and not ids["eval"] & ids["heldout"]
    )
    assert ids["train"] | ids["eval"] | ids["heldout"] == set(humaneval["task_id"])
    assert split["train"].column_names == humaneval.column_names
    other = split_dataset(humaneval, n_train=20, n_eval=10, seed=4)
    assert set(other["train"]["task_id"]) != ids["train"]
    everything = split_dataset(humaneval, n_train=164, n_eval=0)
    assert len(everything["train"]) == 164 and len(everything["eval"]) == len(everything["heldout"]) == 0


def test_split_rejects_sizes_beyond_the_data(humaneval):
    with pytest.raises(DataError) as info:
        split_dataset(humaneval, n_train=150, n_eval=30)
    assert str(info.value) == "n_train + n_eval = 150 + 30 = 180 exceeds the 164 rows available"
    with pytest.raises(DataError, match=">= 0"):
        split_dataset(humaneval, n_train=-1)


@pytest.mark.parametrize("column", ["test", "entry_point"])
@pytest.mark.parametrize("how", ["empty", "missing_value", "missing_column"])
def test_rows_without_test_or_entry_point_fail_naming_row_and_column(humaneval, tmp_path, column, how):
    rows = humaneval.select(range(5)).to_list()
    bad = 0 if how == "missing_value" else 3  # row 0: the loader must not take the first row's keys as schema
    if how == "empty":
        rows[bad][column] = "  "
    elif how == "missing_value":
        del rows[bad][column]
    else:
        for row in rows:
            del row[column]
    path = tmp_path / "bad.jsonl"
    _write_jsonl(path, rows)
    with pytest.raises(DataError) as info:
        load_humaneval(path)
    message = str(info.value)
    assert "\n" not in message
    assert repr(column) in message
    if how != "missing_column":
        assert f"row {bad} " in message and f"HumanEval/{bad}'" in message
    else:
        assert "missing" in message


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet"])
def test_local_files_round_trip(humaneval, tmp_path, suffix):
    subset = humaneval.select(range(12))
    path = tmp_path / f"he{suffix}"
    if suffix == ".parquet":
        subset.to_parquet(str(path))
    else:
        _write_jsonl(path, subset.to_list(), gz=suffix.endswith(".gz"))
    loaded = load_humaneval(str(path))
    assert loaded.column_names == list(HUMANEVAL_COLUMNS)
    assert loaded.to_list() == subset.to_list()


def test_local_file_extra_columns_kept_and_solution_optional(humaneval, tmp_path):
    rows = humaneval.select(range(3)).to_list()
    for row in rows:
        del row["canonical_solution"]
        row["difficulty"] = 1
    path = tmp_path / "custom.jsonl"
    _write_jsonl(path, rows)
    loaded = load_humaneval(path)
    assert loaded.column_names == [*HUMANEVAL_COLUMNS, "difficulty"]
    assert loaded["canonical_solution"] == ["", "", ""]


def test_missing_local_file_and_offline_hub_fail_in_one_line(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_humaneval(tmp_path / "absent.jsonl")
    with pytest.raises(DataError) as info:
        load_humaneval("openai_humaneval")  # conftest sets HF_HUB_OFFLINE=1; nothing is cached in tests
    message = str(info.value)
    assert "\n" not in message
    assert "offline" in message and "HF_HUB_OFFLINE=1" in message and ".jsonl" in message


@pytest.mark.parametrize(
    "source, hub",
    [("openai/openai_humaneval", True), ("data/humaneval/test", False), ("absent.jsonl", False)],
)
def test_a_source_is_a_hub_name_only_when_it_looks_like_one(tmp_path, monkeypatch, source: str, hub: bool):
    """ "org/name" goes to the hub (offline here); two slashes or a data suffix is a path, and missing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as info:
        load_humaneval(source)
    assert ("hub is offline" in str(info.value)) == hub
    assert (str(info.value) == f"{source}: no such file") == (not hub)


@pytest.mark.parametrize("kind", ["function", "stdio"])
def test_a_repeated_task_id_is_named(humaneval, tmp_path, kind: str):
    """Ids a, b, b: the message names b, the one that repeats, not the first row's."""
    if kind == "function":
        rows = humaneval.select(range(3)).to_list()
        key = "task_id"
    else:
        rows = [json.loads(line) for line in (STDIO_DATA / "stdio_apps.jsonl").read_text().splitlines()[:3]]
        key = "problem_id"
    rows[0][key], rows[1][key], rows[2][key] = "a", "b", "b"
    path = tmp_path / "repeated.jsonl"
    _write_jsonl(path, rows)
    with pytest.raises(DataError) as info:
        load_problems(path)
    assert str(info.value).endswith("task_id 'b' appears more than once")


def test_completion_rows(humaneval):
    rows = to_rl_rows(humaneval.select(range(4)), style="completion")
    assert rows["prompt"] == humaneval["prompt"][:4]
    assert rows["code_prompt"] == humaneval["prompt"][:4]
    for column in ("task_id", "test", "entry_point", "canonical_solution"):
        assert rows[column] == humaneval[column][:4]


def test_chat_rows(humaneval):
    rows = to_rl_rows(humaneval.select(range(4)), style="chat")
    first = rows[0]
    assert first["code_prompt"] == humaneval[0]["prompt"]
    assert [m["role"] for m in first["prompt"]] == ["user"]
    text = first["prompt"][0]["content"]
    assert text.startswith(DEFAULT_INSTRUCTION)
    assert "```python\n" + humaneval[0]["prompt"].rstrip() + "\n```" in text
    assert first["test"] == humaneval[0]["test"] and first["entry_point"] == humaneval[0]["entry_point"]

    custom = to_rl_rows(
        humaneval.select(range(2)), style="chat", system_prompt="Be terse.", instruction="Do it."
    )
    assert custom[1]["prompt"][0] == {"role": "system", "content": "Be terse."}
    assert custom[1]["prompt"][1]["content"].startswith("Do it.\n\n```python\n")

    # already-converted rows can switch style: code_prompt is the source of truth
    back = to_rl_rows(rows, style="completion")
    assert back["prompt"] == humaneval["prompt"][:4]
    with pytest.raises(DataError, match="style"):
        to_rl_rows(humaneval, style="fim")  # type: ignore[arg-type]


def test_chat_prompt_renders_with_a_chat_template(humaneval, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = to_rl_rows(humaneval.select(range(1)), style="chat")
    text = tokenizer.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>user\n")
    assert humaneval[0]["prompt"].rstrip() in text
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "deleted, kept",
    [
        (("test", "canonical_solution"), "task_id, prompt, entry_point"),
        (("test", "entry_point"), "task_id, prompt, canonical_solution"),  # two missing: the first is named
    ],
)
def test_missing_column_error_lists_the_file_columns_and_what_is_required(humaneval, tmp_path, deleted, kept):
    # A file without test (and without the optional canonical_solution): the message lists the file's own
    # columns, not the canonical_solution the loader would have added, and says which columns are required.
    rows = humaneval.select(range(3)).to_list()
    for row in rows:
        for column in deleted:
            del row[column]
    path = tmp_path / "no_test.jsonl"
    _write_jsonl(path, rows)
    with pytest.raises(DataError) as info:
        load_humaneval(path)
    assert str(info.value) == (
        f"{path}: column 'test' is missing (its columns: {kept}); HumanEval rows need "
        "task_id, prompt, test, entry_point (canonical_solution is optional)"
    )


@pytest.mark.parametrize("style", ["completion", "chat"])
@pytest.mark.parametrize("n_train, n_eval, seed", [(50, 30, 0), (20, 10, 3), (164, 0, 0), (0, 164, 1)])
def test_built_rows_are_the_splits_train_and_eval_parts_and_never_overlap(
    humaneval, style: str, n_train: int, n_eval: int, seed: int
):
    spec = DataSpec(n_train=n_train, n_eval=n_eval, split_seed=seed, style=style)
    train, evaluation = build_datasets(spec)
    split = split_dataset(humaneval, n_train=n_train, n_eval=n_eval, seed=seed)
    assert train["task_id"] == split["train"]["task_id"]
    assert evaluation["task_id"] == split["eval"]["task_id"]
    assert not set(train["task_id"]) & set(evaluation["task_id"])  # no evaluation row ever trains
    assert evaluation.column_names == train.column_names  # also with no evaluation rows
    assert train["code_prompt"] == split["train"]["prompt"]
    first = (train if n_train else evaluation)[0]["prompt"]
    assert isinstance(first, str) == (style == "completion")


def test_built_learnable_rows_keep_held_out_problems_out_of_training():
    train, evaluation = build_datasets(DataSpec(dataset="learnable", n_train=300, n_eval=60, split_seed=2))
    assert (len(train), len(evaluation)) == (300, 60)
    assert not set(train["task_id"]) & set(evaluation["task_id"])
    assert not set(train["prompt"]) & set(evaluation["prompt"])
    train, evaluation = build_datasets(DataSpec(dataset="learnable", n_train=10, n_eval=0))
    assert len(evaluation) == 0 and evaluation.column_names == train.column_names  # not a column-less table


@pytest.mark.parametrize("style", ["completion", "chat"])
def test_stdio_rows_ask_for_a_whole_program_in_either_style(style: str):
    """APPS rows 0 (stdin/stdout) and 6 (call-based, fn_name "add"): the request names what the tests run, the
    statement follows, nothing is prepended to the completion (code_prompt "")."""
    problems = load_problems(STDIO_DATA / "stdio_apps.jsonl")
    assert problems.column_names[:2] == ["task_id", "statement"]
    rows = to_rl_rows(problems.select([0, 6]), style=_parsed(style))
    assert rows["code_prompt"] == ["", ""]
    texts = [
        f"{STDIO_INSTRUCTION}\n\n{problems[0]['statement'].strip()}",
        f"{CALL_INSTRUCTION.format(fn_name='add')}\n\n{problems[6]['statement'].strip()}",
    ]
    if style == "completion":
        assert rows["prompt"] == [f'"""\n{t}\n"""\n' for t in texts]
    else:
        assert rows["prompt"] == [[{"role": "user", "content": t + CHAT_REPLY}] for t in texts]
    assert rows["task_id"] == problems["task_id"][:1] + problems["task_id"][6:7]


def test_stdio_chat_rows_with_a_system_prompt_and_an_instruction_of_ones_own():
    problems = load_problems(STDIO_DATA / "stdio_code_contests.jsonl").select([0])
    rows = to_rl_rows(problems, style="chat", system_prompt="Be terse.", instruction="Solve it.")
    statement = problems[0]["statement"].strip()
    # One's own instruction replaces the request and the reply format: nothing is appended to it.
    assert rows[0]["prompt"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": f"Solve it.\n\n{statement}"},
    ]


def test_a_stdio_file_loads_as_stdio_problems_not_as_humaneval_rows():
    problems = load_problems(STDIO_DATA / "stdio_verification_info.jsonl")
    assert (
        len(problems) == 8
        and "statement" in problems.column_names
        and "entry_point" not in problems.column_names
    )


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_built_rows_come_from_the_file_the_dataset_names(tmp_path, monkeypatch, where: str):
    """A path sorts before "humaneval" ("/...") or after it and after "learnable" ("x..."): either way it is
    the file's rows that are built, not HumanEval's or the learnable task's."""
    path = tmp_path / "x_stdio.jsonl"
    path.write_bytes((STDIO_DATA / "stdio_apps.jsonl").read_bytes())
    if where == "relative":
        monkeypatch.chdir(tmp_path)
    dataset = str(path) if where == "absolute" else "x_stdio.jsonl"
    train, evaluation = build_datasets(DataSpec(dataset=_parsed(dataset), n_train=5, n_eval=3))
    ids = set(load_problems(path)["task_id"])
    assert set(train["task_id"]) | set(evaluation["task_id"]) == ids and len(ids) == 8
    assert train["code_prompt"] == [""] * 5


def test_the_dataset_names_read_as_a_parsed_config_hands_them_over(humaneval):
    train, evaluation = build_datasets(DataSpec(dataset=_parsed("humaneval"), n_train=4, n_eval=2))
    assert set(train["task_id"]) | set(evaluation["task_id"]) <= set(humaneval["task_id"])
    train, _ = build_datasets(DataSpec(dataset=_parsed("learnable"), n_train=4, n_eval=2))
    assert len(train) == 4 and not set(train["task_id"]) & set(humaneval["task_id"])


def _stdio_file(tmp_path, rows: list[dict]) -> Path:
    path = tmp_path / "stdio.jsonl"
    _write_jsonl(path, rows)
    return path


IO = json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})


@pytest.mark.parametrize(
    "rows, message",
    [
        (
            [
                {"problem_id": "p0", "question": "echo", "input_output": IO},
                {
                    "problem_id": "p1",
                    "question": "echo",
                    "input_output": json.dumps({"inputs": [], "outputs": []}),
                },
            ],
            "row 1 (task_id 'p1') has no test case",
        ),
        (
            [{"problem_id": "p0", "question": " ", "input_output": IO}],
            "row 0 (task_id 'p0') has no 'question' (missing or empty)",
        ),
        (
            [{"problem_id": "p0", "question": 7, "input_output": IO}],
            "row 0 (task_id 'p0') has no 'question' (missing or empty)",
        ),
        (
            [{"problem_id": "p0", "title": "echo", "input_output": IO}],
            "no problem statement column (question / description / prompt / problem / problem_statement; its "
            "columns: problem_id, title, input_output)",
        ),
    ],
    ids=["no-cases", "blank-statement", "statement-not-text", "no-statement-column"],
)
def test_a_stdio_row_that_cannot_train_is_named(tmp_path, rows: list[dict], message: str):
    path = _stdio_file(tmp_path, rows)
    with pytest.raises(DataError) as info:
        load_problems(path)
    assert str(info.value) == f"{path}: {message}"


def test_stdio_rows_that_can_train_load_each_statement():
    """The positive side of the checks above: every row of each format has cases and a statement."""
    for fmt in ("apps", "code_contests", "verification_info"):
        problems = load_problems(STDIO_DATA / f"stdio_{fmt}.jsonl")
        assert len(problems) == 8 and all(s.strip() for s in problems["statement"])


@pytest.mark.parametrize(
    "error, first",
    [
        (ConnectionError("connection refused\nretry later"), "connection refused"),
        (ValueError(""), "ValueError"),
    ],
)
def test_a_hub_failure_online_is_one_line(humaneval, monkeypatch, error: Exception, first: str):
    import datasets

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    from experiments.inputs import data

    monkeypatch.setattr(data, "hub_unreachable", lambda timeout=3.0: None)  # online: the hub answers

    def fail(name, split):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(DataError) as info:
        load_humaneval("org/name")
    assert str(info.value) == (
        f"could not load dataset 'org/name' (split 'test') from the Hugging Face hub: {first}; pass a local "
        ".jsonl/.jsonl.gz/.parquet file instead"
    )


@pytest.mark.parametrize("shape", ["dataset", "dataset-dict"])
def test_a_hub_dataset_is_its_test_split(humaneval, monkeypatch, shape: str):
    import datasets

    rows = humaneval.select(range(3))
    got = rows if shape == "dataset" else datasets.DatasetDict({"train": humaneval.select([9]), "test": rows})
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split: got)
    assert load_humaneval("org/name")["task_id"] == rows["task_id"]


def test_a_jsonl_file_skips_blank_lines_and_names_the_line_that_is_not_json(humaneval, tmp_path):
    rows = humaneval.select(range(3)).to_list()
    path = tmp_path / "gaps.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + "\n".join(json.dumps(r) for r in rows[1:]) + "\n")
    assert load_humaneval(path)["task_id"] == humaneval["task_id"][:3]  # all rows, past the blank line
    path.write_text(json.dumps(rows[0]) + "\n\n{not json\n")
    with pytest.raises(DataError) as info:
        load_humaneval(path)
    assert str(info.value).startswith(f"{path}:3: not valid JSON (")


@pytest.mark.parametrize("columns, named", [([], "none"), (["a", "b"], "a, b")])
def test_columns_of_no_kind_are_named(columns: list[str], named: str):
    with pytest.raises(DataError) as info:
        problem_kind(columns)
    assert str(info.value).startswith(f"columns {named}: neither function problems (task_id, prompt, test, ")


def test_a_malformed_stdio_row_is_named_with_the_formats_reason(tmp_path):
    path = _stdio_file(tmp_path, [{"problem_id": "p0", "question": "echo", "input_output": "not json"}])
    with pytest.raises(DataError) as info:
        load_problems(path)
    assert (
        str(info.value)
        == f"{path}: row 0 (task_id 'p0'): input_output is not valid JSON: Expecting value: line 1 column 1 (char 0)"
    )


@pytest.mark.parametrize(
    "starter, fn_name, want",
    [
        (None, None, f"{STDIO_INSTRUCTION}\n\nSum it."),
        ("   \n", None, f"{STDIO_INSTRUCTION}\n\nSum it."),  # blank starter code adds nothing
        (
            "class Solution:\n    def add(self, a, b):\n",
            "add",
            f"{CALL_INSTRUCTION.format(fn_name='add')}\n\nSum it.\n\nStart from this code:\n```python\n"
            "class Solution:\n    def add(self, a, b):\n```",
        ),
    ],
)
def test_stdio_prompt_with_and_without_starter_code(starter, fn_name, want):
    assert stdio_prompt("  Sum it.\n", starter, None, fn_name) == want


def test_a_path_object_is_a_path_even_without_a_suffix_and_a_backslash_makes_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="^absent: no such file$"):
        load_humaneval(Path("absent"))
    with pytest.raises(DataError, match=r"no such file$"):
        load_humaneval("data\\humaneval")


def test_split_sizes_below_zero_are_refused_on_either_side(humaneval):
    for sizes in ({"n_train": -1}, {"n_eval": -1}):
        with pytest.raises(DataError, match=r"^split sizes must be >= 0"):
            split_dataset(humaneval, **sizes)


def test_the_data_spec_defaults_are_the_experiments_and_it_is_frozen():
    import dataclasses

    spec = DataSpec()
    assert (spec.dataset, spec.n_train, spec.n_eval, spec.split_seed, spec.style, spec.system_prompt) == (
        "humaneval",
        50,
        30,
        0,
        "completion",
        None,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_train = 3  # type: ignore[misc]


def test_files_of_300_rows_load_and_split(humaneval, tmp_path):
    """Row counts are compared by value: 300 is past the small integers CPython keeps one object for."""
    base = humaneval[0]
    function_rows = [{**base, "task_id": f"T/{i}"} for i in range(300)]
    path = tmp_path / "many.jsonl"
    _write_jsonl(path, function_rows)
    loaded = load_problems(path)
    assert len(loaded) == 300
    split = split_dataset(loaded, n_train=200, n_eval=50)
    assert [len(split[k]) for k in ("train", "eval", "heldout")] == [200, 50, 50]
    stdio_rows = [{"problem_id": f"p{i}", "question": "echo", "input_output": IO} for i in range(300)]
    assert len(load_problems(_stdio_file(tmp_path, stdio_rows))) == 300


def test_split_refuses_repeated_task_ids(humaneval):
    from datasets import Dataset

    rows = humaneval.select(range(3)).to_list()
    rows[2]["task_id"] = rows[1]["task_id"]
    with pytest.raises(DataError, match="^split_dataset needs unique task_id values$"):
        split_dataset(Dataset.from_list(rows), n_train=1, n_eval=1)


def test_split_defaults_are_50_30_and_seed_0(humaneval):
    default = split_dataset(humaneval)
    explicit = split_dataset(humaneval, n_train=50, n_eval=30, seed=0)
    for name in ("train", "eval", "heldout"):
        assert default[name]["task_id"] == explicit[name]["task_id"]


def test_function_rows_read_the_style_as_a_parsed_config_hands_it_over(humaneval):
    rows = to_rl_rows(humaneval.select(range(2)), style=_parsed("completion"))
    assert rows["prompt"] == humaneval["prompt"][:2]


def test_the_data_spec_is_read_from_any_config_with_its_keys():
    from types import SimpleNamespace

    config = SimpleNamespace(
        dataset="learnable", n_train=7, n_eval=2, split_seed=5, style="chat", system_prompt="Hi.", lr=1e-5
    )
    assert DataSpec.from_config(config) == DataSpec("learnable", 7, 2, 5, "chat", "Hi.")


def test_verification_info_rows_keep_their_cases_when_the_statement_is_set_aside():
    """verification_info sorts after "statement": it is the cases, and must reach the format reader."""
    rows = to_rl_rows(load_problems(STDIO_DATA / "stdio_verification_info.jsonl"), style="chat")
    assert len(rows) == 8 and rows["code_prompt"] == [""] * 8
    assert rows[0]["prompt"][-1]["content"].startswith(STDIO_INSTRUCTION)


# ---- datasets the TRL way: a folder or file in any format datasets.load_dataset reads, a hub id ----------------
MBPP_ROWS = [
    {
        "task_id": 11,
        "text": "Write a function to add two numbers.",
        "code": "def add(a, b):\n    return a + b\n",
        "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Write a function that doubles a string.",
        "code": "import math\ndef double(s):\n    return s + s\n",
        "test_list": ["assert double('a') == 'aa'"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
]


def _folder(tmp_path: Path, name: str, files: dict[str, list[dict]]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file, rows in files.items():
        _write_jsonl(folder / file, rows)
    return folder


def test_a_folder_of_humaneval_rows_in_a_json_file_loads_as_the_file_would(humaneval, tmp_path):
    rows = humaneval.select(range(4)).to_list()
    folder = _folder(tmp_path, "he", {"test.json": rows})
    loaded = load_problems(folder)
    assert loaded["task_id"] == humaneval["task_id"][:4] and loaded.column_names[:5] == list(
        HUMANEVAL_COLUMNS
    )


def test_the_readme_quick_starts_data_folder_trains_as_trl_rows_without_task_ids(humaneval, tmp_path):
    """`dataset.to_json("data/train.jsonl")` in the README: prompt, code_prompt, test, entry_point, no task_id."""
    rows = [
        {
            "prompt": p["prompt"],
            "code_prompt": p["prompt"],
            "test": p["test"],
            "entry_point": p["entry_point"],
        }
        for p in humaneval.select(range(4))
    ]
    folder = _folder(tmp_path, "data", {"train.jsonl": rows})
    loaded = load_problems(folder)
    assert loaded["task_id"] == [f"row {i}" for i in range(4)] and loaded["test"] == humaneval["test"][:4]
    train, _ = build_datasets(DataSpec(dataset=str(folder), n_train=3, n_eval=1))
    assert len(train) == 3 and train["code_prompt"][0] in humaneval["prompt"][:4]


def test_mbpp_rows_are_mapped_to_humanevals_columns_and_their_own_code_passes(tmp_path):
    from rewards import unit_test_reward

    folder = _folder(tmp_path, "mbpp", {"test.jsonl": MBPP_ROWS, "train.jsonl": MBPP_ROWS[:1]})
    loaded = load_problems(folder)  # the test split, of two
    assert loaded["task_id"] == ["MBPP/11", "MBPP/12"] and loaded["entry_point"] == ["add", "double"]
    assert loaded["prompt"][0] == '"""\nWrite a function to add two numbers.\nassert add(1, 2) == 3\n"""\n'
    assert loaded["test"][0] == "assert add(1, 2) == 3\nassert add(0, 0) == 0"
    rows = to_rl_rows(loaded)
    scores = unit_test_reward.score(
        prompts=rows["prompt"],
        completions=loaded["canonical_solution"],
        test=rows["test"],
        entry_point=rows["entry_point"],
        code_prompt=rows["code_prompt"],
    )
    assert scores == [1.0, 1.0]
    wrong = unit_test_reward.score(
        prompts=rows["prompt"][:1],
        completions=["def add(a, b):\n    return a - b\n"],
        test=rows["test"][:1],
        entry_point=rows["entry_point"][:1],
        code_prompt=rows["code_prompt"][:1],
    )
    assert wrong == [0.0]


def test_a_folder_of_stdio_problems_and_a_csv_file_load(humaneval, tmp_path):
    stdio = [{"problem_id": "p0", "question": "Echo the input.", "input_output": IO}]
    loaded = load_problems(_folder(tmp_path, "apps", {"train.jsonl": stdio}))
    assert loaded.column_names[:2] == ["task_id", "statement"] and loaded["task_id"] == ["p0"]
    import csv

    path = tmp_path / "he.csv"
    rows = humaneval.select(range(3)).to_list()
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert load_problems(path)["test"] == humaneval["test"][:3]


def test_a_folder_datasets_cannot_read_and_a_file_of_another_type_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError) as info:
        load_problems(tmp_path / "empty")
    assert str(info.value).startswith(f"{tmp_path / 'empty'}: datasets.load_dataset cannot read it (")
    assert "\n" not in str(info.value)
    (tmp_path / "notes.docx").write_text("x")
    with pytest.raises(
        DataError, match=r"notes\.docx: unsupported file type; use one of .*\.csv.*or a folder"
    ):
        load_problems(tmp_path / "notes.docx")


def test_an_unreachable_hub_is_one_line_with_the_offline_alternative(monkeypatch):
    from experiments.inputs import data

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    reason = "the Hugging Face hub https://huggingface.co cannot be reached (Name or service not known)"
    monkeypatch.setattr(data, "hub_unreachable", lambda timeout=3.0: reason)
    with pytest.raises(DataError) as info:
        load_problems("openai/openai_humaneval")
    assert str(info.value) == (
        f"dataset 'openai/openai_humaneval' is not a local file or folder, and {reason}; to work offline, set "
        "HF_HUB_OFFLINE=1 with the dataset in the Hugging Face cache, or pass a local file or folder (.jsonl, "
        ".jsonl.gz, .parquet, .json, .csv, ...)"
    )


def test_passk_train_takes_a_folder_and_a_hub_id_as_trls_dataset_name(humaneval, tmp_path, capsys):
    """`--dataset_name data` (a folder) and `--dataset_name openai/openai_humaneval` (offline here: one line before
    any model loads) instead of "neither humaneval nor learnable nor an existing file"."""
    from experiments.run import cli
    from experiments.run.argv import parse_config
    from experiments.run.config import config_path

    rows = humaneval.select(range(4)).to_list()
    folder = _folder(tmp_path, "data", {"train.jsonl": rows})
    exp, _ = parse_config([str(config_path("cpu")), "--method", "grpo", "--dataset_name", str(folder)])
    assert exp.dataset == str(folder)
    argv = [
        "train",
        "cpu",
        "--method",
        "grpo",
        "--model",
        "/nonexistent-model",
        "--output_dir",
        str(tmp_path / "o"),
    ]
    assert cli.main([*argv, "--dataset_name", "openai/openai_humaneval"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "passk: error: dataset 'openai/openai_humaneval' is not a local file or folder and the Hugging Face hub "
        "is offline (HF_HUB_OFFLINE=1) with no cached copy; pass a local file or folder"
    ), err
    assert cli.main([*argv, "--dataset_name", "no/such/folder"]) == 2
    assert "dataset: 'no/such/folder' is neither humaneval nor learnable nor an existing file or folder" in (
        capsys.readouterr().err
    )
