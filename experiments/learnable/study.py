"""The protocol of the side-by-side study on the learnable task (issue 52, item 3): every method tuned alike and run
where its mechanism acts. `benchmarks/bench_learning.py` applies it; `benchmarks/side_by_side_preregistration.md`
says what a rerun with it can show.

- **Rows** (`STUDY_METHODS`): the twelve of `experiments.trainers.METHODS`, and two variants (`VARIANTS`) that are a
  METHODS row with one value changed: `grpo_seq`, GRPO with the paper's sequence-mean loss (TRL's
  `loss_type="grpo"`: each completion's token mean, then the mean over completions; Shao et al. 2024, eq. 3), where
  the `grpo` row keeps TRL's default `loss_type="dapo"` (one mean over the batch's tokens); and `pkpo_k1`, PKPO's
  trainer with k = 1, the control of `pkpo` that changes the objective alone (Walder & Karkhanis 2025: at k = 1 the
  transform is the plain pass@1 advantage, so the scaling, the loss and the trainer are the same as `pkpo`'s).
- **Off-policy where a method clips** (`OFF_POLICY_METHODS`, `off_policy_overrides`): the rows whose loss holds an
  importance ratio that a clip or a cap acts on take `steps_per_generation = OFF_POLICY_STEPS` optimizer steps per
  generation batch, each on its own mini-batch of it, once (one epoch, `num_iterations=1`): every step after a
  batch's first sees samples of an older policy, so the ratio leaves 1 and the clip acts. The papers do the same:
  GSPO splits each rollout into 4 mini-batches (Zheng et al. 2025, section 5.1), DAPO takes 16 gradient updates per
  rollout (Yu et al. 2025, section 4.1), MiniMax-M1's CISPO caps the importance weight of tokens sampled by an
  older policy (MiniMax 2025, arXiv:2506.13585), PPO takes several mini-batch steps per rollout (Schulman et al.
  2017; verl 4, OpenRLHF 8: ppo.py). 5 lies in that
  range and divides the study's 75 generation batches of 8 prompts (600 prompts = 15 rollouts of 40 prompts).
  The REINFORCE rows are on-policy by their papers (Williams 1992; Ahmadian et al. 2024 use no ratio) and keep one
  step per batch. Every row then samples the same fresh prompts in the same number of optimizer steps of the same
  size, so the view at equal fresh samples and the view at equal optimizer steps are the same runs.
- **One learning-rate search per method** (`LR_GRID`, `select_learning_rate`): the same three rates for every row,
  the same budget per cell (the study's fresh prompts, one tuning seed), scored on training-family problems that no
  run trains on (`experiments.learnable.tasks.tuning_rows`), never on the held-out families of the final numbers.
- **One log-prob temperature** per comparison (`check_one_logprob_temperature`): a comparison that mixes them
  refuses in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.report.analysis import CLIP_METRICS, clip_fraction

__all__ = [
    "CLIP_METRICS",
    "LR_GRID",
    "LR_SEARCH_SEED",
    "OFF_POLICY_METHODS",
    "OFF_POLICY_STEPS",
    "SELECT_ON",
    "STUDY_METHODS",
    "TUNING_PROBLEMS",
    "TUNING_SAMPLES",
    "VARIANTS",
    "StudyError",
    "base_method",
    "check_one_logprob_temperature",
    "clip_fraction",
    "method_overrides",
    "off_policy_overrides",
    "select_learning_rate",
]


class StudyError(ValueError):
    """A study set-up that would not compare its rows alike; the message is one line and names the fix."""


# name -> (the METHODS row it changes, the values it changes)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # GRPO's own loss (Shao et al. 2024, DeepSeekMath, eq. 3: 1/G sum_i 1/|o_i| sum_t), TRL's loss_type "grpo".
    "grpo_seq": ("grpo", {"loss_type": "grpo"}),
    # PKPO's control (Walder & Karkhanis 2025, arXiv:2505.15201): the same trainer and settings with k = 1.
    "pkpo_k1": ("pkpo", {"pkpo_k": 1}),
}


def _study_methods() -> tuple[str, ...]:
    from experiments.trainers import METHODS

    return (*METHODS, *VARIANTS)


STUDY_METHODS: tuple[str, ...] = _study_methods()

# The rows whose loss has an importance ratio that a clip or cap acts on: TRL's GRPOTrainer (token or sequence
# ratio, clipped; CISPO's capped weight), TRL's RLOOTrainer (the same clipped ratio), PKPO (GRPOTrainer's loss) and
# PPO (its clipped surrogate).
OFF_POLICY_METHODS: frozenset[str] = frozenset(
    {"ppo", "grpo", "grpo_seq", "rloo", "dr_grpo", "dapo", "gspo", "cispo", "pkpo", "pkpo_k1"}
)
OFF_POLICY_STEPS = 5

# The learning-rate search: the same grid for every row, half a decade apart around the task prototype's 3e-4.
LR_GRID: tuple[float, ...] = (1e-4, 3e-4, 1e-3)
LR_SEARCH_SEED = 100  # a training seed of its own: the study's seeds are 0, 1, 2
TUNING_PROBLEMS = 200
TUNING_SAMPLES = 8
# The criterion: pass@1 at the training temperature on the tuning problems, the expectation of the reward every
# row is trained on. `--select-on` may name another; the pre-registration fixes this one.
SELECT_ON = "pass@1"


def base_method(name: str) -> str:
    """The METHODS row a study row runs (a variant's base, else the name itself); unknown names refused."""
    from experiments.trainers import METHODS

    if name in VARIANTS:
        return VARIANTS[name][0]
    if name not in METHODS:
        raise StudyError(f"--methods: unknown row {name!r}; known: {', '.join(STUDY_METHODS)}")
    return name


def method_overrides(name: str) -> dict[str, Any]:
    """The config values a variant changes from its base row (none for a METHODS row)."""
    return dict(VARIANTS[name][1]) if name in VARIANTS else {}


def off_policy_overrides(name: str, steps: int = OFF_POLICY_STEPS) -> dict[str, Any]:
    """`steps_per_generation` and one epoch for a row that clips (`OFF_POLICY_METHODS`), nothing for the others;
    `steps` 1 runs every row on-policy (the earlier study's set-up)."""
    if steps < 1:
        raise StudyError(f"--off-policy-steps: must be >= 1, got {steps}")
    if name not in OFF_POLICY_METHODS:
        return {}
    return {"steps_per_generation": steps, "num_iterations": 1}


def check_one_logprob_temperature(temperatures: Mapping[str, Any]) -> float:
    """The one log-prob temperature of a comparison ({row: temperature}); refuses, in one line, rows that differ
    (TRL's trainers take log π at the sampling temperature, passk's at `logprob_temperature`)."""
    values = {row: t for row, t in temperatures.items() if t is not None}
    distinct = sorted({float(t) for t in values.values()})
    if len(distinct) > 1:
        by = ", ".join(f"{row} {float(t):g}" for row, t in values.items())
        raise StudyError(
            f"log-prob temperatures differ ({by}): set one logprob_temperature equal to the sampling temperature "
            "for every row, or compare the rows in separate reports"
        )
    return distinct[0] if distinct else float("nan")


def select_learning_rate(
    cells: Sequence[Mapping[str, Any]],
    method: str,
    select_on: str = SELECT_ON,
    grid: Sequence[float] = LR_GRID,
) -> dict[str, Any]:
    """The chosen rate of `method` from its search cells ({method, learning_rate, scores: {metric: value}}): the
    rate with the highest `select_on`, the smaller rate on a tie. Refuses a search whose cells do not cover the
    grid once each, since a row searched over fewer rates than the others would not be tuned alike."""
    own = [c for c in cells if c["method"] == method]
    rates = sorted(float(c["learning_rate"]) for c in own)
    if rates != sorted(float(r) for r in grid):
        have = ", ".join(f"{r:g}" for r in rates) or "none"
        want = ", ".join(f"{float(r):g}" for r in grid)
        raise StudyError(
            f"lr search of {method}: cells at {have}, not the grid {want}: run "
            f"`bench_learning.py --lr-search --methods {method}` with that grid to fill it"
        )
    if any(select_on not in c["scores"] for c in own):
        raise StudyError(
            f"lr search of {method}: no {select_on!r} score; --select-on one of {sorted(own[0]['scores'])}"
        )
    best = max(own, key=lambda c: (c["scores"][select_on], -float(c["learning_rate"])))
    return {
        "method": method,
        "learning_rate": float(best["learning_rate"]),
        "select_on": select_on,
        "scores": {f"{float(c['learning_rate']):g}": c["scores"][select_on] for c in own},
    }
