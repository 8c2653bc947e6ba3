"""The 80% interval on every printed time (issue 17): the family classifier, the one result type, the
JSON keys and text of estimate / fit / plan / recommend / serve, and recommend's "within the model's
uncertainty" where two GPUs' intervals overlap."""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

from gpuplan.advise.recommend import Candidate, mark_overlaps, recommend
from gpuplan.cli.main import main
from gpuplan.hardware import get_gpu
from gpuplan.perf.efficiency import arch_key
from gpuplan.perf.uncertainty import interval
from gpuplan.perf.workload_family import TimeInterval, time_interval, workload_family, workload_kind
from gpuplan.trace.records import OpRecord
from gpuplan.workload import Workload


def _op(op_class: str, flops: int) -> OpRecord:
    return OpRecord(f"aten.{op_class}.default", "forward", "m", op_class, "float16", flops, 8, 8)


def test_kind_follows_the_step_then_the_task() -> None:
    conv_heavy = [_op("conv", 90), _op("matmul", 10)]
    assert workload_kind("custom", conv_heavy) == "cnn"
    assert workload_kind("image-classification", conv_heavy) == "cnn"  # ResNet through timm/HF
    assert workload_kind("image-classification", [_op("matmul", 90), _op("conv", 10)]) == "vit"  # patch embed
    assert workload_kind("masked-lm") == workload_kind("sequence-classification") == "encoder"
    assert workload_kind("causal-lm", [_op("matmul", 1)]) == workload_kind("seq2seq-lm") == "llm"
    assert workload_family("causal-lm", "train", 8) == "llm-train-multi"
    assert workload_family("causal-lm", "generate") == "llm-infer"
    assert workload_family("custom", "infer", 1, conv_heavy) == "cnn-infer"


def test_time_interval_is_the_uncertainty_interval() -> None:
    iv = time_interval(0.2, "cnn-train", "ada")
    assert iv is not None
    low, high, basis = interval(0.2, "cnn-train", "ada")
    assert (iv.low_s, iv.high_s, iv.basis) == (low, high, basis)
    assert iv.low_s <= 0.2 <= iv.high_s
    assert iv.to_list() == [low, high] and basis in iv.describe() and iv.describe().startswith("80%: ")
    other = iv.of(0.4)
    assert other is not None and other.high_s == pytest.approx(2 * iv.high_s)
    assert time_interval(None, "cnn-train", "ada") is None and time_interval(0.0, "cnn-train", "ada") is None


def _cand(gpu: str, t: float, iv: tuple[float, float]) -> Candidate:
    g = get_gpu(gpu)
    return Candidate(g, 1, True, "fits", step_time_s=t,
                     interval=TimeInterval(iv[0], iv[1], "rows", "llm-train", arch_key(g)))


def test_overlapping_intervals_are_called_within_the_uncertainty_not_ranked() -> None:
    ranked = [_cand("H100-SXM", 1.0, (0.9, 1.3)), _cand("A100-80GB-SXM", 1.2, (1.1, 1.5)),
              _cand("V100-SXM2-32GB", 3.0, (2.7, 3.9))]
    marked = mark_overlaps(ranked)
    assert [c.within_uncertainty_of for c in marked] == [None, "H100-SXM", None]
    assert marked[1].to_dict()["within_uncertainty_of"] == "H100-SXM"
    assert marked[2].to_dict()["step_time_interval_s"] == [2.7, 3.9]


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code in (0, 1), err.getvalue()
    return code, out.getvalue()


def _json(*argv: str) -> dict[str, Any]:
    _, out = _cli(*argv, "--json")
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def _check(span: Any, time_s: float) -> None:
    low, high = span
    assert math.isfinite(low) and math.isfinite(high) and 0 < low <= time_s <= high


SHAPE = ("--batch-size", "2", "--seq-len", "32")


def test_estimate_carries_the_interval_in_json_and_text(tiny_gpt2: str) -> None:
    data = _json("estimate", tiny_gpt2, *SHAPE, "--gpu", "RTX-4090")
    _check(data["step_time_interval_s"], data["step_time_s"])
    assert data["step_time_interval_basis"] and data["time_unknown"] is None
    gen = _json("estimate", tiny_gpt2, *SHAPE, "--gpu", "RTX-4090", "--mode", "generate", "--new-tokens", "4")
    _check(gen["generation"]["ttft_interval_s"], gen["generation"]["ttft_s"])
    _, text = _cli("estimate", tiny_gpt2, *SHAPE, "--gpu", "RTX-4090")
    assert "(80%: " in next(line for line in text.splitlines() if line.startswith("step time"))


@pytest.mark.slow
def test_fit_points_carry_the_interval(tiny_gpt2: str) -> None:
    data = _json("fit", tiny_gpt2, "--seq-len", "32", "--gpu", "RTX-4090")
    point = data["max_batch"]
    _check(point["step_time_interval_s"], point["step_time_s"])


def test_plan_carries_the_interval_per_layout(tiny_gpt2: str) -> None:
    data = _json("plan", tiny_gpt2, "--gpu", "A100-80GB-SXM", "--gpus", "2", "--seq-len", "32",
                 "--global-batch-size", "8")
    _check(data["step_time_interval_s"], data["step_time_s"])
    assert "several GPUs" in data["step_time_interval_basis"] or "Ampere" in data["step_time_interval_basis"]
    for alt in data["alternatives"]:
        _check(alt["step_time_interval_s"], alt["step_time_s"])


def test_recommend_carries_the_interval_per_candidate(tiny_gpt2: str) -> None:
    gpus = [get_gpu("H100-SXM"), get_gpu("H200-SXM"), get_gpu("T4")]
    rec = recommend(tiny_gpt2, Workload(mode="train", batch_size=2, seq_len=32), max_gpus=1, gpus=gpus)
    for c in rec.candidates_in:
        d = c.to_dict()
        _check(d["step_time_interval_s"], d["step_time_s"])
    # H100 and H200 run the same kernels at nearly the same rates: the model cannot rank them
    assert any(c.within_uncertainty_of is not None for c in rec.candidates_in)
    assert "within the model's uncertainty" in str(rec)


def test_serve_carries_both_intervals(tiny_gpt2: str) -> None:
    data = _json("serve", tiny_gpt2, "--gpu", "H100-SXM", "--max-num-batched-tokens", "256", "--max-num-seqs", "16")
    _check(data["prefill"]["ttft_interval_s"], data["prefill"]["ttft_s"])
    _check(data["decode"]["step_interval_s"], data["decode"]["step_s"])


PRECISIONS_BY_GPU = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16", "fp8")


@pytest.mark.slow
def test_every_catalog_gpu_and_precision_has_a_time_or_says_time_unknown(tiny_gpt2: str) -> None:
    """Issue 17: every catalog GPU × every precision is either timed or answered with the memory and an
    explicit "time unknown" (a GPU whose vendor publishes no rate for the dtype: Apple, some Gaudi and
    Blackwell rates); never a refusal of the memory answer. A precision the GPU cannot run at all (bf16
    on Volta, fp8 below compute capability 8.9) is a one-line usage refusal, as before. The trace depends
    on the GPU only through its kernel class, so the step is traced once per class and costed per GPU
    the way estimate costs it (perf.summary.summarize_source; estimate turns NoRateError into
    time_unknown, checked end to end below)."""
    from gpuplan.advise.recommend import kernel_class
    from gpuplan.errors import ConfigError
    from gpuplan.hardware import all_gpus
    from gpuplan.hardware.support import check_workload_on_gpu
    from gpuplan.models.sources import resolve_model
    from gpuplan.perf.roofline import NoRateError
    from gpuplan.perf.summary import summarize_source
    from gpuplan.trace.step import trace_step

    source = resolve_model(tiny_gpt2)
    unknown: set[tuple[str, str]] = set()
    timed = 0
    for precision in PRECISIONS_BY_GPU:
        work = Workload(mode="train", batch_size=2, seq_len=32, precision=precision)
        steps: dict[tuple[int, int], Any] = {}
        for gpu in (g for g in all_gpus() if not g.is_mig):
            try:
                check_workload_on_gpu(work, gpu)
            except ConfigError:
                continue  # the GPU cannot run this precision at all: a usage refusal, not a missing rate
            cls = kernel_class(gpu, work)
            if cls not in steps:
                steps[cls] = trace_step(source, work, compute_capability=cls)
            try:
                timing = summarize_source(source, steps[cls], gpu, work)
            except NoRateError:
                unknown.add((gpu.id, precision))
                continue
            assert timing.step_time_s > 0 and timing.interval is not None, (gpu.id, precision)
            timed += 1
    assert timed > 300
    # what is left unknown is what no vendor publishes (the A10G is timed since issue 17)
    assert {g for g, _ in unknown} <= {"M2-Ultra", "M3-Max", "M3-Ultra", "M4-Max", "Gaudi2", "Gaudi3", "B100",
                                       "GB300", "RTX-PRO-6000", "RX-7900-XTX"}, sorted(unknown)
    assert not any(g == "A10G" for g, _ in unknown)
    est = _json("estimate", tiny_gpt2, *SHAPE, "--gpu", "M4-Max")
    assert est["step_time_s"] is None and est["time_unknown"] and est["total_required_bytes"] > 0
    assert est["fits"] is True and est["step_time_interval_s"] is None
    _, text = _cli("estimate", tiny_gpt2, *SHAPE, "--gpu", "M4-Max")
    assert "step time unknown" in text
    serve = _json("serve", tiny_gpt2, "--gpu", "M4-Max", "--max-num-batched-tokens", "256", "--max-num-seqs", "16")
    assert serve["ok"] is True and serve["kv_cache_bytes"] > 0 and serve["time_unknown"]
    assert serve["prefill"]["ttft_s"] is None and serve["decode"]["step_s"] is None
    _, text = _cli("serve", tiny_gpt2, "--gpu", "M4-Max", "--max-num-batched-tokens", "256", "--max-num-seqs", "16")
    assert "time: unknown" in text


def test_a_thin_family_does_not_take_other_families_sign() -> None:
    """A family with too few rows borrows all rows, each family's median offset combined with every row's
    spread about its own family's median (uncertainty.between). Made-up residuals: on this generation every
    row of the two measured families runs 20-40% slower than modelled, for causes of their own; a third
    family elsewhere runs 10% faster. An interval for the unmeasured family must then allow both signs —
    before, it took the generation's rows as they stood and its low end was the estimate itself."""
    from gpuplan.perf.uncertainty import log_bounds

    def rows(family: str, arch: str, values: list[float]) -> list[dict[str, Any]]:
        return [{"family": family, "arch": arch, "log_residual": v, "source": family} for v in values]

    data = {"rows": rows("cnn-train", "hopper", [0.2, 0.25, 0.3] * 4) + rows("encoder-train", "hopper", [0.3, 0.35] * 5)
            + rows("llm-train", "ampere", [-0.1, -0.12] * 5)}
    low, high, basis = log_bounds(data, "llm-train-multi", "hopper")
    assert low < 0 < high, (low, high)
    assert "spread between families" in basis and "0 LLM training, several GPUs rows" in basis
    # a family with its own rows is untouched by the rule
    own_low, own_high, own_basis = log_bounds(data, "cnn-train", "hopper")
    assert own_low == 0.0 and own_high == pytest.approx(0.3) and own_basis.startswith("Hopper, CNN training rows")
