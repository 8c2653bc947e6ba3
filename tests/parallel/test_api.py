"""Public API surface of gpuplan.parallel; importing it stays light (no torch, no transformers)."""

from __future__ import annotations

import subprocess
import sys

import gpuplan.parallel as par


def test_exports_resolve() -> None:
    for name in par.__all__:
        assert getattr(par, name) is not None


def test_import_is_light() -> None:
    code = "import sys, gpuplan.parallel; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
