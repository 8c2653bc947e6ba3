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

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, TypeVar

from gpuplan.memory.offload import activation_offload_time_s, optimizer_offload_time
from gpuplan.parallel.collectives import (
    Group,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    group,
    p2p_s,
    reduce_scatter_s,
)
from gpuplan.parallel.layout import FSDP2, Layout, MegatronDDP, Zero, encoder_decoder_stages
from gpuplan.parallel.profile import Activations, ModelProfile
from gpuplan.parallel.topology import Topology
from gpuplan.parallel.zero import model_states_bytes

_T = TypeVar("_T")
_MISSING = object()

DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""torch DistributedDataParallel's default bucket_cap_mb (25 MiB)."""
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""torch DDP's first bucket (``dist._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB): reduced as soon as the
last layers' gradients exist, so gradient traffic starts early in the backward."""


TIME_PART_NAMES = {
    "compute": "compute",
    "pipeline_bubble": "pipeline bubble",
    "tp_comm": "tensor-parallel collectives",
    "pp_comm": "pipeline sends",
    "ep_comm": "expert all-to-alls",
    "cp_comm": "context-parallel K/V exchange not hidden by attention",
    "shard_comm_exposed": "parameter gathers not hidden by compute",
    "dp_comm_exposed": "gradient traffic not overlapped",
    "optimizer": "optimizer step",
}
"""Words for the keys of ``Evaluation.time_parts_s`` (the JSON keeps the keys)."""


def time_part_name(key: str) -> str:
    return TIME_PART_NAMES.get(key, key.replace("_", " "))


_Kind = tuple[str, float, float, float, float]
"""(kind, parameters, activations, autocast copies, blocks held) of one reported pipeline stage."""


def _tensor_peak_bytes(params: int, grads: int, optimizer: int, activations: int, weight_casts: int,
                       optimizer_temps: int, buffers: int) -> int:
    """Peak of one rank's live tensors: the optimizer step's temporaries never coexist with the activations of a
    micro-batch (and autocast's weight copies, freed with them), so the peak takes the larger of the two."""
    return params + grads + optimizer + max(activations + weight_casts, optimizer_temps) + buffers


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
        tensors = _tensor_peak_bytes(self.params_bytes, self.grads_bytes, self.optimizer_bytes, self.activations_bytes,
                                     self.weight_cast_bytes, self.optimizer_temp_bytes, self.buffers_bytes)
        return tensors + self.overhead_bytes

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
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """What the layouts of one search share, computed once per key: the stages' activations and parameters
    (``_stage_memory``), one micro-batch on the slowest stage (``_slot``), the engine's activations. Each entry
    is a pure function of this context and its key (the layout fields it reads), so it never changes an answer;
    a new Context (``dataclasses.replace`` too) starts empty."""


def _memo(ctx: Context, key: tuple[Any, ...], compute: Callable[..., _T], *args: Any) -> _T:
    """``compute(ctx, *args)`` once per ``key`` in ``ctx`` (a search evaluates thousands of layouts sharing a
    few shapes); ``key`` holds everything the result depends on besides ``ctx``."""
    memo = ctx.memo
    value = memo.get(key, _MISSING)
    if value is _MISSING:
        value = memo[key] = compute(ctx, *args)
    return value  # type: ignore[no-any-return]


def _activations(ctx: Context, layout: Layout) -> Activations:
    """The activations of the program ``layout``'s engine runs (``ModelProfile.activations``: autocast weight
    copies exist only where the engine keeps fp32 weights, DDP / TP / PP with AMP; FSDP2's MixedPrecisionPolicy,
    DeepSpeed and Megatron hold the compute copy in 16 bits already and run the modules in 16 bits)."""
    sixteen = not layout.fp32_weights_with_autocast
    return _memo(ctx, ("activations", sixteen), _profile_activations, sixteen)


def _profile_activations(ctx: Context, sixteen_bit_modules: bool) -> Activations:
    return ctx.profile.activations(sixteen_bit_modules)


def bucket_elements(rank_params: float) -> int:
    """DeepSpeed ZeRO-1/2 reduce and all-gather bucket size we emit: 2e8 elements (Hugging Face's
    recommended value), smaller for small models so buckets never exceed an eighth of the shard."""
    return int(min(2e8, max(1e6, rank_params / 8)))


def zero3_buckets(hidden: int) -> tuple[int, int, int]:
    """(reduce_bucket_size, stage3_prefetch_bucket_size, stage3_param_persistence_threshold) as the
    Hugging Face DeepSpeed integration sets 'auto': h², 0.9·h², 10·h."""
    return hidden * hidden, int(0.9 * hidden * hidden), 10 * hidden


def fsdp_state_bytes(p: ModelProfile, s: FSDP2) -> tuple[float, float, float]:
    """Bytes per parameter of FSDP2's (shard, gradient, optimizer state): as traced, or fp32 when the shards are
    (``sharded_fp32``): gradients take the sharded parameter's dtype, and torch.optim's Adam/AdamW state the
    parameter's, so the traced optimizer bytes scale by 4 / traced parameter bytes. The gradient bytes are also
    what the reduce-scatter moves (reduce_dtype float32 with fp32 shards)."""
    pb, gb, ob = p.param_bytes_per_param, p.grad_bytes_per_param, p.optimizer_bytes_per_param
    if s.sharded_fp32 and 0 < pb < 4:
        return 4.0, 4.0, ob * 4.0 / pb
    return pb, gb, ob


def _stage_params(p: ModelProfile, layout: Layout) -> tuple[float, float, float]:
    """Parameters held by the (first, middle, last) pipeline stage, before tensor parallelism."""
    pp = layout.pp
    if pp == 1:
        return (float(p.params_count),) * 3
    first_l, mid_l, last_l = layout.stage_layers(p.layers)
    head = p.outer_params - p.embedding_params
    tied = head < p.vocab * p.hidden / 2
    # Megatron keeps a copy of tied word embeddings on the last stage for the output layer.
    last = p.block_params * last_l + head + (p.vocab * p.hidden if tied else 0)
    return p.block_params * first_l + p.embedding_params, p.block_params * mid_l, last


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
        pb, gb, ob = fsdp_state_bytes(p, s)
        if layout.pp > 1 and not s.reshard_after_forward:
            unsharded = cb * rank_params  # the whole stage, gathered once and kept for every micro-batch
        elif not s.reshard_after_forward:
            unsharded = cb * block_rank * p.layers
        else:
            unsharded = 2 * cb * block_rank  # current block + the one prefetched
        if layout.pp > 1:
            # torch.distributed.pipelining runs every micro-batch's backward with FSDP's gradient sync off and
            # reduce-scatters once after the last one (pytorch/pytorch torch/distributed/pipelining/stage.py
            # backward_maybe_with_nosync / _post_backward @0138610): the stage's unsharded gradients accumulate,
            # upcast to the reduce dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
            # to_accumulated_grad_if_needed @17a7e1e), alive from the first backward to the end of the step
            unsharded_grads = gb * rank_params
        else:
            unsharded_grads = gb * block_rank  # one block's unsharded gradients before reduce-scatter
        buffers = unsharded + unsharded_grads
        return pb * rank_params / shard, gb * rank_params / shard, ob * rank_params / shard, buffers
    # Under PEFT only the trainable part (the adapters) has a master copy, gradients and optimizer
    # state in DeepSpeed and Megatron (both build their optimizer groups from requires_grad
    # parameters); frozen weights stay model weights: floating-point ones recast to the compute
    # dtype with the module, quantized packed ones as stored. Without frozen parameters
    # (trainable_fraction 1, no frozen bytes) these are the full-model formulas unchanged.
    tf = p.trainable_fraction
    trainable = rank_params * tf
    frozen_bytes = rank_params * (cb * p.frozen_float_params_per_param + p.frozen_packed_bytes_per_param)
    if isinstance(s, Zero):
        # DeepSpeed mixed precision: 16-bit params and grads + fp32 master, fp32 grad partition and
        # the optimizer's own state (traced) — K = 4 + 4 + optimizer bytes (16 for Adam). In fp32
        # there is no master copy: 4-byte params and grads, K = optimizer bytes. ZeRO-1/2 keep the
        # frozen weights replicated (only requires_grad parameters enter bit16_groups,
        # deepspeed/runtime/zero/stage_1_and_2.py); ZeRO-3 partitions every module parameter.
        half = p.compute_bytes
        mixed = half < 4
        ob_trainable = ob / tf if tf > 0 else 0.0
        k = 4 + 4 + ob_trainable if mixed else ob_trainable
        stage = s.stage
        # Megatron splits the largest matrix (the vocabulary) over tp too.
        largest = min(p.largest_layer_params / layout.tp, rank_params)
        if stage == 3:
            # ZeRO-3 reduce-scatters 16-bit grads at once into the fp32 partition counted in K.
            ms = model_states_bytes(trainable, 3, layout.dp, k=k, param_bytes=half, grad_bytes=0 if mixed else 4)
            red, prefetch, _ = zero3_buckets(p.hidden)
            buffers = 2 * largest * half + half * (prefetch + red)
        else:
            ms = model_states_bytes(trainable, stage, layout.dp, k=k, param_bytes=half, grad_bytes=half)
            buffers = 2 * half * bucket_elements(rank_params)
        params = ms.params_bytes + frozen_bytes / (layout.dp if stage == 3 else 1)
        grads, opt = ms.grads_bytes, ms.optimizer_bytes
        if s.offload_optimizer:
            opt = 0.0
            grads = 0.0 if stage <= 2 else grads  # DeepSpeed's estimator: ZeRO-2 offload keeps 2·P
        if s.offload_params:  # stage 3: Zero refuses it at stages 1 and 2
            params = 0.0
        return params, grads, opt, buffers
    if isinstance(s, MegatronDDP) and p.compute_bytes < 4:
        # 16-bit weights; main grads in megatron_grad_bytes (fp16: 2, bf16: 4); fp32 master copy +
        # optimizer state in the optimizer: 2 + 2 + 4 + 8 = 16 bytes per parameter with Adam in fp16
        # (the ZeRO paper's 16Ψ), 18 in bf16. Under PEFT the fp32 master covers the trainable
        # parameters only (megatron/core/optimizer skips parameters without requires_grad when it
        # builds its groups).
        opt = (pb + ob) * rank_params if tf >= 1.0 else 4 * trainable + ob * rank_params
        return cb * trainable + frozen_bytes, megatron_grad_bytes(p) * rank_params, opt, 0.0
    # torch DDP as emitted (gradient_as_bucket_view=True): gradients are views into the buckets,
    # no extra copy (the default False would add one gradient-sized copy per rank).
    return pb * rank_params, gb * rank_params, ob * rank_params, 0.0


def megatron_grad_bytes(p: ModelProfile) -> float:
    """Bytes per parameter of Megatron-LM's main-gradient buffer, which its DDP all-reduces: the
    parameter dtype unless ``--accumulate-allreduce-grads-in-fp32``, an opt-in flag Megatron turns
    on by itself only for bf16 (NVIDIA/Megatron-LM @46c74b4c, 2021-06-22: megatron/arguments.py
    L147 and L559, megatron/model/distributed.py L130 ``torch.float if
    accumulate_allreduce_grads_in_fp32 else param.dtype``; the same rule at @d98e8a64, 2026,
    megatron/training/arguments.py L1206-1217). So fp16 runs (Megatron-LM 2021, Korthikanti 2022)
    hold and reduce fp16 gradients, bf16 runs fp32 ones."""
    if p.compute_dtype == "fp16" and p.compute_bytes < 4:
        # the traced AMP program keeps fp32 gradients: Megatron's buffer holds 2 bytes per trainable one
        return min(p.grad_bytes_per_param, p.compute_bytes * p.trainable_fraction)
    return p.grad_bytes_per_param


def _optimizer_temp(ctx: Context, layout: Layout, rank_params: float) -> float:
    """Traced optimizer-step temporaries for the parameters this rank updates. DeepSpeed steps
    with its own fused/CPU Adam (multi-tensor chunks) and Megatron-LM with Apex/TE FusedAdam, so
    they have none of the foreach copies."""
    if isinstance(layout.sharding, Zero | MegatronDDP):
        return 0.0
    shard = layout.shard_group  # 1 for DDP
    s, p = layout.sharding, ctx.profile
    # fp32 shards: the foreach temporaries are in the parameter dtype too
    widen = fsdp_state_bytes(p, s)[0] / p.param_bytes_per_param if isinstance(s, FSDP2) and s.sharded_fp32 else 1.0
    return p.optimizer_temp_bytes_per_param * rank_params / shard * widen


def memory(ctx: Context, layout: Layout) -> tuple[RankMemory, ...]:
    """One rank of each reported pipeline stage (every rank alike without a pipeline)."""
    stages = _stage_memory(ctx, layout)
    a2a = _a2a_message_bytes(ctx.profile, layout)
    return tuple(_rank_memory(ctx, layout, kind, stages, a2a) for kind in stages.kinds)


@dataclass(frozen=True, slots=True)
class _StageMemory:
    """What a layout's pipeline stages hold before the engine shards the model states: the same for every layout
    of one shape (degrees, micro-batch, stages, schedule), whatever its sharding or data-parallel degree."""

    kinds: tuple[_Kind, ...]
    transient_bytes: float
    """Largest excess over the end-of-forward activations in backward (one traced micro-batch, ÷ tp)."""
    p2p_bytes: float
    """Pipeline send / receive buffers and context parallelism's receive buffers."""
    scale: float
    """Activations of the layout's micro-batch over the traced one's, per context-parallel rank."""


def _stage_memory(ctx: Context, layout: Layout) -> _StageMemory:
    """``_stages_of``, once per shape in ``ctx``: the key is every layout field it reads."""
    key = ("stages", layout.tp, layout.sequence_parallel, layout.fp32_weights_with_autocast, layout.pp,
           layout.micro_batch_size, layout.cp, layout.cp_comm, layout.first_stage_layers, layout.last_stage_layers,
           min(layout.grad_accum, layout.pp), layout.schedule, layout.virtual_stages)
    return _memo(ctx, key, _stages_of, layout)


def _stages_of(ctx: Context, layout: Layout) -> _StageMemory:
    p = ctx.profile
    # context parallelism: every rank holds the activations of its 1/cp of each sequence
    scale = layout.micro_batch_size / p.micro_batch / layout.cp
    tp = layout.tp
    sp = layout.sequence_parallel and tp > 1
    # autocast weight copies exist only where the engine keeps fp32 weights: one predicate (_activations)
    casts = layout.fp32_weights_with_autocast
    a = _activations(ctx, layout)
    rep = a.block_replicated_bytes
    blk = (a.block_bytes - rep) / tp + rep / (tp if sp else 1)
    first_l, mid_l, last_l = layout.stage_layers(p.layers)
    first_p, mid_p, last_p = _stage_params(p, layout)
    transient = a.transient_bytes / tp
    p2p = 0.0
    if layout.pp > 1:
        p2p = 2 * layout.micro_batch_size * p.seq_len * p.hidden * p.compute_bytes / (tp if sp else 1) / layout.cp
        if p.stacks:  # Megatron's T5 pipeline: decoder stages send and receive the encoder's output too
            p2p *= 2
    p2p += _cp_buffer_bytes(p, layout)
    cast_per_block = p.block_weight_cast_bytes / tp if casts else 0.0
    outer_cast = p.outer_weight_cast_bytes / tp if casts else 0.0
    # (kind, parameters, activations, autocast copies, blocks held)
    kinds: list[_Kind] = []
    if layout.pp == 1:
        act = blk * p.layers + a.first_bytes / tp + a.last_bytes / tp
        kinds.append(("every rank", first_p / tp, act, cast_per_block * p.layers + outer_cast, float(p.layers)))
    elif p.stacks:
        kinds = _encoder_decoder_kinds(p, layout, a, outer_cast)
    else:
        n = _inflight(layout)
        first_act = (blk * first_l + a.first_bytes / tp) * n
        kinds.append(("first stage", first_p / tp, first_act, cast_per_block * first_l, first_l))
        if layout.first_stage_layers and layout.pp > 2:
            # uneven stages: the second stage holds the most blocks of the middle ones and, in 1F1B,
            # pp−1 micro-batches in flight
            n_mid = float(min(layout.pp - 1, layout.grad_accum))
            kinds.append(("middle stage", mid_p / tp, blk * mid_l * n_mid, cast_per_block * mid_l, mid_l))
        last_act = blk * last_l + a.last_bytes / tp
        kinds.append(("last stage", last_p / tp, last_act, cast_per_block * last_l + outer_cast, last_l))
    return _StageMemory(tuple(kinds), transient, p2p, scale)


def _rank_memory(ctx: Context, layout: Layout, stage: _Kind, stages: _StageMemory, a2a: float) -> RankMemory:
    """A rank of ``stage``: its model states as the engine shards them (the rank's own experts over the dp/ep
    ranks that hold the same ones), its activations at the layout's micro-batch, the engine's buffers."""
    kind, rank_params, act, cast, stage_blocks = stage
    key = ("states", layout.sharding, layout.dp, layout.ep, layout.tp, layout.pp, layout.cp, rank_params, stage_blocks)
    params, grads, opt, buffers, opt_temp, experts = _memo(ctx, key, _model_states, layout, rank_params, stage_blocks)
    if experts:
        buffers += 2 * a2a  # dispatch and combine receive buffers of one MoE layer
    params_b, grads_b, opt_b, temp_b, cast_b = int(params), int(grads), int(opt), int(opt_temp), int(cast)
    act_b = int((act + stages.transient_bytes) * stages.scale)
    buffers_b = int(buffers + stages.p2p_bytes)
    tensors = _tensor_peak_bytes(params_b, grads_b, opt_b, act_b, cast_b, temp_b, buffers_b)
    slack = ctx.profile.allocator_slack_fraction * tensors
    return RankMemory(kind, params_b, grads_b, opt_b, act_b, buffers_b, ctx.overhead_bytes, temp_b, cast_b, int(slack))


def _model_states(
    ctx: Context, layout: Layout, rank_params: float, stage_blocks: float
) -> tuple[float, float, float, float, float, bool]:
    """(params, grads, optimizer, buffers, optimizer-step temporaries) bytes of a rank that would hold
    ``rank_params`` parameters of ``stage_blocks`` blocks without expert parallelism, as the engine shards them,
    and whether it holds experts: under ``ep`` its own experts are sharded / replicated over the dp/ep ranks that
    hold the same ones. The key of its memo (``_rank_memory``) is every layout field it reads."""
    dense, expert = _expert_split(ctx.profile, layout, rank_params, stage_blocks)
    params, grads, opt, buffers = _states(ctx, layout, dense)
    opt_temp = _optimizer_temp(ctx, layout, dense)
    if expert:
        ep_layout = _expert_layout(layout)
        e_params, e_grads, e_opt, _ = _states(ctx, ep_layout, expert)
        params, grads, opt = params + e_params, grads + e_grads, opt + e_opt
        opt_temp += _optimizer_temp(ctx, ep_layout, expert)
    return params, grads, opt, buffers, opt_temp, bool(expert)


def _encoder_decoder_kinds(p: ModelProfile, layout: Layout, a: Activations, outer_cast: float) -> list[_Kind]:
    """(kind, parameters, activations, autocast copies, blocks) of the pipeline stages of an encoder-decoder
    model (before tensor parallelism for parameters): each stage runs blocks of one stack
    (``parallel.layout.encoder_decoder_stages``); the word embeddings sit on the first stage, again on the decoder's
    first stage and (tied) on the last, as Megatron-LM's ``t5_embedding_ranks``; every decoder stage keeps
    the encoder's output of each micro-batch in flight for its cross-attention's backward. The first stage,
    the decoder's first, the last and the fullest other stage of each stack are reported."""
    tp = layout.tp
    sp = layout.sequence_parallel and tp > 1
    stages = encoder_decoder_stages(layout.pp, p.stacks[0].layers, p.stacks[1].layers)
    last = len(stages) - 1
    first_decoder = next(i for i, (_, d) in enumerate(stages) if d)
    head = p.outer_params - p.embedding_params
    tied = head < p.vocab * p.hidden / 2
    casts = layout.fp32_weights_with_autocast
    rows: list[tuple[str, float, float, float, float, float]] = []  # + the stage's bytes, to pick the fullest
    for i, counts in enumerate(stages):
        blocks = float(sum(counts))
        params = sum(n * st.params for n, st in zip(counts, p.stacks, strict=True))
        act = sum(n * ((st_act - st_rep) / tp + st_rep / (tp if sp else 1))
                  for n, (st_act, st_rep) in zip(counts, a.stacks, strict=True))
        cast = sum(n * st.weight_cast_bytes / tp for n, st in zip(counts, p.stacks, strict=True)) if casts else 0.0
        if i == 0:
            params += p.embedding_params
            act += a.first_bytes / tp
        if counts[1]:
            act += p.encoder_output_bytes / (tp if sp else 1)
        if i == first_decoder and i != last:
            params += p.embedding_params
        act *= min(layout.pp - i, layout.grad_accum)  # 1F1B: micro-batches stage i holds in flight
        if i == last:
            params += head + (p.vocab * p.hidden if tied else 0)
            act += a.last_bytes / tp
            cast += outer_cast
        kind = ("first stage" if i == 0 else "last stage" if i == last else "first decoder stage"
                if i == first_decoder else "decoder stage" if counts[1] else "encoder stage")
        rows.append((kind, params, act, cast, blocks, params * 16 + act))
    picked: dict[str, tuple[str, float, float, float, float, float]] = {}
    for row in rows:  # the fullest stage of each kind
        if row[0] not in picked or row[5] > picked[row[0]][5]:
            picked[row[0]] = row
    return [row[:5] for row in rows if picked[row[0]] is row]


def _kv_chunk_bytes(p: ModelProfile, layout: Layout) -> float:
    """Keys + values of one rank's sequence chunk in one block (its heads under TP)."""
    head_dim = p.hidden / max(p.heads, 1)
    kv_heads = max((p.kv_heads or p.heads) / layout.tp, 1.0)
    return 2 * layout.micro_batch_size * p.seq_len / layout.cp * kv_heads * head_dim * p.compute_bytes


def _cp_buffer_bytes(p: ModelProfile, layout: Layout) -> float:
    """Context parallelism's receive buffers during one block's attention: ring / hierarchical hold
    the K/V chunk being computed on and the one arriving; all-to-all holds the exchanged q, k, v and
    output (the same bytes as the rank's own chunk, regrouped by head)."""
    if layout.cp <= 1:
        return 0.0
    kv = _kv_chunk_bytes(p, layout)
    if layout.cp_comm == "all-to-all":
        q = layout.micro_batch_size * p.seq_len / layout.cp * p.hidden / layout.tp * p.compute_bytes
        return 2 * q + kv
    return 2 * kv


def _cp_comm_s(ctx: Context, layout: Layout, attn_f: float, attn_b: float) -> float:
    """Context-parallel communication of one block (forward + backward, + recompute under full
    checkpointing) not hidden behind its attention kernels, from the one collectives model.

    Ring: cp−1 K/V chunk transfers per forward, and K/V plus their gradients in backward, each
    overlapped with the attention of the chunk in hand. All-to-all (Ulysses): q, k, v in and the
    output back per forward (their gradients in backward), on the critical path. Hierarchical:
    the all-to-all inside a node, the ring across nodes."""
    cp, tp = layout.cp, layout.tp
    if cp <= 1:
        return 0.0
    p, topo = ctx.profile, ctx.topology
    kv = _kv_chunk_bytes(p, layout)
    q = layout.micro_batch_size * p.seq_len / cp * p.hidden / tp * p.compute_bytes
    forwards = 2 if layout.checkpointing == "full" else 1
    inner = 1 if layout.cp_comm == "ring" else cp
    if layout.cp_comm == "hierarchical":
        inner = math.gcd(cp, max(1, topo.gpus_per_node // tp))
    a2a = 0.0
    if inner > 1:
        g = group(topo, inner, tp)
        a2a = 2 * all_to_all_s(g, q) + 2 * all_to_all_s(g, kv / 2)
    ring_steps = cp // inner - 1
    ring_f = ring_b = 0.0
    if ring_steps > 0:
        stride = tp * inner if tp * cp <= topo.gpus_per_node else topo.gpus_per_node
        hop = p2p_s(_p2p_group(topo, stride), kv)
        ring_f = max(0.0, ring_steps * hop - attn_f)
        ring_b = max(0.0, 2 * ring_steps * hop - attn_b)
    return forwards * (a2a + ring_f) + a2a + ring_b


def _expert_split(p: ModelProfile, layout: Layout, rank_params: float, layers: float) -> tuple[float, float]:
    """(dense, own-expert) parameters of a rank that would hold ``rank_params`` without expert
    parallelism: under ``ep`` it keeps 1/ep of its stage's routed experts."""
    if layout.ep <= 1 or not p.block_expert_params:
        return rank_params, 0.0
    experts = p.block_expert_params * layers / layout.tp
    return rank_params - experts, experts / layout.ep


@lru_cache(maxsize=1024)
def _expert_layout(layout: Layout) -> Layout:
    """The layout the expert weights see: data-parallel over the dp/ep ranks holding the same experts."""
    return replace(layout, dp=layout.dp // layout.ep, ep=1)


def _a2a_message_bytes(p: ModelProfile, layout: Layout) -> float:
    """Bytes one rank sends in one MoE all-to-all: its tokens × experts per token × hidden."""
    if layout.ep <= 1 or not p.block_expert_params:
        return 0.0
    sp = layout.sequence_parallel and layout.tp > 1
    tokens = layout.micro_batch_size * p.seq_len / (layout.tp if sp else 1)
    return tokens * max(p.experts_per_token, 1) * p.hidden * p.compute_bytes


def _calls_s(op: Callable[[Group, float], float], g: Group, total_bytes: float, per_call_bytes: float) -> float:
    """``op`` over ``total_bytes`` issued in calls of at most ``per_call_bytes`` (each pays α)."""
    if total_bytes <= 0 or g.size <= 1:
        return 0.0
    per = min(per_call_bytes, total_bytes) if per_call_bytes > 0 else total_bytes
    full = math.floor(total_bytes / per)
    rest = total_bytes - full * per
    return full * op(g, per) + (op(g, rest) if rest > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class _Buckets:
    """One group's gradient buckets, reduced while the backward still runs: bucket k is ready once its share
    of the backward is done; the comm stream runs them in order. With equal buckets the comm stream ends at
    max(first ready + all buckets, last ready + last bucket), so what shows past the backward is the larger
    of the excess and the last bucket, which always waits."""

    total_bytes: float
    first_bytes: float
    comm_s: float
    """Every bucket, back to back."""
    last_s: float
    """The last bucket."""

    def exposed_s(self, window_s: float) -> float:
        """What shows past a backward of ``window_s``."""
        first_ready_s = window_s * self.first_bytes / self.total_bytes
        return max(self.last_s, first_ready_s + self.comm_s - window_s)


def _buckets(
    op: Callable[[Group, float], float], g: Group, total_bytes: float, bucket_bytes: float, first_bucket_bytes: float
) -> _Buckets | None:
    """``op`` over ``total_bytes`` in buckets of ``bucket_bytes`` after a first one of ``first_bucket_bytes``
    (None: nothing to reduce)."""
    if total_bytes <= 0 or g.size <= 1:
        return None
    first = min(first_bucket_bytes, total_bytes)
    comm = op(g, first) + _calls_s(op, g, total_bytes - first, bucket_bytes)
    last = op(g, min(bucket_bytes, total_bytes))
    return _Buckets(total_bytes, first, comm, last)


@dataclass(frozen=True, slots=True)
class _Gathers:
    """Per-block parameter gathers and gradient reduce-scatters of FSDP2 / ZeRO-3 (seconds)."""

    block_ag_s: float
    block_rs_s: float
    outer_ag_s: float
    outer_rs_s: float


def _sharded_exposed(layout: Layout, g: _Gathers, layers: float, bf: float, bb: float, covered: float) -> float:
    """Communication of one micro-batch that FSDP2 / ZeRO-3 cannot hide behind block compute.

    FSDP2: the next block's all-gather is in flight while this block computes (prefetch depth 1,
    forward and backward); the root's and the first block's gathers come before any compute, the
    last block's and the root's reduce-scatters after the last backward. Gathers and
    reduce-scatters share one NCCL communicator, so in backward they queue behind each other.
    DeepSpeed ZeRO-3 fetches a block's submodules in order and prefetches only ``covered`` (the
    prefetch bucket's share of a block) ahead; the rest of each block's gather is on demand."""
    s = layout.sharding
    ag, rs = g.block_ag_s, g.block_rs_s
    regather = not (isinstance(s, FSDP2) and not s.reshard_after_forward)
    lead = ag * (1 - covered)  # fetched on demand: always exposed
    ahead = ag * covered
    rest = max(layers - 1, 0.0)
    fwd = g.outer_ag_s + ag + rest * (lead + max(0.0, ahead - bf))
    bwd_ag = ahead if regather else 0.0
    bwd = rest * ((lead if regather else 0.0) + max(0.0, bwd_ag + rs - bb)) + rs + g.outer_rs_s
    return fwd + bwd


@dataclass(frozen=True, slots=True)
class _Slot:
    """One micro-batch on the slowest pipeline stage."""

    compute_s: float
    block_f_s: float
    block_b_s: float
    stage_b_s: float
    """Backward of the longest stage (the window DDP's gradient buckets overlap)."""
    act_bytes: float
    """One micro-batch's hidden states (micro-batch · sequence · hidden · compute bytes)."""
    tp_s: float
    cp_s: float
    blocks: float
    """Blocks of the slowest stage (each pays the per-block collectives)."""


def _slot(ctx: Context, layout: Layout) -> _Slot:
    """``_slot_of``, once per shape in ``ctx``: the key is every layout field it reads (its sharding only as
    Megatron-LM's own kernels or autocast's weight casts)."""
    key = ("slot", layout.tp, layout.pp, layout.cp, layout.cp_comm, layout.micro_batch_size,
           isinstance(layout.sharding, MegatronDDP), layout.fp32_weights_with_autocast, layout.first_stage_layers,
           layout.last_stage_layers, layout.checkpointing)
    return _memo(ctx, key, _slot_of, layout)


def _slot_of(ctx: Context, layout: Layout) -> _Slot:
    p, topo = ctx.profile, ctx.topology
    tp, pp = layout.tp, layout.pp
    scale = layout.micro_batch_size / p.micro_batch
    # Megatron-LM runs its own kernels (parallel/engine.py); the other engines run the traced program
    meg = p.megatron_time if isinstance(layout.sharding, MegatronDDP) else None
    # tensor parallelism splits each op's work tp ways, context parallelism the tokens cp ways
    # (load-balanced causal chunks: every rank has the same attention work)
    split = tp * layout.cp
    bf, bb = (meg.block if meg else p.block_time).at(scale, split)
    ff, fb = (meg.first if meg else p.first_time).at(scale, split)
    lf, lb = (meg.last if meg else p.last_time).at(scale, split)
    if layout.fp32_weights_with_autocast:
        # autocast re-casts every fp32 weight each micro-batch (work independent of the batch)
        cf, cb_ = p.block_cast_time.at(1.0, tp)
        of, ob_ = p.outer_cast_time.at(1.0, tp)
        bf, bb, lf, lb = bf + cf, bb + cb_, lf + of, lb + ob_
    first_l, mid_l, last_l = layout.stage_layers(p.layers)
    # (blocks, holds the embeddings, holds the head) of the first, last and (pp > 2) a middle stage
    stages = [(first_l, True, pp == 1)]
    stages += [(last_l, False, True)] if pp > 1 else []
    stages += [(mid_l, False, False)] if pp > 2 else []
    stage_f = [n * bf + (ff if a else 0) + (lf if z else 0) for n, a, z in stages]
    stage_b = [n * bb + (fb if a else 0) + (lb if z else 0) for n, a, z in stages]
    # Megatron TP: an all-reduce after each attention and MLP sublayer (the decoder's cross-attention
    # too), forward and backward (with SP: all-gather + reduce-scatter of the same bytes); full
    # recompute repeats the forward ones. Not overlapped.
    act_bytes = layout.micro_batch_size * p.seq_len * p.hidden * p.compute_bytes / layout.cp
    recompute = layout.checkpointing == "full"
    sublayers = [p.block_tp_sublayers * n for n, _, _ in stages]
    if p.stacks and pp > 1:
        stage_f, stage_b, sublayers = _encoder_decoder_stage_times(p, layout, (ff, fb), (lf, lb), scale)
    slot_compute = max(f + b for f, b in zip(stage_f, stage_b, strict=True))
    layers = max(n for n, _, _ in stages)  # the slowest stage's blocks pay the per-block collectives
    per_sublayer = 2 + (1 if recompute else 0)
    tp_s = max(sublayers) * per_sublayer * all_reduce_s(group(topo, tp, 1), act_bytes) if tp > 1 else 0.0
    cp_s = 0.0
    if layout.cp > 1:
        af, ab = p.block_attention_time.at(scale, split)
        cp_s = layers * _cp_comm_s(ctx, layout, af, ab)
    return _Slot(slot_compute, bf, bb, max(stage_b), act_bytes, tp_s, cp_s, layers)


def _ep_comm_s(ctx: Context, layout: Layout, slot: _Slot) -> float:
    """Expert parallelism: every MoE block sends its tokens to their experts and back (all-to-all
    dispatch + combine) in forward, again in backward, and in the recomputed forward; on the
    critical path (the next op needs the tokens). Once per key in ``ctx`` (every field read)."""
    if layout.ep <= 1:
        return 0.0  # no all-to-all (_a2a_message_bytes)
    key = ("ep_comm", layout.ep, layout.tp, layout.sequence_parallel, layout.micro_batch_size, layout.checkpointing,
           slot.blocks)
    return _memo(ctx, key, _ep_comm_of, layout, slot.blocks)


def _ep_comm_of(ctx: Context, layout: Layout, blocks: float) -> float:
    a2a = _a2a_message_bytes(ctx.profile, layout)
    recompute = layout.checkpointing == "full"
    ep_group = group(ctx.topology, layout.ep, layout.tp)
    return blocks * (4 + (2 if recompute else 0)) * all_to_all_s(ep_group, a2a) if a2a else 0.0


def _encoder_decoder_stage_times(
    p: ModelProfile, layout: Layout, first: tuple[float, float], last: tuple[float, float], scale: float
) -> tuple[list[float], list[float], list[float]]:
    """(forward s, backward s, TP sublayers) of every pipeline stage of an encoder-decoder model: its blocks
    of one stack at that stack's traced time, the first stage's embeddings, the last stage's head and loss."""
    meg = isinstance(layout.sharding, MegatronDDP)
    split = layout.tp * layout.cp
    per_stack = []
    for st in p.stacks:
        f, b = (st.megatron_time if meg else st.time).at(scale, split)
        if layout.fp32_weights_with_autocast:
            cf, cb = st.cast_time.at(1.0, layout.tp)
            f, b = f + cf, b + cb
        per_stack.append((f, b))
    stages = encoder_decoder_stages(layout.pp, p.stacks[0].layers, p.stacks[1].layers)
    fwd, bwd, subs = [], [], []
    for i, counts in enumerate(stages):
        f = sum(n * t[0] for n, t in zip(counts, per_stack, strict=True))
        b = sum(n * t[1] for n, t in zip(counts, per_stack, strict=True))
        if i == 0:
            f, b = f + first[0], b + first[1]
        if i == len(stages) - 1:
            f, b = f + last[0], b + last[1]
        fwd.append(f)
        bwd.append(b)
        subs.append(float(sum(n * st.tp_sublayers for n, st in zip(counts, p.stacks, strict=True))))
    return fwd, bwd, subs


def _shard_exposed_s(ctx: Context, layout: Layout, slot: _Slot) -> float:
    """FSDP2 / ZeRO-3: parameters gathered block by block each micro-batch (again in backward if
    resharded after forward), gradients reduce-scattered block by block; what compute cannot hide."""
    s = layout.sharding
    if not (isinstance(s, FSDP2) or (isinstance(s, Zero) and s.stage == 3)) or layout.shard_group <= 1:
        return 0.0
    # the collectives do not depend on the micro-batch: priced once per sharding and degrees (every field read)
    key = ("shard_comm", s, layout.dp, layout.tp, layout.pp, layout.ep, layout.cp)
    g, covered, copy_out = _memo(ctx, key, _shard_comm, layout)
    layers = ctx.profile.layers / layout.pp
    return copy_out + _sharded_exposed(layout, g, layers, slot.block_f_s, slot.block_b_s, covered)


def _shard_comm(ctx: Context, layout: Layout) -> tuple[_Gathers, float, float]:
    """One block's and the root's gathers and reduce-scatters, the share of a block's gather prefetched ahead
    of its use (``covered``), and FSDP2's copy-out of the gathered parameters (seconds per micro-batch)."""
    p, topo = ctx.profile, ctx.topology
    tp, dp, ep = layout.tp, layout.dp, layout.ep
    cb = p.compute_bytes
    s = layout.sharding
    # parameters per rank of one block, dense and own experts (the ones sharded over dp/ep ranks)
    blk_dense, blk_expert = _expert_split(p, layout, p.block_params / tp, 1.0)
    shard_group = group(topo, layout.shard_group, tp)
    expert_dp_group = group(topo, dp // ep, tp * ep)
    # DeepSpeed reduce-scatters the trainable parameters' gradients only (PEFT: the adapters)
    grad_b = fsdp_state_bytes(p, s)[1] if isinstance(s, FSDP2) else cb * p.trainable_fraction
    outer = p.outer_params / tp
    if isinstance(s, FSDP2):
        # one flat all-gather / reduce-scatter per block (fully_shard per block, root separate);
        # HSDP then all-reduces each block's shard across the replicas, on the same stream
        hsdp = s.hsdp_shard
        replicas = group(topo, dp // hsdp, tp * hsdp) if hsdp else None
        copy = p.copy_s_per_byte

        def gather(n: float, grp: Group) -> float:
            return all_gather_s(grp, cb * n)

        def scatter(n: float, grp: Group) -> float:
            # foreach_reduce first copies the unsharded gradients into the reduce-scatter input
            # (chunk_cat, read + write) on the reduce-scatter stream: it delays the collective
            across = all_reduce_s(replicas, grad_b * n / grp.size) if replicas is not None else 0.0
            return 2 * grad_b * n * copy + reduce_scatter_s(grp, grad_b * n) + across

        covered = 1.0
        # foreach_all_gather_copy_out: every gathered block is copied from the flat all-gather output
        # into its parameters (split_with_sizes_copy, read + write) on the compute stream, after the
        # gather and before the block runs, so it never overlaps (pytorch/pytorch
        # torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py); forward, and again in backward
        # when the block was resharded; the root's parameters once
        regathers = 1 if s.reshard_after_forward else 0
        copy_out = 2 * cb * copy * ((1 + regathers) * (blk_dense + blk_expert) * p.layers / layout.pp + outer)
    else:
        # DeepSpeed: one all-gather per submodule; gradients in reduce_bucket_size buckets (h²)
        red, prefetch, _ = zero3_buckets(p.hidden)
        mods = max(p.block_param_modules, 1)

        def gather(n: float, grp: Group) -> float:
            return mods * all_gather_s(grp, cb * n / mods)

        def scatter(n: float, grp: Group) -> float:
            return _calls_s(reduce_scatter_s, grp, grad_b * n, grad_b * red)

        covered = min(1.0, prefetch / max(p.block_params / tp, 1.0))
        copy_out = 0.0  # DeepSpeed points each parameter into its gathered flat buffer (no copy)
    g = _Gathers(
        gather(blk_dense, shard_group) + gather(blk_expert, expert_dp_group),
        scatter(blk_dense, shard_group) + scatter(blk_expert, expert_dp_group),
        gather(outer, shard_group),
        scatter(outer, shard_group),
    )
    return g, covered, copy_out


def _stage_split(ctx: Context, layout: Layout) -> tuple[float, float, float]:
    """(all, dense, own-expert) parameters of one stage's rank before sharding."""
    p = ctx.profile
    stage_params = p.params_count / layout.pp / layout.tp
    dense, expert = _expert_split(p, layout, stage_params, p.layers / layout.pp)
    return stage_params, dense, expert


def _dp_exposed_s(ctx: Context, layout: Layout, slot: _Slot) -> float:
    """Data-parallel gradient traffic not hidden behind the backward (DDP / ZeRO-1/2 / Megatron)."""
    s = layout.sharding
    # context-parallel ranks hold the same weights: their gradients are reduced with dp's (Megatron)
    if layout.dp * layout.cp <= 1 or isinstance(s, FSDP2) or (isinstance(s, Zero) and s.stage == 3):
        return 0.0
    # the collectives do not depend on the micro-batch: priced once per sharding and degrees (every field read)
    key = ("dp_comm", s, layout.dp, layout.tp, layout.pp, layout.ep, layout.cp)
    after_s, buckets, tail = _memo(ctx, key, _dp_comm, layout)
    if after_s is not None:
        return after_s
    # buckets reduced while the last micro-batch's backward runs (no_sync before it)
    window = slot.stage_b_s
    return sum(b.exposed_s(window) if b is not None else 0.0 for b in buckets) + tail


def _dp_comm(ctx: Context, layout: Layout) -> tuple[float | None, tuple[_Buckets | None, ...], float]:
    """The data-parallel gradient traffic of one step: (seconds, when nothing hides it; else None), each group's
    gradient buckets that overlap the backward, and what follows the optimizer step (ZeRO's all-gather)."""
    p, topo = ctx.profile, ctx.topology
    tp, pp, dp, ep = layout.tp, layout.pp, layout.dp, layout.ep
    s = layout.sharding
    dp_cp = dp * layout.cp
    cb = p.compute_bytes
    stage_params, stage_dense, stage_expert = _stage_split(ctx, layout)
    grad_b = (cb * p.trainable_fraction if isinstance(s, Zero)
              else megatron_grad_bytes(p) if isinstance(s, MegatronDDP) else p.grad_bytes_per_param)
    groups = ((group(topo, dp_cp, tp), stage_dense), (group(topo, dp // ep, tp * ep), stage_expert))
    if isinstance(s, Zero):  # stages 1 and 2: gradients reduced in reduce_bucket_size buckets,
        # updated parameters all-gathered after the step (allgather_bucket_size): after the step;
        # both cover the trainable parameters only (PEFT: the adapters)
        bucket: float = cb * bucket_elements(stage_params)
        first: float = bucket
        reduce_op = reduce_scatter_s
        tail = sum(_calls_s(all_gather_s, grp, grad_b * n, bucket) for grp, n in groups)
    elif isinstance(s, MegatronDDP):
        # Megatron-LM all-reduces its contiguous fp32 main-grad buffer once backward is done
        # (--overlap-grad-reduce is off by default; the 2021 code had no overlap at all)
        bucket, first, reduce_op, tail = float("inf"), 0.0, all_reduce_s, 0.0
    else:
        bucket, first, reduce_op, tail = DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, all_reduce_s, 0.0
    if pp > 1 or isinstance(s, MegatronDDP):  # after the flush / the backward: nothing hides it
        return sum(_calls_s(reduce_op, grp, grad_b * n, bucket) for grp, n in groups) + tail, (), tail
    return None, tuple(_buckets(reduce_op, grp, grad_b * n, bucket, first) for grp, n in groups), tail


def _optimizer_s(ctx: Context, layout: Layout) -> float:
    """The optimizer step over the parameters this rank updates (on the host under ZeRO-Offload)."""
    p = ctx.profile
    s = layout.sharding
    _, stage_dense, stage_expert = _stage_split(ctx, layout)
    shard = layout.shard_group if layout.shard_group > 1 else 1
    expert_shard = max(shard // layout.ep, 1) if shard > 1 else 1
    updated = stage_dense / shard + stage_expert / expert_shard
    if isinstance(s, Zero) and s.offload_optimizer:
        # the one CPU-offload model (memory/offload.py, also fit's offload rung): DeepSpeed moves
        # compute-dtype gradients to the host and parameters back; the host link is PCIe (the
        # topology's where that is the GPU link, else memory/offload.py's default)
        host_gb_per_s = ctx.topology.intra_gb_per_s if ctx.topology.intra_link == "pcie" else None
        return optimizer_offload_time(
            updated * p.trainable_fraction,  # the trainable parameters only (PEFT: the adapters)
            grad_bytes_per_param=p.compute_bytes,
            param_bytes_per_param=p.compute_bytes,
            host_link_gb_per_s=host_gb_per_s,
        ).total_s
    return p.optimizer_s_per_param * updated


def step_time(ctx: Context, layout: Layout) -> tuple[float, dict[str, float]]:
    topo = ctx.topology
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    slot = _slot(ctx, layout)
    ep_s = _ep_comm_s(ctx, layout, slot)
    shard_exposed = _shard_exposed_s(ctx, layout, slot)
    slot_s = slot.compute_s + slot.tp_s + ep_s + slot.cp_s + shard_exposed
    # ---- pipeline -------------------------------------------------------------------------------
    m = layout.grad_accum
    v = layout.virtual_stages if layout.schedule == "interleaved" else 1
    bubble_slots = (pp - 1) / v if pp > 1 else 0.0
    pp_s = 0.0
    if pp > 1:
        p2p_group = _p2p_group(topo, tp * layout.cp * dp)
        # Megatron's scatter/gather optimisation (and SP) send 1/tp of the activation per TP rank.
        msg = slot.act_bytes / tp
        if ctx.profile.stacks:  # Megatron's T5 decoder stages send the encoder's output with their hidden states
            msg *= 2
        pp_s = (m + bubble_slots) * 2 * v * p2p_s(p2p_group, msg)
    compute = m * slot_s
    bubble = bubble_slots * slot_s
    dp_exposed = _dp_exposed_s(ctx, layout, slot)
    opt = _optimizer_s(ctx, layout)
    act_offload = m * _activation_offload_s(ctx, layout)
    parts = {
        "compute": m * slot.compute_s,
        "pipeline_bubble": bubble,
        "tp_comm": m * slot.tp_s,
        "pp_comm": pp_s,
        "ep_comm": m * ep_s,
        "cp_comm": m * slot.cp_s,
        "shard_comm_exposed": m * shard_exposed,
        "dp_comm_exposed": dp_exposed,
        "optimizer": opt,
        **({"activation_offload": act_offload} if act_offload else {}),
    }
    return compute + bubble + pp_s + dp_exposed + opt + act_offload, parts


def _activation_offload_s(ctx: Context, layout: Layout) -> float:
    """``--offload activations``: one micro-batch's checkpointed block inputs to the host and back on the most
    loaded stage (memory/offload.py; the residual stream is split by sequence parallelism and context
    parallelism only)."""
    p = ctx.profile
    host_copy = _activations(ctx, layout).block_host_copy_bytes
    if not host_copy:
        return 0.0
    blocks = max(layout.stage_layers(p.layers))
    sp = layout.sequence_parallel and layout.tp > 1
    scale = layout.micro_batch_size / p.micro_batch / layout.cp / (layout.tp if sp else 1)
    host_gb_per_s = ctx.topology.intra_gb_per_s if ctx.topology.intra_link == "pcie" else None
    return activation_offload_time_s(host_copy * blocks * scale, host_gb_per_s)


@lru_cache(maxsize=256)
def _p2p_group(topo: Topology, stride: int) -> Group:
    """Adjacent pipeline stages ``stride`` ranks apart, at the bandwidth of one path between them."""
    return replace(group(topo, 2, stride), bus_gb_per_s=_p2p_bw(topo, stride))


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
    "megatron_grad_bytes",
    "memory",
    "step_time",
    "zero3_buckets",
]
