"""Per-rank tensor memory of a parallel layout, from the single-process trace (explicit accounting).

This is what the multi-process measurement is compared with: each rank's storage-tracked peak,
before any GPU-specific term (allocator, context, workspaces). It starts from the peak of the
single-process trace with the same micro-batch (activations and temporaries are per rank and
unchanged by these layouts) and changes the model states the way each layout's real API does:

* ``ddp``: everything replicated; the gradients live in DDP's buckets (one flat gradient of every
  trainable parameter, alive for the whole run). The measured run uses
  ``gradient_as_bucket_view=True`` as the planner plans (measure/layouts.py), so the gradients
  are views into the buckets: the trace's gradients at the peak are replaced by the whole buckets.
* ``zero1``: DDP, with the optimizer state of only the parameters ``ZeroRedundancyOptimizer``
  assigns to the rank (largest parameters first, each to the least-loaded rank).
* ``fsdp`` (FSDP2, every repeated block wrapped, then the root): parameters, gradients and
  optimizer state live at the peak are sharded (dim 0 split as ``torch.chunk`` does, so the last
  rank may hold less), plus the unsharded working set: the root unit's parameters (FSDP2 keeps the
  root unsharded between forward and backward) and one block's parameters being all-gathered.

Known limitations: one all-gathered block is assumed (FSDP2 may prefetch a second one on GPUs,
where all-gathers run on their own stream); gradients at the peak are counted sharded (a block's
unsharded gradients before its reduce-scatter are not); ZeRO-2/3 (DeepSpeed) are not modelled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from gpuplan.measure.results import Comparison, Measured
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from gpuplan.models.sources import ModelSource


@dataclass(frozen=True, slots=True)
class ParamLayout:
    """Parameter shapes of the full model: per block and outside the blocks (the root unit)."""

    shapes: tuple[tuple[int, ...], ...]
    root_numel: int
    block_numels: tuple[int, ...]
    element_bytes: int

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def param_layout(source: ModelSource, workload: Workload) -> ParamLayout:
    """Build the model on the meta device (no memory) and read its parameter shapes."""
    from gpuplan.trace.runner import DTYPES, block_modules, find_containers, quiet

    with quiet(), torch.device("meta"):
        model = source.build(workload)
    counts = source.layer_counts()
    containers = find_containers(model, counts) if counts else {}
    blocks = block_modules(model, containers)
    in_blocks: set[int] = set()
    block_numels = []
    for _, block in blocks:
        n = 0
        for p in block.parameters():
            if id(p) not in in_blocks:
                in_blocks.add(id(p))
                n += p.numel()
        block_numels.append(n)
    unique = {id(p): p for p in model.parameters() if p.requires_grad}
    root = sum(p.numel() for k, p in unique.items() if k not in in_blocks)
    return ParamLayout(shapes=tuple(tuple(p.shape) for p in unique.values()), root_numel=root,
                       block_numels=tuple(block_numels), element_bytes=DTYPES[workload.param_dtype].itemsize)


def fsdp_shard_numel(shape: tuple[int, ...], rank: int, nproc: int) -> int:
    """Elements of ``rank``'s FSDP2 shard: dim 0 split as ``torch.chunk`` splits it."""
    if not shape:
        return 1 if rank == 0 else 0  # scalars go whole to rank 0
    d0, rest = shape[0], math.prod(shape[1:])
    chunk = -(-d0 // nproc)
    return max(0, min(chunk, d0 - rank * chunk)) * rest


def zero1_partition(shapes: tuple[tuple[int, ...], ...], nproc: int) -> list[int]:
    """Elements per rank as ZeroRedundancyOptimizer assigns parameters: largest first, each to the
    rank with the fewest elements so far (torch/distributed/optim/zero_redundancy_optimizer.py,
    ``_partition_parameters``)."""
    loads = [0] * nproc
    for n in sorted((math.prod(s) for s in shapes), reverse=True):
        loads[loads.index(min(loads))] += n
    return loads


@dataclass(frozen=True, slots=True)
class RankEstimate:
    layout: str
    nproc: int
    tensor_peak_bytes: tuple[int, ...]
    """Per rank."""
    terms: dict[str, Any] = field(default_factory=dict)
    method: str = "explicit accounting from the single-process trace (gpuplan.measure.per_rank)"
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tensor_peak_bytes"] = list(self.tensor_peak_bytes)
        out["notes"] = list(self.notes)
        return out


def account(layout: str, nproc: int, host_peak: int, components: dict[str, int], params: ParamLayout
            ) -> RankEstimate:
    """The per-rank accounting itself (pure arithmetic; see the module docstring)."""
    p_bytes = params.numel * params.element_bytes
    opt = components.get("optimizer_state", 0)
    grads = components.get("gradients", 0)
    per_rank: list[int] = []
    terms: dict[str, Any] = {"single_process_peak_bytes": host_peak, "param_bytes": p_bytes,
                             "optimizer_state_at_peak_bytes": opt, "gradients_at_peak_bytes": grads}
    # DDP (ddp, zero1) with gradient_as_bucket_view=True: the gradients alive at the peak are views
    # into the buckets, which hold every trainable gradient for the whole run
    bucketed = host_peak - grads + p_bytes
    if layout == "ddp":
        terms["ddp_bucket_bytes"] = p_bytes
        per_rank = [bucketed] * nproc
    elif layout == "zero1":
        loads = zero1_partition(params.shapes, nproc)
        terms["ddp_bucket_bytes"] = p_bytes
        terms["zero1_elements_per_rank"] = loads
        per_rank = [bucketed - opt + round(opt * n / params.numel) for n in loads]
    elif layout == "fsdp":
        working = (params.root_numel + max(params.block_numels, default=0)) * params.element_bytes
        terms["fsdp_unsharded_working_set_bytes"] = working
        for rank in range(nproc):
            local = sum(fsdp_shard_numel(s, rank, nproc) for s in params.shapes)
            share = local / params.numel
            sharded = local * params.element_bytes + round((opt + grads) * share)
            per_rank.append(host_peak - p_bytes - opt - grads + sharded + working)
    else:
        raise ValueError(f"no per-rank accounting for layout {layout!r}")
    return RankEstimate(layout=layout, nproc=nproc, tensor_peak_bytes=tuple(per_rank), terms=terms)


def per_rank_estimate(source: ModelSource, workload: Workload, layout: str, nproc: int, *, cuda: bool
                      ) -> RankEstimate:
    """Per-rank tracked-bytes estimate; ``cuda=False`` traces with host semantics (CPU gloo runs)."""
    from gpuplan.trace.step import trace_step

    if layout not in ("ddp", "zero1", "fsdp"):
        return RankEstimate(layout=layout, nproc=nproc, tensor_peak_bytes=(), method="none",
                            notes=(f"no per-rank estimate for {layout} (DeepSpeed) yet",))
    step = trace_step(source, workload, cuda=cuda)
    return account(layout, nproc, step.tensor_peak_bytes, dict(step.tensor_components),
                   param_layout(source, workload))


def compare_ranks(est: RankEstimate, ranks: list[Measured], planner: dict[str, Any] | None = None
                  ) -> tuple[Comparison, ...]:
    rows = []
    for r in ranks:
        e = est.tensor_peak_bytes[r.rank] if r.rank < len(est.tensor_peak_bytes) else None
        rows.append(Comparison(f"rank {r.rank} tracked peak", "bytes", e, r.tracked_peak_bytes))
        if planner is not None and "per_rank_bytes" in planner:
            rows.append(Comparison(f"rank {r.rank} vs planner", "bytes", planner["per_rank_bytes"],
                                   r.tracked_peak_bytes))
        if r.total_bytes is not None:  # on GPUs: the planner's total includes context and workspaces
            total = planner.get("per_rank_total_bytes") if planner is not None else None
            rows.append(Comparison(f"rank {r.rank} total (with context)", "bytes", total, r.total_bytes))
    rows.append(Comparison("step time (rank 0)", "s", None, ranks[0].step_time_s))
    return tuple(rows)


# layout name -> the planner's (zero, fsdp) for the same layout; ZeRO-1 is left out: the planner
# models it as DeepSpeed (16-bit weights), the measurement as ZeroRedundancyOptimizer (fp32)
_PLANNER_LAYOUTS: dict[str, tuple[int | None, bool]] = {"ddp": (0, False), "fsdp": (None, True)}


def planner_per_rank(source: ModelSource, workload: Workload, layout: str, nproc: int, gpu: str | None
                     ) -> dict[str, Any] | None:
    """The planner's per-rank memory before GPU-specific terms (``gpuplan.parallel.plan`` with
    the layout fixed), for reference next to the explicit accounting; None if it has none.

    The planner profiles with CUDA semantics on a catalog GPU; on a CPU run ``H100-SXM`` stands in
    (the GPU only chooses kernels there), so its activations can differ from a host-semantics run."""
    if layout not in _PLANNER_LAYOUTS:
        return None
    try:
        from gpuplan.parallel.plan import plan
    except ImportError:
        return None
    from gpuplan.errors import GpuplanError

    zero, fsdp = _PLANNER_LAYOUTS[layout]
    target = gpu or "H100-SXM"
    try:
        p = plan(source, gpus=nproc, gpu=target, dp=nproc, tp=1, pp=1, zero=zero, fsdp=fsdp,
                 micro_batch_size=workload.batch_size, global_batch_size=workload.batch_size * nproc,
                 workload=workload, checkpointing_fixed=True)
    except GpuplanError as exc:
        return {"gpu": target, "error": str(exc)}
    ranks = [r.total_bytes - r.overhead_bytes for r in p.best.ranks]
    return {"gpu": target, "per_rank_bytes": max(ranks),
            "per_rank_total_bytes": max(r.total_bytes for r in p.best.ranks),
            "ranks": [r.to_dict() for r in p.best.ranks],
            "note": "gpuplan.parallel.plan per-rank memory minus CUDA context and workspaces"}
