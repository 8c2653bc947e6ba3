"""A doctor finding: severity, a stable code, what is wrong, and the fix."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(str, enum.Enum):
    ERROR = "error"  # PyTorch cannot use the GPU (or the install is broken); `gpuplan doctor` exits 1
    WARNING = "warning"  # works, but with a limitation or a trap worth knowing
    INFO = "info"  # a fact that explains the setup


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # stable identifier, e.g. "DRIVER_TOO_OLD"; documented in docs/compat.md
    message: str
    fix: str
    sources: tuple[str, ...] = ()  # ids in compat/data/sources.md


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code, f.message))
