"""Arctic Long Sequence Training's single-GPU figure (docs/accuracy-scale.md): Llama-3.1-8B trains 500K-token
sequences on one H100 80GB with DeepSpeed ZeRO-3 params + optimizer offload, activation-checkpoint offload,
TiledMLP and Liger's fused linear cross entropy (Bekman et al., arXiv 2506.13996 v1, abstract).

gpuplan's largest sequence on the allocated bytes (activations linear in tokens; allocator slack left out: ALST
runs with ``expandable_segments:True``, which gpuplan's allocator model does not have) is within 10% of 500K
(measured: +2.7%); with gpuplan's default-allocator slack it is ~−10% (stated in the doc, not asserted).
"""

from __future__ import annotations

import json

import pytest
from tests.fixtures.exact import run_cli

PUBLISHED_TOKENS = 500_000
TOLERANCE = 0.10


@pytest.mark.slow
def test_alst_500k_on_one_h100() -> None:
    code, out, err = run_cli("plan", "llama-3.1-8b", "--gpus", "1", "--gpu", "H100-SXM", "--zero", "3", "--offload",
                             "params,optimizer,activations", "--checkpointing", "full", "--tiled-mlp", "--loss",
                             "fused-linear-ce", "--seq-len", str(PUBLISHED_TOKENS), "--batch-size", "1", "--precision",
                             "bf16", "--json")
    assert code in (0, 1), err
    data = json.loads(out)
    best = data["parallelism"]
    assert (best["zero"], best["offload_optimizer"], best["offload_params"]) == (3, True, True)
    (rank,) = data["ranks"]
    assert rank["parameters"] == rank["gradients"] == rank["optimizer_state"] == 0  # all on the host
    fixed = rank["allocated_bytes"] - rank["activations"]
    largest = PUBLISHED_TOKENS * (data["usable_bytes_per_gpu"] - fixed) / rank["activations"]
    assert abs(largest / PUBLISHED_TOKENS - 1) <= TOLERANCE, largest
