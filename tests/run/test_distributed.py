"""Two CPU processes (accelerate_configs/cpu.yaml, gloo) against one, every method, 2 generation batches each.

What is comparable between 1 and 2 processes, and what is not:

- The prompts of a step are. TRL's RepeatSampler draws the same index stream from `seed` whatever the world
  size, and each rank takes its slice of the global batch; with the same global batch (1 x 8 vs 2 x 4) a step
  covers the same prompt groups.
- Sampled completions are not: TRL reseeds every rank with `seed + rank` (`set_seed(..., device_specific=True)`),
  so rank 1 draws different tokens than the single process does at those positions. Rewards of sampled runs only
  agree in distribution. Hence generation is greedy here (`do_sample: false`).
- Weights after a step agree only up to float reduction order (DDP all-reduce vs one big batch), so greedy
  completions of later steps could differ on a near tie. Hence `learning_rate: 0`: the policy stays the initial
  one, every step is comparable, and the whole pipeline (sampler, generation, reward gather, advantages, loss,
  backward, DDP all-reduce, PPO's critic) still runs on both sides.

With that, per step: the union over ranks of (task_id, completion, reward) seen by the reward function equals
the single process's, each rank scored exactly half of it, and the `reward` TRL logs (gathered across ranks)
equals the single process's and the mean of that union. The reward is a deterministic hash of (task_id,
completion), so a lost, duplicated or misrouted completion changes the numbers.

Run as a script (what `accelerate launch` starts), this file trains every method; the test drives it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GLOBAL_BATCH = 8  # completions per step: 4 prompts x 2 generations
PROBE_DIR_ENV = "PASSK_PROBE_DIR"


def probe_reward(prompts, completions, task_id, **kwargs) -> list[float]:
    """A reward that is a fixed function of (task_id, completion), logging what this rank scored."""
    scores = []
    for tid, completion in zip(task_id, completions, strict=True):
        digest = hashlib.sha256(f"{tid}\0{completion}".encode()).digest()
        scores.append(int.from_bytes(digest[:2], "big") / 65535)
    out = Path(os.environ[PROBE_DIR_ENV])
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    log = out / f"rank{rank}.jsonl"
    call = sum(1 for _ in open(log)) if log.exists() else 0
    with open(log, "a") as f:
        f.write(
            json.dumps({"call": call, "rows": list(zip(task_id, completions, scores, strict=True))}) + "\n"
        )
    return scores


def run_all(out: Path, model: str, per_device_batch: int, methods: list[str]) -> None:
    """Train every method for 2 steps into out/<method>, in this process (or process group)."""
    from experiments.run.argv import parse_config
    from experiments.run.train import run

    for method in methods:
        os.environ[PROBE_DIR_ENV] = str(out / method / "probe")
        argv = [
            str(REPO / "experiments" / "configs" / "cpu.yaml"),
            "--method",
            method,
            "--model",
            model,
            "--dataset",
            "learnable",
            "--n_train",
            "16",
            "--n_eval",
            "0",
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            str(per_device_batch),
            "--max_completion_length",
            "8",
            "--budget_prompts",
            "8",
            "--learning_rate",
            "0",
            "--steps_per_generation",
            "1",  # PPO too: one step per generation batch, 2 batches for every method
            "--generation_kwargs",
            '{"do_sample": false}',
            "--reward_funcs",
            f"{Path(__file__).resolve()}:probe_reward",
            "--save_strategy",
            "no",
            "--save_model",
            "false",
            "--report_to",
            "none",
            "--disable_tqdm",
            "true",
            "--output_dir",
            str(out / method),
        ]
        run(*parse_config(argv))


def _calls(probe: Path) -> dict[int, list[tuple]]:
    by_call: dict[int, list[tuple]] = {}
    for log in sorted(probe.glob("rank*.jsonl")):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            by_call.setdefault(entry["call"], []).extend(tuple(r) for r in entry["rows"])
    return by_call


def _logged(run_dir: Path, *keys: str) -> list[tuple[float, ...]]:
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    return [tuple(h[k] for k in keys) for h in history if keys[0] in h]


def _logged_rewards(run_dir: Path) -> list[float]:
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    return [h["reward"] for h in history if "reward" in h]


@pytest.mark.slow
def test_two_cpu_processes_gather_the_same_rewards_as_one(tmp_path: Path, tiny_model_dir: Path) -> None:
    from experiments.trainers import ORIGINAL_METHODS

    methods = list(ORIGINAL_METHODS)  # the original seven: CI time (the GRPO variants gather as grpo does)
    two, one = tmp_path / "two", tmp_path / "one"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO / "accelerate_configs" / "cpu.yaml"),
        str(Path(__file__).resolve()),
        str(two),
        str(tiny_model_dir),
        str(GLOBAL_BATCH // 2),
        *methods,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_all(one, str(tiny_model_dir), GLOBAL_BATCH, methods)

    for method in methods:
        run1, run2 = (json.loads((d / method / "run.json").read_text()) for d in (one, two))
        # 8 prompts = 2 generation batches, one step on each (PPO too: one epoch per rollout by default)
        assert run2["num_processes"] == 2 and run2["global_step"] == run1["global_step"] == 2, method
        # The budget counted across both ranks equals the single process's: same prompts, completions, tokens.
        for key in ("fresh_prompts", "fresh_completions", "tokens_generated", "prompt_sequence_sha256"):
            assert run2["budget"][key] == run1["budget"][key], (method, key)
        assert run1["budget"]["fresh_prompts"] == 8 and run1["budget"]["fresh_completions"] == 16, method
        calls1, calls2 = _calls(one / method / "probe"), _calls(two / method / "probe")
        assert calls1 and sorted(calls1) == sorted(calls2), method
        for call, rows in calls1.items():
            assert len(rows) == GLOBAL_BATCH, (method, call)
            assert Counter(calls2[call]) == Counter(rows), (method, call)  # same completions, same rewards
            for rank in (0, 1):  # each rank scored its half of the global batch
                rank_rows = [json.loads(x) for x in (two / method / "probe" / f"rank{rank}.jsonl").open()]
                assert len(rank_rows[call]["rows"]) == GLOBAL_BATCH // 2, (method, call, rank)
        logged1, logged2 = _logged_rewards(one / method), _logged_rewards(two / method)
        assert len(logged1) == len(logged2) >= 1, method
        assert logged2 == pytest.approx(logged1, abs=1e-6), method
        means = [sum(r[2] for r in calls1[c]) / GLOBAL_BATCH for c in sorted(calls1)]
        assert logged1 == pytest.approx(means[: len(logged1)], abs=1e-6), method
        assert len({r[2] for rows in calls1.values() for r in rows}) > 1, method  # rewards really vary
        if (
            method == "ppo"
        ):  # advantages normalised over the whole rollout: both ranks use the global statistics
            stats1, stats2 = (_logged(d / method, "ppo/adv_raw_std", "ppo/adv_divisor") for d in (one, two))
            flat1, flat2 = ([v for row in stats for v in row] for stats in (stats1, stats2))
            assert flat1 and flat2 == pytest.approx(flat1, rel=1e-5), (stats1, stats2)


if __name__ == "__main__":
    out_dir, model_dir, per_device, *method_names = sys.argv[1:]
    run_all(Path(out_dir), model_dir, int(per_device), method_names)
    from experiments.run.train import end_process_group

    end_process_group()  # as experiments.run.train's main does at the end of a rank's run
