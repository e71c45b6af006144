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
