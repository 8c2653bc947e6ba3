"""Tiny models and shrunken GPUs keep the advise tests to a few fast traces."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.hardware import GPU, get_gpu
from gpuplan.models.sources import HFConfigSource
from gpuplan.units import MIB
from tests.fixtures.tiny_models import TINY_GPT2


@pytest.fixture(scope="session")
def tiny_gpt2() -> HFConfigSource:
    return HFConfigSource(
        "tiny-gpt2",
        {"architectures": ["GPT2LMHeadModel"], **TINY_GPT2},
        task="causal-lm",
        default_seq_len=128,
    )


def shrunk(gpu_id: str, usable_mib: float, new_id: str | None = None) -> GPU:
    """``gpu_id`` with only ``usable_mib`` of memory (everything else as in the catalog)."""
    base = get_gpu(gpu_id)
    size = int(usable_mib * MIB)
    return dataclasses.replace(base, id=new_id or base.id, memory_total_bytes=size, cuda_total_memory_bytes=size)
