"""Shared helpers for the GPU catalog tests: where the reference table lives, raw data files."""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

_REPO = Path(__file__).resolve().parents[2]
# shared/ sits beside the clone in CI (../shared) and inside the tree on the device machine.
_CANDIDATES = tuple(root / "shared" / "reference" / "gpus.csv" for root in (_REPO.parent, _REPO))


def reference_csv_path() -> Path | None:
    return next((p for p in _CANDIDATES if p.is_file()), None)


@pytest.fixture(scope="session")
def reference_rows() -> list[dict[str, str]]:
    path = reference_csv_path()
    if path is None:
        pytest.skip("shared/reference/gpus.csv not found beside or inside the checkout")
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def raw_data_files() -> dict[str, dict[str, Any]]:
    """Every shipped data file, parsed as plain YAML, keyed by file stem."""
    folder = resources.files("gpuplan.hardware").joinpath("data", "gpus")
    out = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            out[entry.name[:-5]] = yaml.safe_load(entry.read_text(encoding="utf-8"))
    return out


@pytest.fixture(scope="session")
def raw_files() -> dict[str, dict[str, Any]]:
    return raw_data_files()
