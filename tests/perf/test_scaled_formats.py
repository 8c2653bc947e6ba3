"""Blackwell's block-scaled training recipes (``--precision mxfp8 | nvfp4``, issue 23 item 3): the float8
program re-priced per recipe (gpuplan.scaled_formats), the bf16 blocks NVIDIA's NVFP4 recipe keeps, and the
one-line refusals for the GPUs, modes and flags they do not apply to."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.hardware import resolve_gpu
from gpuplan.perf.roofline import rate_key
from gpuplan.scaled_formats import SCALED_FORMATS, high_precision_blocks
from gpuplan.trace.records import OpRecord
from gpuplan.workload import Workload
from tests.trace import test_float8
from tests.trace.test_float8 import _estimate

pytest.importorskip("torchao.float8")
tiny_llama = test_float8.tiny_llama  # the fixture, shared by name


def test_recipe_table() -> None:
    """OCP MX v1.0: e4m3 + an e8m0 scale per 32; arXiv 2509.25149: e2m1 + an e4m3 scale per 16, ~15% of the
    blocks kept in bf16 (the last ones); 32 blocks → 5 (round(4.8)); an explicit count is capped at the depth."""
    assert SCALED_FORMATS["mxfp8"].cast_bytes_per_element == pytest.approx(1.03125)
    assert SCALED_FORMATS["nvfp4"].cast_bytes_per_element == pytest.approx(0.5625)
    assert high_precision_blocks("nvfp4", None, 32) == 5
    assert high_precision_blocks("mxfp8", None, 32) == 0 and high_precision_blocks("fp8", None, 80) == 0
    assert high_precision_blocks("nvfp4", 40, 32) == 32 and high_precision_blocks("mxfp8", 3, 32) == 3


def test_nvfp4_gemms_take_the_fp4_rate_and_mxfp8_the_fp8_rate() -> None:
    b200 = resolve_gpu("B200")
    assert b200 is not None
    op = OpRecord(
        name="aten._scaled_mm.default",
        phase="forward",
        module="model.layers.0.mlp.up_proj",
        op_class="matmul",
        dtype="float8_e4m3fn",
        flops=2 * 4096**3,
        bytes_read=2 * 4096**2,
        bytes_written=2 * 4096**2,
        block="model.layers:0",
    )
    assert rate_key(op, "nvfp4", b200) == ("fp4", True)
    assert rate_key(op, "mxfp8", b200) == ("fp8", True) == rate_key(op, "fp8", b200)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--precision", "mxfp8", "--gpu", "H100-SXM"], "--precision mxfp8 needs 10.0+: Blackwell"),
        (["--precision", "nvfp4", "--gpu", "RTX-4090"], "--precision nvfp4 needs 10.0+: Blackwell"),
        (["--precision", "nvfp4", "--mode", "infer"], "applies to --mode train only"),
        (["--precision", "amp-bf16", "--high-precision-blocks", "2"], "--high-precision-blocks applies to"),
        (["--precision", "nvfp4", "--high-precision-blocks", "-1"], "high-precision blocks -1 is out of range"),
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_llama: Path, argv: list[str], says: str) -> None:
    code, out, err = _estimate(str(tiny_llama), *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err, err


@pytest.mark.slow
def test_recipes_on_b200_rank_as_their_rates_and_kept_blocks_cost_time() -> None:
    """One trace of the float8 program, priced as each recipe (the program is the same). On B200 (FP4 dense
    9 PFLOP/s = 2× FP8): nvfp4 with no bf16 block is faster than mxfp8, mxfp8 no faster than tensorwise fp8
    (its casts write the e8m0 scales too), every block kept in bf16 costs time, and against bf16 MXFP8 is a
    speedup — torchtitan docs/mxfp8.md (8 × B200, Llama 3 8B, compiled, FSDP2): +20.0% tokens/s
    (pytorch/torchtitan @0d481060); gpuplan's bf16 step is eager, so the bound is loose: 1.05–1.6×."""
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.perf.step_time import step_time
    from gpuplan.trace.step import trace_step
    from tests.trace.test_float8 import GEMM_BOUND_LLAMA

    b200 = resolve_gpu("B200")
    assert b200 is not None
    src = HFConfigSource("llama-8b-2l", GEMM_BOUND_LLAMA)

    def work(precision: str, kept: int | None = None) -> Workload:
        return Workload(mode="train", batch_size=1, seq_len=4096, precision=precision, high_precision_blocks=kept)

    program = trace_step(src, work("fp8"))
    t = {p: step_time(program, b200, work(p, 0)).total_s for p in ("fp8", "mxfp8", "nvfp4")}
    assert t["nvfp4"] < t["mxfp8"] and t["mxfp8"] >= t["fp8"], t
    kept = [step_time(program, b200, work("nvfp4", n)).total_s for n in (0, 1, 2)]
    assert kept[0] < kept[1] < kept[2], kept
    assert kept[2] <= step_time(program, b200, work("mxfp8", 2)).total_s * 1.0001  # all bf16: no fp4 left
    bf16 = step_time(trace_step(src, work("bf16")), b200, work("bf16")).total_s
    assert 1.05 < bf16 / t["mxfp8"] < 1.6, (bf16, t)


@settings(max_examples=60, deadline=None)
@given(out_features=st.integers(1, 4096), blocks=st.integers(1, 128))
def test_fp4_never_stores_more_weight_bytes_than_fp8(out_features: int, blocks: int) -> None:
    """Property (issue 23): a linear layer stored in MXFP4 (uint8 pairs of e2m1 + an e8m0 scale per 32) never holds
    more bytes than in fp8 (e4m3 + an fp32 scale per output channel), for any layer MXFP4 stores (in_features a
    multiple of its 32-element block); and the training recipes' casts write no more per element in NVFP4 than
    in MXFP8 or fp8 (scales included)."""
    from gpuplan.memory.weight_quant import MXFP4_BLOCK, layer_bytes, weight_format

    in_features = MXFP4_BLOCK * blocks
    fp4 = layer_bytes(weight_format("mxfp4"), out_features, in_features)
    fp8 = layer_bytes(weight_format("fp8"), out_features, in_features)
    assert fp4 <= fp8
    assert fp4 == out_features * blocks * (MXFP4_BLOCK // 2 + 1)  # 16 bytes of values + 1 scale per block
    casts = {p: SCALED_FORMATS[p].cast_bytes_per_element for p in ("fp8", "mxfp8", "nvfp4")}
    assert casts["nvfp4"] <= min(casts["fp8"], casts["mxfp8"])


def test_fp4_training_holds_no_more_weight_bytes_than_fp8(tiny_llama: Path) -> None:
    """The recipes keep bf16 parameters (torchao / Transformer Engine cast them per GEMM): NVFP4's parameters,
    gradients and optimizer state on B200 are MXFP8's and fp8's, byte for byte, never more."""
    import json

    held = {}
    for precision in ("fp8", "mxfp8", "nvfp4"):
        code, out, err = _estimate(str(tiny_llama), "--precision", precision, "--gpu", "B200", "--seq-len", "32",
                                   "--json")
        assert code == 0, err
        c = json.loads(out)["components"]
        held[precision] = (c["parameters"], c["gradients"], c["optimizer_state"])
    assert held["nvfp4"] == held["mxfp8"] == held["fp8"]
