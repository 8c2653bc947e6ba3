"""Byte and FLOP units. Bytes are ``int`` everywhere inside gpuplan; only renderers convert.

Binary units (KiB, MiB, GiB) are what PyTorch and nvidia-smi report; decimal GB appear only where a
source prints them (vendor datasheets, the ZeRO paper), and the name always says which.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9

TIB = 1024**4
PIB = 1024**5

_BINARY_STEPS = (("PiB", PIB), ("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB))
"""Largest first: a 1.6-million-GiB requirement (a typo's batch) prints as 1.55 PiB, not 1661405.46 GiB."""


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


_DECIMAL_STEPS = (("TB", 10**12), ("GB", GB), ("MB", 10**6), ("kB", 10**3))


def format_decimal_bytes(num_bytes: int | float, digits: int = 2) -> str:
    """Human-readable decimal size, e.g. ``'1.11 MB'``: for figures set beside decimal rates (GB/s), so a
    line never mixes GB with GiB; the unit follows the magnitude so small figures do not print as 0.00 GB."""
    for name, scale in _DECIMAL_STEPS:
        if abs(num_bytes) >= scale:
            return f"{num_bytes / scale:.{digits}f} {name}"
    return f"{int(num_bytes)} B"


def distinguishing_digits(values: list[int], reference: int, scale: int, digits: int = 2,
                          max_digits: int = 6) -> int:
    """Fewest decimals (at least ``digits``) at which every value that differs from ``reference`` also
    prints differently in units of ``scale``: a fit verdict beside two figures that read the same
    (9.75 GiB needs, 9.75 GiB usable, "no") hides why it was reached."""
    for d in range(digits, max_digits):
        ref = f"{reference / scale:.{d}f}"
        if all(v == reference or f"{v / scale:.{d}f}" != ref for v in values):
            return d
    return max_digits


_COUNT_STEPS = (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3))


def format_count(n: int | float) -> str:
    """1234567 -> '1.23M' (decimal, for parameter counts and FLOPs)."""
    for suffix, scale in _COUNT_STEPS:
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(int(n))


def format_count_significant(n: int, resolution: int = 1, significant: int = 3) -> str:
    """A count to ``significant`` figures, never finer than the ``resolution`` it is known to:
    335,174,458 -> '335M', 66,955,010 -> '67.0M', 7e9 known to 1e9 -> '7B', 72.7e9 known to 1e8 -> '72.7B'.
    One style for exact and rounded published counts alike."""
    for suffix, scale in _COUNT_STEPS:
        if abs(n) >= scale:
            decimals = max(0, significant - len(str(int(abs(n) // scale))))
            if resolution > 1:
                decimals = min(decimals, max(0, len(str(scale // resolution)) - 1) if resolution <= scale else 0)
            return f"{n / scale:.{decimals}f}{suffix}"
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
