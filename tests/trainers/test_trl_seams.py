"""TRL drift guard: the private GRPOTrainer seams our trainers override, pinned to TRL 1.16's signatures.

The behavioural trainer tests would also fail on a TRL upgrade; this file says in one line which seam moved.
"""

import inspect

import pytest
import trl
from trl import GRPOTrainer

# seam -> the leading parameters our overrides pass through (TRL may add trailing keyword parameters).
SEAMS = {
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["self", "inputs"],
    "_compute_loss": ["self", "model", "inputs"],
    "_get_per_token_logps_and_entropies": [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
    ],
    "_generate_single_turn": [
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ],
    "_save_checkpoint": ["self", "model", "trial"],
    "_load_optimizer_and_scheduler": ["self", "checkpoint"],
    "create_scheduler": ["self", "num_training_steps", "optimizer"],
}


def test_trl_is_the_pinned_minor():
    assert trl.__version__.startswith("1.16."), (
        f"passk's trainers are written against TRL 1.16, found {trl.__version__}"
    )


@pytest.mark.parametrize("name", sorted(SEAMS))
def test_grpo_seam_signature(name):
    params = list(inspect.signature(getattr(GRPOTrainer, name)).parameters)
    assert params[: len(SEAMS[name])] == SEAMS[name], f"GRPOTrainer.{name} changed: {params}"


def test_grpo_scales_its_loss_for_gradient_accumulation():
    # Our _compute_loss divides by current_gradient_accumulation_steps because GRPOTrainer declares this.
    assert GRPOTrainer.loss_is_scaled_for_ga is True
