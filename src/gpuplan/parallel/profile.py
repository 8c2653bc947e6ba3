"""What the planner needs from one traced step: per-block and outside-block quantities.

The planner reads the trace record ``estimate`` reads (``gpuplan.trace.step.TracedStep``, traced
once at one micro-batch ``m0``): its run at 3 repeated blocks (``TracedStep.run``) is split here,
and nothing is traced or built again. Everything a layout changes is then arithmetic on it:

* model states (parameters, gradients, optimizer state) per block and outside the blocks, from
  the run's parameters by module and the storages the trace recorded;
* activations live at the end of the forward, by module: those of the middle block are one
  block's worth, the rest (embeddings, logits, loss) sit on the first/last pipeline stage; the
  largest excess over that during backward (recompute working set, loss gradients) is the
  "transient" term;
* time per block and outside the blocks, from ``gpuplan.perf.step_time`` on subsets of the
  traced ops (the cost model is per-op and additive, so a subset's time is its share).

Quantities per micro-batch scale linearly with the micro-batch (fixed kernel-launch overhead
aside); that is the one extrapolation the planner makes, and it says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError
from gpuplan.models.config_view import ConfigView
from gpuplan.perf.workload_family import workload_kind
from gpuplan.trace.cache import layer_counts_of
from gpuplan.trace.scaling import TRACED_BLOCKS

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.perf.efficiency import Efficiency
    from gpuplan.trace.records import OpRecord, RawTrace, RunResult
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

MIDDLE = 1
_HALF = 2
"""Bytes of a 16-bit element (autocast's weight copies)."""
"""Index of the traced block that stands for every block (the first and last may differ)."""
_TRAIN_PHASES = ("forward", "loss", "backward")
# Activations Megatron-style tensor parallelism leaves replicated on every TP rank (without
# sequence parallelism): the block's residual stream, layer norms, and the dropouts after the
# row-parallel projections (Korthikanti et al. 2022, Sec. 4.2.1: the 10·sbh term).
_EXPERTS = re.compile(r"(^|\.)experts(\.|$)")
"""Routed experts' modules (transformers' ``mlp.experts``; ``shared_experts`` are dense)."""
_REPLICATED = re.compile(r"(^$)|((^|\.)[^.]*(ln|norm)[^.]*$)|(resid_dropout$)|(^mlp\.dropout$)|(^dropout$)")


@dataclass(frozen=True, slots=True)
class PhaseTime:
    forward_s: float
    backward_s: float
    overhead_s: float
    """Kernel-launch overhead inside forward_s + backward_s (does not scale with the micro-batch)."""

    def at(self, scale: float, split: int = 1) -> tuple[float, float]:
        """(forward, backward) seconds at ``scale`` × the traced micro-batch, with the work split
        ``split`` ways (tensor parallelism): kernel time divides, launch count does not."""
        f_over = self.overhead_s * (self.forward_s / (self.forward_s + self.backward_s or 1.0))
        b_over = self.overhead_s - f_over
        return (
            f_over + (self.forward_s - f_over) * scale / split,
            b_over + (self.backward_s - b_over) * scale / split,
        )


@dataclass(frozen=True, slots=True)
class EngineTime:
    """Kernel times of one engine's own program (per micro-batch, as ``ModelProfile``'s)."""

    block: PhaseTime
    first: PhaseTime
    last: PhaseTime


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """Per-block and outside-block quantities of one traced step (micro-batch ``micro_batch``)."""

    name: str
    workload: Workload
    micro_batch: int
    seq_len: int
    layers: int
    """Repeated blocks in the full model (1 when the model has none that can be split)."""
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    ffn: int
    params_count: int
    block_params: int
    outer_params: int
    """Parameters outside the repeated blocks (embeddings, final norm, untied head)."""
    embedding_params: int
    largest_layer_params: int
    """Largest parameter count of one module's own parameters (DeepSpeed's ``largest_layer``)."""
    param_bytes_per_param: float
    """Bytes per parameter as the program holds them (4 for fp32 master weights under AMP)."""
    grad_bytes_per_param: float
    optimizer_bytes_per_param: float
    compute_bytes: int
    """Bytes of the compute dtype (2 under AMP/bf16/fp16, 4 in fp32)."""
    block_act_bytes: int
    block_act_replicated_bytes: int
    """Part of ``block_act_bytes`` Megatron TP leaves replicated without sequence parallelism."""
    first_act_bytes: int
    """Activations outside the blocks held by the first pipeline stage (embedding outputs)."""
    last_act_bytes: int
    """Activations outside the blocks held by the last stage (final norm, logits, loss)."""
    transient_bytes: int
    block_weight_cast_bytes: int
    """16-bit copies of one block's fp32 weights that autocast keeps for the forward/backward
    (0 without AMP); not per micro-batch."""
    outer_weight_cast_bytes: int
    """Largest excess over the end-of-forward activations during backward (one micro-batch)."""
    block_time: PhaseTime
    """Kernels of one block, without autocast's weight casts (see block_cast_time)."""
    block_cast_time: PhaseTime
    """autocast's fp32 -> 16-bit weight copies in one block: paid only by engines keeping fp32 weights."""
    outer_cast_time: PhaseTime
    first_time: PhaseTime
    last_time: PhaseTime
    optimizer_s_per_param: float
    optimizer_temp_bytes_per_param: float
    """Temporaries the optimizer step allocates per parameter it updates (foreach Adam: 4 bytes)."""
    allocator_slack_fraction: float
    """(reserved − allocated) / allocated at the traced peak, from the caching-allocator model."""
    block_model_flops: int
    outer_model_flops: int
    block_hw_flops: int
    outer_hw_flops: int
    peak_tflops: float
    compute_dtype: str
    assumptions: tuple[str, ...]
    block_expert_params: int = 0
    """Parameters of one block's routed experts (MoE; 0 for dense models): what expert
    parallelism shards. Shared experts and the router stay with the dense part."""
    experts: int = 0
    """Routed experts per MoE block (the config's ``num_local_experts`` / ``num_experts``)."""
    experts_per_token: int = 0
    """Experts each token is routed to (``num_experts_per_tok``)."""
    block_param_modules: int = 1
    """Modules of one block that own parameters: DeepSpeed ZeRO-3 gathers them one by one."""
    trainable_fraction: float = 1.0
    """Trainable parameters / all parameters (PEFT freezes the base: the adapters' share). Sharded
    engines keep fp32 master weights, gradients and optimizer state for these only."""
    frozen_float_params_per_param: float = 0.0
    """Frozen floating-point parameters per parameter: DeepSpeed and Megatron recast them to the
    compute dtype with the rest of the module."""
    frozen_float_bytes_per_param: float = 0.0
    """Their traced (stored) bytes per parameter."""
    frozen_packed_bytes_per_param: float = 0.0
    """Frozen parameters that are not floating point (quantized packed weights, as traced) per
    parameter: every engine holds them as they are stored."""
    block_attention_time: PhaseTime = PhaseTime(0.0, 0.0, 0.0)
    """The attention kernels of one block (part of ``block_time``): what ring context parallelism
    overlaps its K/V exchange with."""
    megatron_time: EngineTime | None = None
    """block/first/last times as Megatron-LM runs them (parallel/engine.py: fused scale-mask-softmax,
    its GEMM rate); None: the eager times stand for it."""
    copy_s_per_byte: float = 0.0
    """Seconds per byte (read + written) of a memory-bound copy kernel on the profiled GPU
    (perf/roofline.memory_bound_s): what FSDP2's copies of gathered parameters and gradients cost."""
    kind: str = "llm"
    """Workload kind (cnn | vit | encoder | llm) whose public rows give the time's 80% interval
    (perf/workload_family.py)."""
    block_host_copy_bytes: float = 0.0
    """``--offload activations``: bytes one block copies to the host per micro-batch (its checkpointed input; the
    same come back before its recompute), from the traced step's full-depth figure."""

    @property
    def model_flops_per_sample(self) -> float:
        return (self.layers * self.block_model_flops + self.outer_model_flops) / self.micro_batch

    @property
    def hw_flops_per_sample(self) -> float:
        return (self.layers * self.block_hw_flops + self.outer_hw_flops) / self.micro_batch

    @property
    def tokens_per_sample(self) -> int:
        return self.seq_len


def _live_at(trace: RawTrace, event_count: int) -> dict[int, int]:
    live: dict[int, int] = {}
    for ev in trace.events[:event_count]:
        if ev.size_bytes > 0:
            live[ev.storage_id] = ev.size_bytes
        else:
            live.pop(ev.storage_id, None)
    return live


def profile_model(source: ModelSource, workload: Workload, gpu: GPU, step: TracedStep | None = None) -> ModelProfile:
    """Split the traced step of ``workload`` (``step``, else traced here exactly as ``estimate``
    traces it) into per-block quantities timed on ``gpu``."""
    from gpuplan.trace.step import trace_step

    if not workload.trains:
        raise ConfigError(f"gpuplan plan covers training (--mode train), got --mode {workload.mode}")
    counts = layer_counts_of(source)
    if len(counts) > 1:
        raise ConfigError(
            f"{source.name} has {len(counts)} stacks of blocks ({', '.join(counts)}); "
            "the planner splits single-stack models (decoder-only/encoder-only) only"
        )
    if step is None:
        step = trace_step(source, workload, compute_capability=gpu.compute_capability or (9, 0))
    return profile_from_step(step, source, workload, gpu)


def profile_from_step(
    step: TracedStep, source: ModelSource, workload: Workload, gpu: GPU, *, megatron_gemm_scale: float | None = None
) -> ModelProfile:
    """Per-block quantities of one traced step, timed on ``gpu`` (arithmetic only: the record's
    run at 3 repeated blocks is split by module, nothing is traced or built again).
    ``megatron_gemm_scale`` overrides the fitted engine factor (scripts/fit_engine_factors.py)."""
    run = step.run
    if run is None:
        raise ConfigError(f"{source.name}: only the weights are known (no config.json); the planner needs the model")
    counts = layer_counts_of(source)
    key = next(iter(counts), None)
    container = run.containers.get(key or "", "")
    traced_layers = run.block_counts.get(key, 1) if key else 1
    blocks = _Blocks(
        container=container,
        traced_layers=traced_layers,
        full_layers=(counts[key] if key else 1) if container else 1,
        middle_prefix=f"{container}.{MIDDLE}" if container and traced_layers >= TRACED_BLOCKS else None,
        block_re=re.compile(rf"^{re.escape(container)}\.\d+(\.|$)") if container else None,
    )
    params = _param_split(step, run, blocks)
    acts = _activation_split(run, blocks, workload, source.name)
    times = _time_split(run, blocks, workload, gpu, megatron_gemm_scale)
    cfg = ConfigView(getattr(source, "config_dict", None))
    hidden = cfg.hidden_size or 0
    heads = cfg.attention_heads or 1
    # Tokens per sample as the trace ran them: the one rule estimate uses (the workload's, else
    # the model's default), never a config's position-table size.
    from gpuplan.perf.summary import seq_len_of

    seq = seq_len_of(source, workload) or 1
    return ModelProfile(
        name=source.name,
        workload=workload,
        micro_batch=workload.batch_size,
        seq_len=int(seq),
        layers=blocks.full_layers,
        hidden=hidden,
        heads=heads,
        kv_heads=cfg.kv_heads or heads,
        vocab=cfg.vocab_size or 0,
        ffn=cfg.ffn_size or 4 * hidden,
        params_count=params.params_count,
        block_params=params.block_params,
        outer_params=params.outer_params,
        embedding_params=params.embedding_params,
        largest_layer_params=params.largest_layer_params,
        param_bytes_per_param=params.per_param["parameters"],
        grad_bytes_per_param=params.per_param["gradients"],
        optimizer_bytes_per_param=params.per_param["optimizer_state"],
        compute_bytes=times.compute_bytes,
        block_act_bytes=acts.block_act,
        block_weight_cast_bytes=acts.block_cast,
        outer_weight_cast_bytes=acts.outer_cast,
        block_act_replicated_bytes=acts.block_rep,
        first_act_bytes=acts.first_act,
        last_act_bytes=acts.outer_act - acts.first_act,
        transient_bytes=max(0, acts.transient),
        optimizer_temp_bytes_per_param=acts.opt_temp / max(run.params_count, 1),
        allocator_slack_fraction=max(0.0, acts.slack),
        block_time=times.block,
        block_attention_time=times.attention,
        first_time=times.first,
        last_time=times.last,
        block_cast_time=times.cast_block,
        outer_cast_time=times.cast_outer,
        optimizer_s_per_param=times.optimizer_s / max(run.params_count, 1),
        block_model_flops=times.block_model_flops,
        outer_model_flops=times.outer_model_flops,
        block_hw_flops=times.block_hw_flops,
        outer_hw_flops=times.outer_hw_flops,
        peak_tflops=times.peak_tflops,
        compute_dtype=times.compute_dtype,
        assumptions=_assumptions(source.name, blocks, workload, params),
        block_expert_params=params.expert_params,
        experts=cfg.experts if params.expert_params else 0,
        experts_per_token=(cfg.positive("num_experts_per_tok", "moe_topk") or 1) if params.expert_params else 0,
        block_param_modules=params.block_modules or 1,
        megatron_time=times.megatron,
        copy_s_per_byte=times.copy_s_per_byte,
        trainable_fraction=params.trainable_fraction,
        frozen_float_params_per_param=params.frozen_float_params_per_param,
        frozen_float_bytes_per_param=params.frozen_float_bytes_per_param,
        frozen_packed_bytes_per_param=params.frozen_packed_bytes_per_param,
        kind=workload_kind(str(getattr(source, "task", "custom")), run.trace.ops),
        block_host_copy_bytes=step.host_copy_bytes / max(blocks.full_layers, 1),
    )


@dataclass(frozen=True, slots=True)
class _Blocks:
    """Where the repeated blocks sit in the traced run."""

    container: str
    traced_layers: int
    full_layers: int
    middle_prefix: str | None
    """Module path of the middle traced block (None: no blocks to split)."""
    block_re: re.Pattern[str] | None

    def in_block(self, module: str) -> bool:
        return self.block_re is not None and bool(self.block_re.match(module))

    def in_middle(self, module: str) -> bool:
        m = self.middle_prefix
        return bool(m) and (module == m or module.startswith(f"{m}."))


@dataclass(frozen=True, slots=True)
class _ParamSplit:
    params_count: int
    block_params: int
    outer_params: int
    expert_params: int
    block_modules: int
    embedding_params: int
    largest_layer_params: int
    per_param: dict[str, float]
    trainable: int
    traced_params: int
    trainable_fraction: float
    frozen_float_params_per_param: float
    frozen_float_bytes_per_param: float
    frozen_packed_bytes_per_param: float


def _param_split(step: TracedStep, run: RunResult, b: _Blocks) -> _ParamSplit:
    """Parameters by module (per block, outside the blocks) from the traced run; bytes per parameter
    and the trainable/frozen split from the step's full-depth counts (one rule: the trace's own
    totals over its parameter count, so a 3-block run's embeddings do not stand for a third of
    the model)."""
    pmap = run.module_params
    traced_params = sum(pmap.values())
    if b.block_re is not None:
        block_params_traced = sum(n for m, n in pmap.items() if b.in_block(m))
        block_params = block_params_traced // b.traced_layers
        outer_params = traced_params - block_params_traced
    else:
        block_params, outer_params = traced_params, 0
    expert_params = block_modules = 0
    if b.block_re is not None:
        in_block = [(m, n) for m, n in pmap.items() if b.in_block(m) and n > 0]
        expert_params = sum(n for m, n in in_block if _EXPERTS.search(m)) // b.traced_layers
        block_modules = max(1, len(in_block) // b.traced_layers)
    # parameters as the step holds them (buffers included: the storages' "parameters" category,
    # live through the whole step, so the peak's component is the full-depth total)
    n_full = max(step.params_count, 1)
    param_storage = step.tensor_components.get("parameters", step.param_bytes)
    per_param = {
        "parameters": param_storage / n_full,
        "gradients": step.gradient_bytes / n_full,
        "optimizer_state": step.optimizer_state_bytes / n_full,
    }
    # the trainable/frozen split (PEFT): parameters only, as ZeRO's accounting counts them
    count = step.trainable_params_count
    trainable = step.params_count if count is None else min(count, step.params_count)
    every_param_trains = trainable == step.params_count
    frozen_packed = step.param_bytes - step.trainable_param_bytes - step.frozen_float_param_bytes
    return _ParamSplit(
        params_count=outer_params + block_params * b.full_layers,
        block_params=block_params,
        outer_params=outer_params,
        expert_params=expert_params,
        block_modules=block_modules,
        embedding_params=sum(n for m, n in pmap.items() if "emb" in m or m.endswith(("wte", "wpe", "shared"))),
        largest_layer_params=max(pmap.values()) if pmap else 0,
        per_param=per_param,
        trainable=trainable,
        traced_params=step.params_count,
        trainable_fraction=1.0 if every_param_trains else trainable / n_full,
        frozen_float_params_per_param=step.frozen_float_params_count / n_full,
        frozen_float_bytes_per_param=step.frozen_float_param_bytes / n_full,
        frozen_packed_bytes_per_param=0.0 if every_param_trains else max(frozen_packed, 0) / n_full,
    )


@dataclass(frozen=True, slots=True)
class _ActSplit:
    block_act: int
    block_rep: int
    outer_act: int
    first_act: int
    block_cast: int
    outer_cast: int
    transient: int
    opt_temp: int
    slack: float


def _activation_split(run: RunResult, b: _Blocks, workload: Workload, name: str) -> _ActSplit:
    """Activations live at the end of the forward, by module; the backward's excess over them;
    the optimizer's temporaries; the caching allocator's slack."""
    from gpuplan.memory.allocator import replay
    from gpuplan.trace.scaling import category_vectors

    trace = run.trace
    fe = max((i for i, p in enumerate(trace.points) if p.phase in ("forward", "loss")), default=-1)
    if fe < 0:
        raise ConfigError(f"the traced step of {name} has no forward phase")
    live = _live_at(trace, trace.points[fe].event_count)
    block_act = block_rep = outer_act = first_act = block_cast = outer_cast = 0
    # Under torch.autocast the 16-bit copies of fp32 weights stay alive from their first use to the
    # end of the forward (autocast's weight-cast cache) or to their backward (saved for it): per-rank
    # memory for engines that keep fp32 weights, absent when weights are held in 16 bits.
    sizes = run.module_param_sizes if workload.autocast_dtype else {}
    for sid, size in live.items():
        info = trace.storages[sid]
        if info.category not in ("activations", "temporaries"):
            continue
        mod = info.module
        is_cast = size % _HALF == 0 and size // _HALF in sizes.get(mod, ())
        in_middle = b.in_middle(mod)
        if is_cast and (in_middle or not b.in_block(mod)):
            if in_middle:
                block_cast += size
            else:
                outer_cast += size
            continue
        if in_middle and b.middle_prefix:
            block_act += size
            if _REPLICATED.search(mod[len(b.middle_prefix) + 1 :] if mod != b.middle_prefix else ""):
                block_rep += size
        elif b.in_block(mod):
            continue  # blocks 0 and 2: the middle block stands for every block
        else:
            outer_act += size
            if "emb" in mod or mod.endswith((".drop", "wte", "wpe")):
                first_act += size
    if not b.middle_prefix:  # no blocks to split: the whole step's activations are one "block"
        block_act, block_rep, outer_act, first_act = outer_act, outer_act, 0, 0
        block_cast, outer_cast = outer_cast, 0
    points = [i for i, p in enumerate(trace.points) if p.phase in _TRAIN_PHASES]
    vecs = category_vectors(trace, points)
    act_fe = vecs[fe]["activations"] + vecs[fe]["temporaries"] if fe in vecs else 0
    transient = max((v["activations"] + v["temporaries"] - act_fe for v in vecs.values()), default=0)
    opt_points = [i for i, p in enumerate(trace.points) if p.phase == "optimizer"]
    opt_vecs = category_vectors(trace, opt_points) if opt_points else {}
    opt_temp = max((v["temporaries"] + v["activations"] for v in opt_vecs.values()), default=0)
    # The caching allocator's slack over the allocated peak, from gpuplan's allocator model replayed
    # on the traced events (3 blocks): applied to every rank as a fraction of its allocated bytes.
    stats = replay(trace.events)
    slack = stats.peak_reserved_bytes / stats.peak_allocated_bytes - 1 if stats.peak_allocated_bytes else 0.0
    return _ActSplit(block_act, block_rep, outer_act, first_act, block_cast, outer_cast, transient, opt_temp, slack)


@dataclass(frozen=True, slots=True)
class _TimeSplit:
    block: PhaseTime
    attention: PhaseTime
    first: PhaseTime
    last: PhaseTime
    cast_block: PhaseTime
    cast_outer: PhaseTime
    megatron: EngineTime
    optimizer_s: float
    block_model_flops: int
    outer_model_flops: int
    block_hw_flops: int
    outer_hw_flops: int
    peak_tflops: float
    compute_dtype: str
    compute_bytes: int
    copy_s_per_byte: float = 0.0


def _time_split(
    run: RunResult, b: _Blocks, workload: Workload, gpu: GPU, megatron_gemm_scale: float | None
) -> _TimeSplit:
    """Time per block and outside the blocks, from the cost model on subsets of the traced ops."""
    from gpuplan.parallel.engine import megatron_efficiency, megatron_ops
    from gpuplan.perf import step_time
    from gpuplan.perf.efficiency import efficiency_for
    from gpuplan.perf.roofline import memory_bound_s

    ops = run.trace.ops
    sizes = run.module_param_sizes if workload.autocast_dtype else {}

    def subset_time(sel: list[OpRecord], eff: Efficiency | None = None) -> tuple[PhaseTime, int, int]:
        if not sel:
            return PhaseTime(0.0, 0.0, 0.0), 0, 0
        st = step_time(_as_step(sel, run.params_count, run.param_bytes), gpu, workload, efficiency=eff)
        fwd = st.by_phase_s.get("forward", 0.0) + st.by_phase_s.get("loss", 0.0)
        bwd = st.by_phase_s.get("backward", 0.0)
        return PhaseTime(fwd, bwd, st.overhead_s), st.model_flops, st.flops

    def is_weight_cast(op: OpRecord) -> bool:
        """autocast's fp32 -> 16-bit copy of a weight of the op's module (4 bytes in, 2 out)."""
        return (
            op.name == "aten._to_copy.default"
            and op.bytes_read == 2 * op.bytes_written
            and op.bytes_written // _HALF in sizes.get(op.module, ())
        )

    all_train = [op for op in ops if op.phase in _TRAIN_PHASES]
    casts = [op for op in all_train if sizes and is_weight_cast(op)]
    cast_ids = {id(op) for op in casts}
    train_ops = [op for op in all_train if id(op) not in cast_ids]
    if b.middle_prefix:
        mid_block = f"{b.container}:{MIDDLE}"
        cast_block, _, _ = subset_time([op for op in casts if op.block == mid_block])
        cast_outer, _, _ = subset_time([op for op in casts if op.block is None])
        blk = [op for op in train_ops if op.block == mid_block]
        outer = [op for op in train_ops if op.block is None]
    else:
        cast_block, _, _ = subset_time(casts)
        cast_outer = PhaseTime(0.0, 0.0, 0.0)
        blk, outer = train_ops, []
    block_time, block_mf, block_hf = subset_time(blk)
    attention_time, _, _ = subset_time([op for op in blk if op.op_class == "attention"])
    first_ops = [op for op in outer if "emb" in op.module or op.module.endswith(("wte", "wpe", ".drop"))]
    last_ops = [op for op in outer if op not in first_ops]
    first_time, first_mf, first_hf = subset_time(first_ops)
    last_time, last_mf, last_hf = subset_time(last_ops)
    # Megatron-LM's program: its fused softmax in place of HF's chain, at its GEMM rate
    cb_bytes = 2 if workload.precision in ("amp-bf16", "amp-fp16", "bf16", "fp16") else 4
    meg_eff = megatron_efficiency(efficiency_for(gpu), megatron_gemm_scale)
    megatron_time = EngineTime(
        subset_time(megatron_ops(blk, cb_bytes), meg_eff)[0],
        subset_time(megatron_ops(first_ops, cb_bytes), meg_eff)[0],
        subset_time(megatron_ops(last_ops, cb_bytes), meg_eff)[0],
    )
    opt_ops = [op for op in ops if op.phase in ("optimizer", "zero_grad")]
    opt_s = step_time(_as_step(opt_ops, run.params_count, run.param_bytes), gpu, workload).total_s if opt_ops else 0.0
    full = step_time(_as_step(list(ops[:1]), run.params_count, run.param_bytes), gpu, workload)
    return _TimeSplit(
        block=block_time,
        attention=attention_time,
        first=first_time,
        last=last_time,
        cast_block=cast_block,
        cast_outer=cast_outer,
        megatron=megatron_time,
        optimizer_s=opt_s,
        block_model_flops=block_mf,
        outer_model_flops=first_mf + last_mf,
        block_hw_flops=block_hf,
        outer_hw_flops=first_hf + last_hf,
        peak_tflops=full.peak_tflops,
        compute_dtype=full.compute_dtype,
        compute_bytes=cb_bytes,
        copy_s_per_byte=memory_bound_s(1.0, gpu, efficiency_for(gpu)),
    )


def _assumptions(name: str, b: _Blocks, workload: Workload, params: _ParamSplit) -> tuple[str, ...]:
    out: tuple[str, ...] = (
        f"traced once: {name} with {b.traced_layers} of {b.full_layers} blocks at micro-batch "
        f"{workload.batch_size}; other micro-batches scale activations and kernel time linearly "
        "(launch overhead fixed)",
        "TP shards every block activation except the residual stream, norms and output dropouts "
        "(Megatron, Korthikanti et al. 2022); sequence parallelism shards those too",
    )
    if params.trainable_fraction < 1.0:
        out += (
            f"{params.trainable:,} of {params.traced_params:,} traced parameters train: DeepSpeed ZeRO and Megatron "
            "keep 16-bit weights, fp32 master weights, gradients and optimizer state for those only; frozen weights "
            "are held in the compute dtype (quantized ones packed, as traced), replicated under ZeRO-1/2 and "
            "sharded under ZeRO-3 and FSDP2; per pipeline stage the trainable share is the model's",
        )
    return out


def _as_step(ops: list[OpRecord], params_count: int, param_bytes: int) -> TracedStep:
    """A TracedStep holding ``ops`` (count 1 each) for the per-op cost model."""
    from gpuplan.trace.step import TracedStep

    return TracedStep(
        ops=tuple(replace(op, count=1) if op.count != 1 else op for op in ops),
        tensor_peak_bytes=0,
        tensor_components={},
        peak_phase="",
        params_count=params_count,
        param_bytes=param_bytes,
        block_counts={},
        traced_blocks={},
        rounded_peak_bytes=0,
        reserved_peak_bytes=0,
        top_activation_modules=(),
        attention_backends={},
    )
