"""Generation traces 4 decode steps and extrapolates the rest (trace/decode.py): the answer must
equal a real CPU run that generates every token, tracked storage by storage."""

from __future__ import annotations

import pytest

from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA


@pytest.mark.parametrize(("name", "config"), [("llama", TINY_LLAMA), ("gpt2", TINY_GPT2)])
@pytest.mark.slow
def test_extrapolated_decode_equals_real_generation(name: str, config: dict[str, object]) -> None:
    source = HFConfigSource(f"tiny-{name}", config)
    workload = Workload(mode="generate", batch_size=8, seq_len=4, new_tokens=60, precision="bf16")
    real = trace_step(source, workload, cuda=False, fake=False)
    estimated = trace_step(source, workload, cuda=False)
    assert real.peak_phase == estimated.peak_phase == "decode"  # the cache dominates: the last step peaks
    assert estimated.tensor_peak_bytes == real.tensor_peak_bytes
    assert estimated.tensor_components == real.tensor_components
    assert estimated.flops == real.flops
