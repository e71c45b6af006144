"""evaluate_model end to end on the tiny offline model and 3 HumanEval problems, scored by the real sandbox.

A scripted "model" that emits the canonical solutions must score pass@k = 1.0 and one that emits a wrong body
0.0: together they show that generation, decoding, code extraction and execution are wired correctly.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from experiments.evaluation.evaluate import _prompt_ids, evaluate_model

FAST = {"max_new_tokens": 24, "batch_size": 2, "progress": False}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def raw3(humaneval):
    return humaneval.select(range(3))


@pytest.fixture(scope="module")
def rows3(raw3):
    from experiments.inputs.data import to_rl_rows

    return to_rl_rows(raw3, style="completion")


def _strip_timing(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "timing"}


def test_structure_determinism_and_mode_restore(tiny, rows3) -> None:
    model, tok = tiny
    model.train()
    torch.manual_seed(1234)
    expected_next = torch.rand(3)
    torch.manual_seed(1234)
    res = evaluate_model(model, tok, rows3, n_samples=2, ks=(1, 2, 5), seed=3, **FAST)
    assert torch.equal(torch.rand(3), expected_next), "evaluation must not move the caller's RNG stream"
    assert model.training, "the model's train mode must be restored"

    d = res.to_dict()
    json.dumps(d)  # JSON-serialisable
    assert d["num_problems"] == 3 and d["n"] == 2 and d["ks"] == [1, 2]  # k=5 > n is dropped
    assert set(d["metrics"]) == {
        "pass@1",
        "pass@2",
        "first_sample_pass@1",
        "greedy_pass@1",
        "avg_reward",
        "entropy",
    }
    for name, est in d["metrics"].items():
        top = math.log(len(tok)) if name == "entropy" else 1.0
        assert 0.0 <= est["ci"][0] <= est["value"] <= est["ci"][1] <= top, name
    first = [float(p["rewards"][0] >= 1.0) for p in d["problems"]]
    assert d["metrics"]["first_sample_pass@1"]["value"] == pytest.approx(sum(first) / 3)
    assert [p["task_id"] for p in d["problems"]] == list(rows3["task_id"])
    for p in d["problems"]:
        assert p["n"] == 2 and len(p["rewards"]) == 2 and 0 <= p["correct"] <= 2
        assert isinstance(p["greedy_passed"], bool) and isinstance(p["first_completion"], str)
    # 3 problems x (2 samples + 1 greedy), each between 1 and 24 tokens.
    assert 9 <= d["tokens_generated"] <= 9 * 24
    assert d["timing"]["tokens_per_s"] > 0

    again = evaluate_model(model, tok, rows3, n_samples=2, ks=(1, 2, 5), seed=3, **FAST).to_dict()
    assert _strip_timing(again) == _strip_timing(d)
    other = evaluate_model(model, tok, rows3, n_samples=2, ks=(1, 2), seed=4, greedy=False, **FAST).to_dict()
    assert "greedy_pass@1" not in other["metrics"]
    assert [p["first_completion"] for p in other["problems"]] != [
        p["first_completion"] for p in d["problems"]
    ]


class ScriptedModel(torch.nn.Module):
    """Answers each known prompt with fixed completion token ids, padded like `generate` pads."""

    def __init__(self, answers: dict[tuple[int, ...], list[int]], pad_id: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))  # evaluate_model reads the device from parameters
        self.answers, self.pad_id = answers, pad_id
        self.calls: list[dict] = []

    def generate(self, input_ids, attention_mask, generation_config, logits_processor=None):
        self.calls.append({"do_sample": generation_config.do_sample, "batch": input_ids.shape[0]})
        outs = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            assert mask[-1] == 1, "prompts must be left-padded"
            answer = self.answers[tuple(i for i, m in zip(ids, mask) if m)]
            outs += [ids + answer] * generation_config.num_return_sequences
        width = max(map(len, outs))
        return torch.tensor([o + [self.pad_id] * (width - len(o)) for o in outs])


def _scripted(tok, rows, texts: list[str]) -> ScriptedModel:
    answers = {
        tuple(_prompt_ids(tok, row["prompt"])): tok(text, add_special_tokens=False)["input_ids"]
        + [tok.eos_token_id]
        for row, text in zip(rows, texts)
    }
    return ScriptedModel(answers, tok.pad_token_id)


def test_canonical_solutions_score_one_and_wrong_bodies_zero(tiny, rows3, raw3) -> None:
    _, tok = tiny
    canon = list(raw3["canonical_solution"])
    assert all(tok.decode(tok(c, add_special_tokens=False)["input_ids"]) == c for c in canon)  # lossless BPE

    good = _scripted(tok, rows3, canon)
    res = evaluate_model(good, tok, rows3, n_samples=2, ks=(1, 2), **FAST)
    assert res.pass_at_k["pass@1"].value == 1.0 and res.pass_at_k["pass@2"].value == 1.0
    assert res.greedy_pass_at_1.value == 1.0 and res.avg_reward.value == 1.0
    assert res.first_sample_pass_at_1.value == 1.0
    assert res.entropy is None and "entropy" not in res.metrics  # a scripted generate never calls the meter
    assert (res.pass_at_k["pass@1"].ci_low, res.pass_at_k["pass@1"].ci_high) == (1.0, 1.0)
    assert res.problems[0].first_completion == canon[0]
    # 3 prompts in batches of 2; the greedy answer is the last row of each prompt's copies
    assert [(c["do_sample"], c["batch"]) for c in good.calls] == [(True, 2), (True, 1)]
    # 3 problems x 3 completions, each canonical + eos
    per = [len(tok(c, add_special_tokens=False)["input_ids"]) + 1 for c in canon]
    assert res.tokens_generated == 3 * sum(per)

    bad = _scripted(tok, rows3, ["    return None\n"] * 3)
    res_bad = evaluate_model(bad, tok, rows3, n_samples=2, ks=(1, 2), **FAST)
    assert res_bad.pass_at_k["pass@1"].value == 0.0 and res_bad.greedy_pass_at_1.value == 0.0

    # Mixed: problem 0 right, others wrong -> every estimate is exactly 1/3.
    mixed = _scripted(tok, rows3, [canon[0], "    return None\n", "    return None\n"])
    res_mixed = evaluate_model(mixed, tok, rows3, n_samples=2, ks=(1, 2), **FAST)
    assert [p.correct for p in res_mixed.problems] == [2, 0, 0]
    assert res_mixed.pass_at_k["pass@2"].value == pytest.approx(1 / 3)


def test_chat_style_and_raw_rows(tiny, raw3) -> None:
    _, tok = tiny
    from experiments.inputs.data import chat_messages

    # Raw HumanEval rows (no code_prompt) in chat style: the prompt becomes the standard chat prompt.
    fenced = [f"```python\n{p}{c}```" for p, c in zip(raw3["prompt"], raw3["canonical_solution"])]
    chat_rows = [{**row, "prompt": chat_messages(row["prompt"])} for row in raw3]
    model = _scripted(tok, chat_rows, fenced)
    res = evaluate_model(model, tok, raw3, n_samples=1, ks=(1,), style="chat", **FAST)
    assert res.pass_at_k["pass@1"].value == 1.0 and res.greedy_pass_at_1.value == 1.0

    # Raw rows in completion style: the prompt itself is the code prompt.
    model = _scripted(tok, list(raw3), list(raw3["canonical_solution"]))
    res = evaluate_model(model, tok, raw3, n_samples=1, ks=(1,), **FAST)
    assert res.pass_at_k["pass@1"].value == 1.0


def test_rows_without_tests_are_rejected(tiny, raw3) -> None:
    model, tok = tiny
    rows = [{**raw3[0], "test": ""}]
    with pytest.raises(ValueError, match="no `test`"):
        evaluate_model(model, tok, rows, n_samples=1, ks=(1,), **FAST)


def test_entropy_is_the_policys_own_on_its_samples(tiny, rows3) -> None:
    """The meter's entropy equals the entropy of softmax(raw logits) recomputed by a teacher-forced forward
    pass over the same sampled tokens, up to and including EOS, at a sampling temperature other than 1."""
    model, tok = tiny
    n = 3
    res = evaluate_model(
        model,
        tok,
        rows3,
        n_samples=n,
        ks=(1,),
        temperature=0.5,
        top_p=1.0,
        seed=5,
        greedy=False,
        **{**FAST, "batch_size": 3},
    )
    # Regenerate the same samples (same seed, same batch) to get their token ids.
    from transformers import GenerationConfig

    ids = [_prompt_ids(tok, row["prompt"]) for row in rows3]
    width = max(map(len, ids))
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    config = GenerationConfig(
        max_new_tokens=FAST["max_new_tokens"],
        num_return_sequences=n,
        do_sample=True,
        temperature=0.5,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=[tok.eos_token_id],
    )
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(5)
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        logits = model(
            out, attention_mask=torch.cat([mask.repeat_interleave(n, 0), torch.ones_like(out[:, width:])], 1)
        ).logits
    logp = torch.log_softmax(logits[:, width - 1 : -1].double(), dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    for i, problem in enumerate(res.problems):
        total, count = 0.0, 0
        for j in range(n):
            gen = out[i * n + j, width:].tolist()
            stop = gen.index(tok.eos_token_id) + 1 if tok.eos_token_id in gen else len(gen)
            total += ent[i * n + j, :stop].sum().item()
            count += stop
        assert problem.entropy == pytest.approx(total / count, rel=1e-4)
    assert res.entropy.value == pytest.approx(sum(p.entropy for p in res.problems) / 3)


def _texts(model, tok, rows, **kwargs) -> list[list[str]]:
    from experiments.evaluation.evaluate import _generate

    ids = [_prompt_ids(tok, row["prompt"]) for row in rows]
    common = {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_new_tokens": 24,
        "batch_size": 3,
        "progress": False,
        "desc": "test",
    }
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(11)
        return _generate(model, tok, ids, **common, **kwargs)[0]


def test_shared_prompt_prefill_samples_what_a_full_prefill_samples(tiny, rows3, monkeypatch) -> None:
    """Each prompt's copies share one prefill (a repeated KV cache); with the same seed, every sample is the
    sample `generate` draws when it prefills every copy itself."""
    import experiments.evaluation.evaluate as evaluation

    model, tok = tiny
    model.eval()
    calls = []
    shared = evaluation._shared_prompt_cache

    def spy(*args, **kwargs):
        cache = shared(*args, **kwargs)
        calls.append(cache is not None)
        return cache

    monkeypatch.setattr(evaluation, "_shared_prompt_cache", spy)
    with_cache = _texts(model, tok, rows3, num_return_sequences=4, do_sample=True)
    assert calls == [True], "the shared prefill was not used"
    monkeypatch.setattr(evaluation, "_shared_prompt_cache", lambda *a, **k: None)
    full = _texts(model, tok, rows3, num_return_sequences=4, do_sample=True)
    assert with_cache == full
    assert len({t for texts in full for t in texts}) > 3  # sampled, not one text repeated


def test_greedy_row_decodes_what_greedy_generate_decodes(tiny, rows3) -> None:
    model, tok = tiny
    model.eval()
    mixed = _texts(model, tok, rows3, num_return_sequences=3, do_sample=True, greedy_last=True)
    greedy = _texts(model, tok, rows3, num_return_sequences=1, do_sample=False)
    assert [texts[-1] for texts in mixed] == [texts[0] for texts in greedy]
    assert [texts[:-1] for texts in mixed] != [[g[0], g[0]] for g in greedy]  # the other rows still sample


def test_processes_split_the_problems_and_seed_each_share(tiny, rows3) -> None:
    """processes=2 forks two CPU processes: the first takes problems 0-1 and samples from the seed, the second
    problem 2 from seed + 1, so the result is exactly two single-process evaluations joined; the caller's RNG stream
    and the model's mode are left as they were."""
    model, tok = tiny
    model.train()
    torch.manual_seed(99)
    expected_next = torch.rand(3)
    torch.manual_seed(99)
    kw = {"n_samples": 3, "ks": (1,), "temperature": 1.0, **FAST}
    split = evaluate_model(model, tok, rows3, seed=7, processes=2, **kw)
    assert torch.equal(torch.rand(3), expected_next) and model.training
    first = evaluate_model(model, tok, rows3.select([0, 1]), seed=7, **kw)
    second = evaluate_model(model, tok, rows3.select([2]), seed=8, **kw)

    def per_problem(result):
        return [
            (p.task_id, p.rewards, p.first_completion, p.greedy_passed, p.n_truncated)
            for p in result.problems
        ]

    assert per_problem(split) == per_problem(first) + per_problem(second)
    joined = [p.entropy for p in first.problems + second.problems]
    assert [p.entropy for p in split.problems] == pytest.approx(joined, rel=1e-6)
    assert split.tokens_generated == first.tokens_generated + second.tokens_generated
    assert split.settings["processes"] == 2 and "processes" not in first.settings
    # The second share drew its own samples: with the first share's seed, problem 2 samples something else.
    same_seed = evaluate_model(model, tok, rows3.select([2]), seed=7, **kw)
    assert per_problem(same_seed)[0][2] != per_problem(second)[0][2]
    with pytest.raises(ValueError, match="processes must be >= 1"):
        evaluate_model(model, tok, rows3, processes=0, **kw)


@pytest.mark.parametrize("k", [8, 256])  # 8: most rows take the full-sort fallback
def test_top_p_keeps_the_tokens_transformers_top_p_keeps(k) -> None:
    from transformers import TopPLogitsWarper

    from experiments.evaluation.evaluate import _TopP

    gen = torch.Generator().manual_seed(0)
    sharpness = torch.tensor([0.1, 0.5, 1.0, 2.0, 4.0, 8.0]).repeat_interleave(5)[:, None]
    scores = torch.randn(30, 5000, generator=gen) * sharpness
    input_ids = torch.zeros(30, 1, dtype=torch.long)
    for top_p, temperature in [(0.9, 0.7), (0.95, 1.0), (0.5, 1.3)]:
        ours = _TopP(top_p, temperature, k=k)(input_ids, scores.clone())
        theirs = TopPLogitsWarper(top_p)(input_ids, scores / temperature)
        assert torch.equal(ours > float("-inf"), theirs > float("-inf"))
        kept = (ours > float("-inf")).sum(dim=1)
        assert kept.min() >= 1 and kept.max() > k  # flat rows keep more than k tokens: the fallback ran
        assert torch.equal(ours[ours > float("-inf")], scores[ours > float("-inf")])  # kept logits untouched


# ---------------------------------------------------------------------------------------------------------------
# Each option and edge of evaluate_model, _generate and their helpers (a scripted model where generation does not
# matter, a stub reward where the sandbox does not)
# ---------------------------------------------------------------------------------------------------------------


class RecordingModel(ScriptedModel):
    """A ScriptedModel that keeps each generate call's config and logits processors."""

    def __init__(self, answers: dict, pad_id: int) -> None:
        super().__init__(answers, pad_id)
        self.configs: list = []

    def generate(self, input_ids, attention_mask, generation_config, logits_processor=None):
        self.configs.append((generation_config, list(logits_processor or [])))
        return super().generate(input_ids, attention_mask, generation_config, logits_processor)


def _recording(tok, rows, texts: list[str], eos: bool = True) -> RecordingModel:
    answers = {
        tuple(_prompt_ids(tok, row["prompt"])): tok(text, add_special_tokens=False)["input_ids"]
        + ([tok.eos_token_id] if eos else [])
        for row, text in zip(rows, texts)
    }
    return RecordingModel(answers, tok.pad_token_id)


class _StubReward:
    """Scores every completion `value` (or `score(task_id)`), and keeps what it was called with."""

    def __init__(self, score=lambda task_id: 1.0, extra: int = 0) -> None:
        self.score_of, self.extra, self.calls = score, extra, []

    def score(self, prompts, completions, **columns):
        self.calls.append((prompts, completions, columns))
        return [self.score_of(t) for t in columns["task_id"]] + [1.0] * self.extra


def _stub(monkeypatch, reward: _StubReward) -> _StubReward:
    import experiments.evaluation.evaluate as evaluation

    monkeypatch.setattr(evaluation, "_make_reward", lambda sandbox_kwargs, stdio=False: reward)
    return reward


def test_generate_is_told_every_eos_the_pad_and_which_top_p_filters(tiny, rows3, raw3) -> None:
    from types import SimpleNamespace

    from experiments.evaluation.evaluate import _TopP

    _, tok = tiny
    canon = list(raw3["canonical_solution"])
    used = {i for c in canon for i in tok(c, add_special_tokens=False)["input_ids"]}
    other_eos = min(set(range(tok.eos_token_id)) - used)  # an id no answer holds, below the tokenizer's

    def run(model, tokenizer=tok, **kw):
        evaluate_model(model, tokenizer, rows3, n_samples=2, ks=(1,), **{**FAST, **kw})
        return model.configs[-1]

    model = _recording(tok, rows3, canon)
    config, processors = run(model, top_p=0.9)
    assert config.eos_token_id == [tok.eos_token_id] and config.pad_token_id == tok.pad_token_id
    # top_p < 1 without a top-k: our nucleus filters, generate's own top-p is off
    assert config.top_p == 1.0 and any(isinstance(p, _TopP) for p in processors)
    config, processors = run(model, top_p=1.0)
    assert config.top_p == 1.0 and not any(isinstance(p, _TopP) for p in processors)
    # with the model's top-k kept in force, generate's warpers filter in their own order
    config, processors = run(model, top_p=0.9, generation_kwargs={"top_k": 5})
    assert (config.top_k, config.top_p) == (5, 0.9) and not any(isinstance(p, _TopP) for p in processors)

    model.generation_config = SimpleNamespace(eos_token_id=[other_eos, tok.eos_token_id])
    config, _ = run(model)
    assert config.eos_token_id == sorted({other_eos, tok.eos_token_id})

    class Unpadded:  # the tokenizer without a pad token (or without an EOS)
        def __init__(self, inner, eos_token_id):
            self.inner, self.pad_token_id, self.eos_token_id = inner, None, eos_token_id

        def __call__(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    config, _ = run(model, Unpadded(tok, tok.eos_token_id))
    assert config.pad_token_id == other_eos  # the first EOS id pads
    del model.generation_config
    config, _ = run(model, Unpadded(tok, None))
    assert config.pad_token_id == 0 and config.eos_token_id is None


def test_reported_seconds_are_the_clock_differences_around_generation_and_scoring(
    tiny, rows3, raw3, monkeypatch
) -> None:
    from types import SimpleNamespace

    import experiments.evaluation.evaluate as evaluation

    _, tok = tiny
    _stub(monkeypatch, _StubReward())
    model = _recording(tok, rows3, list(raw3["canonical_solution"]))
    for processes, generation in (
        (1, 1.0),
        (2, 0.5),
    ):  # 2 batches of 2 prompts; or one wait for the processes
        ticks = iter(range(2000, 3000))  # a clock that moves on 0.5 s at each read, not the wall clock
        monkeypatch.setattr(
            evaluation, "time", SimpleNamespace(perf_counter=lambda ticks=ticks: next(ticks) / 2)
        )
        res = evaluate_model(model, tok, rows3, n_samples=2, ks=(1,), processes=processes, **FAST)
        assert (res.generation_seconds, res.scoring_seconds) == (generation, 0.5), processes


def test_the_reward_gets_each_completion_in_its_rows_shape_and_must_score_each(
    tiny, raw3, monkeypatch
) -> None:
    from experiments.inputs.data import chat_messages, to_rl_rows

    _, tok = tiny
    canon = list(raw3["canonical_solution"])
    reward = _stub(monkeypatch, _StubReward())
    rows = to_rl_rows(raw3, style="completion")
    evaluate_model(_recording(tok, rows, canon), tok, rows, n_samples=2, ks=(1,), **FAST)
    prompts, completions, columns = reward.calls[-1]
    assert completions == [c for c in canon for _ in range(3)]  # 2 samples + greedy, as text
    assert columns["task_id"] == [t for t in raw3["task_id"] for _ in range(3)]
    assert columns["entry_point"] == [e for e in raw3["entry_point"] for _ in range(3)]
    chat_rows = [{**row, "prompt": chat_messages(row["prompt"])} for row in raw3]
    evaluate_model(_recording(tok, chat_rows, canon), tok, raw3, n_samples=1, ks=(1,), style="chat", **FAST)
    _, completions, columns = reward.calls[-1]
    assert completions == [[{"role": "assistant", "content": c}] for c in canon for _ in range(2)]
    assert columns["code_prompt"] == [p for p in raw3["prompt"] for _ in range(2)]
    for extra in (-1, 1):  # one score too few, one too many
        _stub(monkeypatch, _StubReward(extra=extra) if extra > 0 else _Short())
        with pytest.raises(RuntimeError, match="reward returned"):
            evaluate_model(_recording(tok, rows, canon), tok, rows, n_samples=2, ks=(1,), **FAST)


class _Short(_StubReward):
    def score(self, prompts, completions, **columns):
        return super().score(prompts, completions, **columns)[:-1]


def test_without_greedy_each_problem_reads_its_own_scores_and_long_first_completions_are_cut(
    tiny, rows3, raw3
) -> None:
    from experiments.evaluation.evaluate import MAX_COMPLETION_CHARS

    _, tok = tiny
    canon = list(raw3["canonical_solution"])
    wrong = "    return None\n"
    mixed = _scripted(tok, rows3, [wrong, canon[1], wrong])
    res = evaluate_model(mixed, tok, rows3, n_samples=2, ks=(1,), greedy=False, **FAST)
    assert [p.correct for p in res.problems] == [0, 2, 0] and res.greedy_pass_at_1 is None
    long = "    # " + "x" * 500 + "\n" + canon[0]
    res = evaluate_model(_scripted(tok, rows3, [long, *canon[1:]]), tok, rows3, n_samples=1, ks=(1,), **FAST)
    assert MAX_COMPLETION_CHARS == 400 and res.problems[0].first_completion == long[:400]
    assert res.problems[0].correct == 1 and res.problems[2].first_completion == canon[2][:400]


def test_a_completion_that_ran_to_max_new_tokens_is_counted_truncated(tiny, rows3, raw3, monkeypatch) -> None:
    _, tok = tiny
    _stub(monkeypatch, _StubReward())
    filler = tok("    x = 1\n" * 30, add_special_tokens=False)["input_ids"][: FAST["max_new_tokens"]]
    answers = {
        tuple(_prompt_ids(tok, row["prompt"])): (filler if i == 0 else [*filler[:3], tok.eos_token_id])
        for i, row in enumerate(rows3)
    }
    res = evaluate_model(ScriptedModel(answers, tok.pad_token_id), tok, rows3, n_samples=2, ks=(1,), **FAST)
    assert [p.n_truncated for p in res.problems] == [2, 0, 0]  # the greedy row is not counted


def test_options_are_checked_and_keyword_only_and_the_defaults_are_the_seeds(
    tiny, rows3, raw3, caplog, capfd, monkeypatch
) -> None:
    _, tok = tiny
    canon = list(raw3["canonical_solution"])
    model = _scripted(tok, rows3, canon)
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        evaluate_model(model, tok, rows3, n_samples=0, **FAST)
    with pytest.raises(TypeError):
        evaluate_model(model, tok, rows3, 2)  # n_samples by position
    with caplog.at_level("WARNING", logger="experiments.evaluation.evaluate"):
        evaluate_model(model, tok, rows3, n_samples=2, ks=(1, 2, 9), **FAST)
    assert [r.getMessage() for r in caplog.records] == ["pass@k for k=[9] skipped: k > n_samples=2"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="experiments.evaluation.evaluate"):
        evaluate_model(model, tok, rows3, n_samples=2, ks=(1, 2), **FAST)
    assert not caplog.records
    capfd.readouterr()
    _stub(monkeypatch, _StubReward())
    res = evaluate_model(model, tok, rows3)  # every default
    assert "pass@k sampling (n=5 + greedy)" in capfd.readouterr().err  # the progress bar, on by default
    assert (res.n_samples, res.ks, res.n_bootstrap, res.confidence) == (5, [1, 5], 1000, 0.95)
    assert {k: res.settings[k] for k in ("temperature", "top_p", "max_new_tokens", "greedy", "seed")} == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_new_tokens": 256,
        "greedy": True,
        "seed": 0,
    }
    assert res.settings["batch_size"] == 8 and "processes" not in res.settings
    evaluate_model(model, tok, rows3, n_samples=2, ks=(1,), greedy=False, max_new_tokens=24)
    err = capfd.readouterr().err
    assert "pass@k sampling (n=2)" in err and "greedy" not in err
    evaluate_model(model, tok, rows3, n_samples=2, ks=(1,), max_new_tokens=24, progress=True, processes=2)
    assert "pass@k sampling" not in capfd.readouterr().err  # the processes draw no bars of their own


def _stdio_row(task_id: str) -> dict:
    cases = json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})
    return {
        "prompt": f"Echo the number ({task_id}).",
        "code_prompt": "",
        "task_id": task_id,
        "input_output": cases,
    }


def test_stdio_rows_their_fields_and_problems_with_nothing_hidden(tiny, rows3, monkeypatch) -> None:
    from experiments.evaluation.evaluate import _row_fields

    _, tok = tiny
    row = _stdio_row("s0")
    assert _row_fields(row, "completion").columns == {"input_output": row["input_output"]}
    with pytest.raises(ValueError, match="stdin/stdout rows need"):
        _row_fields({k: v for k, v in row.items() if k != "code_prompt"}, "completion")
    both = {**row, "test": "def check(f): pass", "entry_point": "f"}  # a test wins: a function problem
    assert set(_row_fields(both, "completion").columns) == {"test", "entry_point"}
    with pytest.raises(ValueError, match="mix function problems with stdin/stdout"):
        evaluate_model(_scripted(tok, rows3, ["x"] * 3), tok, [rows3[0], row], n_samples=1, ks=(1,), **FAST)

    rows = [_stdio_row(f"s{i}") for i in range(3)]
    _stub(monkeypatch, _StubReward(lambda task_id: None if task_id == "s0" else 1.0))
    res = evaluate_model(_scripted(tok, rows, ["print(1)"] * 3), tok, rows, n_samples=2, ks=(1,), **FAST)
    assert [p.task_id for p in res.problems] == ["s1", "s2"]  # s0 showed every case: nothing to score
    assert res.settings["unscored_all_cases_shown"] == ["s0"]
    _stub(monkeypatch, _StubReward(lambda task_id: None if task_id == rows3[1]["task_id"] else 1.0))
    with pytest.raises(RuntimeError, match="whose row has a test"):
        evaluate_model(_scripted(tok, rows3, ["x"] * 3), tok, rows3, n_samples=1, ks=(1,), **FAST)


def test_chat_style_is_read_from_an_equal_string(raw3) -> None:
    from experiments.evaluation.evaluate import _row_fields

    assert isinstance(_row_fields(raw3[0], "".join(["ch", "at"])).prompt, list)
    assert _row_fields(raw3[0], "completion").prompt == raw3[0]["prompt"]


def test_sandbox_settings_take_a_function_reward_of_their_own(tiny, rows3, raw3) -> None:
    _, tok = tiny
    model = _scripted(tok, rows3, list(raw3["canonical_solution"]))
    res = evaluate_model(model, tok, rows3, n_samples=1, ks=(1,), sandbox_kwargs={"timeout": 10.0}, **FAST)
    assert res.pass_at_k["pass@1"].value == 1.0


def test_processes_refuse_a_model_off_the_cpu_and_one_process_does_not(tiny, rows3, raw3) -> None:
    _, tok = tiny
    model = _scripted(tok, rows3, list(raw3["canonical_solution"])).to("meta")
    with pytest.raises(ValueError, match="processes > 1 is for CPU evaluation; the model is on meta"):
        evaluate_model(model, tok, rows3, n_samples=1, ks=(1,), processes=2, **FAST)
    with pytest.raises(Exception) as info:  # meta tensors hold no values to generate from
        evaluate_model(model, tok, rows3, n_samples=1, ks=(1,), processes=1, **FAST)
    assert "processes > 1" not in str(info.value)


def test_two_problems_over_two_processes_split_one_each(tiny, rows3) -> None:
    model, tok = tiny
    kw = {"n_samples": 2, "ks": (1,), "temperature": 1.0, **FAST}
    split = evaluate_model(model, tok, rows3.select([0, 1]), seed=7, processes=2, **kw)
    first = evaluate_model(model, tok, rows3.select([0]), seed=7, **kw)
    second = evaluate_model(model, tok, rows3.select([1]), seed=8, **kw)
    assert [p.first_completion for p in split.problems] == [
        p.first_completion for p in first.problems + second.problems
    ]


def test_each_process_gets_its_share_of_threads_no_bar_and_a_death_is_reported(monkeypatch) -> None:
    import os

    import experiments.evaluation.evaluate as evaluation
    from experiments.evaluation.evaluate import _generate_in_processes

    assert _threads_and_progress_seen(monkeypatch, threads=2, progress=True) == [["1|False"], ["1|False"]]
    monkeypatch.setattr(evaluation, "_generate", lambda *a, **k: os._exit(3))
    with pytest.raises(RuntimeError, match="evaluation process 0 died without a result"):
        _generate_in_processes(None, None, [[1], [2]], processes=2, seed=0, progress=False)


def test_the_entropy_meter_stops_at_eos_and_leaves_the_greedy_row_out(tiny, rows3, monkeypatch) -> None:
    import experiments.evaluation.evaluate as evaluation

    meter = evaluation._EntropyMeter(prompt_width=1, eos_ids=[0])
    flat = torch.zeros(2, 4)  # entropy ln 4 at every position
    meter(torch.tensor([[5], [5]]), flat)
    meter(torch.tensor([[5, 0], [5, 1]]), flat)  # row 0 ended with EOS at the first step
    assert meter.tokens.tolist() == [1, 2]
    assert meter.total.tolist() == pytest.approx([math.log(4), 2 * math.log(4)])

    meters = []

    class Kept(evaluation._EntropyMeter):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            meters.append(self)

    monkeypatch.setattr(evaluation, "_EntropyMeter", Kept)
    model, tok = tiny
    gen = _texts_and_entropy(model, tok, rows3)
    total, tokens = meters[0].total.view(3, 3), meters[0].tokens.view(3, 3)
    sampled = (total[:, :2].sum(1) / tokens[:, :2].sum(1)).tolist()
    everything = (total.sum(1) / tokens.sum(1)).tolist()
    assert gen.entropies == pytest.approx(sampled) and sampled != pytest.approx(everything)


def _texts_and_entropy(model, tok, rows):
    from experiments.evaluation.evaluate import _generate

    ids = [_prompt_ids(tok, row["prompt"]) for row in rows]
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(3)
        return _generate(
            model,
            tok,
            ids,
            num_return_sequences=3,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=8,
            batch_size=3,
            progress=False,
            desc="test",
            greedy_last=True,
        )


def test_the_shared_prefill_continues_with_the_logits_a_full_prefill_gives(tiny, rows3) -> None:
    from transformers import GenerationConfig

    from experiments.evaluation.evaluate import _shared_prompt_cache

    model, tok = tiny
    model.eval()
    ids = [_prompt_ids(tok, row["prompt"]) for row in rows3]
    width = max(map(len, ids))
    assert len({len(i) for i in ids}) > 1  # prompts of different lengths: left padding in the batch
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    common = {"do_sample": False, "max_new_tokens": 4, "output_logits": True, "return_dict_in_generate": True}
    common |= {"pad_token_id": tok.pad_token_id, "eos_token_id": None}
    with torch.no_grad():
        assert _shared_prompt_cache(model, input_ids[:, -1:], mask[:, -1:], 2) is None  # one prompt token
        assert _shared_prompt_cache(model, input_ids[:, -2:], mask[:, -2:], 2) is not None  # two: shared
        assert _shared_prompt_cache(model, input_ids, mask, 1) is None  # one copy: nothing to share
        cache = _shared_prompt_cache(model, input_ids, mask, 2)
        shared = model.generate(
            input_ids=input_ids.repeat_interleave(2, 0),
            attention_mask=mask.repeat_interleave(2, 0),
            cache=cache,
            generation_config=GenerationConfig(**common, num_return_sequences=1),
        )
        full = model.generate(  # every copy prefilled on its own
            input_ids=input_ids.repeat_interleave(2, 0),
            attention_mask=mask.repeat_interleave(2, 0),
            generation_config=GenerationConfig(**common, num_return_sequences=1),
        )
    assert len(shared.logits) == len(full.logits) == 4
    for a, b in zip(shared.logits, full.logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_sampling_forks_the_rng_of_the_cuda_device_the_model_is_on(tiny, rows3, monkeypatch) -> None:
    import contextlib
    from types import SimpleNamespace

    import experiments.evaluation.evaluate as evaluation

    _, tok = tiny
    forked = []

    def fork_rng(devices=None, **kwargs):
        forked.append(devices)
        return contextlib.nullcontext()

    monkeypatch.setattr(evaluation.torch.random, "fork_rng", fork_rng)

    class OnCuda(torch.nn.Module):  # claims a CUDA device; generation fails after the RNG is forked
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def parameters(self, recurse: bool = True):
            yield SimpleNamespace(device=torch.device("cuda", self.index))

    for index in (0, 1):
        with pytest.raises(Exception):  # noqa: B017 (this torch has no CUDA to generate on)
            evaluate_model(OnCuda(index), tok, rows3, n_samples=1, ks=(1,), **FAST)
    assert forked == [[0], [1]]


def test_top_p_at_its_exact_boundary_keeps_what_transformers_keeps() -> None:
    from transformers import TopPLogitsWarper

    from experiments.evaluation.evaluate import _TopP

    flat = torch.zeros(1, 4)  # four tokens of 1/4: the two most probable hold exactly top_p = 1/2
    ours = _TopP(0.5, 1.0)(torch.zeros(1, 1, dtype=torch.long), flat.clone())
    theirs = TopPLogitsWarper(0.5)(torch.zeros(1, 1, dtype=torch.long), flat.clone())
    assert int((ours > float("-inf")).sum()) == int((theirs > float("-inf")).sum()) == 2


def test_a_completion_ending_with_eos_at_the_last_token_is_not_truncated(tiny, rows3, monkeypatch) -> None:
    _, tok = tiny
    _stub(monkeypatch, _StubReward())
    filler = tok("    x = 1\n" * 30, add_special_tokens=False)["input_ids"][: FAST["max_new_tokens"]]
    # no EOS; EOS as the last token allowed; EOS early
    ends = [filler, [*filler[:-1], tok.eos_token_id], [*filler[:3], tok.eos_token_id]]
    answers = {tuple(_prompt_ids(tok, row["prompt"])): a for row, a in zip(rows3, ends)}
    res = evaluate_model(ScriptedModel(answers, tok.pad_token_id), tok, rows3, n_samples=2, ks=(1,), **FAST)
    assert [p.n_truncated for p in res.problems] == [2, 0, 0]


def test_a_process_that_hangs_after_its_result_is_killed(monkeypatch) -> None:
    import multiprocessing
    import multiprocessing.util
    import time

    import experiments.evaluation.evaluate as evaluation
    from experiments.evaluation.evaluate import Generation, _generate_in_processes

    def hangs_at_exit(model, tokenizer, share, **kwargs):
        # run by the child as it exits, after it has sent its result
        multiprocessing.util.Finalize(None, time.sleep, args=(120,), exitpriority=0)
        return Generation([["x"]] * len(share), 0, [[False]] * len(share), 0.0, [None] * len(share))

    monkeypatch.setattr(evaluation, "_generate", hangs_at_exit)
    try:
        out = _generate_in_processes(None, None, [[1]], processes=2, seed=0, progress=False)
        for child in multiprocessing.active_children():  # killed: it dies at once (reaped here)
            child.join(timeout=5)
        assert out.texts == [["x"]] and not multiprocessing.active_children()
    finally:
        for child in multiprocessing.active_children():
            child.kill()


def test_processes_split_threads_unevenly_report_a_childs_error_and_refuse_a_distributed_parent(
    monkeypatch,
) -> None:
    import experiments.evaluation.evaluate as evaluation
    from experiments.evaluation.evaluate import _generate_in_processes

    # 7 threads over 2 processes: 3 each
    assert _threads_and_progress_seen(monkeypatch, threads=7, progress=False) == [["3|False"], ["3|False"]]

    def fails(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(evaluation, "_generate", fails)
    with pytest.raises(RuntimeError, match="evaluation process 0 failed: ValueError: boom"):
        _generate_in_processes(None, None, [[1], [2]], processes=2, seed=0, progress=False)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    with pytest.raises(ValueError, match="torch.distributed is initialised"):
        _generate_in_processes(None, None, [[1], [2]], processes=2, seed=0, progress=False)


def test_long_runs_count_truncation_scores_and_first_samples_past_the_small_ints(
    tiny, rows3, monkeypatch
) -> None:
    _, tok = tiny
    reward = _stub(monkeypatch, _StubReward())
    filler = tok("    x = 1\n" * 200, add_special_tokens=False)["input_ids"][:300]
    answers = {tuple(_prompt_ids(tok, row["prompt"])): filler for row in rows3}
    # 300 new tokens and 3 x (86 + 1) = 261 completions: numbers CPython does not keep as one object each
    res = evaluate_model(
        ScriptedModel(answers, tok.pad_token_id),
        tok,
        rows3,
        n_samples=86,
        ks=(1,),
        max_new_tokens=300,
        progress=False,
    )
    assert [p.n_truncated for p in res.problems] == [86, 86, 86] and len(reward.calls[-1][1]) == 261


def test_the_first_completion_is_the_first_sample(tiny, rows3, monkeypatch) -> None:
    model, tok = tiny
    reward = _stub(monkeypatch, _StubReward())
    res = evaluate_model(model, tok, rows3, n_samples=3, ks=(1,), temperature=1.0, seed=2, **FAST)
    completions = reward.calls[-1][1]
    assert [p.first_completion for p in res.problems] == [completions[4 * i][:400] for i in range(3)]
    assert any(completions[4 * i] != completions[4 * i + 2] for i in range(3))  # the samples differ


def test_eval_kwargs_and_evaluate_to_file_carry_the_config(tiny, rows3, raw3, tmp_path, capfd) -> None:
    from experiments.evaluation.evaluate import eval_kwargs, evaluate_to_file
    from experiments.run.config import ExperimentArgs

    exp = ExperimentArgs(eval_n=1, eval_ks=[1], eval_max_new_tokens=24, eval_batch_size=2)
    assert "generation_kwargs" not in eval_kwargs(exp, 0)
    assert eval_kwargs(exp, 0, {"top_k": 20})["generation_kwargs"] == {"top_k": 20}
    _, tok = tiny
    model = _scripted(tok, rows3, list(raw3["canonical_solution"]))
    capfd.readouterr()
    data = evaluate_to_file(model, tok, rows3, exp, 0, tmp_path / "eval_before.json")
    assert "pass@k sampling" in capfd.readouterr().err  # a progress bar
    assert json.loads((tmp_path / "eval_before.json").read_text()) == json.loads(
        json.dumps(data, default=str)
    )
    assert data["metrics"]["pass@1"]["value"] == 1.0 and data["n"] == 1


def test_chat_prompts_end_with_the_generation_prompt_and_get_no_second_bos(tiny) -> None:
    from experiments.inputs.data import chat_messages

    _, tok = tiny

    class WithBos:  # a tokenizer that prepends a BOS when asked for special tokens
        def __call__(self, text, add_special_tokens=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            return {"input_ids": ([tok.eos_token_id] if add_special_tokens else []) + ids}

        def __getattr__(self, name):
            return getattr(tok, name)

    messages = chat_messages("def f(x):\n")
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text != tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert _prompt_ids(WithBos(), messages) == tok(text, add_special_tokens=False)["input_ids"]


def test_the_progress_bar_clears_itself_and_top_p_of_one_or_more_filters_nothing(
    tiny, rows3, raw3, monkeypatch
) -> None:
    import tqdm.auto

    from experiments.evaluation.evaluate import _TopP

    _, tok = tiny
    bars = []
    real = tqdm.auto.tqdm

    def recording(*args, **kwargs):
        bars.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(tqdm.auto, "tqdm", recording)
    model = _recording(tok, rows3, list(raw3["canonical_solution"]))
    evaluate_model(model, tok, rows3, n_samples=1, ks=(1,), top_p=1.5, **FAST)
    assert [b["leave"] for b in bars] == [False]  # the one-line results stay on the console, not the bar
    config, processors = model.configs[-1]
    assert config.top_p == 1.5 and not any(isinstance(p, _TopP) for p in processors)


def _threads_and_progress_seen(monkeypatch, *, threads: int, progress: bool) -> list[list[str]]:
    """What each of two processes' `_generate` saw: its torch thread count and its `progress`, as its one text."""
    import experiments.evaluation.evaluate as evaluation
    from experiments.evaluation.evaluate import Generation, _generate_in_processes

    def fake(model, tokenizer, share, **kwargs):
        text = f"{torch.get_num_threads()}|{kwargs['progress']}"
        return Generation([[text]] * len(share), 0, [[False]] * len(share), 0.0, [None] * len(share))

    monkeypatch.setattr(evaluation, "_generate", fake)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _generate_in_processes(None, None, [[1], [2]], processes=2, seed=0, progress=progress).texts
    finally:
        torch.set_num_threads(before)
