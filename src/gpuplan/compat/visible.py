"""How many GPUs CUDA_VISIBLE_DEVICES leaves visible, by the rules torch itself applies.

torch 2.14.1 ``torch/cuda/__init__.py`` (``_parse_visible_devices``, ``_device_count_nvml``; source
S-TORCH2141-VISIBLE): each entry is read like C ``strtoul`` (leading digits); a negative or
non-numeric entry ends the list; a repeated entry makes the whole list empty; the list is cut at the
first index that does not exist. ``GPU-``/``MIG-`` UUID lists follow the same repeat/prefix rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Visibility:
    listed: int  # entries written in the variable
    visible: int | None  # GPUs CUDA will show; None when it depends on UUIDs not known here
    reason: str | None  # why fewer than listed are visible: "empty", "repeated", "invalid", "missing-index"


def _leading_int(entry: str) -> int:
    match = re.match(r"^[+-]?\d+", entry.strip())
    return int(match.group(0)) if match else -1


def visibility(value: str, gpu_count: int) -> Visibility:
    entries = value.split(",")
    listed = len([e for e in entries if e.strip()])
    if not value.strip():
        return Visibility(0, 0, "empty")
    if value.startswith(("GPU-", "MIG-")):
        prefix = value[:4]
        seen: list[str] = []
        for entry in entries:
            if entry in seen:
                return Visibility(listed, 0, "repeated")
            if not entry.startswith(prefix):
                break
            seen.append(entry)
        return Visibility(listed, None, None)
    ordinals: list[int] = []
    for entry in entries:
        number = _leading_int(entry)
        if number in ordinals:
            return Visibility(listed, 0, "repeated")
        if number < 0:
            reason = "invalid"
            return Visibility(listed, len(_cut(ordinals, gpu_count)), reason)
        ordinals.append(number)
    kept = _cut(ordinals, gpu_count)
    return Visibility(listed, len(kept), "missing-index" if len(kept) < len(ordinals) else None)


def _cut(ordinals: list[int], gpu_count: int) -> list[int]:
    for i, ordinal in enumerate(ordinals):
        if ordinal >= gpu_count:
            return ordinals[:i]
    return ordinals
