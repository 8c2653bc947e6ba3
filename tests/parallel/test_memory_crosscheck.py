"""One GPU, no sharding: the planner's per-rank memory (built from per-block pieces of one trace)
agrees with gpuplan.estimate's allocator-level figures for the whole traced step."""

from __future__ import annotations

import pytest

from gpuplan.estimate import estimate
from gpuplan.parallel.plan import plan


@pytest.mark.parametrize("checkpointing", ["none", "full"])
@pytest.mark.slow
def test_single_gpu_plan_matches_estimate(checkpointing: str) -> None:
    kw = {"mode": "train", "batch_size": 8, "seq_len": 1024, "precision": "amp-bf16", "checkpointing": checkpointing}
    est = estimate("gpt2", gpu="H100-SXM", **kw)
    p = plan("gpt2", gpus=1, gpu="H100-SXM", **kw)
    (rank,) = p.best.ranks
    # Allocated: the plan adds every model state at its full size at once (a conservative steady
    # state), so it may sit a little above the traced peak; never below it by more than rounding.
    allocated = est.peak_allocated_bytes + est.components["cuda_context"]
    assert allocated * 0.98 <= rank.allocated_bytes <= allocated * 1.10
    # With the caching allocator's slack (the traced fraction, from 3 blocks) against estimate's
    # reserved + context at full depth: the planner should not promise a fit estimate would refuse.
    # Measured 2026-11-29: +8.3 % (none), +12.3 % (full).
    assert est.total_required_bytes <= rank.total_bytes <= est.total_required_bytes * 1.15
    assert rank.params_bytes == est.components["parameters"]
    assert rank.optimizer_bytes == est.components["optimizer_state"]
