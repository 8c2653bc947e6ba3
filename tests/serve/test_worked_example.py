"""The issue's worked example: vLLM PR #21489 (``vllm bench latency``, google/gemma-3-4b-it, a device of
178.36 GiB at ``gpu_memory_utilization`` 0.9 = 160.53 GiB) logged weights 8.58 GiB, activation peak 9.96 GiB,
non-torch 0.07 GiB and CUDA graphs 0.65 GiB.

Settings assumed (vLLM 0.10.0, the ``LLM`` class that ``vllm bench`` uses): ``max_num_batched_tokens``
16384 and ``max_num_seqs`` 1024 (``arg_utils._set_default_args_v1``, a device above 70 GiB), bf16 weights,
block size 16, CUDA graphs at the 67 default sizes, piecewise (35 pieces: 34 attention layers + 1).
The published figures are printed with two decimals: a figure within 0.01 GiB reproduces it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.serve import ServeResult, serve
from gpuplan.serve.budget import vllm_budget
from gpuplan.units import GIB

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).parent / "data" / "gemma-3-4b-it"
DEVICE_GIB, UTILIZATION = 178.36, 0.9
PUBLISHED = {"weights": 8.58, "activation_peak": 9.96, "non_torch": 0.07, "cuda_graphs": 0.65}
PUBLISHED_KV_GIB = 160.53 - sum(PUBLISHED.values())  # what the four terms leave: 141.27 GiB
TOLERANCE_GIB = 0.01  # the log's rounding


@pytest.fixture(scope="module")
def gemma() -> ServeResult:
    return serve(str(CONFIG), gpu="B200", total_memory_bytes=int(DEVICE_GIB * GIB),
                 gpu_memory_utilization=UTILIZATION, llm_class=True)


def test_settings_and_requested_memory(gemma: ServeResult) -> None:
    assert (gemma.settings.max_num_batched_tokens, gemma.settings.max_num_seqs) == (16384, 1024)
    assert gemma.budget.requested_bytes / GIB == pytest.approx(160.53, abs=TOLERANCE_GIB)


def test_weights(gemma: ServeResult) -> None:
    # 4,300,079,472 parameters (text + SigLIP vision tower, counted by building the model) in bf16, plus
    # vLLM's rotary caches: 131072 × 8 (linear scaling) and 131072 positions × 256 dims × 2 B = 576 MiB
    assert gemma.params_count == 4_300_079_472
    assert gemma.budget.weights_bytes == 4_300_079_472 * 2 + (131072 * 8 + 131072) * 256 * 2
    assert gemma.budget.weights_bytes / GIB == pytest.approx(PUBLISHED["weights"], abs=TOLERANCE_GIB)


def test_non_torch(gemma: ServeResult) -> None:
    # cuBLAS + cuBLASLt workspaces, 32 MiB each on compute capability 10.0 (B200)
    assert gemma.budget.non_torch_bytes / GIB == pytest.approx(PUBLISHED["non_torch"], abs=TOLERANCE_GIB)


def test_cuda_graphs_fitted_here(gemma: ServeResult) -> None:
    # GRAPH_BYTES_PER_CAPTURE was fitted on this figure: this pins the fit, it is not an independent check
    assert gemma.budget.cuda_graph_bytes / GIB == pytest.approx(PUBLISHED["cuda_graphs"], abs=TOLERANCE_GIB)


def test_kv_budget_arithmetic_of_the_published_terms() -> None:
    budget = vllm_budget(int(DEVICE_GIB * GIB), UTILIZATION,
                         **{k: int(v * GIB) for k, v in (("weights_bytes", 8.58), ("activation_peak_bytes", 9.96))},
                         non_torch=int(0.07 * GIB), graphs=int(0.65 * GIB))
    assert budget.kv_cache_bytes / GIB == pytest.approx(PUBLISHED_KV_GIB, abs=TOLERANCE_GIB)


@pytest.mark.xfail(strict=True, reason="traced profile run (text decoder at 16,384 tokens + float32 sampler over "
                   "1,024 × 262,208 logits) peaks at 5.76 GiB, 4.2 GiB under the log: vLLM's multimodal profile "
                   "(SigLIP on dummy images, encoder cache) is not traced")
def test_activation_peak(gemma: ServeResult) -> None:
    assert gemma.budget.activation_peak_bytes / GIB == pytest.approx(PUBLISHED["activation_peak"], abs=0.1)


@pytest.mark.xfail(strict=True, reason="follows from the activation-peak gap: 146.0 GiB against 141.27 GiB")
def test_kv_budget(gemma: ServeResult) -> None:
    assert gemma.budget.kv_cache_bytes / GIB == pytest.approx(PUBLISHED_KV_GIB, abs=0.1)
