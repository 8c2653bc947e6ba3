"""Gradient accumulation traced with two micro-batches (trace/accumulation.py) answers what tracing
every micro-batch answers: the same memory figures, exactly, and the same ops counted as often."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuplan.estimate import trace_step
from gpuplan.models.sources import HFConfigSource
from gpuplan.trace import runner
from gpuplan.trace.accumulation import ACCUM_STEPS_TRACED, scale_accumulation_ops
from gpuplan.trace.records import OpRecord
from gpuplan.trace.step import TracedStep
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA

GPT2 = HFConfigSource("tiny-gpt2", TINY_GPT2)
LLAMA = HFConfigSource("tiny-llama", TINY_LLAMA)


def _op_totals(step: TracedStep) -> Counter[tuple[str, str, str]]:
    totals: Counter[tuple[str, str, str]] = Counter()
    for op in step.ops:
        totals[(op.name, op.phase, "calls")] += op.count
        totals[(op.name, op.phase, "flops")] += op.flops * op.count
        totals[(op.name, op.phase, "bytes")] += (op.bytes_read + op.bytes_written) * op.count
    return totals


@pytest.mark.parametrize(("source", "workload", "scale"), [
    (GPT2, Workload(mode="train", batch_size=2, seq_len=32, grad_accum=4), False),
    (GPT2, Workload(mode="train", batch_size=2, seq_len=32, grad_accum=3, checkpointing="full",
                    precision="amp-bf16"), True),
    (LLAMA, Workload(mode="train", batch_size=1, seq_len=32, grad_accum=5, zero_grad="zeros"), True),
], ids=["gpt2-whole-k4", "gpt2-scaled-k3-full-ckpt-amp", "llama-scaled-k5-zeros"])
def test_two_traced_micro_batches_answer_for_all(source: HFConfigSource, workload: Workload, scale: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    short = trace_step(source, workload, scale=scale)
    monkeypatch.setattr(runner, "ACCUM_STEPS_TRACED", workload.grad_accum)  # every micro-batch traced
    full = trace_step(source, workload, scale=scale)
    assert short.run is not None and short.run.accum_steps_traced == ACCUM_STEPS_TRACED
    assert full.run is not None and full.run.accum_steps_traced == workload.grad_accum
    for name in ("tensor_peak_bytes", "rounded_peak_bytes", "reserved_peak_bytes", "min_reserved_bytes",
                 "gradient_bytes", "optimizer_state_bytes", "peak_phase"):
        assert getattr(short, name) == getattr(full, name), name
    assert short.tensor_components == full.tensor_components
    assert _op_totals(short) == _op_totals(full)
    assert any("2 of" in note and "micro-batches traced" in note for note in short.notes)


def test_scaling_counts_only_the_last_micro_batch() -> None:
    ops = [OpRecord(f"aten.op{i}", "forward", "", "other", "float32", 10, 1, 1) for i in range(6)]
    scaled = scale_accumulation_ops(ops, (3, 5), traced=2, full=8)
    assert [op.count for op in scaled] == [1, 1, 1, 7, 7, 1]
    assert scale_accumulation_ops(ops, (3, 5), traced=2, full=2) == ops  # nothing untraced
    assert scale_accumulation_ops(ops, (3, 9), traced=2, full=8) == ops  # a range outside the ops: left alone
