"""The measured program is the traced program: ``StepProgram`` run for real on the CPU with the
device's own semantics (``gpuplan.measure.program``) records exactly the bytes that the estimator's
host-semantics trace of the same workload counts on fake tensors (``trace_step(cuda=False)``)."""

from __future__ import annotations

import pytest

from gpuplan.estimate import make_workload
from gpuplan.measure.program import build_program
from gpuplan.models.sources import resolve_model
from gpuplan.trace.runner import DeviceSemantics, StepProgram
from gpuplan.trace.step import trace_step

pytestmark = pytest.mark.slow

CASES = [
    {"mode": "train", "batch_size": 2, "seq_len": 32},
    {"mode": "train", "batch_size": 2, "seq_len": 32, "checkpointing": "full", "precision": "amp-bf16"},
    {"mode": "train", "batch_size": 2, "seq_len": 32, "checkpointing": "selective", "grad_accum": 2},
    {"mode": "train", "batch_size": 2, "seq_len": 32, "checkpointing": "selective-op"},
    {"mode": "infer", "batch_size": 2, "seq_len": 32},
    {"mode": "generate", "batch_size": 2, "seq_len": 16, "new_tokens": 3},
]


@pytest.mark.parametrize("fields", CASES, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_real_step_records_what_the_host_trace_counts(tiny_gpt2: str, fields: dict[str, object]) -> None:
    import torch

    source = resolve_model(tiny_gpt2)
    workload = make_workload(**fields)
    program = build_program(source, workload, torch.device("cpu"))
    assert isinstance(program.step, StepProgram) and isinstance(program.step.semantics, DeviceSemantics)
    program.run_step()  # steady state: the optimizer state exists, as in the trace's warm-up
    trace = program.record_step()
    # new_tokens 3: two decode steps, fewer than the tracer's limit, so nothing is extrapolated
    assert trace.peak_bytes == trace_step(source, workload, cuda=False).tensor_peak_bytes
