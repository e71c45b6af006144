"""passk experiments: everything that turns the sandbox and the rewards into RL runs on code LLMs.

One folder per purpose, lowest layer first (tests/test_layering.py checks that no module reaches one above it):

- `experiments/inputs/`: what a run takes in: HumanEval and other datasets and their split (`data`), the models
  by name (`models`, `gguf_parts` for the seed's model in package chunks), the reward callables a config names
  (`reward_funcs`).
- `experiments/learnable/`: the learnable synthetic task: its problems (`tasks`), model and supervised warm start
  (`warm_start`), RL recipe and the measurement of learning (`recipe`).
- `experiments/evaluation/`: pass@k and the statistics (`stats`, numpy only), generation and scoring and the eval
  callback (`evaluate`), the `evaluate` metric module (`metrics/pass_at_k`).
- `experiments/trainers/`: `METHODS`, one trainer and config per method on GRPOTrainer's seams.
- `experiments/report/`: the side-by-side report (runs, analysis, markdown, plots).
- `experiments/run/`: one run and many: the config's schema (`config`), the YAML file and the command line
  (`argv`), every check before a model loads (`validation`), the sampling budget (`budget`), the run (`train`),
  run.json (`record`), several methods on one budget (`compare`), console progress (`progress`), and `passk`
  (`cli`, `entry`).
- `experiments.errors`: the one-line errors a user can fix, shared by all of them.

`python -m experiments.train` is the run's command (`experiments.run.train`). Nothing is imported here, so
`import experiments` stays cheap (no torch, no transformers); import the submodule you need.
"""
