"""The model card in a run folder (`output_dir/README.md`): TRL's, naming the model the run started from.

TRL's trainers write a card from their template at every checkpoint save. The template links the base model as
`https://huggingface.co/<base_model>` and its quick start loads `model="<hub_model_id>"`; TRL fills in the base
model only when the model it trained was loaded by hub id. A passk run starts from a local folder (every passk
model name, a warm start, a hub model the cache stands in for), so TRL's card links to `huggingface.co/None` and its
quick start loads the model "None". `install_model_card(trainer, model, warm_start_steps)` keeps TRL's card and
rewrites those two places: the base model as the run's `model` names it (a hub link only where it is a hub id)
and, without a `hub_model_id`, the run folder as the model to load.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["base_model_words", "install_model_card", "passk_card_text"]

# passk's own model names and the hub models their weights come from.
_SOURCES: dict[str, tuple[str, str]] = {
    "smollm2": ("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct (Q4_1 GGUF)"),
}

# TRL 1.16's lm_model_card.md: "This model is a fine-tuned version of [{{ base_model }}](https://huggingface.co/
# {{ base_model }})", and the quick start's pipeline(..., model="{{ hub_model_id }}", ...).
_BASE_SENTENCE = re.compile(
    r"This model is a fine-tuned version of \[[^\]]*\]\(https://huggingface\.co/[^)]*\)"
)
_QUICK_START_MODEL = 'model="None"'


def _link(hub_id: str) -> str:
    return f"[{hub_id}](https://huggingface.co/{hub_id})"


def base_model_words(model: str, warm_start_steps: int = 0) -> str:
    """The run's starting model in the card's words: a config's `model` (passk's name, a local folder or a hub
    id) and its warm start, if any. A hub link only for a hub id; never 'None'."""
    from experiments.inputs.gguf_parts import PARTED_MODELS
    from experiments.inputs.models import OFFLINE_STAND_INS

    parted = {name: hub for hub, name in OFFLINE_STAND_INS.items()}
    if model in PARTED_MODELS:
        words = f"passk's `{model}`, {PARTED_MODELS[model].title}"
        if model in parted:
            words += f" of {_link(parted[model])}"
    elif model in _SOURCES:
        hub, title = _SOURCES[model]
        words = f"passk's `{model}`, {title} of {_link(hub)}"
    elif model == "task":
        words = "passk's `task` model (the learnable task's randomly initialised Qwen2)"
    elif model == "tiny" or model.startswith("tiny:"):
        words = f"passk's `{model}` model (a randomly initialised Qwen2)"
    elif Path(model).expanduser().is_dir() or model.startswith(("/", ".", "~")):
        words = f"the local model `{model}`"
    else:  # resolve_model took it as a hub id
        words = _link(model)
    if warm_start_steps:
        words += f", after {warm_start_steps} steps of passk's supervised warm start"
    return words


def passk_card_text(text: str, base_words: str, load_as: str | None) -> str:
    """TRL's card `text` with the base model sentence naming `base_words` and, where `load_as` is given (no
    hub_model_id), the quick start loading `load_as` instead of "None"."""
    text = _BASE_SENTENCE.sub(lambda _: f"This model is a fine-tuned version of {base_words}", text, count=1)
    if load_as is not None:
        text = text.replace(_QUICK_START_MODEL, f"model={json.dumps(load_as)}")
    return text


def install_model_card(trainer: Any, model: str, warm_start_steps: int = 0) -> None:
    """Make `trainer.create_model_card` (which TRL calls at each checkpoint save) write TRL's card with the
    starting model named by `model` (and its warm start) and, without a hub_model_id, the run folder to load."""
    trl_card = trainer.create_model_card
    base_words = base_model_words(model, warm_start_steps)

    def create_model_card(*args: Any, **kwargs: Any) -> None:
        trl_card(*args, **kwargs)
        if not trainer.is_world_process_zero():
            return
        card = Path(trainer.args.output_dir) / "README.md"
        if card.is_file():
            load_as = None if getattr(trainer, "hub_model_id", None) else str(trainer.args.output_dir)
            card.write_text(passk_card_text(card.read_text(), base_words, load_as))

    trainer.create_model_card = create_model_card
