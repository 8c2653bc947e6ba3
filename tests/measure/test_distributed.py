"""2-process gloo runs through torchrun (DDP, FSDP2, ZeRO-1): each rank's tracked bytes against the
per-rank accounting of gpuplan.measure.per_rank, within 2%. The planner's per-rank memory
(gpuplan.parallel) is reported next to it but not held to the bound: it profiles with CUDA
semantics on a catalog GPU (docs/measure.md).

These are the suite's real launches of those three layouts (tests/measure/test_layouts.py runs the DeepSpeed
ones through the CLI): the DDP one goes through submitit's local executor (``run_on_node``, the function a
Slurm node runs), so one launch covers the layout and the executor seam."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gpuplan.measure.executor import Executor, SubmititExecutor
from gpuplan.measure.launch import measure_distributed
from gpuplan.measure.local import Options
from gpuplan.workload import Workload

pytestmark = pytest.mark.slow

TOLERANCE = 0.02  # the acceptance bound per rank
LAYOUTS_RUN_HERE = ("ddp", "fsdp", "zero1")
"""The layouts launched for real in this file (test_layouts.py checks every layout runs somewhere)."""
_HAS_SUBMITIT = importlib.util.find_spec("submitit") is not None


def _executor(layout: str, folder: Path) -> Executor | None:
    """submitit's local executor for the DDP run (None: torchrun directly, measure's default)."""
    return SubmititExecutor(folder, cluster="local", cpu_ranks=True) if layout == "ddp" and _HAS_SUBMITIT else None


@pytest.mark.parametrize("layout", ["ddp", "fsdp"])
def test_two_process_gloo_per_rank_within_2_percent(tiny_gpt2: str, layout: str, tmp_path: Path) -> None:
    executor = _executor(layout, tmp_path / "jobs")
    m = measure_distributed(tiny_gpt2, workload=Workload(mode="train", batch_size=2, seq_len=32),
                            options=Options(steps=1, warmup=1), nproc=2, layout=layout, timeout_s=240,
                            executor=executor)
    if executor is not None:
        assert list((tmp_path / "jobs").glob("*_result.pkl"))  # it went through submitit, not torchrun directly
    assert [r.rank for r in m.ranks] == [0, 1]
    assert all(r.world_size == 2 and r.layout == layout and r.device == "cpu" for r in m.ranks)
    rows = [c for c in m.comparisons if c.quantity.endswith("tracked peak")]
    assert len(rows) == 2
    for c in rows:
        assert c.measured is not None and c.estimated is not None
        assert abs(c.error) <= TOLERANCE, (c.quantity, c.estimated, c.measured)  # type: ignore[arg-type]
    # the planner's own per-rank figure is reported next to it (CUDA-semantics profile; not bound here)
    planner = m.estimated["planner"]
    assert planner is not None and planner["per_rank_bytes"] > 0
    assert any(c.quantity == "rank 0 vs planner" for c in m.comparisons)
    per_rank = m.estimated["per_rank"]
    single = per_rank["terms"]["single_process_peak_bytes"]
    if layout == "ddp":
        # DDP replicates everything and adds its gradient buckets: more than one process alone
        assert all(r.tracked_peak_bytes > single for r in m.ranks)  # type: ignore[operator]
        assert any("gradient_as_bucket_view=True" in n for n in m.notes)
    else:
        # FSDP2 shards parameters and optimizer state: each rank holds less than one process alone
        assert all(r.tracked_peak_bytes < single for r in m.ranks)  # type: ignore[operator]
        assert m.ranks[0].tracked_components["parameters"] * 2 == per_rank["terms"]["param_bytes"]


def test_two_process_zero1_shards_only_the_optimizer_state(tiny_gpt2: str) -> None:
    m = measure_distributed(tiny_gpt2, workload=Workload(mode="train", batch_size=2, seq_len=32),
                            options=Options(steps=1, warmup=1), nproc=2, layout="zero1", timeout_s=240)
    for c in (c for c in m.comparisons if c.quantity.endswith("tracked peak")):
        assert abs(c.error) <= TOLERANCE, (c.quantity, c.estimated, c.measured)  # type: ignore[arg-type]
    terms = m.estimated["per_rank"]["terms"]
    # ZeroRedundancyOptimizer: each rank keeps about half the AdamW state, all of the weights
    for r in m.ranks:
        assert r.tracked_components["parameters"] == terms["param_bytes"]
        assert abs(r.tracked_components["optimizer_state"] - terms["optimizer_state_at_peak_bytes"] / 2) < 1024
    assert m.estimated["planner"] is None  # the planner's ZeRO-1 is DeepSpeed's, not compared
    assert any("gradient_as_bucket_view=True" in n for n in m.notes)
