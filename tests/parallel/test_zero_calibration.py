"""ZeRO Table 1 and DeepSpeed estimator rows of shared/reference/calibration.csv, to print rounding."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

from conftest import calibration_rows
from gpuplan.parallel.zero import (
    ZERO_PAPER_K,
    deepspeed_zero2_gpu_bytes,
    deepspeed_zero2_gpu_bytes_docs,
    deepspeed_zero3_gpu_bytes,
    model_states_bytes,
)

ROWS = calibration_rows()
STAGE = {"Pos": 1, "Pos+g": 2, "Pos+g+p": 3}


def _printed(value: str) -> int:
    """Digits after the point as printed in the paper."""
    return len(value.split(".")[1]) if "." in value else 0


@pytest.mark.parametrize("row_id", sorted(r for r in ROWS if r.startswith("zero-t1-")))
def test_zero_table1_rows(row_id: str) -> None:
    # Rajbhandari et al. 2020 (arXiv:1910.02054) Table 1: model-state GB per GPU (1 GB = 1e9 B), K = 12.
    row = ROWS[row_id]
    psi = float(row["params"])
    par = row["parallelism"]
    stage = 0 if "no ZeRO" in par else STAGE[par.split("(")[1].rstrip(")")]
    nd = 1 if stage == 0 else int(par.split("dp=")[1].split(",")[0])
    got = model_states_bytes(psi, stage, nd, k=ZERO_PAPER_K).total_bytes / 1e9
    # The paper rounds half up (41.25 -> "41.3").
    digits = Decimal(1).scaleb(-_printed(row["value"]))
    assert Decimal(repr(got)).quantize(digits, rounding=ROUND_HALF_UP) == Decimal(row["value"])


def _t53b_params() -> tuple[int, int]:
    """t5-3b's parameter count and largest layer, from the model built on fake tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuplan.estimate import make_workload
    from gpuplan.models.sources import resolve_model
    from gpuplan.trace.runner import own_parameters

    with torch.device("cpu"), FakeTensorMode():
        model = resolve_model("t5-3b").build(make_workload(mode="train"), None)
    pmap, _ = own_parameters(model)  # what a trace records as parameters by module
    return sum(pmap.values()), max(pmap.values())


def test_deepspeed_estimator_rows_t5_3b() -> None:
    # calibration.csv ds-z2-t53b-8gpu (15.93 GiB) and ds-z3-t53b-8gpu (6.1 GiB): DeepSpeed memory.rst.
    params, largest = _t53b_params()
    assert params == 2_851_598_336  # "2851M total params" in the same DeepSpeed page
    assert 32_000_000 < largest < 33_000_000  # "32M largest layer params" (shared embedding 32128 x 1024)
    z2 = deepspeed_zero2_gpu_bytes_docs(params, 8) / 2**30
    z3 = deepspeed_zero3_gpu_bytes(params, largest, 8) / 2**30
    assert round(z2, 2) == float(ROWS["ds-z2-t53b-8gpu"]["value"])
    assert round(z3, 1) == float(ROWS["ds-z3-t53b-8gpu"]["value"])


def test_deepspeed_current_estimators_match_library() -> None:
    # DeepSpeed v0.19.8's own functions (the docs' ZeRO-2 formula is older: 4P + 16P/N).
    stage12 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    p, ll = 2_851_598_336, 32_899_072
    for n in (1, 8, 64):
        assert stage12.estimate_zero2_model_states_mem_needs(p, n, 1, cpu_offload=False)[
            1
        ] == deepspeed_zero2_gpu_bytes(p, n)
        assert stage12.estimate_zero2_model_states_mem_needs(p, n, 1, cpu_offload=True)[1] == deepspeed_zero2_gpu_bytes(
            p, n, cpu_offload=True
        )
        for off_o, off_p in ((False, False), (True, False), (True, True)):
            ds = stage3.estimate_zero3_model_states_mem_needs(p, ll, n, 1, cpu_offload=off_o, cpu_offload_params=off_p)[
                1
            ]
            assert ds == deepspeed_zero3_gpu_bytes(p, ll, n, offload_optimizer=off_o, offload_params=off_p)


def test_planner_zero3_states_are_deepspeed_estimator(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    # The planner's DeepSpeed ZeRO-3 model states + largest-layer buffer equal DeepSpeed's estimator
    # for the traced parameter count (AMP + AdamW: K = 4 master + 8 Adam + 4 fp32 grads = 16).
    from gpuplan.parallel.evaluate import memory
    from gpuplan.parallel.layout import Layout, Zero

    p = gpt2_ctx.profile
    lay = Layout(dp=8, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=Zero(3))
    (rank,) = memory(gpt2_ctx, lay)
    states = rank.params_bytes + rank.grads_bytes + rank.optimizer_bytes
    ds = deepspeed_zero3_gpu_bytes(p.params_count, p.largest_layer_params, 8)
    assert states + 4 * p.largest_layer_params == pytest.approx(ds, rel=1e-5)
