"""passk experiments: everything that turns the sandbox and the rewards into RL runs on code LLMs.

One job per module, lowest layer first (tests/test_layering.py checks that no module reaches one above it):

- `experiments.errors`: the one-line errors a user can fix (`ConfigError`, `DataError`, `ModelError`, `CliError`).
- `experiments.tasks`: the learnable synthetic task's data (problems, rows, the family split).
- `experiments.data`: HumanEval loading, the reproducible train/eval/held-out split, trainer rows, a config's rows.
- `experiments.models`: the tiny offline Qwen2, SmolLM2 from its wheel, `resolve_model`, the one model loader.
- `experiments.stats`: pass@k, bootstrap intervals, Holm, the result containers (numpy only).
- `experiments.evaluation`: generation and scoring for pass@k and greedy pass@1, the eval callback.
- `experiments.trainers`: `METHODS`, one trainer and config per method on GRPOTrainer's seams.
- `experiments.budget`, `experiments.config`: the sampling budget; the config's schema (`ExperimentArgs`).
- `experiments.argv`, `experiments.validation`: the YAML file and the command line read into the config; every
  check before a model loads.
- `experiments.warm_start`, `experiments.task_recipe`: the task's model and supervised warm start; its RL recipe
  and the measurement of learning.
- `experiments.reward_funcs`, `experiments.run_record`, `experiments.train`: the reward callables a config names;
  run.json; one run (and the accelerate entry point).
- `experiments.report`, `experiments.compare`, `experiments.cli`: reports; several methods on one budget; `passk`.

Nothing is imported here, so `import experiments` stays cheap (no torch, no transformers); import the
submodule you need.
"""
