"""Byte and FLOP units. Bytes are ``int`` everywhere inside gpuplan; only renderers convert.

Binary units (KiB, MiB, GiB) are what PyTorch and nvidia-smi report; decimal GB appear only where a
source prints them (vendor datasheets, the ZeRO paper), and the name always says which.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9

_BINARY_STEPS = (("GiB", GIB), ("MiB", MIB), ("KiB", KIB))


def bytes_to_gib(num_bytes: int | float) -> float:
    return num_bytes / GIB


def bytes_to_mib(num_bytes: int | float) -> float:
    return num_bytes / MIB


def gib_to_bytes(gib: float) -> int:
    return round(gib * GIB)


def format_bytes(num_bytes: int | float, unit: str | None = None, digits: int = 2) -> str:
    """Human-readable binary size, e.g. ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    if unit is not None:
        scale = dict((*_BINARY_STEPS, ("B", 1)))[unit]
        return f"{num_bytes / scale:.{digits}f} {unit}"
    for name, scale in _BINARY_STEPS:
        if abs(num_bytes) >= scale:
            return f"{num_bytes / scale:.{digits}f} {name}"
    return f"{int(num_bytes)} B"


def format_count(n: int | float) -> str:
    """1234567 -> '1.23M' (decimal, for parameter counts and FLOPs)."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(int(n))


def format_flops(flops: int | float) -> str:
    for suffix, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(flops) >= scale:
            return f"{flops / scale:.2f} {suffix}"
    return f"{int(flops)} FLOP"


def format_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"
