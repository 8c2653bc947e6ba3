"""Fixtures for the measure tests: a tiny GPT-2 config and isolated cache/config directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# GPT-2 architecture (transformers GPT2Config keys) shrunk so a real CPU step takes well under a
# second: 2 blocks (traced whole, so each trace is one run), width 64.
TINY_GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2,
             "n_embd": 64, "n_positions": 128, "vocab_size": 1000, "bos_token_id": 0, "eos_token_id": 0}


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("models") / "tiny-gpt2.json"
    path.write_text(json.dumps(TINY_GPT2))
    return str(path)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the user's real store or calibration file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("GPUPLAN_CALIBRATION", raising=False)
    return tmp_path
