"""GPU product name or compute-capability text -> compute capability."""

from __future__ import annotations

import re

from gpuplan.compat.dataload import gpu_data

_CC_TEXT = re.compile(r"^\s*(?:sm_?(\d{2,3})|(\d{1,2})\.(\d))\s*$", re.IGNORECASE)


def cc_from_name(name: str | None) -> str | None:
    """Compute capability for a product name the driver reports ('NVIDIA GeForce RTX 4090' -> '8.9').

    The longest matching pattern wins, so a specific name is never shadowed by a family pattern;
    ``None`` when nothing matches (the report then says the capability is unknown).
    """
    if not name:
        return None
    best: tuple[int, str] | None = None
    for pattern, cc in gpu_data().names:
        for match in pattern.finditer(name):
            length = match.end() - match.start()
            if best is None or length > best[0]:
                best = (length, cc)
    return best[1] if best else None


def cc_from_text(text: str) -> str | None:
    """'sm_120' / 'sm120' / '12.0' -> '12.0'; anything else -> None."""
    match = _CC_TEXT.match(text)
    if match is None:
        return None
    if match.group(1):
        code = int(match.group(1))
        return f"{code // 10}.{code % 10}"
    return f"{int(match.group(2))}.{match.group(3)}"


def known_name_examples() -> list[str]:
    """Common names, for 'did you mean' messages."""
    return list(gpu_data().examples)
