"""estimate(..., gpu=...) carries the cost model's step time, throughput and MFU."""

from __future__ import annotations

import pytest

from gpuplan.estimate import estimate


def test_estimate_with_gpu_has_time_throughput_mfu() -> None:
    est = estimate("gpt2", mode="train", batch_size=2, seq_len=128, precision="amp-bf16", gpu="A100-80GB-SXM")
    assert est.step_time_s is not None and est.step_time_s > 0
    assert est.throughput is not None and est.throughput["unit"] == "tokens/s"
    assert est.throughput["value"] == pytest.approx(2 * 128 / est.step_time_s)
    assert est.mfu is not None and 0 < est.mfu < 1
    assert any(a.startswith("efficiency:") for a in est.assumptions)
    d = est.to_dict()
    assert d["step_time_s"] == est.step_time_s
    assert d["time"]["kernels"] > 0
    assert "step time" in str(est)


def test_estimate_without_gpu_has_no_time() -> None:
    est = estimate("gpt2", mode="infer", batch_size=1, seq_len=32)
    assert est.step_time_s is None and est.throughput is None and est.mfu is None
