"""recommend: one trace, every catalog GPU in or out with a reason, ordering invariants, ZeRO-3 counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.advise.recommend import Candidate, Recommendation, counts_up_to, recommend
from gpuplan.estimate import estimate
from gpuplan.hardware import GPU, all_gpus, get_gpu
from gpuplan.perf.roofline import NoRateError, rate_key
from gpuplan.trace.records import OpRecord
from gpuplan.workload import Workload
from tests.advise.conftest import shrunk

CNN = "tests/fixtures/tiny_models.py:small_cnn"
WIDE = "tests/advise/models.py:wide_mlp,wide_mlp_inputs"
_DTYPES = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def cnn_rec() -> Recommendation:
    return recommend(CNN, Workload(mode="train", batch_size=32, image_size=64), max_gpus=8)


def test_every_catalog_gpu_is_in_or_out_with_a_reason(cnn_rec: Recommendation) -> None:
    ids = [c.gpu.id for c in (*cnn_rec.candidates_in, *cnn_rec.candidates_out)]
    assert sorted(ids) == sorted(g.id for g in all_gpus() if not g.is_mig)
    for c in cnn_rec.candidates_out:
        assert c.reason  # why it is out, e.g. no documented fp32 rate in the catalog
    assert cnn_rec.traces <= 2  # one per attention-kernel class, never one per GPU
    for c in cnn_rec.candidates_in:
        assert c.fits and c.per_gpu_bytes <= c.gpu.usable_memory_bytes and c.count == 1
        assert c.reason.startswith("needs ") and "has" in c.reason
    times = [c.step_time_s or 0.0 for c in cnn_rec.candidates_in]
    assert times == sorted(times)
    tiers = {c.gpu.tier for c in cnn_rec.candidates_in}
    assert tiers == {"entry", "research", "enterprise"}


def test_single_gpu_memory_matches_estimate(cnn_rec: Recommendation) -> None:
    est = estimate(CNN, mode="train", batch_size=32, image_size=64, gpu="H100-SXM")
    cand = next(c for c in cnn_rec.candidates_in if c.gpu.id == "H100-SXM")
    assert cand.per_gpu_bytes == est.min_required_bytes  # what estimate decides the fit on
    assert cand.step_time_s == pytest.approx(est.step_time_s)


def _rate(gpu: GPU, dtype: str, precision: str) -> float:
    """The peak the cost model gives an op of ``dtype`` on ``gpu`` (rate fallbacks included)."""
    op = OpRecord("aten.mm.default", "forward", "m", "matmul", dtype, 1, 0, 0)
    try:
        key, _ = rate_key(op, precision, gpu)
    except NoRateError:
        return 0.0
    return gpu.peak_tflops(key) or 0.0


def _dominates(a: GPU, b: GPU, precision: str = "fp32") -> bool:
    if a.usable_memory_bytes < b.usable_memory_bytes or a.memory_bandwidth_gb_per_s < b.memory_bandwidth_gb_per_s:
        return False
    return all(_rate(a, d, precision) >= _rate(b, d, precision) for d in _DTYPES)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_dominating_gpu_never_ranks_below_on_time(cnn_rec: Recommendation, data: st.DataObject) -> None:
    """Issue 3: a GPU with >= memory, bandwidth and FLOPs never ranks below another on time."""
    ranked = list(cnn_rec.candidates_in)
    a: Candidate = data.draw(st.sampled_from(ranked))
    b: Candidate = data.draw(st.sampled_from(ranked))
    if _dominates(a.gpu, b.gpu):
        assert (a.step_time_s or 0) <= (b.step_time_s or 0) * (1 + 1e-9)
        assert ranked.index(a) <= ranked.index(b) or a.step_time_s == b.step_time_s


def test_zero3_shards_model_state_when_one_gpu_is_too_small() -> None:
    small = shrunk("H100-SXM", 1400, "H100-small")  # the ~1 GiB of fp32 AdamW state of wide_mlp does not fit on one
    rec = recommend(WIDE, Workload(mode="train", batch_size=4), max_gpus=8, gpus=[small, get_gpu("H100-SXM")])
    by_id = {c.gpu.id: c for c in rec.candidates_in}
    assert by_id["H100-SXM"].count == 1
    sharded = by_id["H100-small"]
    assert sharded.count > 1 and sharded.layout.startswith("ZeRO-3")
    assert sharded.per_gpu_bytes <= small.usable_memory_bytes
    assert sharded.throughput and by_id["H100-SXM"].throughput
    assert sharded.throughput["value"] > by_id["H100-SXM"].throughput["value"]  # n GPUs, n batches


def test_nothing_fits_reports_largest_gpu() -> None:
    rec = recommend(CNN, Workload(mode="train", batch_size=1_000_000, image_size=64), max_gpus=1)
    assert not rec.ok and not rec.candidates_in
    biggest = max((g for g in all_gpus() if not g.is_mig), key=lambda g: g.usable_memory_bytes)
    assert rec.largest_gpu == biggest.id
    assert rec.needed_bytes and rec.needed_bytes > biggest.usable_memory_bytes


def test_prices_rank_by_cost_and_budget_filters(cnn_rec: Recommendation) -> None:
    prices = {"H100-SXM": 2.5, "L4": 0.7}
    rec = recommend(CNN, Workload(mode="train", batch_size=32, image_size=64), prices=prices, budget_usd=1.0)
    out = {c.gpu.id: c for c in rec.candidates_out}
    assert "over budget" in out["H100-SXM"].reason
    assert [c.gpu.id for c in rec.by_cost] == ["L4"]
    l4 = rec.by_cost[0]
    assert l4.cost_per_hour_usd == 0.7
    assert l4.throughput is not None
    assert l4.cost_per_million_usd == pytest.approx(0.7 / (l4.throughput["value"] * 3600) * 1e6)
    text = str(rec)
    assert "cheapest per million samples" in text and "over budget" in text


def test_counts() -> None:
    assert counts_up_to(1) == [1]
    assert counts_up_to(8) == [1, 2, 4, 8]
    assert counts_up_to(64) == [1, 2, 4, 8, 16, 32, 64]
    assert counts_up_to(12) == [1, 2, 4, 8, 12]


def test_generate_shortcut_agrees_with_estimate(tiny_gpt2: object) -> None:
    """recommend traces generation with 8 decode steps and scales; estimate traces all of them."""
    w = Workload(mode="generate", batch_size=4, seq_len=64, new_tokens=40)
    h100 = get_gpu("H100-SXM")
    rec = recommend(tiny_gpt2, w, max_gpus=1, gpus=[h100])  # type: ignore[arg-type]
    est = estimate(tiny_gpt2, workload=w, gpu=h100)  # type: ignore[arg-type]
    cand = rec.candidates_in[0]
    assert est.step_time_s is not None and cand.step_time_s is not None
    assert cand.step_time_s == pytest.approx(est.step_time_s, rel=0.05)
    # memory: the untraced tokens' KV cache is added, an upper bound within a few MiB
    assert est.min_required_bytes <= cand.per_gpu_bytes <= est.min_required_bytes + 8 * 2**20


_BIG_GPUS = [g for g in all_gpus() if not g.is_mig and g.peak_tflops("fp32") and g.intra_node_gb_per_s_per_direction]


@pytest.fixture(scope="module")
def wide_steps() -> tuple[object, object]:
    """wide_mlp's step (peak in the optimizer step) and the same step without optimizer."""
    from gpuplan.trace.step import trace_step

    w = Workload(mode="train", batch_size=4)
    return trace_step(WIDE, w), trace_step(WIDE, w.with_(optimizer="none"))


@settings(max_examples=40, deadline=None)
@given(
    gpu=st.sampled_from(_BIG_GPUS),
    mem=st.floats(1.0, 3.0),
    bw=st.floats(1.0, 3.0),
    flops=st.floats(1.0, 3.0),
    link=st.floats(1.0, 3.0),
    usable_gib=st.floats(1.0, 2.5),
)
def test_bigger_gpu_never_slower_or_needs_more_gpus(
    wide_steps: tuple[object, object], gpu: GPU, mem: float, bw: float, flops: float, link: float, usable_gib: float
) -> None:
    """Ranking invariant with multi-GPU layouts: more memory, bandwidth, FLOPs and link bandwidth never
    give a slower step or a larger GPU count (wide_mlp: ~1 GiB of model state, so counts > 1 occur)."""
    import dataclasses

    from gpuplan.advise.recommend import _best_count, _Sharding, _Timer

    size = int(usable_gib * 2**30)
    base = dataclasses.replace(gpu, memory_total_bytes=size, cuda_total_memory_bytes=size)
    rates = ("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops")
    bigger = dataclasses.replace(
        base,
        memory_total_bytes=int(size * mem),
        cuda_total_memory_bytes=int(size * mem),
        memory_bandwidth_gb_per_s=base.memory_bandwidth_gb_per_s * bw,
        interconnect_gb_per_s_bidirectional=(base.interconnect_gb_per_s_bidirectional or 0) * link or None,
        **{f: (getattr(base, f) * flops if getattr(base, f) else None) for f in rates},
    )
    w = Workload(mode="train", batch_size=4)
    step, without_optimizer = wide_steps

    def best(g: GPU) -> Candidate:
        timer = _Timer(w, w, None, "custom", None)
        sharding = _Sharding(step, lambda: without_optimizer)  # type: ignore[arg-type]
        return _best_count(step, g, w, 64, None, timer, sharding)  # type: ignore[arg-type]

    a, b = best(bigger), best(base)
    if b.fits:
        assert a.fits and a.count <= b.count
        assert (a.step_time_s or 0) <= (b.step_time_s or 0) * (1 + 1e-9)
