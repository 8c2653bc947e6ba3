"""Parsers for what tools print: nvidia-smi (``-q``, table, CSV, ``-L``), nvcc, cudnn_version.h,
rocm-smi, torch/version.py, /etc/os-release.

Contract: every parser accepts any string (garbled, truncated, empty, another tool's output) and
returns what it could read; a field it could not read is ``None``. None of them raises.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from gpuplan.units import GIB, KIB, MIB

_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "kb": KIB, "mb": MIB, "gb": GIB}
_NOT_A_VALUE = {"", "n/a", "[n/a]", "not found", "none", "[not supported]", "not supported", "unknown error"}


@dataclass
class SmiGpu:
    """One GPU as nvidia-smi showed it; every field may be missing."""

    index: int
    name: str | None = None
    cc: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    mig_mode: bool | None = None
    mig_devices: int | None = None
    ecc: bool | None = None
    processes: int | None = None


@dataclass
class SmiReport:
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[SmiGpu] = field(default_factory=list)


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _NOT_A_VALUE else text


def _memory_bytes(text: str | None, default_unit: str = "MiB") -> int | None:
    """'81920 MiB' -> bytes; '81920' with default MiB; garbage -> None (nvidia-smi MiB are binary)."""
    if text is None:
        return None
    match = _MEMORY.match(text)
    if match is None:
        return None
    unit = (match.group(2) or default_unit).lower()
    return int(float(match.group(1)) * _UNIT_BYTES[unit])


def _enabled(text: str | None) -> bool | None:
    if text is None:
        return None
    low = text.strip().lower()
    if low in ("enabled", "on", "1", "yes"):
        return True
    if low in ("disabled", "off", "0", "no"):
        return False
    return None


def _version(text: str | None) -> str | None:
    if text is None:
        return None
    match = re.match(r"^\s*(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def parse_smi_query(text: str) -> SmiReport:
    """``nvidia-smi -q``: indented 'Key : Value' lines, one 'GPU <bus id>' block per device.

    Section titles ('FB Memory Usage', 'MIG Mode', 'Processes') are lines without a colon; the
    open sections are tracked by indentation.
    """
    report = SmiReport()
    gpu: SmiGpu | None = None
    sections: list[tuple[int, str]] = []  # (indent, title) of the open sections, outermost first
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        indent = len(raw) - len(raw.lstrip())
        while sections and sections[-1][0] >= indent:
            sections.pop()
        if re.fullmatch(r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f:.]+", line):
            gpu = SmiGpu(index=len(report.gpus))
            report.gpus.append(gpu)
            sections = []
            continue
        key, sep, val = line.partition(":")
        if not sep:
            parent = sections[-1][1] if sections else None
            if gpu is not None and line == "MIG Device" and parent == "MIG Devices":
                gpu.mig_devices = (gpu.mig_devices or 0) + 1
            sections.append((indent, line))
            continue
        key = key.strip()
        value = _value(val)
        none_listed = val.strip().lower() == "none"
        if gpu is None:
            if key == "Driver Version":
                report.driver_version = _version(value)
            elif key == "CUDA Version":
                report.cuda_version = _version(value)
            continue
        # section titles changed case across driver versions ("Ecc Mode" -> "ECC Mode")
        title = sections[-1][1].lower() if sections else None
        if title is None:
            if key == "Product Name":
                gpu.name = value
            elif key in ("Compute Capability", "CUDA Compute Capability"):
                gpu.cc = _version(value)
            elif key == "MIG Devices" and none_listed:
                gpu.mig_devices = 0
            elif key == "Processes" and none_listed:
                gpu.processes = 0
        elif title == "mig mode" and key == "Current":
            gpu.mig_mode = _enabled(value)
        elif title == "fb memory usage" and key in ("Total", "Used"):
            amount = _memory_bytes(value)
            if key == "Total":
                gpu.memory_total_bytes = amount
            else:
                gpu.memory_used_bytes = amount
        elif title == "ecc mode" and key == "Current":
            gpu.ecc = _enabled(value)
        elif key == "Process ID" and any(t == "Processes" for _, t in sections):
            gpu.processes = (gpu.processes or 0) + 1
    return report


_TABLE_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>[\d.]+)\s+Driver Version:\s*(?P<driver>[\d.]+)"
    r"(?:\s+CUDA Version:\s*(?P<cuda>[\d.]+|N/A))?"
)
_TABLE_ROW1 = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off|WDDM|TCC)\s+\|")
_TABLE_ROW2 = re.compile(r"(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB")
_TABLE_MIG = re.compile(r"\|\s+(Enabled|Disabled|N/A)\s+\|\s*$")


def parse_smi_table(text: str) -> SmiReport:
    """Plain ``nvidia-smi``: the header line and the per-GPU boxes (what people paste in issues)."""
    report = SmiReport()
    header = _TABLE_HEADER.search(text)
    if header:
        report.driver_version = header.group("driver")
        cuda = header.group("cuda")
        report.cuda_version = cuda if cuda and cuda != "N/A" else None
    lines = text.splitlines()
    in_mig = in_procs = False
    for i, line in enumerate(lines):
        if "MIG devices:" in line:
            in_mig, in_procs = True, False
            continue
        if "Processes:" in line:
            in_mig, in_procs = False, True
            continue
        if in_mig:
            mig_row = re.match(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|", line)
            if mig_row:
                gpu_index = int(mig_row.group(1))
                for gpu in report.gpus:
                    if gpu.index == gpu_index:
                        gpu.mig_devices = (gpu.mig_devices or 0) + 1
            continue
        if in_procs:
            proc_row = re.match(r"^\|\s+(\d+)\s+(?:\S+\s+){2,3}(\d+)\s+[CG+]{1,3}\s", line)
            if proc_row:
                gpu_index = int(proc_row.group(1))
                for gpu in report.gpus:
                    if gpu.index == gpu_index:
                        gpu.processes = (gpu.processes or 0) + 1
            if "No running processes found" in line:
                for gpu in report.gpus:
                    gpu.processes = 0
            continue
        row = _TABLE_ROW1.match(line)
        if row is None:
            continue
        gpu = SmiGpu(index=int(row.group("index")), name=row.group("name").strip().rstrip("."))
        if i + 1 < len(lines):
            mem = _TABLE_ROW2.search(lines[i + 1])
            if mem:
                gpu.memory_used_bytes = int(mem.group("used")) * MIB
                gpu.memory_total_bytes = int(mem.group("total")) * MIB
        if i + 2 < len(lines):
            mig = _TABLE_MIG.search(lines[i + 2])
            if mig:
                gpu.mig_mode = _enabled(mig.group(1))
        report.gpus.append(gpu)
    return report


def parse_smi_csv(text: str, fields: list[str]) -> list[dict[str, str | None]]:
    """``nvidia-smi --query-gpu=<fields> --format=csv,noheader``: one row per GPU."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.lower().startswith(("field", "index", "error")):
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            continue
        rows.append({name: _value(cell) for name, cell in zip(fields, cells, strict=True)})
    return rows


def parse_smi_list(text: str) -> dict[int, int]:
    """``nvidia-smi -L``: GPU index -> number of MIG devices listed under it."""
    counts: dict[int, int] = {}
    current: int | None = None
    for line in text.splitlines():
        gpu = re.match(r"^GPU (\d+):", line)
        if gpu:
            current = int(gpu.group(1))
            counts[current] = 0
        elif current is not None and re.match(r"^\s+MIG\s", line):
            counts[current] += 1
    return counts


def parse_nvcc(text: str) -> str | None:
    """``nvcc --version`` -> '12.4' (from 'Cuda compilation tools, release 12.4, V12.4.131')."""
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def parse_cudnn_header(text: str) -> str | None:
    """cudnn_version.h (or cudnn.h before v8) -> '9.1.0'."""
    parts = []
    for name in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"):
        match = re.search(rf"#define\s+{name}\s+(\d+)", text)
        if match is None:
            return None
        parts.append(match.group(1))
    return ".".join(parts)


def parse_rocm_smi(text: str) -> list[str]:
    """``rocm-smi --showproductname`` -> product names, one per GPU."""
    return [name for name, _ in parse_rocm_smi_targets(text)]


def _gpu_rows(rows: dict[int, dict[str, str]]) -> list[tuple[str | None, str | None]]:
    return [(rows[k].get("name"), rows[k].get("gfx")) for k in sorted(rows)]


def parse_rocm_smi_targets(text: str) -> list[tuple[str, str | None]]:
    """``rocm-smi --showproductname`` -> (product name, gfx target or None) per GPU; newer rocm-smi
    prints a ``GFX Version: gfx1201`` line beside ``Card Series``."""
    rows: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*GPU\[(\d+)\]\s*:\s*(Card [Ss]eries|GFX Version):\s*(.*?)\s*$", line)
        value = _value(match.group(3)) if match else None
        if match and value:
            rows.setdefault(int(match.group(1)), {})["name" if match.group(2).startswith("Card") else "gfx"] = value
    return [(name, gfx) for name, gfx in _gpu_rows(rows) if name]


def parse_amd_smi_static(text: str) -> list[tuple[str | None, str | None]]:
    """``amd-smi static`` (or ``--asic``) -> (MARKET_NAME, TARGET_GRAPHICS_VERSION) per ``GPU: N`` block."""
    rows: dict[int, dict[str, str]] = {}
    current: int | None = None
    for line in text.splitlines():
        head = re.match(r"^GPU:\s*(\d+)\s*$", line.strip())
        if head:
            current = int(head.group(1))
            rows.setdefault(current, {})
            continue
        field = re.match(r"^\s*(MARKET_NAME|TARGET_GRAPHICS_VERSION):\s*(.*?)\s*$", line)
        value = _value(field.group(2)) if field else None
        if field and value and current is not None:
            rows[current]["name" if field.group(1) == "MARKET_NAME" else "gfx"] = value
    return _gpu_rows(rows)


def parse_rocminfo(text: str) -> list[tuple[str | None, str | None]]:
    """``rocminfo`` -> (Marketing Name, gfx target) of each GPU agent, in agent order (CPU agents skipped)."""
    found: list[tuple[str | None, str | None]] = []
    for block in re.split(r"^\*{3,}\s*\n\s*Agent \d+\s*\n\*{3,}\s*$", text, flags=re.MULTILINE)[1:]:
        fields: dict[str, str] = {}
        for line in block.splitlines():
            match = re.match(r"^ {0,4}(Name|Marketing Name|Device Type):\s*(.*?)\s*$", line)
            if match and match.group(1) not in fields:
                fields[match.group(1)] = match.group(2)
        if fields.get("Device Type", "").upper() == "GPU":
            gfx = fields.get("Name", "")
            found.append((_value(fields.get("Marketing Name", "")), gfx if re.fullmatch(r"gfx\w+", gfx) else None))
    return found


_ASSIGN = re.compile(r"^(?P<name>\w+)\s*(?::[^=]+)?=\s*(?P<value>.+?)\s*$")


def parse_python_assignments(text: str) -> dict[str, str | None]:
    """Simple ``name = 'literal'`` lines (torch/version.py) without executing the file."""
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        match = _ASSIGN.match(line.strip())
        if match is None:
            continue
        try:
            value = ast.literal_eval(match.group("value"))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if value is None or isinstance(value, str):
            found[match.group("name")] = value
    return found


def parse_os_release(text: str) -> str | None:
    """/etc/os-release -> PRETTY_NAME."""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?\s*$', text, re.MULTILINE)
    return match.group(1) if match and match.group(1) else None
