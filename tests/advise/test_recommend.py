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
    ids = [c.gpu.id for c in (*cnn_rec.candidates_in, *cnn_rec.untimed, *cnn_rec.candidates_out)]
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


def _rate(gpu: GPU, dtype: str, precision: str, op_class: str = "matmul") -> float:
    """The peak the cost model gives an op of ``dtype`` on ``gpu`` (rate fallbacks included; an fp32
    convolution runs in TF32 where the GPU has it, so its rate is one more axis)."""
    op = OpRecord("aten.mm.default", "forward", "m", op_class, dtype, 1, 0, 0)
    try:
        key, _ = rate_key(op, precision, gpu)
    except NoRateError:
        return 0.0
    return gpu.peak_tflops(key) or 0.0


def _dominates(a: GPU, b: GPU, precision: str = "fp32") -> bool:
    """>= memory, bandwidth and every rate; with SM counts (issue 10's wave quantization), also >= SMs,
    each at least as fast: a GEMM of one wave takes a tile's time on one SM, so more but slower SMs
    (V100S vs TITAN RTX: 80 at 0.205 vs 72 at 0.226 fp32 TFLOP/s) are rightly slower on it."""
    if a.usable_memory_bytes < b.usable_memory_bytes or a.memory_bandwidth_gb_per_s < b.memory_bandwidth_gb_per_s:
        return False
    pairs = [(_rate(a, d, precision, c), _rate(b, d, precision, c)) for d in _DTYPES for c in ("matmul", "conv")]
    if a.sm_count and b.sm_count:
        return a.sm_count >= b.sm_count and all(ra * b.sm_count >= rb * a.sm_count for ra, rb in pairs)
    return all(ra >= rb for ra, rb in pairs)


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


@pytest.mark.slow
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
def wide_step() -> object:
    """wide_mlp's step (peak in the optimizer step)."""
    from gpuplan.trace.step import trace_step

    return trace_step(WIDE, Workload(mode="train", batch_size=4))


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
    wide_step: object, gpu: GPU, mem: float, bw: float, flops: float, link: float, usable_gib: float
) -> None:
    """Ranking invariant with multi-GPU layouts: more memory, bandwidth, FLOPs and link bandwidth never
    give a slower step or a larger GPU count (wide_mlp: ~1 GiB of model state, so counts > 1 occur)."""
    import dataclasses

    from gpuplan.advise.recommend import _best_count, _Sharded, _Timer
    from gpuplan.models.sources import resolve_model

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
    source = resolve_model(WIDE)

    def best(g: GPU) -> Candidate:
        timer = _Timer(w, w, None, "custom", None)
        sharded = _Sharded(source, wide_step, w, (9, 0))  # type: ignore[arg-type]
        return _best_count(wide_step, g, w, 64, None, timer, sharded)  # type: ignore[arg-type]

    a, b = best(bigger), best(base)
    if b.fits:
        assert a.fits and a.count <= b.count
        assert (a.step_time_s or 0) <= (b.step_time_s or 0) * (1 + 1e-9)


# ---- issue #9: one sharding model, --top, numeric flags ----------------------------------------------


def test_sharded_memory_and_time_are_the_planners() -> None:
    """Old main: recommend divided the single-GPU trace's model state by N with its own arithmetic
    (and its own 0.78-efficiency link model); now ZeRO-3 × N is the planner's evaluation of the same
    layout, byte for byte."""
    from gpuplan.parallel.plan import plan

    w = Workload(mode="train", batch_size=4)
    gpu = shrunk("H100-SXM", 1200, "H100-1.2G")
    rec = recommend(WIDE, w, max_gpus=8, gpus=[gpu])
    cand = rec.candidates_in[0]
    assert cand.count > 1 and cand.layout == f"ZeRO-3 × {cand.count}"
    p = plan(WIDE, gpus=cand.count, gpu=gpu, zero=3, tp=1, pp=1, micro_batch_size=4, workload=w)
    assert p.best.layout.sharding.name == "zero3" and p.best.layout.dp == cand.count
    assert cand.per_gpu_bytes == p.per_gpu_peak_bytes
    one = estimate(WIDE, workload=w, gpu=get_gpu("H100-SXM"))
    assert one.step_time_s is not None and cand.step_time_s is not None
    # the single-GPU step is the floor: sharding adds communication, never removes compute
    assert cand.step_time_s == pytest.approx(max(one.step_time_s, p.step_time_s))


def _recommend_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from gpuplan.cli.main import main

    try:
        code = main(["recommend", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _table_rows(text: str) -> list[str]:
    """Rows of the first table (numbered candidates) of recommend's text output."""
    _, _, rest = text.partition("\n\n")
    rows = []
    for line in rest.splitlines():
        if not line.strip():
            break
        if line.split()[0].isdigit():
            rows.append(line)
    return rows


def test_top_k_is_honoured(cnn_rec: Recommendation, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Old main: --top was parsed and never used (every fitting GPU was listed)."""
    from gpuplan.report.advise import render_recommendation

    assert len(cnn_rec.candidates_in) > 3
    assert len(_table_rows(render_recommendation(cnn_rec, top=3))) == 3
    assert len(_table_rows(render_recommendation(cnn_rec))) == len(cnn_rec.candidates_in)
    monkeypatch.setenv("GPUPLAN_CALIBRATION", "off")
    code, out, _ = _recommend_cli(capsys, CNN, "--batch-size", "32", "--image-size", "64", "--precision", "fp32",
                                  "--top", "2")
    assert code == 0 and len(_table_rows(out)) == 2
    assert f"(2 of {len(cnn_rec.candidates_in)} that fit shown" in out


def test_without_precision_each_gpu_runs_its_default(tmp_path: object) -> None:
    """Old main: recommend without --precision ran amp-bf16 on every GPU, so every pre-Ampere GPU was left
    out ("no bfloat16 support"). Each GPU is now sized and timed in the precision the CLI's estimate would
    default to on it (hardware.support.default_precision_for), one trace per precision, and each row says it."""
    import json
    from pathlib import Path

    from gpuplan.hardware.support import default_precision_for

    config = Path(str(tmp_path)) / "config.json"
    config.write_text(json.dumps(_TINY_LM))
    gpus = [get_gpu(g) for g in ("H100-SXM", "T4", "GTX-1080-Ti")]
    r = recommend(str(config), Workload(mode="train", seq_len=64, precision="amp-bf16"), max_gpus=1, gpus=gpus,
                  precision_per_gpu=True)
    got = {c.gpu.id: c.precision for c in r.candidates_in}
    assert got == {"H100-SXM": "amp-bf16", "T4": "amp-fp16", "GTX-1080-Ti": "fp32"}
    assert all(got[g.id] == default_precision_for("train", g) for g in gpus) and not r.candidates_out
    t4 = next(c for c in r.candidates_in if c.gpu.id == "T4")
    est = estimate(str(config), mode="train", seq_len=64, precision="amp-fp16", gpu="T4")
    assert t4.per_gpu_bytes == est.min_required_bytes and t4.step_time_s == pytest.approx(est.step_time_s)
    data = r.to_dict()
    assert data["precision_per_gpu"] is True
    assert {c["gpu"]: c["precision"] for c in data["recommendations"]} == got
    text = str(r)
    assert "precision per GPU" in text and " amp-fp16 " in _table_rows(text)[[c.gpu.id for c in
                                                                               r.candidates_in].index("T4")]
    explicit = recommend(str(config), Workload(mode="train", seq_len=64, precision="amp-bf16"), max_gpus=1,
                         gpus=gpus)
    assert [c.gpu.id for c in explicit.candidates_in] == ["H100-SXM"]  # the given precision is kept
    assert {c.gpu.id for c in explicit.candidates_out} == {"T4", "GTX-1080-Ti"}


@pytest.mark.parametrize(
    "flag,value",
    [
        *((f, v) for f in ("--top", "--max-gpus") for v in ("0", "-1", "nan", "inf", "1e400")),
        *(("--budget-usd", v) for v in ("0", "-5", "nan", "inf", "-inf")),
    ],
)
def test_numeric_flags_refused_in_one_line(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    """Old main: --budget-usd inf and --top 0/-1 were accepted."""
    code, out, err = _recommend_cli(capsys, CNN, f"{flag}={value}")
    assert code == 2 and out == "" and err.count("\n") == 1 and flag in err, err


_TINY_LM = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_embd": 64,
    "n_layer": 4,
    "n_head": 4,
    "vocab_size": 300,
    "n_positions": 256,
}
RECOMMEND_RUNS: list[tuple[str, ...]] = [
    (),
    ("--json",),
    ("--max-gpus", "1"),
    ("--max-gpus", "16", "--batch-size", "64"),
    ("--budget-usd", "1000", "--json"),
    ("--prices", "{prices}", "--budget-usd", "1", "--json"),
    ("--prices", "{prices}", "--json"),
    ("--top", "3"),
    ("--mode", "infer"),
    ("--mode", "generate", "--new-tokens", "16"),
    ("--mode", "generate", "--new-tokens", "16", "--max-gpus", "4", "--json"),
    ("--precision", "amp-fp16", "--checkpointing", "full"),
    ("--precision", "fp32", "--optimizer", "sgd", "--grad-accum", "2"),
]


@pytest.mark.slow
@pytest.mark.parametrize("extra", RECOMMEND_RUNS, ids=lambda a: " ".join(a) or "defaults")
def test_every_recommend_flag_runs_end_to_end(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: object, extra: tuple[str, ...]
) -> None:
    import json
    from pathlib import Path

    root = Path(str(tmp_path))
    (root / "config.json").write_text(json.dumps(_TINY_LM))
    (root / "prices.csv").write_text("gpu,usd_per_hour\nH100-SXM,2.49\nL4,0.7\nA100-80GB-SXM,1.6\n")
    monkeypatch.setenv("GPUPLAN_CALIBRATION", "off")
    argv = [a.replace("{prices}", str(root / "prices.csv")) for a in extra]
    code, out, err = _recommend_cli(capsys, str(root / "config.json"), "--seq-len", "64", *argv)
    assert code == 0, err
    if "--json" in extra:
        d = json.loads(out)
        assert d["recommendations"] and all(c["fits"] for c in d["recommendations"])
        if "--precision" not in extra:  # each GPU in the precision people run on it
            from gpuplan.hardware.support import default_precision_for

            mode = extra[extra.index("--mode") + 1] if "--mode" in extra else "train"
            assert d["precision_per_gpu"] is True
            assert all(c["precision"] == default_precision_for(mode, get_gpu(c["gpu"])) for c in d["recommendations"])
        if "--prices" in extra:
            assert d["by_cost"] and all(c["cost_per_million_usd"] is not None for c in d["by_cost"])
        if "--budget-usd" in extra:
            budget = float(extra[extra.index("--budget-usd") + 1])
            key = "cost_per_hour_usd" if "--prices" in extra else "purchase_usd"
            assert all(c[key] is None or c[key] <= budget for c in d["recommendations"])
            assert any(c["reason"].startswith("over budget") for c in d["excluded"])
    else:
        rows = _table_rows(out)
        assert rows and (len(rows) <= 3 if "--top" in extra else True)
