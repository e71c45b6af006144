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
- `sampled_prompts.jsonl`: the prompts, completions and tokens of every generation batch (experiments.run.budget);
- `run.json`: config, seed, method, its hyperparameters (`method_hparams`), the budget counted (`budget`), the
  sampling settings applied (`sampling`), wall time, tokens/s, versions;
- `train.log`: what the libraries logged and warned, kept off the console (one line there follows the run).

This module is the order of the run; each step's work has its own module: the rows (experiments.inputs.data,
experiments.run.budget.scheduled_rows), the reward callables (experiments.inputs.reward_funcs), the starting model
(experiments.learnable.warm_start), loading and sampling settings (experiments.inputs.models), evaluation
(experiments.evaluation.evaluate) and run.json (experiments.run.record).

Multi-process runs evaluate on the main process while the others wait at a barrier (DDP holds full weights on
every rank). Sharded runs (FSDP, DeepSpeed ZeRO-3) evaluate the saved model, reloaded on the main process.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from experiments.errors import USER_ERRORS, ConfigError
from experiments.inputs.data import DataSpec, build_datasets, problem_kind
from experiments.inputs.models import (
    MODEL_SAMPLING_KEYS,
    eval_generation_kwargs,
    load_model_and_tokenizer,
    model_sampling,
)
from experiments.inputs.reward_funcs import RewardSpec, build_reward_funcs
from experiments.learnable.warm_start import starting_model
from experiments.run.argv import drop_flags, parse_config
from experiments.run.budget import scheduled_rows
from experiments.run.config import ExperimentArgs, method_spec
from experiments.run.progress import attach, note
from experiments.run.record import run_budget_record, run_record
from experiments.run.settings import resume_changes, write_run_config
from experiments.run.stopping import Interrupted, exit_status, sigterm_interrupts
from experiments.run.validation import check_output_dir, sharded_weights

logger = logging.getLogger("passk.train")


# -------------------------------------------------------------------------------------------------- sampling


def apply_model_sampling(exp: ExperimentArgs, cfg: Any, model_path: str) -> dict[str, Any]:
    """With `model_generation_config`, put the model's sampling values into the trainer config (and return them
    for evaluation); the record of what sampling used, for run.json."""
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


# ----------------------------------------------------------------------------------------------------- model


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


def load_for_eval(path: str, cfg: Any) -> tuple[Any, Any]:
    """`experiments.inputs.models.load_model_and_tokenizer` with the dtype and device the trainer config trains with."""
    return load_model_and_tokenizer(path, _dtype(cfg), _device(cfg))


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


def _is_sharded(cfg: Any) -> bool:
    return bool(getattr(cfg, "fsdp", None)) or sharded_weights()


# ------------------------------------------------------------------------------------------------------- run


def setup_torch(exp: ExperimentArgs, cfg: Any) -> None:
    """Pin torch threads on CPU (shared 2-core machines slow down 10-100x when oversubscribed)."""
    import torch

    if (getattr(cfg, "use_cpu", False) or not torch.cuda.is_available()) and exp.num_threads > 0:
        torch.set_num_threads(exp.num_threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(exp.num_threads))


def _checkpoint_step(path: str | os.PathLike) -> str:
    """N of a `checkpoint-N` folder, "?" for any other name."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    name = Path(path).name
    tail = name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-")
    return tail if tail != name and tail.isdigit() else "?"


def last_checkpoint(folder: str | os.PathLike) -> str | None:
    """The newest `checkpoint-N` in `folder` that was saved whole, or None. The Trainer writes trainer_state.json
    after the weights, optimizer and RNG states, so a save cut short (Ctrl-C, a killed job) leaves a folder without
    it, which transformers' `get_last_checkpoint` would still pick and a resume would then fail to load."""
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    saved = []
    for path in Path(folder).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if Path(folder).is_dir() else ():
        step = _checkpoint_step(path)
        try:
            complete = step.isdigit() and bool(json.loads((path / TRAINER_STATE_NAME).read_text()))
        except (OSError, ValueError):  # missing, or cut short mid-write
            complete = False
        if complete:
            saved.append((int(step), str(path)))
    return max(saved)[1] if saved else None


def find_resume_checkpoint(exp: ExperimentArgs, cfg: Any) -> str | None:
    """The checkpoint to resume from: `resume_from_checkpoint`, or with `resume` the last one in output_dir."""
    if getattr(cfg, "resume_from_checkpoint", None):
        path = Path(cfg.resume_from_checkpoint)
        if not path.is_dir():
            raise ConfigError(f"resume_from_checkpoint: no such checkpoint folder {path}")
        return str(path)
    if not exp.resume:
        return None
    out = Path(cfg.output_dir)
    last = last_checkpoint(out)
    if last is None:
        raise ConfigError(
            f"resume: no checkpoint-* folder saved whole (with its trainer_state.json) in output_dir {out}; "
            "pass --overwrite to start that run again"
        )
    return last


class TiedWeightsLoaded(logging.Filter):
    """Drops transformers' "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" when every
    key it lists is a tied weight of `model` (loaded under its other name, e.g. the embeddings): a checkpoint saves a
    tied tensor once, so on resume nothing is missing. Any other missing key is still reported."""

    PREFIX = "There were missing keys in the checkpoint model loaded: "

    def __init__(self, model: Any) -> None:
        super().__init__()
        names: dict[int, list[str]] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(param), []).append(name)
        self.tied = {n for group in names.values() if len(group) > 1 for n in group}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.PREFIX):
            return True
        import ast

        try:
            missing = ast.literal_eval(message[len(self.PREFIX) :].rstrip("."))
        except (ValueError, SyntaxError):
            return True
        return not (missing and set(missing) <= self.tied)


def _at_generation_end(state: Any, period: int) -> bool:
    return state.global_step % period == 0 or state.global_step >= state.max_steps


def save_at_generation_ends(period: int) -> Any:
    """A TrainerCallback that moves each `save_steps` checkpoint to the next end of a generation batch
    (`experiments.run.budget.generation_period`), so that a run resumed from any checkpoint samples exactly the prompts
    an uninterrupted run would (TRL's GRPOTrainer and RLOOTrainer do not save the generation batch they are
    training on, and would sample it again; passk's trainers do, and get period 1). With one optimizer step per
    generation batch nothing moves."""
    from transformers import TrainerCallback

    class SaveAtGenerationEnd(TrainerCallback):
        deferred = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if _at_generation_end(state, period):
                control.should_save = control.should_save or self.deferred
                self.deferred = False
            elif control.should_save:
                control.should_save, self.deferred = False, True

    return SaveAtGenerationEnd()


@contextlib.contextmanager
def stop_at_step_end_on_ctrl_c(trainer: Any, period: int = 1, grace_s: float = 0.0) -> Iterator[Any]:
    """While training, the first Ctrl-C or SIGTERM (experiments.run.stopping) stops the run at the end of the current
    generation batch (the current optimizer step, unless one generation batch feeds several: PPO's epochs,
    `steps_per_generation`) and saves a checkpoint there, so that `--resume true` loses nothing and samples what an
    uninterrupted run would; a second Ctrl-C stops it at once, and so does a SIGTERM's deadline: `grace_s` seconds
    after it (0: none). A repeated SIGTERM (a launcher passing on the scheduler's) changes nothing. The yielded
    callback's `signum` says which signal asked (None: none), `stopped` whether training ended at the step for it
    (the caller then raises `Interrupted`). Only a flag is set in the handler: raised wherever the signal happened
    to land, a Ctrl-C was once lost on a loaded machine (Python drops an exception raised inside a finalizer or a
    weakref callback). Every rank of a multi-process run stops at the same step when any one was asked."""
    import threading

    from transformers import TrainerCallback

    from experiments.run.stopping import STOP_SIGNALS, Interrupted, signal_name

    class StopAtGenerationEnd(TrainerCallback):
        stopped = False
        signum: int | None = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            asked = pending.is_set()
            # Every rank stops at the same step, or the save would hang.
            if trainer.accelerator.num_processes > 1:
                import torch

                flag = torch.tensor(float(asked), device=trainer.accelerator.device)
                asked = bool(trainer.accelerator.reduce(flag, reduction="sum").item() > 0)
            if asked and _at_generation_end(state, period):
                control.should_save = control.should_training_stop = self.stopped = True
                if self.signum is None:  # asked on another rank
                    self.signum = signal.SIGTERM

    pending, expired = threading.Event(), threading.Event()
    callback = StopAtGenerationEnd()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield callback
        return
    deadline: list[threading.Timer] = []
    main_ident = threading.main_thread().ident

    def expire() -> None:
        expired.set()
        print(
            f"passk: SIGTERM: sigterm_grace_s ({grace_s:g} s) is over before the end of the step: stopping now",
            file=sys.stderr,
            flush=True,
        )
        # A real signal to the main thread (the handler below raises there), so that a wait it is in (a sleep, a
        # lock, a pipe) ends too.
        signal.pthread_kill(main_ident, signal.SIGTERM)

    def on_signal(signum: int, frame: Any) -> None:
        if pending.is_set():
            if signum == signal.SIGTERM == callback.signum and not expired.is_set():
                return  # the same request again: its deadline stands
            raise Interrupted(callback.signum or signum)
        callback.signum = signum
        pending.set()
        step, total = trainer.state.global_step + 1, trainer.state.max_steps  # the step in progress
        stop = min(-(-step // period) * period, total) if total else step
        then = "Ctrl-C again: now" if signum == signal.SIGINT else f"within sigterm_grace_s {grace_s:g} s"
        if signum == signal.SIGTERM and grace_s > 0:
            deadline.append(threading.Timer(grace_s, expire))
            deadline[0].daemon = True
            deadline[0].start()
        elif signum == signal.SIGTERM:
            then = "sigterm_grace_s 0: no deadline"
        print(
            f"passk: {signal_name(signum)}: stopping at the end of step {stop} and saving a checkpoint there ({then})",
            file=sys.stderr,
            flush=True,
        )

    trainer.add_callback(callback)
    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    try:
        yield callback
    finally:
        for timer in deadline:
            timer.cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        trainer.remove_callback(callback)


def _saved_step(checkpoint: str) -> int:
    """The optimizer step a whole checkpoint was saved at (its trainer_state.json)."""
    from transformers.trainer import TRAINER_STATE_NAME

    return int(json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text()).get("global_step", 0))


def finished_run(out: str | os.PathLike, max_steps: int) -> bool:
    """Whether `out` holds a run that trained its `max_steps` to the end (its run.json, written last, says so); a
    ConfigError when it trained more (a smaller budget than it ran with: resuming cannot keep that budget)."""
    try:
        record = json.loads((Path(out) / "run.json").read_text())
    except (OSError, ValueError):
        return False
    trained = int(record.get("global_step") or 0)
    if max_steps > 0 and trained > max_steps:
        raise ConfigError(
            f"resume: {out} trained {trained} steps, past this run's max_steps {max_steps}; resume with the budget it "
            "was started with (budget_prompts), or pass --overwrite to start again"
        )
    return trained >= max_steps > 0


def nothing_to_resume(exp: ExperimentArgs, cfg: Any) -> bool:
    """Whether this is a resume of a run that trained its budget (`finished_run`): `run` then trains nothing, says
    so, and writes nothing."""
    return bool(getattr(exp, "resume", False)) and finished_run(cfg.output_dir, cfg.max_steps)


def _check_resume_point(resume_from: str, cfg: Any) -> int:
    """The checkpoint's step, refused when it lies past this run's max_steps (a smaller budget than it ran)."""
    step = _saved_step(resume_from)
    if cfg.max_steps > 0 and step > cfg.max_steps:
        raise ConfigError(
            f"resume: {resume_from} is at step {step}, past this run's max_steps {cfg.max_steps}; resume with the "
            "budget it was started with (budget_prompts), or pass --overwrite to start again"
        )
    return step


RUN_LOG = "train.log"  # in output_dir: what the libraries log and warn during a run
PASSK_LOGGERS = ("passk", "experiments")  # the loggers whose records stay on the console


class _PasskOnly(logging.Filter):
    """A console handler's filter: passk's own records, and errors from anyone."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.split(".")[0] in PASSK_LOGGERS or record.levelno >= logging.ERROR


class _RunLog(logging.Handler):
    """Holds the libraries' records until output_dir exists, then writes them, and the rest of the run's, to
    `output_dir/train.log` (`open`)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.held: list[logging.LogRecord] = []
        self.file: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.file is not None:
            self.file.handle(record)
        else:
            self.held.append(record)

    def open(self, path: Path) -> None:
        if self.file is not None:
            return
        self.file = logging.FileHandler(path, mode="a", encoding="utf-8")
        self.file.setFormatter(
            logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%H:%M:%S")
        )
        for record in self.held:
            self.file.handle(record)
        self.held = []

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        super().close()


@contextlib.contextmanager
def library_output_to_run_log() -> Iterator[_RunLog | None]:
    """The libraries' log records, warnings (gradient_checkpointing's FutureWarning, transformers' LOAD REPORT of
    PPO's new value head) and progress bars (loading and writing weights, datasets) leave the console, whose lines
    are then passk's own (progress, phases, errors); the records go to the run's log, `output_dir/train.log`, once
    `open`ed there (the main process's). A run that `passk compare` started is left alone: all its output already
    goes to its log file."""
    from experiments.run.progress import PROGRESS_FD_ENV

    if os.environ.get(PROGRESS_FD_ENV):
        yield None
        return
    import datasets
    import huggingface_hub.utils
    import transformers

    root = logging.getLogger()
    consoles = [h for h in root.handlers if type(h) is logging.StreamHandler]
    only = _PasskOnly()
    main_rank = os.environ.get("RANK", "0") == "0"  # the others' library records are dropped
    run_log = _RunLog() if main_rank else None
    library = logging.getLogger("transformers")  # transformers writes to stderr itself, without propagating
    saved = (
        library.handlers[:],
        library.propagate,
        root.level,
        transformers.utils.logging.is_progress_bar_enabled(),
    )
    for h in consoles:
        h.addFilter(only)
    if run_log is not None:
        root.addHandler(run_log)
        root.setLevel(min(root.level, logging.INFO) if root.level else logging.INFO)
    library.handlers, library.propagate = [], True
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()  # bars for selecting 50 rows are noise next to the run's own line
    huggingface_hub.utils.disable_progress_bars()
    logging.captureWarnings(True)
    try:
        yield run_log
    finally:
        logging.captureWarnings(False)
        library.handlers, library.propagate, root.level = saved[0], saved[1], saved[2]
        if saved[3]:
            transformers.utils.logging.enable_progress_bar()
        if run_log is not None:
            root.removeHandler(run_log)
            run_log.close()
        for h in consoles:
            h.removeFilter(only)


def run(exp: ExperimentArgs, cfg: Any, callbacks: Sequence[Any] = ()) -> Path:
    """Run one experiment from parsed configs; returns `output_dir`. See the module docstring.

    `callbacks` are extra `transformers.TrainerCallback`s for the trainer (benchmarks use this for timing). The
    libraries' output goes to `output_dir/train.log` (`library_output_to_run_log`). Ctrl-C and SIGTERM stop it
    with `Interrupted` (experiments.run.stopping), leaving what `--resume true` continues.
    """
    with library_output_to_run_log() as run_log, sigterm_interrupts():
        return _run(exp, cfg, callbacks, run_log)


def _run(exp: ExperimentArgs, cfg: Any, callbacks: Sequence[Any], run_log: _RunLog | None) -> Path:
    from accelerate import PartialState

    from experiments.evaluation.evaluate import evaluate_to_file, write_json

    t_start = time.time()
    setup_torch(exp, cfg)
    state = PartialState()
    out = Path(cfg.output_dir)
    check_output_dir(exp, cfg)  # an earlier run's files: refused unless overwrite or resume
    if nothing_to_resume(exp, cfg):
        # Nothing to train: TRL's own resume of a finished run would take one more step (its loop checks
        # max_steps only after a step), sampling past the budget.
        if state.is_main_process:
            print(
                f"passk: {out} already trained its {cfg.max_steps} steps (run.json): nothing to resume",
                flush=True,
            )
        return out
    resume_from = find_resume_checkpoint(exp, cfg)
    resume_step = _check_resume_point(resume_from, cfg) if resume_from else 0
    # A resume continues the run as it was set: a changed setting that defines it is refused here.
    config_changes = resume_changes(exp, cfg, resume_from, resume_step) if resume_from else []

    # Everything that can fail on a bad value, before any model is loaded.
    spec = method_spec(exp.method or "")
    train_rows, eval_rows = build_datasets(DataSpec.from_config(exp))
    reward_funcs = build_reward_funcs(RewardSpec.from_config(exp), problem_kind(train_rows.column_names))
    peft_config = lora_config(exp)

    with state.main_process_first():  # one process builds the cached models; the others then find them
        model_path = starting_model(exp.model, exp.warm_start_steps, seed=exp.split_seed)
    if exp.overwrite and state.is_main_process and out.is_dir():
        shutil.rmtree(out)
    state.wait_for_everyone()
    out.mkdir(parents=True, exist_ok=True)
    if run_log is not None and state.is_main_process:
        run_log.open(out / RUN_LOG)
    label = out.name
    if resume_from and state.is_main_process:
        print(f"passk: resuming from {resume_from} (step {_checkpoint_step(resume_from)})", flush=True)
        for change in config_changes:
            if change["step"] == resume_step:
                print(
                    f"passk: {change['key']} {change['from']!r} -> {change['to']!r} from step {resume_step} "
                    "(run.json: config_changes)",
                    flush=True,
                )
    if state.is_main_process:
        write_run_config(out, exp, cfg, config_changes, resume_from)
    sampling = apply_model_sampling(exp, cfg, model_path)
    eval_gen = sampling["eval"]
    screen = None  # training problems kept by the starting model's pass rate (experiments.inputs.screening)
    if exp.screen_n:
        from experiments.inputs.screening import screen_training_rows

        resumed = bool(resume_from)
        train_rows, screen = screen_training_rows(
            exp, cfg, model_path, train_rows, out, state, resume=resumed
        )
    train_rows = scheduled_rows(exp, train_rows, cfg.seed)
    logger.info(
        "method=%s model=%s train=%d eval=%d max_steps=%d out=%s",
        exp.method,
        model_path,
        len(train_rows),
        len(eval_rows),
        cfg.max_steps,
        out,
    )
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
            note(f"{label} evaluating the starting model on {len(eval_rows)} problems")
            model, eval_tok = load_for_eval(model_path, cfg)
            before = evaluate_to_file(model, eval_tok, eval_rows, exp, cfg.seed, path, eval_gen)
            del model
    state.wait_for_everyone()

    callbacks = list(callbacks)
    periodic = None
    if exp.eval_every_n_steps and exp.n_eval:
        from experiments.evaluation.evaluate import PassAtKCallback, eval_kwargs

        kw = eval_kwargs(exp, cfg.seed, eval_gen)
        periodic = PassAtKCallback(eval_rows, tokenizer=tokenizer, every_n_steps=exp.eval_every_n_steps, **kw)
        callbacks.append(periodic)

    from experiments.trainers.vllm_cpu import check_cpu_attention, engine_dtype, host_dtype

    colocated = getattr(cfg, "use_vllm", False) and getattr(cfg, "vllm_mode", "") == "colocate"
    if colocated:
        check_cpu_attention(model_path)
    with engine_dtype(host_dtype(exp.vllm_dtype) if colocated else None):
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
    if exp.stop_at_code_end:  # every completion ends where its code ends (experiments.evaluation.evaluate)
        from experiments.evaluation.evaluate import stop_generation_at_code_end

        stop_generation_at_code_end(trainer, exp.style)
    if colocated:  # a CPU engine takes its syncs by vLLM's reload (experiments.trainers.vllm_cpu)
        from experiments.trainers.vllm_cpu import install_cpu_vllm_sync

        install_cpu_vllm_sync(trainer)
    # A step without gradient: AdamW would step on its momentum alone (experiments.trainers.zero_gradient).
    if exp.skip_zero_gradient_steps:
        from experiments.trainers.zero_gradient import SkipZeroGradientSteps

        try:
            trainer.add_callback(SkipZeroGradientSteps(trainer))
        except ValueError as err:
            raise ConfigError(str(err)) from None
    # TRL's model card, written at each checkpoint save, names the starting model as passk does (not 'None').
    from experiments.run.model_card import install_model_card

    install_model_card(trainer, str(exp.model), exp.warm_start_steps)
    from experiments.run.budget import CHECKPOINT_SAMPLES_FILE, SAMPLES_FILE, SampleLog, generation_period

    previous = SampleLog.read(Path(resume_from) / CHECKPOINT_SAMPLES_FILE) if resume_from else []
    samples = SampleLog(trainer, previous)
    trainer.add_callback(samples.checkpoint_callback())
    from experiments.trainers.seams import GRPOSeamsMixin

    # passk's own trainers save the rest of a rollout in a checkpoint taken inside it; TRL's would sample it again.
    period = 1 if isinstance(trainer, GRPOSeamsMixin) else generation_period(cfg)
    trainer.add_callback(save_at_generation_ends(period))
    attach(trainer, label)  # one live line on the console: step, reward, ETA
    tied = TiedWeightsLoaded(trainer.accelerator.unwrap_model(trainer.model))
    logging.getLogger("transformers.trainer").addFilter(tied)
    t_train = time.time()
    if resume_from and cfg.max_steps > 0 and resume_step >= cfg.max_steps:
        # Trained to the end, stopped before run.json (Ctrl-C in the last step or in eval_after): finish the run
        # from the checkpoint without trainer.train, which would take one step past max_steps.
        from transformers.trainer import TRAINER_STATE_NAME
        from transformers.trainer_callback import TrainerState
        from transformers.trainer_utils import TrainOutput

        trainer._load_from_checkpoint(resume_from)
        trainer.state = TrainerState.load_from_json(str(Path(resume_from) / TRAINER_STATE_NAME))
        train_output = TrainOutput(trainer.state.global_step, 0.0, {})
        logging.getLogger("transformers.trainer").removeFilter(tied)
    else:
        try:
            with stop_at_step_end_on_ctrl_c(trainer, period, exp.sigterm_grace_s) as stop:
                if periodic is not None:  # no evaluation at an interrupted run's end (PassAtKCallback)
                    periodic.interrupted = lambda: stop.stopped
                train_output = trainer.train(resume_from_checkpoint=resume_from)
        finally:
            logging.getLogger("transformers.trainer").removeFilter(tied)
        if stop.signum is not None:  # saved at the step (else the last save); the caller says how to resume
            raise Interrupted(stop.signum)
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
            final = periodic is not None and periodic.last_result_step == trainer.state.global_step
            if model is not None and final and not sharded:
                # PassAtKCallback scored this very model at the last step, with the same settings and seed:
                # the same numbers a second evaluation would produce, without its cost.
                after = periodic.last_result.to_dict()
                write_json(out / "eval_after.json", after)
                logger.info(
                    "eval_after.json: the step-%d evaluation of PassAtKCallback", trainer.state.global_step
                )
            elif model is not None:
                note(f"{label} evaluating the trained model on {len(eval_rows)} problems")
                after = evaluate_to_file(
                    model, eval_tok, eval_rows, exp, cfg.seed, out / "eval_after.json", eval_gen
                )
        state.wait_for_everyone()

    if state.is_main_process:
        samples.write(out / SAMPLES_FILE)
        record = run_record(
            exp,
            cfg,
            trainer,
            train_output,
            model_path,
            resume_from,
            t_start,
            train_seconds,
            before,
            after,
            state.num_processes,
        )
        record.update(run_budget_record(exp, cfg, trainer, samples, state.num_processes, sampling))
        record["config_changes"] = config_changes  # settings a resume changed, each from its step
        record["screen"] = screen
        write_json(out / "run.json", record)
    state.wait_for_everyone()
    return out


def interrupted_message(args: Sequence[str], cfg: Any) -> str:
    """After Ctrl-C: where the last checkpoint is and the exact `passk train` command that resumes from it."""
    import shlex

    out = Path(cfg.output_dir)
    last = last_checkpoint(out)
    if last is None:
        when = (
            "save_strategy is 'no'"
            if str(cfg.save_strategy) in ("no", "SaveStrategy.NO")
            else f"the first save comes at step {cfg.save_steps:g}"
        )
        return f"passk: interrupted; no checkpoint in {out} ({when}), so nothing to resume: run it again with --overwrite"
    resume = ["passk", "train", *drop_flags(args, {"overwrite": True, "resume": True}), "--resume", "true"]
    return f"passk: interrupted; last checkpoint: {last}; resume with: {shlex.join(resume)}"


def end_process_group() -> None:
    """Destroy this process's process group, if it has one: call once, when a rank's work is done.

    Left to interpreter exit, gloo's worker threads can abort a rank that finished its run ("terminate called
    without an active exception"), so that the launcher reports a failure; NCCL warns at exit. Not called by
    `run`, since one process group may run several experiments (in-process comparisons, the distributed test),
    and not after an error: a rank that stopped mid-collective could then wait on its peers instead of exiting.
    """
    dist = sys.modules.get("torch.distributed")  # never imported: no group, and no torch import to find out
    if dist is not None and dist.is_available() and dist.is_initialized():
        # A finished trainer lives on in reference cycles, its FSDP/DDP state holding the groups and tensors the
        # gloo threads touch: free it while the interpreter and the group are alive, not at interpreter exit.
        gc.collect()
        vllm_groups = sys.modules.get("vllm.distributed.parallel_state")
        if vllm_groups is not None:  # a colocated engine's groups and ours, else its exit hook fails on them
            vllm_groups.destroy_model_parallel()
            vllm_groups.destroy_distributed_environment()
        if dist.is_initialized():
            dist.destroy_process_group()  # not accelerate's PartialState(): that would build its state if none yet


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
    cfg = None
    try:
        with sigterm_interrupts():  # also while the config is read and the libraries imported
            exp, cfg = parse_config(args)
            finished = nothing_to_resume(exp, cfg)
            out = run(exp, cfg)
    except USER_ERRORS as e:
        print(f"passk: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stopped:  # Ctrl-C or SIGTERM (experiments.run.stopping)
        if main_rank:
            print(
                interrupted_message(args, cfg) if cfg is not None else "passk: interrupted", file=sys.stderr
            )
        return exit_status(stopped)
    end_process_group()
    if main_rank and not finished:  # a finished run resumed: run said there was nothing to do
        print(f"passk: run written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
