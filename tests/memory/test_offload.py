"""One CPU-offload model (memory/offload.py): its arithmetic, and the planner's DeepSpeed offload
layouts calling it (fit's offload rung is checked in tests/advise/test_fit.py)."""

from __future__ import annotations

import pytest

from gpuplan.hardware import get_gpu, pcie_gb_per_s_per_direction
from gpuplan.memory import offload
from gpuplan.memory.offload import OffloadTime, optimizer_offload_time


def test_offload_time_exact_accounting() -> None:
    # 1e9 parameters, bf16 gradients down and bf16 parameters back over PCIe Gen4 x16 (31.5 GB/s)
    t = optimizer_offload_time(1e9, grad_bytes_per_param=2, param_bytes_per_param=2, host_link_gb_per_s=31.5)
    assert t.transfer_s == pytest.approx(4e9 / (31.5e9 * offload.PCIE_EFFICIENCY), rel=1e-12)
    assert t.cpu_update_s == pytest.approx(1e9 * 32 / 40e9, rel=1e-12)  # 16 B read + 16 B written per param
    assert t.total_s == t.transfer_s + t.cpu_update_s
    # an unknown host link is a PCIe Gen4 x16 slot
    unknown = optimizer_offload_time(1e9, grad_bytes_per_param=2, param_bytes_per_param=2, host_link_gb_per_s=None)
    assert offload.DEFAULT_HOST_LINK_GB_PER_S == pcie_gb_per_s_per_direction(4, 16)
    assert unknown.transfer_s == pytest.approx(4e9 / (pcie_gb_per_s_per_direction(4, 16) * 1e9 * 0.8), rel=1e-12)


@pytest.mark.slow
def test_planner_offload_calls_the_one_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplan.estimate import make_workload
    from gpuplan.memory.overheads import overheads_for
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.parallel import evaluate
    from gpuplan.parallel.layout import Layout, Zero
    from gpuplan.parallel.profile import profile_model
    from gpuplan.parallel.topology import make_topology
    from tests.fixtures.tiny_models import TINY_GPT2

    gpu = get_gpu("L4")  # PCIe GPUs: the topology's link is the host link
    source = HFConfigSource("tiny-gpt2", {"architectures": ["GPT2LMHeadModel"], **TINY_GPT2}, task="causal-lm")
    prof = profile_model(source, make_workload(mode="train", batch_size=2, seq_len=64, precision="amp-bf16"), gpu)
    over = overheads_for(arch=gpu.arch, vendor=gpu.vendor, compute_capability=gpu.compute_capability, trains=True)
    ctx = evaluate.Context(prof, make_topology(gpu, 2), gpu.usable_memory_bytes, over.cuda_context_bytes)
    calls: list[tuple[float, dict[str, float | None]]] = []

    def recorded(params: float, **kw: float | None) -> OffloadTime:
        calls.append((params, kw))
        return optimizer_offload_time(params, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluate, "optimizer_offload_time", recorded)
    layout = Layout(dp=2, tp=1, pp=1, micro_batch_size=2, grad_accum=1, sharding=Zero(2, offload_optimizer=True))
    _, parts = evaluate.step_time(ctx, layout)
    assert len(calls) == 1
    params, kw = calls[0]
    assert params == prof.params_count / layout.dp  # ZeRO-2 offload: each rank updates its shard on the host
    assert kw["grad_bytes_per_param"] == kw["param_bytes_per_param"] == prof.compute_bytes == 2  # bf16 both ways
    expected = optimizer_offload_time(params, **kw).total_s  # type: ignore[arg-type]
    assert parts["optimizer"] == expected and kw["host_link_gb_per_s"] == gpu.pcie_gb_per_s_per_direction
