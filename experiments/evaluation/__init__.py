"""Evaluating a policy: pass@k, bootstrap intervals and Holm (`stats`, numpy only, no torch), generation and
unit-test scoring and the training callback (`evaluate`), and the `evaluate` metric module (`metrics/pass_at_k`)."""
