"""Per-rank memory and step time of one layout, from the traced profile (pure arithmetic).

Memory: the traced parameters, gradients and optimizer state are split over pipeline stages
(blocks evenly, embeddings on the first stage, the head on the last), over tensor-parallel ranks
(Megatron splits every linear layer and the vocabulary) and over the sharding group of the
engine (DeepSpeed ZeRO stage / FSDP2); activations of one micro-batch are those traced, sharded by
TP (and SP) and multiplied by the micro-batches a stage holds in flight; communication buffers are
the engine's (DeepSpeed buckets, FSDP2 unsharded blocks, pipeline send/receive tensors).

Time: per micro-batch, each stage runs its blocks' traced forward/backward time ÷ tp plus the
TP collectives (not overlapped); a pipeline runs ``(m + (p−1)/v)`` micro-batch slots of the
slowest stage; data-parallel gradient traffic overlaps the last backward as the engine does it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuplan.memory.offload import optimizer_offload_time
from gpuplan.parallel.collectives import Group, all_gather_s, all_reduce_s, group, p2p_s, reduce_scatter_s
from gpuplan.parallel.layout import FSDP2, Layout, MegatronDDP, Zero
from gpuplan.parallel.profile import ModelProfile
from gpuplan.parallel.topology import Topology
from gpuplan.parallel.zero import model_states_bytes

DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""torch DistributedDataParallel's default bucket_cap_mb (25 MiB)."""


@dataclass(frozen=True, slots=True)
class RankMemory:
    kind: str
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    buffers_bytes: int
    overhead_bytes: int
    """CUDA context and library workspaces."""
    optimizer_temp_bytes: int = 0
    """Temporaries of the optimizer step (torch foreach optimizers); they never coexist with the
    activations of a micro-batch, so the peak takes the larger of the two."""
    weight_cast_bytes: int = 0
    """16-bit copies of fp32 weights that torch.autocast keeps through forward and backward."""
    allocator_slack_bytes: int = 0
    """Caching-allocator slack (reserved beyond allocated), at the traced step's fraction."""

    @property
    def allocated_bytes(self) -> int:
        """Peak of live tensors (what torch.cuda.max_memory_allocated would report) + context."""
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + max(self.activations_bytes + self.weight_cast_bytes, self.optimizer_temp_bytes)
            + self.buffers_bytes
            + self.overhead_bytes
        )

    @property
    def total_bytes(self) -> int:
        """What the rank needs from the GPU: allocated + allocator slack + CUDA context."""
        return self.allocated_bytes + self.allocator_slack_bytes

    def to_dict(self) -> dict[str, int | str]:
        return {
            "kind": self.kind,
            "total_bytes": self.total_bytes,
            "allocated_bytes": self.allocated_bytes,
            "allocator_slack": self.allocator_slack_bytes,
            "parameters": self.params_bytes,
            "gradients": self.grads_bytes,
            "optimizer_state": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "optimizer_step_temporaries": self.optimizer_temp_bytes,
            "autocast_weight_copies": self.weight_cast_bytes,
            "communication_buffers": self.buffers_bytes,
            "cuda_context_and_workspaces": self.overhead_bytes,
        }


@dataclass(frozen=True, slots=True)
class Evaluation:
    layout: Layout
    ranks: tuple[RankMemory, ...]
    step_time_s: float
    time_parts_s: dict[str, float] = field(default_factory=dict)
    """compute, pipeline_bubble, tp_comm, pp_comm, dp_comm_exposed, optimizer."""

    @property
    def per_gpu_peak_bytes(self) -> int:
        return max(r.total_bytes for r in self.ranks)


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a layout is evaluated against (fixed for one plan)."""

    profile: ModelProfile
    topology: Topology
    usable_bytes: int
    overhead_bytes: int


def bucket_elements(rank_params: float) -> int:
    """DeepSpeed ZeRO-1/2 reduce and all-gather bucket size we emit: 2e8 elements (Hugging Face's
    recommended value), smaller for small models so buckets never exceed an eighth of the shard."""
    return int(min(2e8, max(1e6, rank_params / 8)))


def zero3_buckets(hidden: int) -> tuple[int, int, int]:
    """(reduce_bucket_size, stage3_prefetch_bucket_size, stage3_param_persistence_threshold) as the
    Hugging Face DeepSpeed integration sets 'auto': h², 0.9·h², 10·h."""
    return hidden * hidden, int(0.9 * hidden * hidden), 10 * hidden


def _stage_params(p: ModelProfile, pp: int) -> tuple[float, float]:
    """Parameters held by the (first, last) pipeline stage, before tensor parallelism."""
    if pp == 1:
        return float(p.params_count), float(p.params_count)
    blocks = p.block_params * p.layers / pp
    head = p.outer_params - p.embedding_params
    tied = head < p.vocab * p.hidden / 2
    # Megatron keeps a copy of tied word embeddings on the last stage for the output layer.
    last = blocks + head + (p.vocab * p.hidden if tied else 0)
    return blocks + p.embedding_params, last


def _inflight(layout: Layout) -> float:
    """Micro-batches of activations the first stage holds (1F1B: pp; interleaved: more)."""
    if layout.pp == 1:
        return 1.0
    n = min(layout.pp, layout.grad_accum)
    if layout.schedule == "interleaved" and layout.virtual_stages > 1:
        return n * (1 + (layout.pp - 1) / (layout.pp * layout.virtual_stages))
    return float(n)


def _states(ctx: Context, layout: Layout, rank_params: float) -> tuple[float, float, float, float]:
    """(params, grads, optimizer, buffers) bytes of one rank holding ``rank_params`` parameters."""
    p = ctx.profile
    pb, gb, ob = p.param_bytes_per_param, p.grad_bytes_per_param, p.optimizer_bytes_per_param
    cb = p.compute_bytes
    block_rank = p.block_params / layout.tp
    s = layout.sharding
    if isinstance(s, FSDP2):
        shard = layout.shard_group
        unsharded = (
            cb * block_rank * p.layers / layout.pp if not s.reshard_after_forward else 2 * cb * block_rank
        )  # current block + the one prefetched
        buffers = unsharded + gb * block_rank  # one block's unsharded gradients before reduce-scatter
        return pb * rank_params / shard, gb * rank_params / shard, ob * rank_params / shard, buffers
    if isinstance(s, Zero):
        # DeepSpeed mixed precision: 16-bit params and grads + fp32 master, fp32 grad partition and
        # the optimizer's own state (traced) — K = 4 + 4 + optimizer bytes (16 for Adam). In fp32
        # there is no master copy: 4-byte params and grads, K = optimizer bytes.
        half = p.compute_bytes
        mixed = half < 4
        k = 4 + 4 + ob if mixed else ob
        stage = s.stage
        # Megatron splits the largest matrix (the vocabulary) over tp too.
        largest = min(p.largest_layer_params / layout.tp, rank_params)
        if stage == 3:
            # ZeRO-3 reduce-scatters 16-bit grads at once into the fp32 partition counted in K.
            ms = model_states_bytes(rank_params, 3, layout.dp, k=k, param_bytes=half, grad_bytes=0 if mixed else 4)
            red, prefetch, _ = zero3_buckets(p.hidden)
            buffers = 2 * largest * half + half * (prefetch + red)
        else:
            ms = model_states_bytes(rank_params, stage, layout.dp, k=k, param_bytes=half, grad_bytes=half)
            buffers = 2 * half * bucket_elements(rank_params)
        params, grads, opt = ms.params_bytes, ms.grads_bytes, ms.optimizer_bytes
        if s.offload_optimizer:
            opt = 0.0
            grads = 0.0 if stage <= 2 else grads  # DeepSpeed's estimator: ZeRO-2 offload keeps 2·P
        if s.offload_params:  # stage 3: Zero refuses it at stages 1 and 2
            params = 0.0
        return params, grads, opt, buffers
    if isinstance(s, MegatronDDP) and p.compute_bytes < 4:
        # 16-bit weights; fp32 main grads (traced gradient bytes); fp32 master copy + optimizer
        # state in the optimizer: 2 + 4 + 4 + 8 = 18 bytes per parameter with Adam.
        return cb * rank_params, gb * rank_params, (pb + ob) * rank_params, 0.0
    # torch DDP as emitted (gradient_as_bucket_view=True): gradients are views into the buckets,
    # no extra copy (the default False would add one gradient-sized copy per rank).
    return pb * rank_params, gb * rank_params, ob * rank_params, 0.0


def _optimizer_temp(ctx: Context, layout: Layout, rank_params: float) -> float:
    """Traced optimizer-step temporaries for the parameters this rank updates. DeepSpeed steps
    with its own fused/CPU Adam (multi-tensor chunks) and Megatron-LM with Apex/TE FusedAdam, so
    they have none of the foreach copies."""
    if isinstance(layout.sharding, Zero | MegatronDDP):
        return 0.0
    shard = layout.shard_group  # 1 for DDP
    return ctx.profile.optimizer_temp_bytes_per_param * rank_params / shard


def memory(ctx: Context, layout: Layout) -> tuple[RankMemory, ...]:
    p = ctx.profile
    scale = layout.micro_batch_size / p.micro_batch
    tp = layout.tp
    sp = layout.sequence_parallel and tp > 1
    rep = p.block_act_replicated_bytes
    blk = (p.block_act_bytes - rep) / tp + rep / (tp if sp else 1)
    per_stage_layers = p.layers / layout.pp
    first_p, last_p = _stage_params(p, layout.pp)
    transient = p.transient_bytes / tp
    p2p = 0.0
    if layout.pp > 1:
        p2p = 2 * layout.micro_batch_size * p.seq_len * p.hidden * p.compute_bytes / (tp if sp else 1)
    # autocast weight copies exist only where the engine keeps fp32 weights (DDP / TP / PP with
    # AMP); FSDP2's MixedPrecisionPolicy and DeepSpeed hold the compute copy in 16 bits already.
    casts = layout.fp32_weights_with_autocast
    block_cast = p.block_weight_cast_bytes * per_stage_layers / tp if casts else 0.0
    outer_cast = p.outer_weight_cast_bytes / tp if casts else 0.0
    kinds: list[tuple[str, float, float, float]] = []
    if layout.pp == 1:
        act = blk * p.layers + p.first_act_bytes / tp + p.last_act_bytes / tp
        kinds.append(("every rank", first_p / tp, act, block_cast + outer_cast))
    else:
        n = _inflight(layout)
        kinds.append(("first stage", first_p / tp, (blk * per_stage_layers + p.first_act_bytes / tp) * n, block_cast))
        kinds.append(
            (
                "last stage",
                last_p / tp,
                blk * per_stage_layers + p.last_act_bytes / tp,
                block_cast + outer_cast,
            )
        )
    out = []
    for kind, rank_params, act, cast in kinds:
        params, grads, opt, buffers = _states(ctx, layout, rank_params)
        rank = RankMemory(
            kind,
            int(params),
            int(grads),
            int(opt),
            int((act + transient) * scale),
            int(buffers + p2p),
            ctx.overhead_bytes,
            int(_optimizer_temp(ctx, layout, rank_params)),
            int(cast),
        )
        slack = p.allocator_slack_fraction * (rank.allocated_bytes - ctx.overhead_bytes)
        out.append(replace(rank, allocator_slack_bytes=int(slack)))
    return tuple(out)


def step_time(ctx: Context, layout: Layout) -> tuple[float, dict[str, float]]:
    p, topo = ctx.profile, ctx.topology
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    scale = layout.micro_batch_size / p.micro_batch
    cb = p.compute_bytes
    tp_group = group(topo, tp, 1)
    dp_group = group(topo, dp, tp)
    shard_group = group(topo, layout.shard_group, tp)
    # ---- one micro-batch on the slowest stage ------------------------------------------------
    bf, bb = p.block_time.at(scale, tp)
    ff, fb = p.first_time.at(scale, tp)
    lf, lb = p.last_time.at(scale, tp)
    if layout.fp32_weights_with_autocast:
        # autocast re-casts every fp32 weight each micro-batch (work independent of the batch)
        cf, cb_ = p.block_cast_time.at(1.0, tp)
        of, ob_ = p.outer_cast_time.at(1.0, tp)
        bf, bb, lf, lb = bf + cf, bb + cb_, lf + of, lb + ob_
    layers = p.layers / pp
    stage_f = [layers * bf + (ff if i == 0 else 0) + (lf if i == pp - 1 else 0) for i in (0, pp - 1)]
    stage_b = [layers * bb + (fb if i == 0 else 0) + (lb if i == pp - 1 else 0) for i in (0, pp - 1)]
    slot_compute = max(f + b for f, b in zip(stage_f, stage_b, strict=True))
    # Megatron TP: two all-reduces per block forward and two backward (with SP: all-gather +
    # reduce-scatter of the same bytes); full recompute repeats the forward pair. Not overlapped.
    act_bytes = layout.micro_batch_size * p.seq_len * p.hidden * cb
    per_block = 4 + (2 if layout.checkpointing == "full" else 0)
    tp_s = layers * per_block * all_reduce_s(tp_group, act_bytes) if tp > 1 else 0.0
    # FSDP2 / ZeRO-3: parameters gathered per micro-batch (twice if resharded after forward) and
    # gradients reduce-scattered, prefetched one block ahead so only the excess over compute shows.
    shard_exposed = 0.0
    stage_params = p.params_count / pp / tp
    s = layout.sharding
    zero3 = isinstance(s, Zero) and s.stage == 3
    if (isinstance(s, FSDP2) or zero3) and layout.shard_group > 1:
        gathers = 2 if (zero3 or (isinstance(s, FSDP2) and s.reshard_after_forward)) else 1
        ag = all_gather_s(shard_group, cb * stage_params)
        rs = reduce_scatter_s(shard_group, (p.grad_bytes_per_param if isinstance(s, FSDP2) else cb) * stage_params)
        fwd_c, bwd_c = max(stage_f), max(stage_b)
        first_block = all_gather_s(shard_group, cb * p.block_params / tp)
        shard_exposed = max(0.0, ag - fwd_c) + max(0.0, (gathers - 1) * ag + rs - bwd_c) + first_block
    slot = slot_compute + tp_s + shard_exposed
    # ---- pipeline -------------------------------------------------------------------------------
    m = layout.grad_accum
    v = layout.virtual_stages if layout.schedule == "interleaved" else 1
    bubble_slots = (pp - 1) / v if pp > 1 else 0.0
    pp_s = 0.0
    if pp > 1:
        p2p_group = Group(2, _p2p_bw(topo, tp * dp), group(topo, 2, tp * dp).latency_s, False)
        # Megatron's scatter/gather optimisation (and SP) send 1/tp of the activation per TP rank.
        msg = act_bytes / tp
        pp_s = (m + bubble_slots) * 2 * v * p2p_s(p2p_group, msg)
    compute = m * slot
    bubble = bubble_slots * slot
    # ---- data-parallel gradients ----------------------------------------------------------------
    dp_exposed = 0.0
    if dp > 1 and not isinstance(s, FSDP2) and not zero3:
        grad_b = cb if isinstance(s, Zero) else p.grad_bytes_per_param
        if isinstance(s, Zero):  # stages 1 and 2 here
            comm = reduce_scatter_s(dp_group, grad_b * stage_params) + all_gather_s(dp_group, cb * stage_params)
            tail = all_gather_s(dp_group, cb * stage_params)  # updated params gathered after the step
        else:
            comm = all_reduce_s(dp_group, grad_b * stage_params)
            tail = 0.0
        if pp > 1:
            dp_exposed = comm  # after the pipeline flush (Megatron / DeepSpeed pipeline engine)
        else:
            # Buckets are reduced while the last micro-batch's backward runs; the last bucket
            # (DDP bucket_cap_mb = 25 MB; DeepSpeed reduce_bucket_size) always waits for backward to end.
            bucket = cb * bucket_elements(stage_params) if isinstance(s, Zero) else DDP_BUCKET_BYTES
            last = all_reduce_s(dp_group, min(bucket, grad_b * stage_params))
            window = max(stage_b)
            dp_exposed = max(comm - tail - window, last) + tail
    elif isinstance(s, FSDP2) and s.hsdp_shard is not None:  # Layout holds it below dp
        replicas = group(topo, dp // s.hsdp_shard, tp * s.hsdp_shard)
        dp_exposed = all_reduce_s(replicas, p.grad_bytes_per_param * stage_params / s.hsdp_shard)
    # ---- optimizer --------------------------------------------------------------------------
    updated = stage_params / (layout.shard_group if layout.shard_group > 1 else 1)
    if isinstance(s, Zero) and s.offload_optimizer:
        # the one CPU-offload model (memory/offload.py, also fit's offload rung): DeepSpeed moves
        # compute-dtype gradients to the host and parameters back; the host link is PCIe (the
        # topology's where that is the GPU link, else memory/offload.py's default)
        host_gb_per_s = ctx.topology.intra_gb_per_s if ctx.topology.intra_link == "pcie" else None
        opt = optimizer_offload_time(
            updated, grad_bytes_per_param=cb, param_bytes_per_param=cb, host_link_gb_per_s=host_gb_per_s
        ).total_s
    else:
        opt = p.optimizer_s_per_param * updated
    parts = {
        "compute": compute,
        "pipeline_bubble": bubble,
        "tp_comm": m * tp_s,
        "pp_comm": pp_s,
        "shard_comm_exposed": m * shard_exposed,
        "dp_comm_exposed": dp_exposed,
        "optimizer": opt,
    }
    total = compute + bubble + pp_s + dp_exposed + opt
    parts["compute"] = m * slot_compute
    return total, parts


def _p2p_bw(topo: Topology, stride: int) -> float:
    """Point-to-point between adjacent pipeline stages: one NVLink path or one NIC."""
    if stride < topo.gpus_per_node and topo.gpus_per_node > 1:
        return topo.intra_gb_per_s * topo.intra_efficiency
    return topo.inter_gb_per_s * topo.inter_efficiency


def evaluate(ctx: Context, layout: Layout) -> Evaluation:
    ranks = memory(ctx, layout)
    total, parts = step_time(ctx, layout)
    return Evaluation(layout, ranks, total, parts)


def flops_per_step(p: ModelProfile, layout: Layout) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one optimizer step over all GPUs."""
    samples = layout.global_batch
    return p.model_flops_per_sample * samples, p.hw_flops_per_sample * samples


__all__ = [
    "Context",
    "Evaluation",
    "RankMemory",
    "bucket_elements",
    "evaluate",
    "flops_per_step",
    "memory",
    "step_time",
    "zero3_buckets",
]
