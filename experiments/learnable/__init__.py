"""The learnable synthetic task: problems and the family split (`tasks`), the task model and its supervised warm
start (`warm_start`), the RL recipe and the measurement of learning (`recipe`)."""
