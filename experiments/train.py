"""The run: parse a config, build the rows, evaluate, train one method, evaluate again, write run.json.

Entry point for both launchers, which do the same thing::

    passk train cpu --method grpo [--key value ...]
    accelerate launch [--config_file accelerate_configs/X.yaml] -m experiments.train experiments/configs/seed.yaml \
        --method ppo [--key value ...]

Order matters: the config is parsed and checked, the data rows are built and the reward functions resolved
before any model is loaded, so a bad value costs a second, not a model load. Then, in `output_dir`:

- `eval_before.json`: pass@k of the starting model on the eval split (main process only);
- trainer checkpoints and `trainer_state.json` (TRL's per-step metrics), TensorBoard logs in `runs/`;
- `eval_after.json`: pass@k of the trained model, same settings and seed;
- `sampled_prompts.jsonl`: the prompts, completions and tokens of every generation batch (experiments.budget);
- `run.json`: config, seed, method, its hyperparameters (`method_hparams`), the budget counted (`budget`), the
  sampling settings applied (`sampling`), wall time, tokens/s, versions.

Multi-process runs evaluate on the main process while the others wait at a barrier (DDP holds full weights on
every rank). Sharded runs (FSDP, DeepSpeed ZeRO-3) evaluate the saved model, reloaded on the main process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.config import USER_ERRORS, ConfigError, ExperimentArgs, method_spec, parse_config, to_dict
from experiments.models import ModelError

logger = logging.getLogger("passk.train")

WARM_START_INFO = "passk_warm_start.json"  # written last: marks a complete cached warm start


# ------------------------------------------------------------------------------------------------------ data


def build_datasets(exp: ExperimentArgs) -> tuple[Any, Any]:
    """(train rows, eval rows) for the trainer and the evaluator, per `exp.dataset` and `exp.style`."""
    from experiments.data import load_humaneval, split_dataset, to_rl_rows

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


def scheduled_rows(exp: ExperimentArgs, train_rows: Any, seed: int) -> Any:
    """The training rows in the order the trainer will walk them: with `prompts_per_epoch`, the seed's schedule of
    `budget_prompts` rows (experiments.budget.prompt_schedule, seeded with the training seed; the config turned
    the trainer's shuffling off); else the rows unchanged."""
    if not exp.prompts_per_epoch:
        return train_rows
    from experiments.budget import prompt_schedule

    return train_rows.select(prompt_schedule(len(train_rows), exp.prompts_per_epoch, exp.budget_prompts, seed))


# -------------------------------------------------------------------------------------------------- sampling


def model_sampling(model_path: str) -> dict[str, Any]:
    """The sampling values `model.generate` would use for `MODEL_SAMPLING_KEYS`: the model's generation_config,
    else transformers' generate defaults (top_k 50, repetition_penalty 1.0); `source` says which, per key."""
    from transformers import GenerationConfig

    from experiments.config import MODEL_SAMPLING_KEYS

    try:
        model_config = GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json: generate() uses its defaults
        model_config = None
    getter = getattr(GenerationConfig, "_get_default_generation_params", None)
    defaults = getter() if getter else {"top_k": 50, "repetition_penalty": 1.0}
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key in MODEL_SAMPLING_KEYS:
        value = getattr(model_config, key, None) if model_config is not None else None
        source[key] = "model generation_config" if value is not None else "transformers generate default"
        values[key] = value if value is not None else defaults.get(key)
    return {**values, "source": source}


def apply_model_sampling(exp: ExperimentArgs, cfg: Any, model_path: str) -> dict[str, Any]:
    """With `model_generation_config`, put the model's sampling values into the trainer config (and return them
    for evaluation); the record of what sampling used, for run.json."""
    from experiments.config import MODEL_SAMPLING_KEYS

    read = model_sampling(model_path) if exp.model_generation_config else None
    if read is not None:
        for key in MODEL_SAMPLING_KEYS:
            if read[key] is not None and hasattr(cfg, key):
                setattr(cfg, key, read[key])
    applied = {key: getattr(cfg, key, None) for key in ("temperature", "top_p", *MODEL_SAMPLING_KEYS)}
    return {
        "from_model_generation_config": bool(read),
        **applied,
        "source": read["source"] if read else {key: "config" for key in MODEL_SAMPLING_KEYS},
        "eval": eval_generation_kwargs(read),
    }


def eval_generation_kwargs(read: dict[str, Any] | None) -> dict[str, Any]:
    """The generation kwargs evaluation adds to its pinned settings: the model's values, when kept in force."""
    if not read:
        return {}
    from experiments.config import MODEL_SAMPLING_KEYS

    return {key: read[key] for key in MODEL_SAMPLING_KEYS if read[key] is not None}


# --------------------------------------------------------------------------------------------------- rewards


def _import_dotted(path: str) -> Any:
    """`package.module.attr`, `package.module:attr` or `path/to/file.py:attr`."""
    module_name, _, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        if module_name.endswith(".py"):
            file = Path(module_name).expanduser().resolve()
            spec = importlib.util.spec_from_file_location(f"passk_reward_{file.stem}", file)
            if spec is None or spec.loader is None or not file.is_file():
                raise ImportError(f"no such file {file}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:  # as TRL's scripts do: a reward module next to the config works
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"reward_funcs: cannot import {path!r}: {e}") from None


def build_reward_funcs(exp: ExperimentArgs) -> list[Any]:
    """The reward callables named by `exp.reward_funcs` (see ExperimentArgs)."""
    import rewards

    sandbox = {"timeout": exp.reward_timeout, "memory_mb": exp.reward_memory_mb}
    funcs: list[Any] = []
    for name in exp.reward_funcs:
        if name == "unit_test":
            funcs.append(rewards.make_unit_test_reward(**sandbox))
        elif name == "partial":
            funcs.append(rewards.make_partial_test_reward(**sandbox))
        elif name == "format":
            funcs.append(rewards.make_format_reward())
        else:
            funcs.append(_import_dotted(name))
    return funcs


# ----------------------------------------------------------------------------------------------------- model


def _cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    from experiments.models import cache_root

    return cache_root(cache_dir)


def resolve_base_model(exp: ExperimentArgs) -> str:
    """A local folder (or hub id) for `exp.model`; "task" is the learnable task's own tiny model."""
    if exp.model == "task":
        from experiments.tasks import task_model_path

        return str(task_model_path())
    from experiments.models import resolve_model

    return resolve_model(exp.model)


def warm_started_model(
    base: str, steps: int, seed: int = 0, cache_dir: str | os.PathLike[str] | None = None
) -> str:
    """The base model after `steps` supervised steps on the learnable task, built once and cached.

    Keyed by the base folder's config/weights digest, the steps and the seed, so every method of a comparison
    (and every later run) starts from the same weights; built in a temporary folder and renamed into place, so
    concurrent builders never see half a model. `cache_dir` defaults to $PASSK_CACHE or ~/.cache/passk.
    """
    from experiments.tasks import warm_start

    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        f = Path(base) / name
        if f.is_file():
            digest.update(f.read_bytes())
    key = hashlib.sha256(f"{digest.hexdigest()}:{steps}:{seed}".encode()).hexdigest()[:16]
    dest = _cache_root(cache_dir) / "warm_start" / f"learnable-{key}"
    if (dest / WARM_START_INFO).is_file():
        return str(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        warm_start(base, tmp, steps=steps, seed=seed)
        shutil.rmtree(tmp / "sft", ignore_errors=True)  # SFT checkpoints/logs: not part of the model
        (tmp / WARM_START_INFO).write_text(json.dumps({"base": base, "steps": steps, "seed": seed}) + "\n")
        if dest.exists() and not (dest / WARM_START_INFO).is_file():
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / WARM_START_INFO).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)


def _dtype(cfg: Any) -> Any:
    import torch

    kwargs = getattr(cfg, "model_init_kwargs", None) or {}
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype")) if isinstance(kwargs, dict) else None
    if dtype in (None, "auto"):
        return torch.float32  # what TRL loads a model path as
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def _device(cfg: Any) -> Any:
    import torch
    from accelerate import PartialState

    if getattr(cfg, "use_cpu", False) or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", PartialState().local_process_index)


def load_model(path: str, dtype: Any, device: Any) -> tuple[Any, Any]:
    """(model, tokenizer) for generation from a model folder, a trainer checkpoint or a LoRA adapter folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as e:  # transformers' several-paragraph "couldn't connect" message, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"model {path!r} could not be loaded: {first} (set HF_HUB_OFFLINE=1 to fail fast offline)") from e
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if (Path(path) / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device).eval(), tokenizer


def load_for_eval(path: str, cfg: Any) -> tuple[Any, Any]:
    """`load_model` with the dtype and device the trainer config trains with."""
    return load_model(path, _dtype(cfg), _device(cfg))


def lora_config(exp: ExperimentArgs) -> Any:
    """The peft `LoraConfig` for `exp.use_peft` (None without it)."""
    if not exp.use_peft:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=exp.lora_r,
        lora_alpha=exp.lora_alpha,
        lora_dropout=exp.lora_dropout,
        target_modules=exp.lora_target_modules or "all-linear",
        task_type="CAUSAL_LM",
    )


# ------------------------------------------------------------------------------------------------ evaluation


def eval_kwargs(exp: ExperimentArgs, seed: int, generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """`evaluate_model` keyword arguments from the config (the same before, during and after training);
    `generation_kwargs` are the model's sampling values when `model_generation_config` keeps them in force."""
    return {
        "n_samples": exp.eval_n,
        "ks": tuple(exp.eval_ks),
        "temperature": exp.eval_temperature,
        "top_p": exp.eval_top_p,
        "max_new_tokens": exp.eval_max_new_tokens,
        "greedy": exp.eval_greedy,
        "seed": seed,
        "batch_size": exp.eval_batch_size,
        "style": exp.style,
        "sandbox_kwargs": {"timeout": exp.reward_timeout, "memory_mb": exp.reward_memory_mb},
        **({"generation_kwargs": generation_kwargs} if generation_kwargs else {}),
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def _evaluate(
    model: Any,
    tokenizer: Any,
    rows: Any,
    exp: ExperimentArgs,
    seed: int,
    out: Path,
    generation_kwargs: dict[str, Any] | None = None,
) -> dict:
    from experiments.evaluation import evaluate_model

    result = evaluate_model(model, tokenizer, rows, progress=True, **eval_kwargs(exp, seed, generation_kwargs))
    data = result.to_dict()
    _write_json(out, data)
    logger.info("%s: %s", out.name, ", ".join(f"{k}={v:.4f}" for k, v in result.scalars("").items()))
    return data


def _is_sharded(cfg: Any) -> bool:
    from experiments.config import sharded_weights

    return bool(getattr(cfg, "fsdp", None)) or sharded_weights()


# ------------------------------------------------------------------------------------------------------- run


def setup_torch(exp: ExperimentArgs, cfg: Any) -> None:
    """Pin torch threads on CPU (shared 2-core machines slow down 10-100x when oversubscribed)."""
    import torch

    if (getattr(cfg, "use_cpu", False) or not torch.cuda.is_available()) and exp.num_threads > 0:
        torch.set_num_threads(exp.num_threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(exp.num_threads))


def find_resume_checkpoint(exp: ExperimentArgs, cfg: Any) -> str | None:
    """The checkpoint to resume from: `resume_from_checkpoint`, or with `resume` the last one in output_dir."""
    if getattr(cfg, "resume_from_checkpoint", None):
        path = Path(cfg.resume_from_checkpoint)
        if not path.is_dir():
            raise ConfigError(f"resume_from_checkpoint: no such checkpoint folder {path}")
        return str(path)
    if not exp.resume:
        return None
    from transformers.trainer_utils import get_last_checkpoint

    out = Path(cfg.output_dir)
    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    if last is None:
        raise ConfigError(f"resume: no checkpoint-* folder in output_dir {out}")
    return last


def run(exp: ExperimentArgs, cfg: Any, callbacks: Sequence[Any] = ()) -> Path:
    """Run one experiment from parsed configs; returns `output_dir`. See the module docstring.

    `callbacks` are extra `transformers.TrainerCallback`s for the trainer (benchmarks use this for timing).
    """
    from accelerate import PartialState

    t_start = time.time()
    setup_torch(exp, cfg)
    import datasets

    datasets.disable_progress_bars()  # bars for selecting 50 rows are noise next to the trainer's
    state = PartialState()
    out = Path(cfg.output_dir)
    resume_from = find_resume_checkpoint(exp, cfg)

    # Everything that can fail on a bad value, before any model is loaded.
    spec = method_spec(exp.method or "")
    train_rows, eval_rows = build_datasets(exp)
    train_rows = scheduled_rows(exp, train_rows, cfg.seed)
    reward_funcs = build_reward_funcs(exp)
    peft_config = lora_config(exp)

    with state.main_process_first():  # one process builds the cached models; the others then find them
        model_path = resolve_base_model(exp)
        if exp.warm_start_steps:
            model_path = warm_started_model(model_path, exp.warm_start_steps, seed=exp.split_seed)
    out.mkdir(parents=True, exist_ok=True)
    sampling = apply_model_sampling(exp, cfg, model_path)
    eval_gen = sampling["eval"]
    logger.info("method=%s model=%s train=%d eval=%d max_steps=%d out=%s", exp.method, model_path,
                len(train_rows), len(eval_rows), cfg.max_steps, out)  # fmt: skip
    for key, reason in exp.not_applicable.items():
        logger.warning("%s: not used by %s (%s)", key, exp.method, reason)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    before = None
    if exp.eval_before and exp.n_eval and state.is_main_process:
        path = out / "eval_before.json"
        if resume_from and path.is_file():  # the starting model was already evaluated by the first attempt
            before = json.loads(path.read_text())
        else:
            model, eval_tok = load_for_eval(model_path, cfg)
            before = _evaluate(model, eval_tok, eval_rows, exp, cfg.seed, path, eval_gen)
            del model
    state.wait_for_everyone()

    callbacks = list(callbacks)
    if exp.eval_every_n_steps and exp.n_eval:
        from experiments.evaluation import PassAtKCallback

        kw = eval_kwargs(exp, cfg.seed, eval_gen)
        callbacks.append(
            PassAtKCallback(eval_rows, tokenizer=tokenizer, every_n_steps=exp.eval_every_n_steps, **kw)
        )

    trainer = spec.trainer_cls(
        model=model_path,
        reward_funcs=reward_funcs,
        args=cfg,
        train_dataset=train_rows,
        eval_dataset=None,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
    from experiments.budget import CHECKPOINT_SAMPLES_FILE, SAMPLES_FILE, SampleLog

    previous = SampleLog.read(Path(resume_from) / CHECKPOINT_SAMPLES_FILE) if resume_from else []
    samples = SampleLog(trainer, previous)
    trainer.add_callback(samples.checkpoint_callback())
    t_train = time.time()
    train_output = trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.time() - t_train
    # trainer_state.json in output_dir (the report reads its log_history), also when save_strategy is "no".
    trainer.save_state()
    if exp.save_model:
        trainer.save_model(str(out))  # gathers sharded weights; a PeftModel saves its adapter

    after = None
    if exp.eval_after and exp.n_eval:
        sharded = _is_sharded(cfg)
        if state.is_main_process:
            if sharded and exp.save_model:
                model, eval_tok = load_for_eval(str(out), cfg)
            elif sharded:
                model, eval_tok = None, None
                logger.warning("eval_after skipped: sharded weights and save_model=false")
            else:
                model, eval_tok = trainer.accelerator.unwrap_model(trainer.model), tokenizer
            if model is not None:
                after = _evaluate(model, eval_tok, eval_rows, exp, cfg.seed, out / "eval_after.json", eval_gen)
        state.wait_for_everyone()

    if state.is_main_process:
        samples.write(out / SAMPLES_FILE)
        record = run_record(exp, cfg, trainer, train_output, model_path, resume_from, t_start, train_seconds,
                            before, after, state.num_processes)  # fmt: skip
        record.update(run_budget_record(exp, cfg, trainer, samples, state.num_processes, sampling))
        _write_json(out / "run.json", record)
    state.wait_for_everyone()
    return out


def _last_logged(history: Sequence[dict[str, Any]], key: str) -> Any:
    return next((h[key] for h in reversed(history) if key in h), None)


def run_record(
    exp: ExperimentArgs,
    cfg: Any,
    trainer: Any,
    train_output: Any,
    model_path: str,
    resume_from: str | None,
    t_start: float,
    train_seconds: float,
    before: dict | None,
    after: dict | None,
    num_processes: int,
) -> dict[str, Any]:
    """The content of run.json."""
    import torch
    import transformers
    import trl

    history = trainer.state.log_history
    num_tokens = _last_logged(history, "num_tokens") or trainer.state.num_input_tokens_seen or 0
    # Tokens are counted from the start of training; a resumed run trained only part of them here.
    record: dict[str, Any] = {
        "method": exp.method,
        "seed": cfg.seed,
        "model": exp.model,
        "model_path": model_path,
        "output_dir": str(cfg.output_dir),
        "config": to_dict(exp, cfg),
        "global_step": trainer.state.global_step,
        "num_processes": num_processes,
        "resumed_from": resume_from,
        "wall_time_s": time.time() - t_start,
        "train_time_s": train_seconds,
        "train_runtime_s": (train_output.metrics or {}).get("train_runtime"),
        "num_tokens": num_tokens,
        "tokens_per_s": (num_tokens / train_seconds) if train_seconds > 0 and not resume_from else None,
        "eval_tokens_per_s": {
            name: (d.get("timing") or {}).get("tokens_per_s") if d else None
            for name, d in (("before", before), ("after", after))
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "device": "cpu" if getattr(cfg, "use_cpu", False) or not torch.cuda.is_available() else "cuda",
        "torch_threads": torch.get_num_threads(),
    }
    return record


def run_budget_record(
    exp: ExperimentArgs, cfg: Any, trainer: Any, samples: Any, num_processes: int, sampling: dict[str, Any]
) -> dict[str, Any]:
    """The run.json keys about fairness: `method_hparams` (the method's own values, flat), `budget` (fresh prompts,
    completions and tokens counted, optimizer steps, and the inputs), `sampling` (what generation applied) and
    `not_applicable` (keys of the shared file this method's config does not have)."""
    from experiments.budget import budget_record
    from experiments.trainers import method_hparams

    source = "budget_prompts" if exp.budget_prompts else "max_steps"
    return {
        "method_hparams": method_hparams(exp.method or "", cfg),
        "budget": budget_record(exp, cfg, samples, trainer.state.global_step, num_processes, source),
        "sampling": sampling,
        "not_applicable": dict(exp.not_applicable),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m experiments.train CONFIG [--key value ...]`; returns the process exit code."""
    main_rank = os.environ.get("RANK", "0") == "0"  # under accelerate launch, one process reports
    logging.basicConfig(
        level=logging.INFO if main_rank else logging.WARNING,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        exp, cfg = parse_config(args)
        out = run(exp, cfg)
    except USER_ERRORS as e:
        print(f"passk: error: {e}", file=sys.stderr)
        return 2
    if main_rank:
        print(f"passk: run written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
