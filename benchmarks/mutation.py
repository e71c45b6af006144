"""Mutation testing of the core modules with cosmic-ray (hand-run benchmark, not CI).

Each target module is mutated by cosmic-ray (one small change per mutant: an operator, a comparison, a constant,
a loop that never runs...) and the module's own fast test files are run against every sampled mutant; a mutant
is killed when they fail (or time out). The score is killed / sampled, per module, and every surviving mutant
is listed with its diff, to be read by hand: equivalent (no test could tell) or a gap in the tests.

The mutants are mutated in place, so the script works in a throwaway copy of the tree (`git archive REF`), never
in your checkout. `--tests after` adds this branch's test files for each module to the ones main had.

    pip install cosmic-ray coverage
    python benchmarks/mutation.py --ref <commit> --tests before --out benchmarks/results/mutation_before.json
    python benchmarks/mutation.py --ref <commit> --tests after --only-survivors-of \
        benchmarks/results/mutation_before.json --out benchmarks/results/mutation_after.json

Sampling: a full run is hours on 2 cores (every mutant pays a torch import), so `--sample N --seed S` draws N
mutants per module, reproducibly: the candidates are sorted by (file, position, operator, occurrence) and drawn
with `random.Random(S)`. Exotic operators (bitwise and shift operators, %, **) are left out of the candidates:
they make code crash at once and would inflate the score. `--only-survivors-of` re-runs only the mutants that
survived an earlier run (adding tests cannot revive a killed mutant, so the later run's killed set is the earlier
one's plus these).

Every mutant: `--sample 0` takes every candidate, `--part K/N` every N-th of them from the K-th (a module's run in
parts), `--fork` runs each mutant's tests by `pytest.main` in a forked child of a process that imported pytest and
the heavy modules once (`--preload`), instead of one cosmic-ray exec subprocess each, and `--equivalent FILE` marks
the survivors a reader found equivalent, with the reason, and scores the others (`score_non_equivalent`).
`--select-by-coverage` (with `--fork`) maps once, with coverage.py, which tests run each function's body, runs
each mutant against only those, and reruns each survivor against every test, so a survivor is one that every test
missed and a kill is a failing test: same verdicts, for modules whose tests are slow (models, sandboxes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = "python -m pytest -x -q -p no:cacheprovider -o addopts="

# module -> (paths to mutate, definitions to mutate (None: all), test files before, test files added after)
TARGETS: dict[str, dict] = {
    "estimators": {
        "paths": ["experiments/trainers/estimators.py"],
        "definitions": None,
        "before": ["tests/trainers/test_estimators.py"],
        # PKPO's estimators, the terms' exact cases and the edges live beside the trainers' tests (fast, no model).
        "after": [
            "tests/trainers/test_estimator_properties.py",
            "tests/trainers/test_passk_objective.py",
            "tests/trainers/test_trainer_terms.py",
            "tests/trainers/test_estimator_edges.py",
        ],
    },
    "evaluation": {
        "paths": ["experiments/evaluation/stats.py", "experiments/evaluation/evaluate.py"],
        # The statistics and the scoring of evaluate_model; generation and the callback have their own tests.
        "definitions": [
            "pass_at_k",
            "pass_at_k_per_problem",
            "bootstrap_ci",
            "hierarchical_bootstrap",
            "bootstrap_p_value",
            "holm",
            "from_values",
            "mean_reward",
            "first_sample_passed",
            "_estimate",
            "first_sample_pass_at_1",
            "metrics",
            "summarize",
            "evaluate_model",
        ],
        "before": ["tests/evaluation/test_evaluation.py", "tests/evaluation/test_evaluation_model.py"],
        "after": [
            "tests/evaluation/test_statistics_meaning.py",
            "tests/trainers/test_estimator_properties.py",
        ],
    },
    "report": {
        "paths": ["experiments/report/analysis.py"],
        "definitions": [
            "_headline_k",
            "_first_passed",
            "_per_problem",
            "_matrix",
            "_interval",
            "_estimate",
            "_delta_ci",
            "_comparison",
            "build_report",
        ],
        "before": ["tests/report/test_report.py"],
        "after": ["tests/evaluation/test_statistics_meaning.py"],
    },
    # analysis.py's definitions that "report" leaves out: the curves, crossovers, coverage, verdict and setup.
    "report_rest": {
        "paths": ["experiments/report/analysis.py"],
        "definitions": [
            "metric_list",
            "_round",
            "_n_min",
            "_curve",
            "_from_start",
            "_crossover",
            "_distinct",
            "_coverage",
            "_verdict",
            "_shared",
            "_task",
            "_setup",
            "each",
            "cfg",
            "evals",
            "get",
            "_run_row",
            "_mean",
            "_series",
            "_series_ci",
            "_curves",
            "_matching_steps",
            "_coincidences",
            None,  # module level: the constants
        ],
        "before": ["tests/report/test_report.py"],
        "after": ["tests/evaluation/test_statistics_meaning.py"],
    },
    # evaluate.py alone (its statistics, stats.py, are the "stats" target): generation, scoring, the callback.
    "evaluate": {
        "paths": ["experiments/evaluation/evaluate.py"],
        "definitions": None,
        "before": [
            "tests/evaluation/test_evaluation.py",
            "tests/evaluation/test_evaluation_model.py",
            "tests/evaluation/test_evaluation_callback.py",
            "tests/evaluation/test_eval_combinations.py",
            "tests/evaluation/test_metric_module.py",
        ],
        "after": ["tests/evaluation/test_statistics_meaning.py"],
    },
    "config": {
        "paths": ["experiments/run/validation.py"],
        "definitions": ["validate", "_generation_batch", "_world_size", "apply_budget"],
        "before": ["tests/run/test_config.py"],
        "after": ["tests/run/test_validation_boundaries.py"],
    },
    "rewards": {
        "paths": ["rewards"],
        "definitions": None,
        "before": [
            "tests/rewards/test_rewards.py",
            "tests/rewards/test_extraction.py",
            "tests/rewards/test_rewards_mapping.py",
        ],
        "after": ["tests/rewards/test_rewards_workers.py"],
    },
    # Issue 32's modules: every mutant (--sample 0), each against its fast, sandbox-free tests (the stdio rewards
    # start one small sandbox per run); the slower end-to-end files that also cover them are not run per mutant.
    "formats": {
        "paths": ["sandbox/formats.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/sandbox/test_formats_shapes.py"],
    },
    "verdicts": {
        "paths": ["sandbox/verdicts.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/sandbox/test_verdicts_edges.py"],
    },
    "extraction": {
        "paths": ["rewards/extraction.py"],
        "definitions": None,
        "before": ["tests/rewards/test_extraction.py"],
        "after": ["tests/rewards/test_extraction_chat.py"],
    },
    "code_rewards": {
        "paths": ["rewards/code_rewards.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/rewards/test_rewards_columns.py"],
    },
    "budget": {
        "paths": ["experiments/run/budget.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/run/test_budget_edges.py"],
    },
    "stats": {
        "paths": ["experiments/evaluation/stats.py"],
        "definitions": None,
        "before": [],
        "after": [
            "tests/evaluation/test_evaluation.py",  # the estimators' and intervals' exact cases, first (1 s)
            "tests/evaluation/test_eval_combinations.py",
            "tests/evaluation/test_statistics_meaning.py",
        ],
    },
    "data": {
        "paths": ["experiments/inputs/data.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/inputs/test_data.py", "tests/inputs/test_split_determinism.py"],
    },
    "gguf_parts": {
        "paths": ["experiments/inputs/gguf_parts.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/inputs/test_gguf_parts.py"],
        # The real models' conversion (3-4 min, marked slow) is left to CI; the rest cover every parsing rule.
        "pytest_args": ["-m", "not slow"],
    },
    # The rewards package's own code besides code_rewards and extraction: the health metrics and the re-exports.
    "reward_metrics": {
        "paths": ["rewards/metrics.py", "rewards/__init__.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/rewards/test_reward_metrics.py"],
    },
    "argv_validation": {
        "paths": ["experiments/run/argv.py", "experiments/run/validation.py", "experiments/run/config.py"],
        "definitions": None,
        "before": [],
        "after": [
            "tests/run/test_config.py",
            "tests/run/test_config_roundtrip.py",
            "tests/run/test_validation_boundaries.py",
        ],
    },
    "trainer_terms": {
        "paths": [
            "experiments/trainers/reinforce.py",
            "experiments/trainers/ppo.py",
            "experiments/trainers/pkpo.py",
            "experiments/trainers/sampling.py",
            "experiments/trainers/seams.py",
        ],
        # The methods' math on GRPOTrainer's seams: rollout advantages, losses, log-prob temperature, masks.
        # Construction, checkpointing and the critic's saving have their own (slow) tests.
        "definitions": [
            "_generate_and_score_completions",
            "_compute_loss",
            "_critic_values",
            "critic_warmup_steps",
            "critic_lr",
            "_in_critic_warmup",
            "check_logprob_temperature",
            "__call__",
            "per_token_logps",
            "_set_advantages",
            "_completion_logps",
            "_policy_logps",
            "_loss_mask",
            "_logprob_temperature",
        ],
        "before": [],
        "after": ["tests/trainers/test_trainer_terms.py"],
    },
    # run.json's content: each figure, the rate after a resume, the fallbacks (a stand-in trainer, no model).
    "record": {
        "paths": ["experiments/run/record.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/run/test_record.py"],
    },
    # train.py's helpers around a run: the checkpoint resumed from, the budget checks, saves and Ctrl-C at the
    # end of a generation batch, the resume command, the model's sampling values, the log filters. `_run` itself
    # (models, trainers) is left to the end-to-end tests.
    "resume": {
        "paths": ["experiments/run/train.py"],
        "definitions": [
            "apply_model_sampling",
            "_checkpoint_step",
            "last_checkpoint",
            "find_resume_checkpoint",
            "__init__",
            "filter",
            "_at_generation_end",
            "save_at_generation_ends",
            "on_step_end",
            "stop_at_step_end_on_ctrl_c",
            "on_sigint",
            "_saved_step",
            "finished_run",
            "_check_resume_point",
            "emit",
            "open",
            "close",
            "interrupted_message",
        ],
        "before": [],
        "after": ["tests/run/test_resume_points.py"],
    },
    # argv.py's definitions changed since argv_validation's run (2026-12-05: a flag's value is optional), run
    # apart so that argv_validation's figures stay those of the code they were measured on.
    "argv_flags": {
        "paths": ["experiments/run/argv.py"],
        "definitions": ["_value_follows", "cli_value", "bool_flag", "drop_flags", "parse_config"],
        "before": [],
        "after": [
            "tests/run/test_config.py",
            "tests/run/test_config_roundtrip.py",
            "tests/run/test_validation_boundaries.py",
            "tests/run/test_resume_points.py",
            "tests/run/test_cli_edges.py",
        ],
    },
    # The command line: `passk eval RUN_DIR` reading a run back, train/compare/demo's argument handling, --check
    # and the help. The end-to-end runs (marked slow) are left to CI; the rest stop before training.
    "cli": {
        "paths": ["experiments/run/cli.py"],
        "definitions": None,
        "before": [],
        "after": [
            "tests/run/test_config_roundtrip.py",
            "tests/run/test_cli.py",
            "tests/run/test_cli_edges.py",
        ],
        "pytest_args": ["-m", "not slow"],
    },
    "sandbox_verdict": {
        "paths": ["sandbox/_zygote/judge.py", "sandbox/_zygote/__init__.py"],
        # The verdict path: reply frames, the rpc and exec judges, and the mapping to a status and flags.
        "definitions": [
            "_frame",
            "receive",
            "wait_exit",
            "judge_rpc",
            "load_failure",
            "judge_exec",
            "run_task",
        ],
        "before": ["tests/sandbox/test_sandbox.py"],
        "after": ["tests/sandbox/test_sandbox_verdicts.py"],
    },
    # The stdin/stdout judge: compile in the case server, stream each case's input, read its output, the case's
    # verdict. Its tests start sandboxes too, so every test file runs for every mutant.
    "stdio_judge": {
        "paths": ["sandbox/_zygote/stdio_judge.py"],
        "definitions": None,
        "before": [],
        "after": ["tests/sandbox/test_sandbox_stdio.py", "tests/sandbox/test_sandbox_stdio_judge.py"],
    },
    # The trainers' configs and the METHODS table: each config's checks and the values it sets for GRPOTrainer,
    # PPO's parallelism check, the table's rows, build_config and method_hparams (trainer_terms has the math).
    "trainer_config": {
        "paths": [
            "experiments/trainers/__init__.py",
            "experiments/trainers/ppo.py",
            "experiments/trainers/reinforce.py",
            "experiments/trainers/pkpo.py",
        ],
        # None: module level (the table, the constants); a class name: its fields' defaults.
        "definitions": [
            None,
            "MethodSpec",
            "method_hparams",
            "config_fields",
            "build_config",
            "PPOConfig",
            "ReinforceConfig",
            "PKPOConfig",
            "__post_init__",
            "_unsupported_parallelism",
            "_unsupported_message",
        ],
        "before": [],
        "after": [
            "tests/trainers/test_trainer_configs.py",
            "tests/trainers/test_trainer_terms.py",
            "tests/trainers/test_methods_variants.py",
            "tests/run/test_config.py",
        ],
    },
    # train.py around `_run`: main's exit codes, the libraries' output during a run, the evaluation's dtype and
    # device, LoRA, the thread pin, the process group's end.
    "train_setup": {
        "paths": ["experiments/run/train.py"],
        "definitions": [
            None,
            "_dtype",
            "_device",
            "load_for_eval",
            "lora_config",
            "_is_sharded",
            "setup_torch",
            "library_output_to_run_log",
            "end_process_group",
            "run",
            "main",
            "SaveAtGenerationEnd",  # the callbacks' class-level lines, which `resume` leaves out
            "StopAtGenerationEnd",
        ],
        "before": [],
        "after": [
            "tests/run/test_train_setup.py",
            "tests/run/test_resume_points.py",
            "tests/trainers/test_trainers_ddp.py",
        ],
        "pytest_args": ["-m", "not slow"],
    },
    # train.py's `_run`, the order of a run (evaluations, training, resumes, run.json), on the tiny model: two
    # grpo steps a run, a few seconds each.
    "run_order": {
        "paths": ["experiments/run/train.py"],
        "definitions": ["_run"],
        "before": [],
        "after": ["tests/run/test_run_order.py"],
    },
    # The trainers' construction and checkpoints: PPO's critic (built, stepped, saved, restored), the rollout saved
    # inside a checkpoint, what GRPOTrainer is told while sampling, the log-prob temperature's LM heads. Their
    # tests build trainers on the tiny model.
    "trainer_build": {
        "paths": [
            "experiments/trainers/ppo.py",
            "experiments/trainers/reinforce.py",
            "experiments/trainers/pkpo.py",
            "experiments/trainers/seams.py",
        ],
        "definitions": [
            "__init__",
            "PPOTrainer",
            "ReinforceTrainer",
            "PKPOTrainer",
            "GRPOSeamsMixin",
            "create_scheduler",
            "training_step",
            "mean_over_processes",
            "on_pre_optimizer_step",
            "on_optimizer_step",
            "save_model",
            "_save_checkpoint",
            "_load_optimizer_and_scheduler",
            "read_critic_weights",
            "critic_lora_config",
            "zero_new_value_head",
            "_rollout_looks_on_policy",
            "_wants_sampled_logps",
            "_mode",
            "_calculate_rewards",
            "_prompt_and_completion",
            "_inside_rollout",
            "_trl_computes_old_logps",
            "_can_record",
            "_generate_single_turn",
            "_sampled_logps",
            "_apply_logprob_temperature",
        ],
        "before": [],
        "after": [
            "tests/trainers/test_trainers.py",
            "tests/trainers/test_ppo_memory.py",
            "tests/trainers/test_trainer_terms.py",
            "tests/trainers/test_methods_variants.py",
        ],
        "pytest_args": ["-m", "not slow"],
    },
    # validation.py's rule for a run's length, changed (max_steps 0 refused) after argv_validation's run: its own
    # target, so that argv_validation's figures stay those of the code they measured.
    "run_length": {
        "paths": ["experiments/run/validation.py"],
        "definitions": ["_check_run_length"],
        "before": [],
        "after": ["tests/run/test_validation_boundaries.py", "tests/run/test_config.py"],
    },
    # Models with no hub: the cache's build-then-rename, the tiny build, the GGUF conversions (a tiny GGUF in
    # test_gguf_parts), the resolver, the hub checks, the loader and the model's sampling values.
    "models": {
        "paths": ["experiments/inputs/models.py"],
        "definitions": None,
        "before": [],
        "after": [
            "tests/inputs/test_models.py",
            "tests/inputs/test_models_edges.py",
            "tests/inputs/test_gguf_parts.py",
        ],
        # SmolLM2's and the real models' conversions (slow) are left to CI.
        "pytest_args": ["-m", "not slow"],
    },
}
SKIP_OPERATORS = ("BitOr", "BitAnd", "BitXor", "LShift", "RShift", "_Pow", "_Mod", "Binary_Pow")


def spec_key(m) -> str:
    return (
        f"{Path(m.module_path).as_posix()}:{m.start_pos[0]}:{m.start_pos[1]}:{m.operator_name}:{m.occurrence}"
    )


def export_tree(ref: str, dest: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def add_files(src: Path, dest: Path, files: list[str]) -> None:
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((src / f).read_bytes())


OUTSIDE_TESTS = "(outside tests)"  # coverage's context for import, collection and anything between tests


def coverage_map(
    tree: Path, tests: list[str], paths: list[str], timeout: float
) -> dict[str, dict[int, set[str]]]:
    """Which tests execute each line of the mutated files: the tests are run once on the unmutated tree, in a
    forked child, under coverage.py with one dynamic context per test (its setup, call and teardown). The
    baseline must pass: a failing test would kill every mutant it is given."""
    import coverage

    data_file = tree / ".mutation" / "coverage.sqlite"
    data_file.parent.mkdir(parents=True, exist_ok=True)
    data_file.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            os.chdir(tree)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            cov = coverage.Coverage(data_file=str(data_file), include=[str(tree / p) + "*" for p in paths])
            cov.start()
            cov.switch_context(OUTSIDE_TESTS)

            class _PerTest:
                @pytest.hookimpl(hookwrapper=True)
                def pytest_runtest_protocol(self, item, nextitem):
                    cov.switch_context(item.nodeid)
                    yield
                    cov.switch_context(OUTSIDE_TESTS)

            args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--assert=plain", *tests]
            rc = int(pytest.main(args, plugins=[_PerTest()]))
            cov.stop()
            cov.save()
        finally:
            os._exit(rc)
    deadline = time.time() + timeout
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.time() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise SystemExit(
                f"the coverage run of {' '.join(tests)} took over {timeout:.0f} s: raise --timeout"
            )
        time.sleep(0.05)
    exit_code = os.waitstatus_to_exitcode(done[1])
    if exit_code != 0:
        raise SystemExit(
            f"the unmutated tree fails {' '.join(tests)} (pytest exit {exit_code}): "
            "fix the tests first, or every mutant they are given counts as killed"
        )
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    if not data.measured_files():
        raise SystemExit(
            f"the coverage run of {' '.join(tests)} failed or measured nothing: run them by hand"
        )
    return {
        Path(f).relative_to(tree).as_posix(): {
            line: set(ctx) for line, ctx in data.contexts_by_lineno(f).items()
        }
        for f in data.measured_files()
    }


def selected_tests(m, lines: dict[int, set[str]], source: str) -> set[str] | None:
    """The tests that can see mutant ``m``: those that ran the body of the innermost function around it. A
    change inside a function body acts only when that body runs, so the others cannot fail on it. None (run
    them all) where the change is outside any body (module or class level, a default, a decorator), or where
    the body runs outside a test (at import, in a fixture between tests) or in no test coverage can see (a
    subprocess). A survivor of a selected run is only provisional: rerun it with every test."""
    import ast

    line = m.start_pos[0]
    body_range = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lo, hi = node.body[0].lineno, node.end_lineno
            if lo <= line <= hi and (body_range is None or lo >= body_range[0]):
                body_range = (lo, hi)
    if body_range is None:
        return None
    contexts = set().union(*(lines.get(n, set()) for n in range(body_range[0], body_range[1] + 1)))
    if not contexts or OUTSIDE_TESTS in contexts:
        return None
    return contexts


def _forked_run(item, tree: Path, tests: list[str], timeout: float, select: set[str] | None = None):
    """One mutant, as cosmic-ray's worker runs it (mutate the file, run the tests, restore it), but with the
    tests run by ``pytest.main`` in a forked child of this process, which has imported pytest, hypothesis and
    the heavy third-party modules once: the child imports the mutated module (and the package) afresh from
    disk, and no bytecode is written, so no stale .pyc is read. Same verdicts, a fraction of the start-up."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import use_mutation
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    m = item.mutations[0]
    operator = cosmic_ray.plugins.get_operator(m.operator_name)(**(getattr(m, "operator_args", None) or {}))
    try:
        with use_mutation(tree / m.module_path, operator, m.occurrence) as (original, mutated):
            return _forked_test(m, original, mutated, tree, tests, timeout, select)
    except Exception as e:  # an operator that cannot mutate this node (a cosmic-ray bug)
        return WorkResult(
            output=repr(e), test_outcome=TestOutcome.INCOMPETENT, worker_outcome=WorkerOutcome.EXCEPTION
        )


def _forked_test(
    m, original: str, mutated: str | None, tree: Path, tests: list[str], timeout: float, select=None
):
    from cosmic_ray.mutating import _make_diff
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    if mutated is None:
        return WorkResult(worker_outcome=WorkerOutcome.NO_TEST)
    first_failure = tree / ".mutation" / "first_failure"
    first_failure.unlink(missing_ok=True)
    # A process the tests start afresh (the sandbox's zygotes) writes bytecode; the next mutant of the same size
    # in the same second would otherwise be read from it.
    shutil.rmtree((tree / m.module_path).parent / "__pycache__", ignore_errors=True)
    pid = os.fork()
    if pid == 0:  # the child: run the tests, report by exit status and the first failing test's id
        rc = 1
        try:
            os.chdir(tree)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            class _FirstFailure:
                def pytest_runtest_logreport(self, report) -> None:
                    if report.failed and not first_failure.exists():
                        first_failure.write_text(report.nodeid)

                def pytest_collection_modifyitems(self, config, items) -> None:
                    # Only the selected tests; all of them if any is not found (a nodeid that changed).
                    keep = [i for i in items if select is not None and i.nodeid in select]
                    if select is not None and len(keep) == len(select):
                        config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in select])
                        items[:] = keep

            args = ["-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--assert=plain", *tests]
            rc = int(pytest.main(args, plugins=[_FirstFailure()]))
        finally:
            os._exit(rc)
    deadline = time.time() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.time() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return WorkResult(worker_outcome=WorkerOutcome.ABNORMAL, output="timeout")
        time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    diff = "\n".join(_make_diff(original, mutated, Path(m.module_path)))
    outcome = TestOutcome.SURVIVED if rc == 0 else TestOutcome.KILLED
    killer = first_failure.read_text() if first_failure.exists() else ""
    return WorkResult(
        output=f"exit {rc}" + (f"; killed by {killer}" if killer else ""),
        diff=diff,
        test_outcome=outcome,
        worker_outcome=WorkerOutcome.NORMAL,
    )


def run_module(
    name: str,
    target: dict,
    tree: Path,
    tests: list[str],
    *,
    sample: int,
    seed: int,
    only: set[str] | None,
    timeout: float,
    part: tuple[int, int] = (1, 1),
    equivalent: dict[str, str] | None = None,
    fork: bool = False,
    select_by_coverage: bool = False,
) -> dict:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    work = tree / ".mutation" / name
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for path in target["paths"]:
        cfg = work / f"{Path(path).name}.toml"
        cfg.write_text(
            "[cosmic-ray]\n"
            f'module-path = "{path}"\n'
            f"timeout = {timeout}\n"
            "excluded-modules = []\n"
            f'test-command = "{PYTEST} {shlex.join(tests)}"\n'
            '[cosmic-ray.distributor]\nname = "local"\n'
        )
        db_path = work / f"{Path(path).name}.sqlite"
        subprocess.run(["cosmic-ray", "init", str(cfg), str(db_path)], cwd=tree, check=True)
        with use_db(str(db_path), WorkDB.Mode.open) as db:
            items = list(db.work_items)
            candidates = []
            for item in items:
                m = item.mutations[0]
                if any(s in m.operator_name for s in SKIP_OPERATORS):
                    continue
                if target["definitions"] is not None and m.definition_name not in target["definitions"]:
                    continue
                candidates.append((spec_key(m), item))
            candidates.sort(key=lambda c: c[0])
            results[path] = {"items": items, "candidates": candidates, "db": db_path, "cfg": cfg}
    # One draw over all the module's files, so that a package (rewards/) gets `sample` mutants in all.
    pool = [c for r in results.values() for c in r["candidates"]]
    if only is not None:
        chosen = {k for k, _ in pool if k in only}
    elif sample <= 0:  # every candidate
        chosen = {k for k, _ in pool}
    else:
        chosen = {k for k, _ in random.Random(seed).sample(pool, min(sample, len(pool)))}
    k, n = part  # part k of n: every n-th of the chosen keys in sorted order, from the k-th
    chosen = set(sorted(chosen)[k - 1 :: n])
    survivors, killed, n_run, incompetent = [], 0, 0, []
    timed_out: list[str] = []  # killed by hanging past --timeout: listed, so a reader can check each hang
    killed_by: dict[str, str] = {}  # --fork: each killed mutant's first failing test
    t0 = time.time()
    lines, sources, n_selected, n_confirmed = None, {}, 0, 0
    if select_by_coverage and chosen:
        files = [p for p, r in results.items() if any(k in chosen for k, _ in r["candidates"])]
        lines = coverage_map(tree, tests, files, timeout=max(timeout, 1800.0))
        print(f"[{name}] coverage of {' '.join(files)} by test: mapped", flush=True)
    for path, r in results.items():
        keep = {item.job_id for k, item in r["candidates"] if k in chosen}
        with use_db(str(r["db"]), WorkDB.Mode.open) as db:
            for item in r["items"]:
                if item.job_id not in keep:
                    db.set_result(
                        item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not sampled")
                    )
        if not keep:
            continue
        print(f"[{name}] {path}: {len(keep)} mutants with {' '.join(tests)}", flush=True)
        if fork:
            with use_db(str(r["db"]), WorkDB.Mode.open) as db:
                done, start = 0, time.time()
                for item in r["items"]:
                    if item.job_id in keep:
                        select = None
                        if lines is not None:
                            source = sources.setdefault(path, (tree / path).read_text())
                            select = selected_tests(item.mutations[0], lines.get(path, {}), source)
                        result = _forked_run(item, tree, tests, timeout, select)
                        if select is not None:
                            n_selected += 1
                            if result.test_outcome == TestOutcome.SURVIVED:  # provisional: every test now
                                n_confirmed += 1
                                result = _forked_run(item, tree, tests, timeout)
                        db.set_result(item.job_id, result)
                        done += 1
                        if done % 25 == 0 or done == len(keep):
                            rate = (time.time() - start) / done
                            eta = rate * (len(keep) - done) / 60
                            print(
                                f"[{name}] {done}/{len(keep)} ({rate:.1f} s each, ~{eta:.0f} min left)",
                                flush=True,
                            )
        else:
            subprocess.run(["cosmic-ray", "exec", str(r["cfg"]), str(r["db"])], cwd=tree, check=True)
        with use_db(str(r["db"]), WorkDB.Mode.open) as db:
            for item, result in db.completed_work_items:
                if item.job_id not in keep:
                    continue
                m = item.mutations[0]
                if result.worker_outcome in (WorkerOutcome.EXCEPTION, WorkerOutcome.NO_TEST):  # not applied
                    incompetent.append(spec_key(m))
                    continue
                n_run += 1
                if result.worker_outcome == WorkerOutcome.ABNORMAL:  # the tests hung: cosmic-ray's timeout
                    timed_out.append(spec_key(m))
                    killed += 1
                elif (
                    result.test_outcome == TestOutcome.SURVIVED
                    and result.worker_outcome == WorkerOutcome.NORMAL
                ):
                    survivor = {
                        "key": spec_key(m),
                        "definition": m.definition_name,
                        "operator": m.operator_name,
                        "diff": result.diff,
                    }
                    if equivalent and spec_key(m) in equivalent:
                        survivor["equivalent"] = equivalent[spec_key(m)]
                    survivors.append(survivor)
                else:
                    killed += 1
                    if "; killed by " in (result.output or ""):
                        killed_by[spec_key(m)] = result.output.split("; killed by ", 1)[1]
    n_equivalent = sum(1 for s in survivors if "equivalent" in s)
    return {
        "part": f"{k}/{n}",
        "sampled": n_run,
        "killed": killed,
        "equivalent": n_equivalent,
        "incompetent": incompetent,  # mutants cosmic-ray could not apply: not run, not counted  # survivors no test can tell from the original (never counted as killed)
        "score_non_equivalent": killed / (n_run - n_equivalent) if n_run > n_equivalent else None,
        "timeouts": len(timed_out),
        "timed_out": sorted(timed_out),
        "survived": len(survivors),
        "score": killed / n_run if n_run else None,
        "candidates": len(pool),
        "tests": tests,
        "definitions": target["definitions"],
        "seconds": round(time.time() - t0, 1),
        # --select-by-coverage: mutants first run against only the tests that ran their function's body, and
        # of those, the survivors rerun against every test (so each survivor here survived every test)
        "selected_by_coverage": n_selected,
        "survivors_rerun_with_every_test": n_confirmed,
        "survivors": sorted(survivors, key=lambda s: s["key"]),
        "killed_by": dict(sorted(killed_by.items())),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", default="HEAD", help="the commit whose source (and tests) are mutated")
    p.add_argument(
        "--tests",
        choices=("before", "after"),
        default="after",
        help="before: main's test files for each module; after: plus this branch's",
    )
    p.add_argument("--modules", nargs="*", default=list(TARGETS), choices=list(TARGETS))
    p.add_argument(
        "--definitions", nargs="*", help="mutate only these functions (overrides the module's list)"
    )
    p.add_argument("--sample", type=int, default=12, help="mutants drawn per module (0: every candidate)")
    p.add_argument("--part", default="1/1", help="K/N: run only every N-th chosen mutant from the K-th")
    p.add_argument(
        "--equivalent",
        type=Path,
        help='JSON {"<module>": {"<mutant key>": "why it is equivalent"}}: such survivors are marked, not killed',
    )
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's test run")
    p.add_argument(
        "--only-survivors-of", type=Path, help="re-run only the survivors listed in this result file"
    )
    p.add_argument(
        "--tests-from",
        type=Path,
        default=ROOT,
        help="where the added test files are read (default: this checkout)",
    )
    p.add_argument(
        "--fork",
        action="store_true",
        help="run each mutant's tests in a forked child (pytest.main) instead of a cosmic-ray exec subprocess",
    )
    p.add_argument(
        "--select-by-coverage",
        action="store_true",
        help="with --fork: run each mutant against only the tests that execute its function (mapped once by "
        "coverage.py), then rerun its survivors against every test",
    )
    p.add_argument(
        "--preload",
        nargs="*",
        default=["pytest", "hypothesis", "numpy"],
        help="with --fork: modules imported once before forking (never the ones mutated)",
    )
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.select_by_coverage and not args.fork:
        p.error("--select-by-coverage needs --fork (the selection is made in the forked children)")

    previous = json.loads(args.only_survivors_of.read_text()) if args.only_survivors_of else None
    equivalent = json.loads(args.equivalent.read_text()) if args.equivalent else {}
    part = tuple(int(x) for x in args.part.split("/"))
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.ref], capture_output=True, text=True)
    out: dict = {
        "ref": sha.stdout.strip() or args.ref,
        "tests": args.tests,
        "sample": args.sample,
        "seed": args.seed,
        "modules": {},
    }
    with tempfile.TemporaryDirectory(prefix="passk-mutation-") as tmp:
        tree = Path(tmp)
        export_tree(args.ref, tree)
        env_path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = str(tree) + (os.pathsep + env_path if env_path else "")
        if args.fork:
            import importlib

            sys.dont_write_bytecode = True  # the forked children read the mutated source, never a cached .pyc
            sys.path.insert(0, str(tree))
            for module in args.preload:
                importlib.import_module(module)
        for name in args.modules:
            target = dict(TARGETS[name])
            if args.definitions:
                target["definitions"] = list(args.definitions)
            tests = list(target["before"])
            if args.tests == "after":
                added = [f for f in target["after"] if (args.tests_from / f).is_file()]
                add_files(args.tests_from, tree, added)
                tests += added
            tests = [*target.get("pytest_args", []), *tests]
            only = None
            if previous is not None:
                only = {s["key"] for s in previous["modules"].get(name, {}).get("survivors", [])}
            res = run_module(
                name,
                target,
                tree,
                tests,
                sample=args.sample,
                seed=args.seed,
                only=only,
                timeout=args.timeout,
                part=part,
                equivalent=equivalent.get(name, {}),
                fork=args.fork,
                select_by_coverage=args.select_by_coverage,
            )
            if previous is not None and name in previous["modules"]:
                before = previous["modules"][name]
                res["killed_earlier"] = before["killed"]
                res["sampled"] = before["sampled"]
                res["killed"] += before["killed"]
                res["score"] = res["killed"] / res["sampled"] if res["sampled"] else None
            out["modules"][name] = res
            print(
                f"[{name}] killed {res['killed']}/{res['sampled']} ({res['survived']} survived)", flush=True
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
