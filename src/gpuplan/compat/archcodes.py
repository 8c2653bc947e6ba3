"""Compute-capability and arch-list strings: '8.6' <-> 86, TORCH_CUDA_ARCH_LIST, get_arch_list() entries.

Pure text, no data files: the data loader (dataload) parses the wheels' arch lists with these, and the
arch rules (archs) judge them against the data, so neither imports the other.
"""

from __future__ import annotations

import re

_ENTRY = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def cc_to_code(cc: str) -> int | None:
    """'8.6' -> 86, '12.0' -> 120."""
    try:
        major_s, minor_s = cc.split(".")
        return int(major_s) * 10 + int(minor_s)
    except ValueError:
        return None


def code_to_cc(code: int) -> str:
    return f"{code // 10}.{code % 10}"


def parse_arch_setting(setting: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST style '7.5;8.0;12.0+PTX' -> ['sm_75', 'sm_80', 'sm_120', 'compute_120']."""
    entries: list[str] = []
    for raw in setting.replace(" ", ";").split(";"):
        item = raw.strip()
        if not item:
            continue
        ptx = item.endswith("+PTX")
        code = cc_to_code(item.removesuffix("+PTX"))
        if code is None:
            continue
        entries.append(f"sm_{code}")
        if ptx:
            entries.append(f"compute_{code}")
    return entries


def parse_arch_list(entries: list[str]) -> list[tuple[str, int]]:
    """['sm_90', 'compute_120', 'garbage'] -> [('sm', 90), ('compute', 120)]; suffixes a/f dropped."""
    parsed: list[tuple[str, int]] = []
    for entry in entries:
        match = _ENTRY.match(entry.strip())
        if match:
            parsed.append((match.group(1), int(match.group(2))))
    return parsed
