"""Fixtures for the measure tests: isolated cache/config directories (the tiny GPT-2 config is the root conftest's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as dist


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the user's real store or calibration file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("GPUPLAN_CALIBRATION", raising=False)
    return tmp_path


@pytest.fixture
def one_rank_group(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A one-process gloo group in this process (what DDP needs to be built; gloo's worker threads)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
