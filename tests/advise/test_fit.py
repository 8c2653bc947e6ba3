"""fit: largest batch confirmed by the tool's own traces, the technique ladder, gradient accumulation
searched with accumulation, bounded traces for any target, nothing-fits, one offload model."""

from __future__ import annotations

import math

import pytest

import gpuplan.estimate
from gpuplan.advise.fit import MAX_TRACES, accumulation_split, fit
from gpuplan.errors import ConfigError
from gpuplan.estimate import estimate
from gpuplan.hardware import get_gpu
from gpuplan.memory.offload import optimizer_offload_time
from gpuplan.workload import MAX_BATCH_SIZE, MAX_GRAD_ACCUM, Workload
from tests.advise.conftest import AffineStep, shrunk

CNN = "tests/fixtures/tiny_models.py:small_cnn"
MLP = "tests/fixtures/tiny_models.py:mlp"


@pytest.fixture
def affine(monkeypatch: pytest.MonkeyPatch) -> AffineStep:
    stub = AffineStep(get_gpu("L4"))
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    return stub


# AMP, plain SGD and full checkpointing: no ladder rung applies before gradient accumulation
ACCUM_BASE = Workload(mode="train", precision="amp-bf16", optimizer="sgd", checkpointing="full")


def test_accumulation_split_smallest_k_then_smallest_micro_batch() -> None:
    assert accumulation_split(1000, 10) == (10, 100)  # issue 9 item 10: gpt2 on T4, micro 10 × 100
    assert accumulation_split(1000, 16) == (16, 63)  # 1008 ≥ 1000 with 63 steps: 62 would need micro 17
    assert accumulation_split(1000, 16, exact=True) == (10, 100)  # smallest divisor of 1000 ≥ 63
    assert accumulation_split(1000, 15) == (15, 67)  # k divides nothing cheaper: 1005
    assert accumulation_split(1200, 16) == (16, 75)  # 75 divides 1200: exact at no cost
    assert accumulation_split(97, 10) == (10, 10)
    assert accumulation_split(97, 10, exact=True) == (1, 97)  # a prime: only micro-batch 1 is exact
    assert accumulation_split(3, 100) == (2, 2)  # at least 2 steps: this is accumulation
    assert accumulation_split(3, 100, min_steps=4) == (1, 4)
    for target, micro_max in ((10**6, 7), (MAX_BATCH_SIZE, 3), (999_983, 1000)):
        micro, k = accumulation_split(target, micro_max)
        assert micro <= micro_max and micro * k >= target and micro_max * (k - 1) < target  # k is the least
        assert micro * (k - 1) < target  # and the micro-batch the least at that k
        micro, k = accumulation_split(target, micro_max, exact=True)
        assert micro * k == target and micro <= micro_max


def test_accumulation_micro_batch_is_searched_with_accumulation(affine: AffineStep) -> None:
    """Issue 9 item 10: main searched the micro-batch without accumulation (b1 = 1000), picked 1000 × 2
    for a target of 2000, which does not fit with the accumulated gradients alive, and answered that
    nothing fits. With accumulation at most b2 = 600 fits: 4 micro-batches of 500."""
    r = fit(MLP, affine.gpu, ACCUM_BASE, target_batch_size=2000)
    assert r.max_batch_size == affine.b1
    last = r.techniques[-1]
    assert r.target_fits and r.ok and last.name == "grad-accumulation" and last.point.fits
    w = last.point.workload
    assert (w.batch_size, w.grad_accum) == (500, math.ceil(2000 / affine.b2)) == (500, 4)
    assert r.effective_batch_size == 2000 and r.to_dict()["effective_batch_size"] == 2000
    # memory of any k ≥ 2 is traced at k = 2; the micro-batch bound was confirmed by trace at k = 2
    assert affine.need_bytes(w.with_(grad_accum=2)) <= affine.gpu.usable_memory_bytes
    assert affine.need_bytes(w.with_(batch_size=affine.b2 + 1, grad_accum=2)) > affine.gpu.usable_memory_bytes
    assert any(c == w.with_(batch_size=affine.b2 + 1, grad_accum=2) for c in affine.calls)


def test_accumulated_time_reads_the_calibrated_step_time_only(affine: AffineStep) -> None:
    """Issue 9 item 3: main added uncalibrated per-phase seconds to a calibrated step time."""
    r = fit(MLP, affine.gpu, ACCUM_BASE, target_batch_size=2048)
    w = r.techniques[-1].point.workload
    assert r.target_fits and (w.batch_size, w.grad_accum) == (512, 4)  # main chose this one too
    expected_s = affine.raw_time_s(w) * affine.calibration  # the stub's step at k = 4, calibrated
    assert r.techniques[-1].point.step_time_s == pytest.approx(expected_s, rel=1e-12)
    tp = r.techniques[-1].point.throughput
    assert tp is not None and tp["value"] == pytest.approx(2048 / expected_s, rel=1e-12)


def test_at_least_or_exactly_the_target(affine: AffineStep) -> None:
    target = 2001  # 3 × 23 × 29: 4 steps of 501 reach it; exactly needs 23 steps of 87
    r = fit(MLP, affine.gpu, ACCUM_BASE, target_batch_size=target)
    w = r.techniques[-1].point.workload
    assert (w.batch_size, w.grad_accum) == (501, 4) and not r.exact_batch
    assert any("≥ target 2001" in a and "--exact-batch" in a for a in r.assumptions)
    r = fit(MLP, affine.gpu, ACCUM_BASE, target_batch_size=target, exact_batch=True)
    w = r.techniques[-1].point.workload
    assert (w.batch_size, w.grad_accum) == (87, 23) and r.exact_batch and r.effective_batch_size == target
    assert any("exactly the target" in a for a in r.assumptions)


def test_absurd_targets_cost_the_same_traces(affine: AffineStep) -> None:
    """Issue 9 item 10: the number of traces does not depend on the target."""
    counts = {}
    for target in (2000, 10**6, MAX_BATCH_SIZE):
        r = fit(MLP, affine.gpu, ACCUM_BASE, target_batch_size=target)
        assert r.target_fits and r.techniques[-1].name == "grad-accumulation"
        w = r.techniques[-1].point.workload
        assert w.batch_size <= affine.b2 and w.batch_size * w.grad_accum >= target
        counts[target] = r.traces
    # one trace more or less where the split lands on an already traced micro-batch
    assert max(counts.values()) - min(counts.values()) <= 1 and max(counts.values()) <= MAX_TRACES, counts


def test_no_trace_runs_more_than_two_micro_batches(affine: AffineStep) -> None:
    """A trace runs every micro-batch: main's offload rung traced the step with all k of them
    (``fit gpt2 --gpu T4 --target-batch-size 100000`` traced 5000 micro-batches and ran for hours)."""
    fit(MLP, affine.gpu, ACCUM_BASE, target_batch_size=10**6)
    assert affine.calls and max(w.grad_accum for w in affine.calls) <= 2


def test_accumulation_beyond_its_limit_is_a_no_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """1M samples in micro-batches of 10 needs more accumulation steps than gpuplan accepts: a "no"
    with the reason (main crashed building the workload)."""
    stub = AffineStep(get_gpu("L4"), b1=20, b2=10)
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    r = fit(MLP, stub.gpu, ACCUM_BASE, target_batch_size=MAX_BATCH_SIZE)
    assert not r.ok and r.target_fits is False and r.reason and "does not fit" in r.reason
    assert math.ceil(MAX_BATCH_SIZE / 10) > MAX_GRAD_ACCUM
    assert any(f"allowed up to {MAX_GRAD_ACCUM}" in a for a in r.assumptions)


@pytest.mark.slow
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
    # one fit rule: the verdict is estimate's (memory/on_gpu.py on min_required_bytes), nothing of fit's own
    for p in (r.max_point, r.over_point):
        est = estimate(CNN, workload=p.workload, gpu=gpu)
        assert (p.fits, p.min_required_bytes) == (est.fits, est.min_required_bytes)
    d = r.to_dict()
    assert d["max_batch_size"] == r.max_batch_size
    assert d["peak_allocated_bytes"] == r.max_point.peak_allocated_bytes
    assert d["techniques"] == [] and d["reason"] is None
    assert "largest batch that fits" in str(r)


@pytest.mark.slow
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
    assert "GPU in the catalog is" in str(r)
    assert r.reason is not None and "\n" not in r.reason and r.largest_gpu in r.reason


def test_offload_rung_adds_the_one_offload_model() -> None:
    """fit's CPU-offload rung adds memory/offload.py's time (the planner's DeepSpeed offload calls it too)."""
    gpu = shrunk("L4", 300)
    w = Workload(mode="train", image_size=32, precision="amp-bf16", optimizer="sgd", checkpointing="full")
    r = fit(CNN, gpu, w)
    off = r.techniques[-1]
    bare = estimate(CNN, workload=off.point.workload.with_(optimizer="none"), gpu=gpu)
    per_param = bare.step.param_bytes / bare.step.params_count
    added = optimizer_offload_time(
        bare.step.params_count,
        grad_bytes_per_param=per_param,
        param_bytes_per_param=per_param,
        host_link_gb_per_s=gpu.pcie_gb_per_s_per_direction,
    )
    assert bare.step_time_s is not None and off.point.step_time_s is not None
    assert off.point.step_time_s == pytest.approx(bare.step_time_s + added.total_s, rel=1e-12)
    assert off.point.min_required_bytes == bare.min_required_bytes


def test_bad_target_batch() -> None:
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
    assert micro.batch_size * micro.grad_accum >= target  # at least the effective batch
    assert micro.batch_size >= 16 and last.point.fits
    # the largest micro-batch that fits with accumulation, by the tool's own trace at k = 2
    bound = estimate(CNN, workload=micro.with_(grad_accum=2), gpu=gpu)
    assert bound.fits and micro.grad_accum >= 2 and micro.batch_size * (micro.grad_accum - 1) < target


@pytest.mark.slow
def test_real_traces_accumulation_with_gradients_alive() -> None:
    """Issue 9 item 10 on real traces: a model whose gradients are large beside its activations, on a
    GPU where the largest micro-batch with accumulation is well below the one without it."""
    model = "tests/advise/models.py:wide_mlp,wide_mlp_inputs"
    w = ACCUM_BASE
    small = estimate(model, workload=w.with_(batch_size=1, grad_accum=2), gpu="L4")
    large = estimate(model, workload=w.with_(batch_size=2048, grad_accum=2), gpu="L4")
    gpu = shrunk("L4", (small.min_required_bytes + large.min_required_bytes) / 2 / 2**20)
    without = fit(model, gpu, w)
    assert without.max_point is not None and without.max_point.fits
    # the largest micro-batch without accumulation does not fit with it: main chose it (1 × 2 steps of it)
    assert not estimate(model, workload=without.max_point.workload.with_(grad_accum=2), gpu=gpu).fits
    target = 2 * without.max_batch_size
    r = fit(model, gpu, w, target_batch_size=target)
    last = r.techniques[-1]
    assert r.target_fits and last.name == "grad-accumulation" and last.point.fits, [
        (t.name, t.point.workload.batch_size, t.point.workload.grad_accum, t.point.fits) for t in r.techniques
    ]
    micro = last.point.workload
    assert micro.batch_size < without.max_batch_size and micro.batch_size * micro.grad_accum >= target


def test_checkpointing_rungs_are_not_traced_when_the_model_state_alone_cannot_fit() -> None:
    """Issue 19: `fit gemma-2-2b --gpu A100-40GB-PCIe:3g.20gb --zero-grad zeros` traced selective and full
    checkpointing although parameters, gradients and 8-bit state alone (24.4 GiB) exceed the slice's 18 GiB:
    5 traces, 198 s on a busy machine; now 3 (54 s), the same "needs at least 25.67 GiB". Checkpointing frees
    activations only, so those rungs are skipped; the later rungs still include them."""
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.units import MIB

    # two blocks: traced whole, one run per trace
    two_blocks = HFConfigSource("two-block-gpt2", {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                                                   "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300,
                                                   "n_positions": 64}, task="causal-lm")
    w = Workload(mode="train", seq_len=16, precision="amp-bf16", zero_grad="zeros")
    state = estimate(two_blocks, workload=w.with_(optimizer="adamw-8bit"), gpu="H100-SXM").step.model_state_bytes
    small = shrunk("H100-SXM", 0.9 * state / MIB, "SMALL")
    assert small.usable_memory_bytes < state
    r = fit(two_blocks, small, w)
    assert [t.name for t in r.techniques] == ["as-given", "8bit-optimizer", "cpu-offload"] and r.traces == 3
    assert sum("checkpointing not traced: the model state alone" in a for a in r.assumptions) == 2
    offload = r.techniques[-1].point.workload
    assert (offload.checkpointing, offload.optimizer) == ("full", "adamw-8bit")  # the skipped rungs included
