"""Wave quantization on every catalog GPU (issue 10): a missing SM count is never rewarded, and a
convolution's weight gradient splits its long N·H·W reduction over the SMs as cuDNN does."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.hardware import all_gpus, get_gpu
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.perf.roofline import gemm_efficiency, op_time, widest_sm_count
from gpuplan.trace.records import OpRecord

# The first convolution's backward of tests/fixtures/tiny_models.py:small_cnn (fp32, batch 32,
# 64×64 images, 3→16 channels, 3×3), as the trace records it: no input gradient, so its output is
# the 16·3·3·3 weight gradient (432 floats, plus the bias) and its K is 32·64·64 = 131,072.
WGRAD = OpRecord(
    "aten.convolution_backward.default", "backward", "conv1", "conv", "float32",
    113_246_208, 1_572_864 + 8_388_608, 1_792,
)


def test_widest_sm_count_is_the_catalog_maximum() -> None:
    assert widest_sm_count() == max(g.sm_count for g in all_gpus() if g.sm_count)
    assert widest_sm_count() == get_gpu("MI300X").sm_count == 304  # AMD CDNA 3 whitepaper: 8 XCDs × 38 CUs


@pytest.mark.parametrize("gpu_id", ["A10", "RTX-4090", "H100-SXM"])
def test_a_missing_sm_count_is_charged_the_widest_gpu(gpu_id: str) -> None:
    """The issue-10 bug: a GPU without a count skipped the wave term and came out faster than better
    GPUs. Now it is charged the waves of the widest counted GPU."""
    gpu = get_gpu(gpu_id)
    eff = efficiency_for(gpu)
    unknown = dataclasses.replace(gpu, sm_count=None)
    widest = dataclasses.replace(gpu, sm_count=widest_sm_count())
    assert gemm_efficiency(WGRAD, unknown, eff) == gemm_efficiency(WGRAD, widest, eff)
    assert op_time(WGRAD, unknown, "fp32", eff).total_s == op_time(WGRAD, widest, "fp32", eff).total_s


def test_issue_example_weight_gradient_is_not_slower_on_better_gpus() -> None:
    """Issue 10's example: this weight gradient cost 0.11 ms on an A10 (no count), 2.05 ms on an
    A100-SXM-80GB and 0.47 ms on a B200. Split over the SMs, a GPU with more SMs and more TF32 peak is
    never slower, and the A100 takes well under the 2 ms of a 16-CTA kernel."""
    times = {}
    for gpu_id in ("A10", "A100-80GB-SXM", "H100-SXM", "B200"):
        gpu = get_gpu(gpu_id)
        times[gpu_id] = op_time(WGRAD, gpu, "fp32", efficiency_for(gpu)).total_s
    assert times["B200"] <= times["H100-SXM"] <= times["A100-80GB-SXM"] <= times["A10"]
    assert times["A100-80GB-SXM"] < 0.5e-3
