"""GGUF checkpoints (llama.cpp's format): weight bytes per quantization type from the header alone.

The header (GGUF v2/v3, docs/gguf.md of ggml: magic, version, tensor count, key/value pairs, tensor
infos) is parsed here from a read-only memory map, with the ``gguf`` package's tables for the value
types, the quantization types and their block layouts (``gguf.GGML_QUANT_SIZES``: elements per block
and bytes per block, scales included); the tensor data is never read. Each tensor's bytes follow from
its type's block layout, so the weight bytes are exact for every quantization type (Q4_K_M files mix
several). The package's own ``GGUFReader`` is not used: it builds numpy views of every header item
and took 20 s and 575 MiB for an 8B model's header (its 128k-token vocabulary and 280k merges;
benchmarks/model_sources.py). Every count is checked against the bytes left before it is looped over,
so a damaged or hostile header is one line, quickly. A file whose data section is shorter than its
tensor infos say is refused: its counts would be fiction.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gpuplan.errors import MissingDependencyError, ModelSourceError, one_line
from gpuplan.extras import GGUF
from gpuplan.models.files import WeightsSummary

GGUF_MAGIC: Final = b"GGUF"
"""The first four bytes of every GGUF file (gguf/constants.py ``GGUF_MAGIC``, little-endian)."""

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""llama.cpp's split naming (``gguf-split``): ``model-00001-of-00003.gguf``."""


def _require_gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:
        raise MissingDependencyError(GGUF.message()) from exc
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


GGUF_MAX_DIMS: Final = 4
"""Dimensions a GGUF tensor may have (``GGML_MAX_DIMS``)."""
_MAX_NESTING: Final = 8
"""Arrays of arrays deeper than this are not a model header."""
GGUF_MAX_ITEMS: Final = 1 << 24
"""Most strings in one header array, tensors or key/value pairs one file may declare: 64× the largest
vocabulary published (Gemma 3's 262,144 tokens). Bounds the work on a damaged count whose items would
fit in a multi-GB data section of zeros."""
_SCALAR: Final = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
"""struct format of each scalar GGUF value type (``gguf.GGUFValueType``; 8 is STRING, 9 is ARRAY)."""
_STRING, _ARRAY = 8, 9


class _Header:
    """A bounded little-endian cursor over the mapped file; any overrun is a one-line error."""

    def __init__(self, path: Path, data: Any) -> None:
        self.path, self.data, self.pos = path, data, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise _bad(self.path, f"the header ends at byte {len(self.data):,}, inside a field: it is truncated")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self, what: str, min_item_bytes: int, *, looped: bool = False) -> int:
        """A u64 count whose items (each at least ``min_item_bytes``) fit in the bytes left; at most
        :data:`GGUF_MAX_ITEMS` where each item is ``looped`` over."""
        n = int(self.take("<Q"))
        if looped and n > GGUF_MAX_ITEMS:
            raise _bad(self.path, f"{what} count {n:,} is more than the {GGUF_MAX_ITEMS:,} gpuplan reads")
        if n * min_item_bytes > len(self.data) - self.pos:
            raise _bad(self.path, f"{what} count {n:,} does not fit in the {len(self.data) - self.pos:,} bytes left")
        return n

    def string(self) -> str:
        n = self.count("string length", 1)
        raw = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if kind in _SCALAR:
            self.pos += struct.calcsize(_SCALAR[kind])
        elif kind == _STRING:
            length = self.count("string length", 1)  # (count() moves the cursor past the length itself)
            self.pos += length
        elif kind == _ARRAY and depth < _MAX_NESTING:
            item = int(self.take("<I"))
            if item in _SCALAR:
                items = self.count("array", struct.calcsize(_SCALAR[item]))
                self.pos += items * struct.calcsize(_SCALAR[item])
            else:
                for _ in range(self.count("array", 8, looped=True)):  # a string or array item is at least 8 bytes
                    self.skip_value(item, depth + 1)
        else:
            raise _bad(self.path, f"value type {kind} at byte {self.pos:,} is not a GGUF type")
        if self.pos > len(self.data):
            raise _bad(self.path, "a value runs past the end of the file: it is truncated")

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        if kind in _SCALAR:
            return self.take(_SCALAR[kind])
        self.skip_value(kind)
        return None


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One tensor of a GGUF file as its tensor info states it (the data is never read)."""

    name: str
    type_name: str
    """ggml type name (``Q4_K``, ``F16``...)."""
    shape: tuple[int, ...]
    """ggml order: ``ne[0]`` (the row length) first."""
    nbytes: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class GGUFModel:
    """The tensors and the scalar metadata (``llama.block_count``...) of a GGUF model; arrays (the
    tokenizer) are skipped."""

    tensors: tuple[GGUFTensor, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    architecture: str | None = None


def _read_one(path: Path, gguf: Any) -> tuple[list[GGUFTensor], dict[str, Any], str | None]:
    """The tensors of one file, its scalar metadata and its architecture."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 24:
                magic = fh.read(4)
                raise _bad(path, f"it starts with {magic!r}, not {GGUF_MAGIC!r}, and holds {size} bytes")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse(_Header(path, data), gguf, size)
    except OSError as exc:
        raise ModelSourceError(f"cannot read {path}: {one_line(exc.strerror or exc)}") from exc


def _parse(h: _Header, gguf: Any, file_bytes: int) -> tuple[list[GGUFTensor], dict[str, Any], str | None]:
    path = h.path
    magic = bytes(h.data[:4])
    if magic != GGUF_MAGIC:
        raise _bad(path, f"it starts with {magic!r}, not {GGUF_MAGIC!r}")
    h.pos = 4
    version = int(h.take("<I"))
    if version not in (2, 3):
        swapped = " (a big-endian file: convert it little-endian)" if version & 0xFFFF == 0 else ""
        raise _bad(path, f"format version {version}; gpuplan reads versions 2 and 3{swapped}")
    tensor_count = h.count("tensor", 8 + 4 + 8 + 4 + 8, looped=True)
    kv_count = h.count("key/value", 8 + 4, looped=True)
    architecture: str | None = None
    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = h.string()
        kind = int(h.take("<I"))
        if key == "general.architecture" and kind == _STRING:
            architecture = h.string()
            metadata[key] = architecture
        elif key == "general.alignment":
            value = h.value(kind)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value & (value - 1):
                raise _bad(path, f"general.alignment is {value!r}, not a power of two")
            alignment = value
        elif kind in _SCALAR or (kind == _STRING and not key.startswith("tokenizer.")):
            metadata[key] = h.value(kind)
        else:
            h.skip_value(kind)
    infos: list[tuple[GGUFTensor, int]] = []
    for _ in range(tensor_count):
        name = h.string()
        label = one_line(repr(name), 80)
        n_dims = int(h.take("<I"))
        if not 1 <= n_dims <= GGUF_MAX_DIMS:
            raise _bad(path, f"tensor {label} has {n_dims} dimensions (1 to {GGUF_MAX_DIMS})")
        shape = tuple(int(h.take("<Q")) for _ in range(n_dims))
        numel = 1
        for d in shape:
            numel *= d
        code = int(h.take("<I"))
        offset = int(h.take("<Q"))
        try:
            qtype = gguf.GGMLQuantizationType(code)
            block, type_bytes = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise _bad(path, f"tensor {label} has type {code}, not a ggml type this gguf package knows "
                             "(a newer gguf may)") from None
        if numel % block:
            raise _bad(path, f"tensor {label} has {numel:,} elements, not whole {qtype.name} blocks of {block}")
        infos.append((GGUFTensor(name, qtype.name, shape, numel // block * type_bytes), offset))
    data_start = -(-h.pos // alignment) * alignment
    for t, offset in infos:
        if data_start + offset + t.nbytes > file_bytes:
            raise _bad(path, f"a {t.type_name} tensor of {t.nbytes:,} bytes at data offset {offset:,} ends past the "
                             f"{file_bytes:,}-byte file: it is truncated")
    return [t for t, _ in infos], metadata, architecture


def _read_files(path: Path) -> tuple[tuple[str, ...], GGUFModel]:
    gguf = _require_gguf()
    files = gguf_files(path)
    tensors: list[GGUFTensor] = []
    metadata: dict[str, Any] = {}
    architecture = None
    for f in files:
        found, meta, arch = _read_one(f, gguf)
        tensors += found
        metadata = metadata or meta  # split files repeat the first file's keys (gguf-split)
        architecture = architecture or arch
    if not tensors:
        raise ModelSourceError(f"{path} holds no tensors; pass a GGUF file with the model's weights")
    return tuple(str(f) for f in files), GGUFModel(tuple(tensors), metadata, architecture)


def read_gguf_model(path: Path) -> GGUFModel:
    """Every tensor (name, type, shape, bytes) and the scalar metadata of the GGUF model at ``path``."""
    return _read_files(path)[1]


def read_gguf_header(path: Path) -> WeightsSummary:
    """What the GGUF checkpoint at ``path`` (a file, or a folder with one model) holds, from its header."""
    files, model = _read_files(path)
    params: dict[str, int] = {}
    stored: dict[str, int] = {}
    for t in model.tensors:
        params[t.type_name] = params.get(t.type_name, 0) + t.elements
        stored[t.type_name] = stored.get(t.type_name, 0) + t.nbytes
    return WeightsSummary(files, sum(t.elements for t in model.tensors), sum(t.nbytes for t in model.tensors),
                          params, tuple(t.nbytes for t in model.tensors), format="gguf", dtype_bytes=stored,
                          architecture=model.architecture)


__all__ = ["GGUF_MAGIC", "GGUFModel", "GGUFTensor", "gguf_files", "read_gguf_header", "read_gguf_model"]
