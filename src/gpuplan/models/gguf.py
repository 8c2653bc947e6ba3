"""GGUF checkpoints (llama.cpp's format): weight bytes per quantization type from the header alone.

The ``gguf`` package's reader parses the key/value header and the tensor infos (name, shape,
quantization type, offset); the tensor data is memory-mapped by that reader and never touched here.
Each tensor's bytes follow from its type's block layout (``gguf.GGML_QUANT_SIZES``: elements per
block and bytes per block, scales included), so the weight bytes are exact for every quantization
type (Q4_K_M files mix several). A file whose data section is shorter than its tensor infos say is
refused: its counts would be fiction.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

from gpuplan.errors import MissingDependencyError, ModelSourceError, one_line
from gpuplan.models.files import WeightsSummary

GGUF_MAGIC: Final = b"GGUF"
"""The first four bytes of every GGUF file (gguf/constants.py ``GGUF_MAGIC``, little-endian)."""

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""llama.cpp's split naming (``gguf-split``): ``model-00001-of-00003.gguf``."""


def _require_gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:
        raise MissingDependencyError(
            "reading .gguf files needs the 'gguf' package: pip install 'gpuplan[hub]'") from exc
    return gguf


def gguf_files(path: Path) -> list[Path]:
    """The GGUF file(s) of one model at ``path``: the file, or a folder's single file or split set."""
    if not path.is_dir():
        return [path]
    found = sorted(path.glob("*.gguf"))
    if not found:
        raise ModelSourceError(f"{path} holds no .gguf files")
    if len(found) == 1:
        return found
    sets = {m.group("stem") for f in found if (m := _SPLIT.match(f.name))}
    if len(sets) == 1 and all(_SPLIT.match(f.name) for f in found):
        return found
    names = ", ".join(f.name for f in found[:6]) + (", …" if len(found) > 6 else "")
    raise ModelSourceError(f"{path} holds {len(found)} GGUF files that are not one split model ({names}); "
                           "pass the one file to estimate")


def _bad(path: Path, problem: str) -> ModelSourceError:
    return ModelSourceError(f"{path} is not a valid GGUF file ({problem}); pass a .gguf file as llama.cpp "
                            "writes it, or the model's config.json")


def _architecture(reader: Any) -> str | None:
    field = reader.fields.get("general.architecture")
    if field is None:
        return None
    try:
        value = field.contents()
    except Exception:  # a damaged field: the architecture is only reported, never needed
        return None
    return value if isinstance(value, str) else None


def _read_one(path: Path, gguf: Any) -> tuple[list[tuple[str, int, int]], str | None]:
    """(quant type, elements, bytes) of each tensor of one file, and its architecture."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelSourceError(f"cannot read {path}: {one_line(exc.strerror or exc)}") from exc
    if magic != GGUF_MAGIC:
        raise _bad(path, f"it starts with {magic!r}, not {GGUF_MAGIC!r}")
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # the reader's own checks of a damaged header, whatever their type
        raise _bad(path, f"{type(exc).__name__}: {one_line(exc, 160)}") from exc
    tensors: list[tuple[str, int, int]] = []
    for t in reader.tensors:
        qtype = gguf.GGMLQuantizationType(t.tensor_type)
        block, type_bytes = gguf.GGML_QUANT_SIZES[qtype]
        numel = int(t.n_elements)
        if numel % block:
            raise _bad(path, f"tensor {one_line(repr(t.name), 80)} has {numel:,} elements, not whole "
                             f"{qtype.name} blocks of {block}")
        nbytes = numel // block * type_bytes
        if int(t.data.nbytes) != nbytes:
            raise _bad(path, f"tensor {one_line(repr(t.name), 80)} needs {nbytes:,} bytes of {qtype.name} but the "
                             f"file holds {int(t.data.nbytes):,}: it is truncated")
        tensors.append((qtype.name, numel, nbytes))
    return tensors, _architecture(reader)


def read_gguf_header(path: Path) -> WeightsSummary:
    """What the GGUF checkpoint at ``path`` (a file, or a folder with one model) holds, from its header."""
    gguf = _require_gguf()
    files = gguf_files(path)
    tensors: list[tuple[str, int, int]] = []
    architecture = None
    for f in files:
        found, arch = _read_one(f, gguf)
        tensors += found
        architecture = architecture or arch
    if not tensors:
        raise ModelSourceError(f"{path} holds no tensors; pass a GGUF file with the model's weights")
    params: dict[str, int] = {}
    stored: dict[str, int] = {}
    for qtype, numel, nbytes in tensors:
        params[qtype] = params.get(qtype, 0) + numel
        stored[qtype] = stored.get(qtype, 0) + nbytes
    return WeightsSummary(tuple(str(f) for f in files), sum(t[1] for t in tensors), sum(t[2] for t in tensors),
                          params, tuple(t[2] for t in tensors), format="gguf", dtype_bytes=stored,
                          architecture=architecture)


__all__ = ["GGUF_MAGIC", "gguf_files", "read_gguf_header"]
