"""``gpuplan.parallel.plan``: the best layout of a training step over N GPUs, and the runners-up.

The model is traced once (``profile.profile_model``); every layout is then evaluated from that
trace (``evaluate``). When no layout fits without activation checkpointing, the step is traced a
second time with full checkpointing; when none fits with it, offload layouts are added.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuplan.errors import LayoutError
from gpuplan.hardware.support import check_workload_on_gpu
from gpuplan.models.config_view import ConfigView
from gpuplan.parallel.engine import megatron_kernels_note
from gpuplan.parallel.evaluate import Context, Evaluation, flops_per_step
from gpuplan.parallel.layout import (
    FSDP_RESHARDS,
    FSDP_SHARDED_DTYPES,
    MEGATRON_ENCODER_DECODER,
    MegatronDDP,
    Zero,
    encoder_decoder_refusal,
)
from gpuplan.parallel.profile import ModelProfile, profile_model
from gpuplan.parallel.search import Constraints, candidates, rank, ranking, validate, why_loses
from gpuplan.parallel.topology import Topology, make_topology
from gpuplan.perf.efficiency import generation_key
from gpuplan.perf.uncertainty import family_key
from gpuplan.perf.workload_family import TimeInterval, time_interval
from gpuplan.presentation import to_json, to_text
from gpuplan.trace.cache import layer_counts_of
from gpuplan.units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.parallel.layout import Layout
    from gpuplan.workload import Workload


@dataclass(frozen=True, slots=True)
class Plan:
    model: str
    gpu: GPU
    topology: Topology
    workload: Workload
    profile: ModelProfile
    best: Evaluation
    alternatives: tuple[tuple[Evaluation, str], ...]
    layouts_considered: int
    search_s: float
    trace_s: float
    usable_bytes: int
    assumptions: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- headline numbers ------------------------------------------------------------------
    @property
    def fits(self) -> bool:
        return self.best.per_gpu_peak_bytes <= self.usable_bytes

    @property
    def per_gpu_peak_bytes(self) -> int:
        return self.best.per_gpu_peak_bytes

    @property
    def step_time_s(self) -> float:
        return self.best.step_time_s

    @property
    def gpus(self) -> int:
        return self.best.layout.gpus

    def interval(self, e: Evaluation | None = None) -> TimeInterval | None:
        """80% prediction interval of the step time of ``e`` (the best layout when None)."""
        e = e or self.best
        family = family_key(self.profile.kind, self.workload.mode, e.layout.gpus)
        return time_interval(e.step_time_s, family, generation_key(self.gpu))

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.best.layout.global_batch * self.profile.seq_len / self.step_time_s / self.gpus

    @property
    def samples_per_s(self) -> float:
        return self.best.layout.global_batch / self.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        _, hw = flops_per_step(self.profile, self.best.layout)
        return hw / self.step_time_s / self.gpus / 1e12

    @property
    def mfu(self) -> float:
        model, _ = flops_per_step(self.profile, self.best.layout)
        peak = self.profile.peak_tflops * 1e12
        return model / self.step_time_s / self.gpus / peak if peak else 0.0

    @property
    def layouts_per_s(self) -> float:
        return self.layouts_considered / self.search_s if self.search_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.plan.plan_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.plan.render_plan


LONG_CONTEXT_TOKENS = 32768
"""From this many tokens per sample, context-parallel layouts are searched even when a layout fits without
them (torchtitan's published CP runs start at 32K: benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd, Table 2);
below it only when nothing fits otherwise."""


def _fsdp_settings(reshard: str | None, dtype: str, *, fsdp: bool | None, zero: int | None,
                   megatron: bool | None) -> bool | None:
    """Check FSDP2's own settings; given, they make the plan FSDP2's (the new ``fsdp``). An engine without
    them is refused in one line."""
    if reshard is not None and reshard not in FSDP_RESHARDS:
        raise LayoutError(f"--fsdp-reshard-after-forward {reshard!r} is not one of {', '.join(FSDP_RESHARDS)} "
                          "(torchtitan's parallelism.fsdp_reshard_after_forward)")
    if dtype not in FSDP_SHARDED_DTYPES:
        raise LayoutError(f"--fsdp-sharded-dtype {dtype!r} is not one of {', '.join(FSDP_SHARDED_DTYPES)}")
    given = [f for f, on in (("--fsdp-reshard-after-forward", reshard is not None),
                             ("--fsdp-sharded-dtype fp32", dtype != "compute")) if on]
    if not given:
        return fsdp
    if zero is not None:
        raise LayoutError(f"{given[0]} is an FSDP2 setting; DeepSpeed ZeRO has no equivalent (ZeRO-3 releases each "
                          f"gathered parameter after use; its fp32 master is always kept): drop --zero {zero} or "
                          f"{given[0]}")
    if megatron or fsdp is False:
        raise LayoutError(f"{given[0]} is an FSDP2 setting; Megatron-LM's DDP keeps whole parameters (nothing to "
                          f"reshard): drop --megatron or {given[0]}")
    return True


def plan(
    model: str | ModelSource,
    *,
    gpus: int,
    gpu: str | GPU,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    inter_node_gbps: float | None = None,
    dp: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    zero: int | None = None,
    fsdp: bool | None = None,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    sequence_parallel: bool = True,
    megatron: bool | None = None,
    ep: int | None = None,
    cp: int | None = None,
    cp_comm: str = "ring",
    fsdp_reshard_after_forward: str | None = None,
    fsdp_sharded_dtype: str = "compute",
    workload: Workload | None = None,
    max_alternatives: int = 5,
    checkpointing_fixed: bool | None = None,
    emit: EngineFilter | None = None,
    **workload_fields: Any,
) -> Plan:
    """Best layout of one training step of ``model`` on ``gpus`` GPUs of type ``gpu``.

    Degrees left as None are searched. Activation checkpointing is the user's choice when
    ``checkpointing_fixed`` is True (default: when ``checkpointing=`` is passed): it is never
    overridden, and a layout that fits only with full checkpointing is shown as an alternative.
    Otherwise, when nothing fits without it, full checkpointing is searched too. Context
    parallelism (``cp``, its attention exchange ``cp_comm``: ring | all-to-all | hierarchical) is
    the user's when given; left None, it is searched when nothing fits otherwise. ``emit`` (an ``--emit``
    engine's filter, ``parallel.emit.engine_filter("deepspeed")``) searches only the layouts that engine's
    output implements, and refuses before the trace when the constraints allow none. FSDP2's
    ``fsdp_reshard_after_forward`` (always | never | default: torchtitan's names and rule) and
    ``fsdp_sharded_dtype`` (compute | fp32: the dtype of the shards, their gradients and optimizer state)
    fix those settings of every FSDP2 layout, and make the plan FSDP2's. Example::

        p = plan("llama-3.1-8b", gpus=16, gpu="H100-SXM", nodes=2, seq_len=4096, precision="amp-bf16")
        p.best.layout.describe(), p.step_time_s, p.per_gpu_peak_bytes
    """
    from gpuplan.hardware import GPU, get_gpu
    from gpuplan.models.sources import ModelSource, resolve_model
    from gpuplan.workload import make_workload

    w = workload if workload is not None else make_workload(**{"mode": "train", **workload_fields})
    fixed_ckpt = "checkpointing" in workload_fields if checkpointing_fixed is None else checkpointing_fixed
    _check_counts(
        nodes=nodes, gpus_per_node=gpus_per_node, global_batch_size=global_batch_size, micro_batch_size=micro_batch_size
    )
    target = gpu if isinstance(gpu, GPU) else get_gpu(str(gpu))
    check_workload_on_gpu(w, target)  # the same refusal as every verb, before the trace
    topo = make_topology(target, gpus, nodes=nodes, gpus_per_node=gpus_per_node, inter_node_gbps=inter_node_gbps)
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    from gpuplan.models.base import refuse_pipeline

    refuse_pipeline(source, "plan")
    # ---- what the user fixed, checked before the trace ------------------------------------------
    base, shape = _constraints(
        source, w, gpus=gpus, dp=dp, tp=tp, pp=pp, zero=zero, fsdp=fsdp, global_batch_size=global_batch_size,
        micro_batch_size=micro_batch_size, sequence_parallel=sequence_parallel, megatron=megatron, ep=ep, cp=cp,
        cp_comm=cp_comm, fsdp_reshard_after_forward=fsdp_reshard_after_forward, fsdp_sharded_dtype=fsdp_sharded_dtype,
    )
    heads, kv = shape.heads, shape.kv_heads
    if emit is not None and base.encoder_layers:
        emit = _encoder_decoder_filter(emit, source.name, str(getattr(source, "config_dict", {}).get("model_type", "")))
    if emit is not None:
        _check_emittable(base, emit, heads=heads, kv_heads=kv, layers=shape.layers, experts=shape.experts,
                         gpus_per_node=topo.gpus_per_node)
    # ---- one trace, every layout ranked on it -----------------------------------------------------
    t0 = time.perf_counter()
    trace_w = w.with_(batch_size=micro_batch_size if micro_batch_size is not None else w.batch_size, grad_accum=1)
    prof = profile_model(source, trace_w, target)
    search = _Search(base, heads, kv, topo, trace_s=time.perf_counter() - t0, emit=emit)
    ctx = plan_context(prof, topo, target)
    evals = search.rank(ctx)
    if not evals:
        raise LayoutError(
            f"no layout of {gpus} GPUs can run {source.name} with global batch {base.global_batch} "
            "under the given constraints (check divisibility of heads, layers and batch)"
        )
    # ---- escalation when nothing fits: full checkpointing, then the wider searches ----------------
    notes = [f"--emit {emit.name}: only the layouts its output implements were searched"] if emit else []
    esc = _Escalated(evals, ctx)
    if w.checkpointing == "none":
        esc = _with_full_checkpointing(search, esc, source, trace_w, target, fixed_ckpt=fixed_ckpt, notes=notes)
    for step in _ESCALATIONS:
        esc = _widen(search, esc, step, notes)
    return _plan_of(source.name, target, topo, esc, search, notes, max_alternatives)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the search needs of the model's shape (from its config and layer counts, before any trace)."""

    heads: int
    kv_heads: int
    layers: int
    experts: int


def _constraints(
    source: ModelSource,
    w: Workload,
    *,
    gpus: int,
    dp: int | None,
    tp: int | None,
    pp: int | None,
    zero: int | None,
    fsdp: bool | None,
    global_batch_size: int | None,
    micro_batch_size: int | None,
    sequence_parallel: bool,
    megatron: bool | None,
    ep: int | None,
    cp: int | None,
    cp_comm: str,
    fsdp_reshard_after_forward: str | None,
    fsdp_sharded_dtype: str,
) -> tuple[Constraints, _Shape]:
    """The user's choices as search constraints, refused before any trace when no layout can have them."""
    from gpuplan.perf.summary import seq_len_of

    if zero is not None and fsdp:
        raise LayoutError(f"--fsdp and --zero {zero} are two ways to shard; pick one")
    fsdp = _fsdp_settings(fsdp_reshard_after_forward, fsdp_sharded_dtype, fsdp=fsdp, zero=zero, megatron=megatron)
    offload_fixed = _zero_offload(w, zero, fsdp=bool(fsdp), megatron=bool(megatron))
    if offload_fixed is not None:
        zero = zero if zero is not None else 3
    gb = global_batch_size if global_batch_size is not None else gpus * w.batch_size * w.grad_accum
    if gb < 1:
        raise LayoutError(f"global batch must be at least 1, got {gb}")
    cfg = ConfigView(getattr(source, "config_dict", None))
    heads = cfg.attention_heads or 0
    kv = cfg.kv_heads or heads
    counts = layer_counts_of(source)  # cached beside the traces: no torch on a hit
    # an encoder-decoder model (T5: two stacks) is planned over all its blocks, each stage one stack's
    encoder_layers = next(iter(counts.values())) if len(counts) == 2 else 0
    layers = sum(counts.values()) if encoder_layers else max(counts.values(), default=1)
    base = Constraints(
        gpus=gpus,
        global_batch=gb,
        dp=dp,
        tp=tp,
        pp=pp,
        zero=zero,
        fsdp=fsdp,
        micro_batch=micro_batch_size,
        checkpointing=w.checkpointing,
        sequence_parallel=sequence_parallel,
        megatron=megatron,
        ep=ep,
        cp=cp,
        cp_comm=cp_comm,
        seq_len=int(seq_len_of(source, w) or 0),
        offload_fixed=offload_fixed,
        encoder_layers=encoder_layers,
        fsdp_reshard=fsdp_reshard_after_forward,
        fsdp_sharded_fp32=fsdp_sharded_dtype == "fp32",
    )
    validate(base, heads=heads, kv_heads=kv, layers=layers, experts=cfg.experts)
    return base, _Shape(heads, kv, layers, cfg.experts)


@dataclass(frozen=True, slots=True)
class _Escalation:
    """A wider search on the same trace, tried when no layout fits yet: the constraints it overrides and the
    note the plan then carries. ``plan --emit`` checks the same list before its trace (``_check_emittable``)."""

    name: str
    overrides: tuple[tuple[str, Any], ...]
    note: str

    def applies(self, base: Constraints) -> bool:
        """Context parallelism is searched only when the user left ``--cp`` open."""
        return base.cp is None if self.name == "context-parallel" else True


_ESCALATIONS: tuple[_Escalation, ...] = (
    _Escalation("context-parallel", (("search_cp", True),),
                "nothing fits with the whole sequence on each GPU: context-parallel layouts considered"),
    _Escalation("cpu-offload", (("offload", True),),
                "nothing fits on the GPUs alone: DeepSpeed CPU offload layouts considered"),
)
"""The wider searches, in the order they are tried (after full checkpointing, which traces again)."""


@dataclass(frozen=True, slots=True)
class _Escalated:
    """Where the escalation stands: the ranked layouts (best first) on ``ctx``'s trace, and the best layout of
    full checkpointing when the user fixed ``--checkpointing none`` (shown beside the answer)."""

    evals: list[Evaluation]
    ctx: Context
    ckpt_alt: tuple[Evaluation, str] | None = None

    @property
    def fits(self) -> bool:
        return self.evals[0].per_gpu_peak_bytes <= self.ctx.usable_bytes


def _with_full_checkpointing(
    search: _Search, esc: _Escalated, source: ModelSource, trace_w: Workload, target: GPU, *, fixed_ckpt: bool,
    notes: list[str],
) -> _Escalated:
    """Nothing fits without activation checkpointing: the step traced again with full checkpointing. Its best
    layout becomes the answer, unless the user chose ``--checkpointing none`` (then it is shown beside it)."""
    if esc.fits:
        return esc
    usable = esc.ctx.usable_bytes
    t0 = time.perf_counter()
    prof2 = profile_model(source, trace_w.with_(checkpointing="full"), target)
    search.trace_s += time.perf_counter() - t0
    ctx2 = Context(prof2, search.topology, usable, esc.ctx.overhead_bytes)
    evals2 = search.rank(ctx2, checkpointing="full")
    peak = esc.evals[0].per_gpu_peak_bytes
    if not (evals2 and (evals2[0].per_gpu_peak_bytes <= usable or evals2[0].per_gpu_peak_bytes < peak)):
        return esc
    if fixed_ckpt:
        # the user chose --checkpointing none: answer for it, and show what full checkpointing gives
        notes.append(
            "nothing fits with --checkpointing none as given; with --checkpointing full the best layout "
            f"is {evals2[0].layout.describe()} ({format_bytes(evals2[0].per_gpu_peak_bytes)} per GPU)"
        )
        return replace(esc, ckpt_alt=(evals2[0], _ckpt_why(evals2[0], usable)))
    notes.append("nothing fits without activation checkpointing: traced again with full checkpointing")
    return _Escalated(evals2, ctx2, esc.ckpt_alt)


def _widen(search: _Search, esc: _Escalated, step: _Escalation, notes: list[str]) -> _Escalated:
    """``step``'s wider search on the current trace when nothing fits yet, adopted when its best layout needs
    less memory per GPU. A long sequence that fits whole is searched split too (``LONG_CONTEXT_TOKENS``)."""
    base = search.base
    if not step.applies(base):
        return esc
    usable = esc.ctx.usable_bytes
    if esc.fits:
        if step.name != "context-parallel" or base.seq_len < LONG_CONTEXT_TOKENS:
            return esc
        # a long sequence that fits whole may still run faster split: less activation memory per GPU leaves room
        # for a larger micro-batch, less recomputation or less tensor parallelism
        wider = search.rank(esc.ctx, checkpointing=esc.ctx.profile.workload.checkpointing, **dict(step.overrides))
        if not (wider and wider[0].per_gpu_peak_bytes <= usable and wider[0].step_time_s < esc.evals[0].step_time_s):
            return esc
        notes.append(f"{base.seq_len:,} tokens per sample: context-parallel layouts searched too, and one is faster")
        return replace(esc, evals=sorted([*esc.evals, *wider], key=ranking(usable)))
    wider = search.rank(esc.ctx, checkpointing=esc.ctx.profile.workload.checkpointing, **dict(step.overrides))
    if not (wider and wider[0].per_gpu_peak_bytes < esc.evals[0].per_gpu_peak_bytes):
        return esc
    notes.append(step.note)
    return replace(esc, evals=wider)


def _plan_of(
    model: str, target: GPU, topo: Topology, esc: _Escalated, search: _Search, notes: list[str],
    max_alternatives: int,
) -> Plan:
    """The Plan: the best layout, the runners-up that differ in degrees or sharding (each with why it loses)."""
    prof, usable = esc.ctx.profile, esc.ctx.usable_bytes
    best = esc.evals[0]
    alts = tuple((e, why_loses(best, e, usable)) for e in _distinct(esc.evals, max_alternatives)[1:])
    if esc.ckpt_alt is not None:
        alts = (esc.ckpt_alt, *alts)
    return Plan(
        model=model,
        gpu=target,
        topology=topo,
        workload=prof.workload,
        profile=prof,
        best=best,
        alternatives=alts,
        layouts_considered=search.considered,
        search_s=search.search_s,
        trace_s=search.trace_s,
        usable_bytes=usable,
        assumptions=_assumptions(prof, topo, (best, *(e for e, _ in alts)), notes),
    )


def plan_context(profile: ModelProfile, topology: Topology, gpu: GPU) -> Context:
    """What every layout of one traced training step is evaluated against on ``gpu``: the usable memory and
    the per-rank CUDA context and cuBLAS workspaces (plan's, and gpuplan.rl's trainer)."""
    from gpuplan.memory.overheads import overheads_for

    over = overheads_for(arch=gpu.arch, vendor=gpu.vendor, compute_capability=gpu.compute_capability, trains=True)
    return Context(profile, topology, gpu.usable_memory_bytes, over.cuda_context_bytes + over.workspace_bytes)


@dataclass(slots=True)
class _Search:
    """One plan's layout searches (the first, and each escalation), with their counts and time."""

    base: Constraints
    heads: int
    kv_heads: int
    topology: Topology
    trace_s: float = 0.0
    search_s: float = 0.0
    considered: int = 0
    emit: EngineFilter | None = None
    """Only layouts this ``--emit`` engine implements (None: all)."""

    def rank(self, ctx: Context, **overrides: Any) -> list[Evaluation]:
        """Every layout of ``base`` (with ``overrides``) ranked on ``ctx``'s profile."""
        t1 = time.perf_counter()
        prof = ctx.profile
        lazy = prof.module_dtype_trace  # traced when the first layout of a 16-bit-copy engine asks: trace time
        traced_before = lazy.trace_s if lazy is not None else 0.0
        c = Constraints(**{**_fields(self.base), **overrides}) if overrides else self.base
        layouts = candidates(c, heads=self.heads, kv_heads=self.kv_heads, layers=prof.layers,
                             gpus_per_node=self.topology.gpus_per_node, experts=prof.experts)
        evals, n = rank(ctx, _emittable(layouts, self.emit))
        traced = (lazy.trace_s if lazy is not None else 0.0) - traced_before
        self.search_s += time.perf_counter() - t1 - traced
        self.trace_s += traced
        self.considered += n
        return evals


@dataclass(frozen=True, slots=True)
class EngineFilter:
    """An ``--emit`` engine as the search sees it (made by ``parallel.emit.engine_filter``, so the planner
    needs no emitter): its name, and why it cannot implement a layout (None: it can; ``before_search``: the
    layout stands for every one the flags allow)."""

    name: str
    refusal: Callable[[Layout, bool], str | None]


def _encoder_decoder_filter(emit: EngineFilter, model: str, model_type: str) -> EngineFilter:
    """``emit`` for an encoder-decoder model: torchtitan has none, the torch snippet's pipeline cannot pass the
    encoder's output along, and Megatron-LM runs T5 only (its pretrain_t5.py; DeepSpeed ZeRO runs any)."""
    if emit.name == "torchtitan":
        raise LayoutError(encoder_decoder_refusal("torchtitan", model, model_type))

    def refusal(lay: Layout, before_search: bool) -> str | None:
        megatron = lay.engine == "megatron" and model_type not in MEGATRON_ENCODER_DECODER
        if emit.name == "torchrun" and (megatron or (lay.engine == "torch" and lay.pp > 1)):
            return encoder_decoder_refusal(emit.name, model, model_type, megatron=megatron)
        return emit.refusal(lay, before_search)

    return EngineFilter(emit.name, refusal)


def _emittable(layouts: Iterator[Layout], emit: EngineFilter | None) -> Iterator[Layout]:
    return layouts if emit is None else (lay for lay in layouts if emit.refusal(lay, False) is None)


def _check_emittable(base: Constraints, emit: EngineFilter, **shape: int) -> None:
    """Refuse ``--emit`` before any trace when no layout the constraints allow — escalations included
    (full checkpointing, context parallelism, CPU offload) — is one that engine's output implements."""
    first: Layout | None = None
    wider = [dict(step.overrides) for step in _ESCALATIONS if step.applies(base)]
    for variant in ({}, {"checkpointing": "full"}, *wider):
        c = Constraints(**{**_fields(base), **variant})
        for lay in candidates(c, **shape):
            if emit.refusal(lay, False) is None:
                return
            if first is None:
                first = lay
    if first is not None:  # none at all: the search says so with its own message
        raise LayoutError(str(emit.refusal(first, True)))


def _assumptions(
    prof: ModelProfile, topo: Topology, shown: tuple[Evaluation, ...], notes: list[str]
) -> tuple[str, ...]:
    return (
        *prof.assumptions,
        topo.describe(),
        "rank order tp (inside a node) → dp → pp (Megatron); TP collectives not overlapped with compute",
        "data-parallel gradient traffic overlaps the last micro-batch's backward (DDP / ZeRO buckets, each "
        "paying NCCL's latency) when pp = 1, follows the pipeline flush when pp > 1, and follows the backward "
        "for Megatron-LM (no --overlap-grad-reduce); FSDP2 / ZeRO-3 gather and reduce-scatter block by block, "
        "one block ahead (FSDP2; HSDP adds each block's all-reduce across replicas) or within the prefetch "
        "bucket (ZeRO-3); MoE expert parallelism: "
        "all-to-all dispatch and combine per MoE block, routing assumed balanced",
        f"memory: CUDA context and cuBLAS workspaces added per rank; caching-allocator slack at the "
        f"traced step's {prof.allocator_slack_fraction:.1%} of allocated bytes; NCCL internal buffers not counted",
        *((megatron_kernels_note(),) if any(isinstance(e.layout.sharding, MegatronDDP) for e in shown) else ()),
        *notes,
    )


def _zero_offload(w: Workload, zero: int | None, *, fsdp: bool, megatron: bool) -> tuple[bool, bool] | None:
    """``--offload params|optimizer`` as DeepSpeed ZeRO's offload_param / offload_optimizer: (optimizer, params)
    for every layout, or None when neither is asked; one line for what DeepSpeed cannot run."""
    optimizer, params = w.offloads("optimizer"), w.offloads("params")
    if not (optimizer or params):
        return None
    asked = ",".join(k for k, on in (("params", params), ("optimizer", optimizer)) if on)
    if fsdp or megatron:
        raise LayoutError(f"--offload {asked} is DeepSpeed ZeRO's CPU offload; drop --{'fsdp' if fsdp else 'megatron'}"
                          " (or the offload)")
    if params and zero not in (None, 3):
        raise LayoutError(f"--offload params is DeepSpeed's offload_param, which needs ZeRO-3, not --zero {zero}; "
                          "use --zero 3 or leave --zero out")
    if zero == 0:
        raise LayoutError(f"--offload {asked} needs a DeepSpeed ZeRO stage (1-3), not --zero 0")
    return optimizer, params


def _ckpt_why(e: Evaluation, usable_bytes: int) -> str:
    fits = "fits" if e.per_gpu_peak_bytes <= usable_bytes else "still does not fit"
    return f"needs --checkpointing full (not the --checkpointing none given): {fits}"


def _check_counts(**counts: int | None) -> None:
    """Whole-number options that must be at least 1 when given (one line naming the value)."""
    for name, value in counts.items():
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise LayoutError(f"{flag} must be at least 1, got {value}; leave it out to let gpuplan choose")


def _fields(c: Constraints) -> dict[str, Any]:
    return {f: getattr(c, f) for f in c.__dataclass_fields__}


def _distinct(evals: list[Evaluation], n: int) -> list[Evaluation]:
    """The next ``n`` layouts that differ in degrees or sharding (not just micro-batch) from each other."""
    seen: set[tuple[Any, ...]] = set()
    out: list[Evaluation] = []
    for e in evals:
        lay = e.layout
        s = lay.sharding
        # offloading parameters too is the same alternative as ZeRO-3 with the optimizer offloaded
        key = (
            lay.dp,
            lay.tp,
            lay.pp,
            lay.cp,
            replace(s, offload_params=False) if isinstance(s, Zero) else s,
            lay.schedule,
        )
        if key in seen:
            continue
        seen.add(key)
        out.append(e)
        if len(out) > n:
            break
    return out
