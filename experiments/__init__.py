"""passk experiments: everything that turns the sandbox and the rewards into RL runs on code LLMs.

- `experiments.data`: HumanEval loading, the reproducible train/eval/held-out split, trainer rows.
- `experiments.models`: the tiny offline Qwen2, SmolLM2 from its wheel, and `resolve_model`.
- `experiments.tasks`, `experiments.trainers`, `experiments.evaluation`, `experiments.report`,
  `experiments.cli` / `experiments.train`: the learnable task, the trainers, pass@k, reports, the `passk` CLI.

Nothing is imported here, so `import experiments` stays cheap (no torch, no transformers); import the
submodule you need.
"""
