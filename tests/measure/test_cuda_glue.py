"""The CUDA branch of a measurement, run on the CPU with torch.cuda's counters stubbed.

No GPU is present here, so the code that reads the allocator, the context and the event timer is
exercised against fixed readings: what must hold is the wiring (which counter lands in which
field, peaks reset after warm-up, total = reserved + context), not the numbers themselves."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from gpuplan.measure import cuda as cudamod
from gpuplan.measure import local
from gpuplan.measure.local import Options, compare, run_program
from gpuplan.measure.program import build_program
from gpuplan.models.sources import resolve_model
from gpuplan.units import MIB
from gpuplan.workload import Workload


class _Timer:
    def __enter__(self) -> _Timer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def seconds(self) -> float:
        return 0.25


@pytest.mark.slow
def test_cuda_counters_land_in_their_fields(tiny_gpt2: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 700 * MIB)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 800 * MIB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 800 * MIB)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a: {"num_alloc_retries": 0, "num_ooms": 0,
                                                                "reserved_bytes.all.peak": 800 * MIB})
    monkeypatch.setattr(cudamod, "EventTimer", _Timer)
    monkeypatch.setattr(cudamod, "process_used_bytes", lambda index: 1300 * MIB)
    program = build_program(resolve_model(tiny_gpt2), Workload(mode="train", batch_size=1, seq_len=16),
                            torch.device("cpu"))
    program.device = torch.device("cuda", 0)  # the tensors stay on the CPU; only the branch changes
    m = run_program(program, Options(steps=3, warmup=1))
    assert calls == ["sync", "reset"]  # peaks reset once, after warm-up, before the timed steps
    assert m.device == "cuda" and m.step_times_s == (0.25, 0.25, 0.25) and m.step_time_s == 0.25
    assert m.peak_allocated_bytes == 700 * MIB and m.peak_reserved_bytes == 800 * MIB
    assert m.cuda_context_bytes == 500 * MIB  # NVML per-process used minus reserved
    assert m.total_bytes == 1300 * MIB
    assert m.allocator_stats["reserved_bytes.all.peak"] == 800 * MIB
    assert m.tracked_peak_bytes and m.tracked_peak_bytes > 0


def test_context_falls_back_to_mem_get_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cudamod, "process_used_bytes", lambda index: None)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 100 * MIB)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (9000 * MIB, 10000 * MIB))
    reading = cudamod.read_context(0, used_before_bytes=400 * MIB)
    assert reading.context_bytes == (10000 - 9000 - 400 - 100) * MIB
    assert "mem_get_info" in reading.method
    assert cudamod.read_context(0, None).context_bytes is None


def test_cuda_comparison_rows() -> None:
    class _Est:
        tensor_peak_bytes, peak_allocated_bytes, peak_reserved_bytes = 10, 20, 30
        components: ClassVar[dict[str, Any]] = {"cuda_context": 40}
        total_required_bytes, step_time_s = 70, 0.5

    m = local.Measured(device="cuda", steps=1, warmup=1, step_time_s=0.4, step_times_s=(0.4,),
                       tracked_peak_bytes=10, peak_allocated_bytes=25, peak_reserved_bytes=30,
                       cuda_context_bytes=50, total_bytes=80)
    rows = {c.quantity: c for c in compare(_Est(), None, m)}  # type: ignore[arg-type]
    assert rows["peak allocated"].error == pytest.approx(-0.2)
    assert rows["peak reserved"].error == 0
    assert rows["total (with context)"].error == pytest.approx(-0.125)
    assert rows["step time"].error == pytest.approx(0.25)


def test_fit_check_on_a_gpu() -> None:
    from dataclasses import replace

    from gpuplan.hardware import get_gpu
    from gpuplan.measure.environment import collect
    from gpuplan.measure.local import WouldNotFitError, check_fits

    gpu = get_gpu("H100-SXM")
    env = replace(collect("cpu"), device="cuda", gpu_id=gpu.id)

    class _Est:
        fits: bool | None = True
        gpu = get_gpu("H100-SXM")
        total_required_bytes = 10 * 2**30
        components: ClassVar[dict[str, int]] = {"cuda_context": 2**30}

    est = _Est()
    check_fits(est, None, env, free_bytes=9 * 2**30)  # context already made: 9 GiB left to need
    with pytest.raises(WouldNotFitError, match="free on H100-SXM now"):
        check_fits(est, None, env, free_bytes=8 * 2**30)
    est.fits = False
    with pytest.raises(WouldNotFitError, match="does not fit H100-SXM"):
        check_fits(est, None, env, free_bytes=None)


@pytest.mark.slow
def test_rank_fit_check_adds_the_gpu_terms_where_the_estimate_does(tiny_gpt2: str) -> None:
    """A multi-process run on GPUs is refused when one rank cannot fit, decided by the estimate's own
    rule (memory_on_gpu: context, workspaces, the allocator's least-needed capacity), not by a
    copy that added context and workspaces to the bare tensor peak (the allocator's slack missed)."""
    from gpuplan.estimate import estimate
    from gpuplan.measure.launch import _check_rank_fit, rank_memory_on_gpu
    from gpuplan.measure.local import WouldNotFitError
    from gpuplan.measure.per_rank import RankEstimate
    from gpuplan.units import format_bytes

    est = estimate(tiny_gpt2, workload=Workload(mode="train", batch_size=2, seq_len=32), gpu="T4")
    assert est.gpu is not None
    # a rank holding exactly the single process's tensors needs what the estimate says
    same = rank_memory_on_gpu(est, est.tensor_peak_bytes)
    assert (same.min_required_bytes, same.total_required_bytes, same.fits) == (
        est.min_required_bytes, est.total_required_bytes, est.fits)
    # the largest rank that fits, and one byte more
    largest = est.gpu.usable_memory_bytes - est.min_required_bytes + est.tensor_peak_bytes
    _check_rank_fit(est, RankEstimate(layout="ddp", nproc=2, tensor_peak_bytes=(largest, largest)), 2, None)
    with pytest.raises(WouldNotFitError, match=f"one rank needs about {format_bytes(est.gpu.usable_memory_bytes + 1)}"):
        _check_rank_fit(est, RankEstimate(layout="ddp", nproc=2, tensor_peak_bytes=(largest + 1, 1)), 2, None)
