"""What a run takes in: the problems (`data`), the model (`models`, `gguf_parts`) and the rewards a config names
(`reward_funcs`). See `experiments/__init__.py` for the map of the package."""
