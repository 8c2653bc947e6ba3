"""Bytes per element of every dtype gpuplan names, by PyTorch's name (``str(torch.bfloat16)`` without
``torch.``): the one table the trace readers, the quantized-weight layouts, the planner's kernel fusions
and the serving budget read, so a dtype's size is written once.

Sizes are the storage sizes PyTorch allocates (``torch.empty((), dtype=d).element_size()``); no
torch import is needed to read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

DTYPE_BYTES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "float64": 8,
        "float32": 4,
        "float16": 2,
        "bfloat16": 2,
        "float8_e4m3fn": 1,
        "float8_e5m2": 1,
        "float8_e4m3fnuz": 1,
        "float8_e5m2fnuz": 1,
        "int64": 8,
        "int32": 4,
        "int16": 2,
        "int8": 1,
        "uint8": 1,
        "bool": 1,
    }
)
"""torch dtype name -> bytes per element."""

FLOAT_DTYPES: Final[tuple[str, ...]] = ("float64", "float32", "float16", "bfloat16")
"""The floating dtypes a kernel computes in (not the 8-bit storage formats)."""


def dtype_bytes(name: str) -> int:
    """Bytes per element of ``name`` (``torch.`` prefix allowed); a KeyError names an unknown dtype."""
    return DTYPE_BYTES[name.removeprefix("torch.")]
