"""Tiny models and shrunken GPUs keep the advise tests to a few fast traces."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gpuplan.hardware import GPU, get_gpu
from gpuplan.models.sources import HFConfigSource
from gpuplan.units import MIB
from gpuplan.workload import Workload
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


@dataclass
class AffineStep:
    """A stand-in for ``estimate()`` whose memory is exactly affine in the batch: the search logic is
    checked against numbers known in advance, in milliseconds. ``fits`` is decided the way
    memory/on_gpu.py decides it (least needed ≤ usable).

    The largest micro-batch is ``b1`` without accumulation and ``b2`` with it (the accumulated
    gradients, ``accum`` samples' worth of bytes, stay alive through every later forward). Step time
    is ``opt_s + micro_s`` per sample per micro-batch, scaled by ``calibration`` — while the per-phase
    split in ``extra["json"]`` stays uncalibrated, as main's calibration left it (issue 9 item 3)."""

    gpu: GPU
    b1: int = 1000
    b2: int = 600
    calibration: float = 2.0
    opt_s: float = 0.01
    micro_s: float = 1e-3
    calls: list[Workload] = field(default_factory=list)

    @property
    def per_sample_bytes(self) -> int:
        return 1 << 20

    def need_bytes(self, w: Workload) -> int:
        fixed = self.gpu.usable_memory_bytes - self.b1 * self.per_sample_bytes
        accum = (self.b1 - self.b2) * self.per_sample_bytes if w.grad_accum >= 2 else 0
        ckpt = {"full": 1, "selective": 2, "none": 3}[w.checkpointing]
        return fixed + accum + w.batch_size * self.per_sample_bytes * ckpt

    def raw_time_s(self, w: Workload) -> float:
        return self.opt_s + self.micro_s * w.batch_size * w.grad_accum

    def __call__(self, model: Any, *, workload: Workload, gpu: GPU, **_: Any) -> Any:
        self.calls.append(workload)
        need = self.need_bytes(workload)
        raw = self.raw_time_s(workload)
        fb = self.micro_s * workload.batch_size * workload.grad_accum
        return SimpleNamespace(
            total_required_bytes=need,
            peak_allocated_bytes=need,
            min_required_bytes=need,
            tensor_peak_bytes=need,
            fits=need <= gpu.usable_memory_bytes,
            step_time_s=raw * self.calibration,
            throughput={
                "value": workload.batch_size * workload.grad_accum / (raw * self.calibration),
                "unit": "samples/s",
            },
            assumptions=(),
            step=SimpleNamespace(params_count=1000, param_bytes=4000, model_state_bytes=4000),
            extra={
                "json": {"time": {"by_phase_s": {"forward": fb / 3, "backward": 2 * fb / 3, "optimizer": self.opt_s}}}
            },
        )
