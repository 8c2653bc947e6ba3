"""Reading the user's model files: a config.json and safetensors headers, with bounded memory.

Every read is size-limited and nesting is bounded (through :mod:`gpuplan.userio`: ``/dev/zero``
named config.json, 10,000 nested lists), and every field a later stage relies on is checked here,
so a damaged or hostile file is one :class:`~gpuplan.errors.ModelSourceError` line naming the file
and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gpuplan.errors import ModelSourceError, one_line
from gpuplan.units import MIB
from gpuplan.userio import parse_user_json, read_user_text

CONFIG_MAX_BYTES: Final = 8 * MIB
"""Largest config.json read. Published configs are a few KiB; one with 21,843 ImageNet labels
(``id2label``) is about 1 MiB."""

SAFETENSORS_HEADER_MAX_BYTES: Final = 100_000_000
"""The safetensors format's own header limit (``MAX_HEADER_SIZE`` in the reference reader)."""

SAFETENSORS_MAX_RANK: Final = 16
"""More dimensions than any stored weight has; bounds the work on a hostile header."""

SAFETENSORS_DTYPE_BITS: Final[Mapping[str, int]] = {
    "F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U8": 8,
    "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8, "U16": 16, "U32": 32, "U64": 64, "F8_E8M0": 8, "F4": 4,
    "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64,
}
"""Bits per element of each dtype name the safetensors format defines."""


def read_json_object(path: Path, hint: str = "pass a Hugging Face config.json") -> dict[str, Any]:
    """A JSON object from a user's config file (bounded read, one-line errors): a diffusers
    ``model_index.json`` or a component's ``config.json``, which have no ``model_type``."""
    what = f"config file {str(path)!r}"
    text = read_user_text(path, what=what, limit_bytes=CONFIG_MAX_BYTES, error=ModelSourceError,
                          hint=f" for a config.json; {hint}")
    config = parse_user_json(text, what=what, error=ModelSourceError)
    if not isinstance(config, dict):
        raise ModelSourceError(f"{path} holds a JSON {type(config).__name__}, not an object; {hint}")
    return config


def read_config_json(path: Path) -> dict[str, Any]:
    """A Hugging Face config.json as a dict with a string ``model_type``."""
    hint = "pass a Hugging Face config.json"
    config = read_json_object(path, hint)
    model_type = config.get("model_type")
    if model_type is None:
        raise ModelSourceError(f"{path} has no 'model_type'; {hint}")
    if not isinstance(model_type, str) or not model_type:
        raise ModelSourceError(f"{path}: 'model_type' must be a non-empty string such as \"llama\", "
                               f"not {one_line(json.dumps(model_type), 60)}; {hint}")
    return config


# ----------------------------------------------------------------------------- safetensors ----

@dataclass(frozen=True, slots=True)
class WeightsSummary:
    """Parameter count and bytes of a checkpoint from its headers alone (no tensor is read):
    safetensors headers, or a GGUF file's tensor infos (models/gguf.py)."""

    files: tuple[str, ...]
    params_count: int
    weight_bytes: int
    dtypes: dict[str, int]
    """dtype (or GGUF quantization type) -> parameter count."""
    tensor_bytes: tuple[int, ...] = ()
    """Bytes of each stored tensor, in file order (what loading them allocates, one by one)."""
    format: str = "safetensors"
    """``safetensors`` or ``gguf``."""
    dtype_bytes: dict[str, int] = field(default_factory=dict)
    """dtype (or GGUF quantization type) -> stored bytes, scales and block headers included."""
    architecture: str | None = None
    """What the file says the model is (GGUF ``general.architecture``), if it says."""

    def describe(self) -> dict[str, Any]:
        return {"format": self.format, "files": list(self.files), "params_count": self.params_count,
                "weight_bytes": self.weight_bytes, "params_by_dtype": dict(self.dtypes),
                "bytes_by_dtype": dict(self.dtype_bytes), "architecture": self.architecture}


SafetensorsSummary = WeightsSummary
"""The name this summary had when safetensors was the only header format."""


@dataclass(frozen=True, slots=True)
class _Tensor:
    dtype: str
    numel: int
    nbytes: int


def _bad(path: Path, problem: str) -> ModelSourceError:
    return ModelSourceError(f"{path} is not a valid safetensors file ({problem}); "
                            "pass the checkpoint as saved by safetensors, or its config.json")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_tensor(path: Path, name: str, meta: object, data_bytes: int) -> _Tensor:
    """One header entry: dtype known, shape of non-negative ints, offsets inside the data section,
    and the offsets spanning exactly the bytes the shape and dtype need."""
    label = one_line(repr(name), 80)
    if not isinstance(meta, dict) or set(meta) != {"dtype", "shape", "data_offsets"}:
        raise _bad(path, f"tensor {label} must have exactly dtype, shape and data_offsets")
    dtype, shape, offsets = meta["dtype"], meta["shape"], meta["data_offsets"]
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BITS:
        raise _bad(path, f"tensor {label} has dtype {one_line(json.dumps(dtype), 40)}, not one of "
                         f"{', '.join(SAFETENSORS_DTYPE_BITS)}")
    if not isinstance(shape, list) or len(shape) > SAFETENSORS_MAX_RANK or not all(
            _is_int(d) and d >= 0 for d in shape):
        raise _bad(path, f"tensor {label} has shape {one_line(json.dumps(shape), 60)}; a shape is a list of "
                         f"at most {SAFETENSORS_MAX_RANK} non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data_bytes):
        raise _bad(path, f"tensor {label} has data_offsets {one_line(json.dumps(offsets), 60)}; they must be "
                         f"[start, end] with 0 <= start <= end <= {data_bytes:,} (the bytes after the header)")
    numel = 0 if 0 in shape else 1
    for d in shape if numel else ():
        numel *= d
        if numel > 8 * data_bytes:  # more elements than bits in the file: stop before numbers grow
            break
    nbytes = offsets[1] - offsets[0]
    if numel * SAFETENSORS_DTYPE_BITS[dtype] != 8 * nbytes:
        raise _bad(path, f"tensor {label}: shape {shape} of {dtype} needs "
                         f"{numel * SAFETENSORS_DTYPE_BITS[dtype] / 8:,.0f} bytes but data_offsets span {nbytes:,}")
    return _Tensor(dtype, numel, nbytes)


def _read_header(path: Path) -> list[_Tensor]:
    try:
        file_bytes = path.stat().st_size
        with path.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise _bad(path, f"{len(prefix)} bytes long, shorter than the 8-byte header length")
            header_len = int.from_bytes(prefix, "little")
            if not 2 <= header_len <= min(SAFETENSORS_HEADER_MAX_BYTES, file_bytes - 8):
                raise _bad(path, f"header length {header_len:,} does not fit a {file_bytes:,}-byte file "
                                 f"(at most {SAFETENSORS_HEADER_MAX_BYTES:,})")
            raw = fh.read(header_len)
    except OSError as exc:
        raise ModelSourceError(f"cannot read {path}: {one_line(exc.strerror or exc)}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(path, "the header is not UTF-8 JSON") from None
    header = parse_user_json(text, what=f"the safetensors header of {path}", error=ModelSourceError)
    if not isinstance(header, dict):
        raise _bad(path, f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", {})
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _bad(path, "__metadata__ must map names to strings")
    data_bytes = file_bytes - 8 - header_len
    return [_check_tensor(path, name, meta, data_bytes) for name, meta in header.items()]


def read_safetensors_headers(path: Path) -> SafetensorsSummary:
    """What the checkpoint at ``path`` (a file, or a folder of shards) holds, from headers alone."""
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise ModelSourceError(f"{path} holds no .safetensors files")
    tensors = [t for f in files for t in _read_header(f)]
    if not tensors:
        raise ModelSourceError(f"{path} holds no tensors; pass a checkpoint with the model's weights")
    dtypes: dict[str, int] = {}
    dtype_bytes: dict[str, int] = {}
    for t in tensors:
        dtypes[t.dtype] = dtypes.get(t.dtype, 0) + t.numel
        dtype_bytes[t.dtype] = dtype_bytes.get(t.dtype, 0) + t.nbytes
    return WeightsSummary(tuple(str(f) for f in files), sum(t.numel for t in tensors),
                          sum(t.nbytes for t in tensors), dtypes, tuple(t.nbytes for t in tensors),
                          dtype_bytes=dtype_bytes)


__all__ = ["CONFIG_MAX_BYTES", "SafetensorsSummary", "WeightsSummary", "read_config_json",
           "read_safetensors_headers"]
