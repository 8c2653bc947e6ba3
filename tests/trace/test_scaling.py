"""Identical repeated blocks are traced once and scaled: the scaled result equals the full trace.

Models small enough to trace whole are traced both ways (3 and 2 blocks scaled to the full depth,
and every block); the peak and its breakdown must be equal to the byte.
"""

from __future__ import annotations

import pytest

from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA, TINY_T5

DEEP_GPT2 = {**TINY_GPT2, "n_layer": 8}

CASES = [
    ("gpt2-8", DEEP_GPT2, Workload(mode="train", batch_size=2, seq_len=64, precision="amp-bf16")),
    ("gpt2-8", DEEP_GPT2, Workload(mode="infer", batch_size=2, seq_len=64)),
    ("gpt2-8", DEEP_GPT2, Workload(mode="train", batch_size=2, seq_len=64, checkpointing="selective", grad_accum=2)),
    ("llama-5", TINY_LLAMA, Workload(mode="generate", batch_size=2, seq_len=32, new_tokens=3, precision="bf16")),
    ("llama-5", TINY_LLAMA, Workload(mode="train", batch_size=1, seq_len=32, optimizer="sgd-momentum",
                                     optimizer_impl="for-loop")),
    ("t5-4+4", TINY_T5, Workload(mode="train", batch_size=2, seq_len=16)),
]


@pytest.mark.parametrize(("name", "config", "workload"), CASES, ids=[f"{c[0]}-{c[2].mode}" for c in CASES])
@pytest.mark.slow
def test_scaled_trace_equals_full_trace(name: str, config: dict[str, object], workload: Workload) -> None:
    source = HFConfigSource(name, config)
    scaled = trace_step(source, workload)
    full = trace_step(source, workload, scale=False)
    assert scaled.block_counts, "the scaled path must have been taken"
    assert not full.block_counts
    assert scaled.tensor_peak_bytes == full.tensor_peak_bytes
    assert scaled.tensor_components == full.tensor_components
    assert scaled.params_count == full.params_count
    assert scaled.flops == full.flops
    assert scaled.peak_phase == full.peak_phase
