"""fit: largest batch confirmed by the tool's own traces, the technique ladder, nothing-fits."""

from __future__ import annotations

import pytest

from gpuplan.advise.fit import fit
from gpuplan.estimate import estimate
from gpuplan.workload import Workload
from tests.advise.conftest import shrunk

CNN = "tests/fixtures/tiny_models.py:small_cnn"


def test_largest_batch_fits_and_next_does_not() -> None:
    gpu = shrunk("L4", 900)
    w = Workload(mode="train", image_size=128)
    r = fit(CNN, gpu, w)
    assert r.max_batch_size >= 2
    assert r.max_point is not None and r.over_point is not None
    # the tool's own traces at the reported batch and one more
    assert r.max_point.workload.batch_size == r.max_batch_size and r.max_point.fits
    assert r.over_point.workload.batch_size == r.max_batch_size + 1 and not r.over_point.fits
    assert r.max_point.need_bytes <= gpu.usable_memory_bytes < r.over_point.need_bytes
    assert r.traces <= 8  # two scaling traces, a few guesses, the confirmations: not one per candidate
    d = r.to_dict()
    assert d["max_batch_size"] == r.max_batch_size
    assert d["peak_allocated_bytes"] == r.max_point.peak_allocated_bytes
    assert d["techniques"] == []
    assert "largest batch that fits" in str(r)


def test_technique_ladder_reaches_target_in_speed_order() -> None:
    target = 64
    fp32 = estimate(CNN, mode="train", batch_size=target, image_size=128, gpu="L4")
    amp = estimate(CNN, mode="train", batch_size=target, image_size=128, precision="amp-bf16", gpu="L4")
    assert amp.min_required_bytes < fp32.min_required_bytes
    # room for the AMP step but not the fp32 one
    gpu = shrunk("L4", (amp.min_required_bytes + fp32.min_required_bytes) / 2 / 2**20)
    r = fit(CNN, gpu, Workload(mode="train", image_size=128), target_batch_size=target)
    names = [t.name for t in r.techniques]
    assert names[0] == "as-given" and not r.techniques[0].point.fits
    assert r.target_fits and r.techniques[-1].point.fits
    assert names[-1] == "mixed-precision"  # the cheapest technique that is enough
    assert all(t.point.step_time_s is not None for t in r.techniques)
    assert r.to_dict()["techniques"][-1]["precision"] == "amp-bf16"


def test_nothing_fits_names_largest_gpu() -> None:
    gpu = shrunk("L4", 300)  # less than the CUDA context alone
    w = Workload(mode="train", image_size=32, precision="amp-bf16", optimizer="sgd", checkpointing="full")
    r = fit(CNN, gpu, w)
    assert r.max_batch_size == 0 and not r.ok
    assert r.techniques[-1].name == "cpu-offload" and not r.target_fits
    assert r.largest_gpu is not None and r.needed_bytes and r.needed_bytes > gpu.usable_memory_bytes
    assert "largest catalog GPU" in str(r)


def test_bad_target_batch() -> None:
    from gpuplan.errors import ConfigError

    with pytest.raises(ConfigError, match="target-batch-size 0"):
        fit(CNN, "L4", Workload(mode="train"), target_batch_size=0)


@pytest.mark.slow
def test_ladder_reaches_grad_accumulation_keeping_effective_batch() -> None:
    target = 64
    w = Workload(mode="train", image_size=128, precision="amp-bf16", optimizer="sgd", checkpointing="full")
    small = estimate(CNN, workload=w.with_(batch_size=16, grad_accum=2), gpu="L4")
    full = estimate(CNN, workload=w.with_(batch_size=target), gpu="L4")
    assert small.min_required_bytes < full.min_required_bytes
    gpu = shrunk("L4", (small.min_required_bytes + full.min_required_bytes) / 2 / 2**20)
    r = fit(CNN, gpu, w, target_batch_size=target)
    last = r.techniques[-1]
    assert r.target_fits and last.name == "grad-accumulation"
    micro = last.point.workload
    assert micro.batch_size * micro.grad_accum == target  # the effective batch is kept
    assert micro.batch_size >= 16 and last.point.fits
