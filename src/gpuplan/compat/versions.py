"""Version strings as comparable tuples: driver versions, CUDA versions, torch versions.

Every parser returns ``None`` for text it cannot read instead of raising: the probe feeds it
whatever tools printed, and a garbled version must end up as "unknown" in the report.
"""

from __future__ import annotations

import re

_NUMBERS = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'2.14.1+cu130' -> (2, 14, 1); '580.65.06' -> (580, 65, 6); garbage -> None."""
    if not text:
        return None
    match = _NUMBERS.match(text)
    if match is None:
        return None
    try:
        return tuple(int(part) for part in match.group(1).split("."))
    except ValueError:  # pragma: no cover - the regex only lets digits through
        return None


def major_minor(text: str | None) -> str | None:
    """'2.14.1+cu130' -> '2.14'; '12.6.3' -> '12.6'; '13' -> '13.0'."""
    parts = parse_version(text)
    if parts is None:
        return None
    minor = parts[1] if len(parts) > 1 else 0
    return f"{parts[0]}.{minor}"


def local_tag(version: str | None) -> str | None:
    """'2.7.1+cu126' -> 'cu126'; '2.7.1' -> None."""
    if not version or "+" not in version:
        return None
    tag = version.split("+", 1)[1].strip()
    return tag or None


def cuda_from_driver_int(value: int | None) -> str | None:
    """cudaDriverGetVersion() / NVML encoding: 12040 -> '12.4' (1000*major + 10*minor)."""
    if value is None or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def cuda_from_tag(tag: str | None) -> str | None:
    """'cu126' -> '12.6', 'cu118' -> '11.8', 'cu102' -> '10.2'; other tags -> None."""
    if not tag:
        return None
    match = re.fullmatch(r"cu(\d{2,3})", tag)
    if match is None:
        return None
    digits = match.group(1)
    return f"{digits[:-1]}.{digits[-1]}"


def version_at_least(have: str | None, need: str | None) -> bool | None:
    """True/False when both versions parse, else None (unknown)."""
    have_v, need_v = parse_version(have), parse_version(need)
    if have_v is None or need_v is None:
        return None
    width = max(len(have_v), len(need_v))
    return have_v + (0,) * (width - len(have_v)) >= need_v + (0,) * (width - len(need_v))
