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
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError, TraceError
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
_STACK_OF = re.compile(r"(?:^|\.)(encoder|decoder)(?:\.|$)")
"""The stack a module of an encoder-decoder model belongs to (its path's ``encoder`` / ``decoder`` segment)."""
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
class StackBlock:
    """One block of one stack of an encoder-decoder model (T5: the encoder's self-attention + FFN, the
    decoder's self-attention + cross-attention + FFN), per traced micro-batch, as ``ModelProfile``'s block
    fields are for a single-stack model."""

    name: str
    """``encoder`` | ``decoder``."""
    layers: int
    params: int
    act_bytes: int
    act_replicated_bytes: int
    weight_cast_bytes: int
    time: PhaseTime
    cast_time: PhaseTime
    megatron_time: PhaseTime
    tp_sublayers: int
    """Sublayers Megatron TP all-reduces after (attention, FFN; the decoder's cross-attention too)."""


@dataclass(frozen=True, slots=True)
class Activations:
    """Activation bytes of one micro-batch as one program holds them (the ``ModelProfile`` fields of the same
    meaning): the traced program's own, or the 16-bit-module program's (``ModelProfile.module_dtype_activations``)."""

    block_bytes: int
    block_replicated_bytes: int
    first_bytes: int
    last_bytes: int
    transient_bytes: int
    block_host_copy_bytes: float
    stacks: tuple[tuple[int, int], ...] = ()
    """Encoder-decoder models: (activation, replicated) bytes of each stack's block."""


class LazyActivations:
    """Activations computed once, on first :meth:`get` (the 16-bit-module trace: a whole second trace that only
    the layouts holding the 16-bit compute copy read, so a profile does not pay for it up front)."""

    __slots__ = ("_make", "_value", "trace_s")

    def __init__(self, make: Callable[[], Activations | None]) -> None:
        self._make: Callable[[], Activations | None] | None = make
        self._value: Activations | None = None
        self.trace_s = 0.0
        """Seconds the trace (or its read from the cache) took: the planner counts them as trace time, not search
        time, wherever the first layout that needs them asks."""

    def get(self) -> Activations | None:
        if self._make is not None:
            t0 = time.perf_counter()
            self._value, self._make = self._make(), None
            self.trace_s = time.perf_counter() - t0
        return self._value


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
    block_unquantized_params: int = 0
    """Parameters of one block a serving engine keeps in 16 bits under weight quantization (norms, the MoE
    router: memory.weight_quant.engine_keeps_16bit)."""
    outer_unquantized_params: int = 0
    """The same outside the blocks (embeddings, lm_head, the final norm)."""
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
    stacks: tuple[StackBlock, ...] = ()
    """Encoder-decoder models: the encoder's block and the decoder's (empty for single-stack models). The
    ``block_*`` fields are then the mean over all ``layers`` = encoder + decoder blocks, so every
    whole-model sum (one stage holding every block) is exact; pipeline stages use the stacks."""
    block_tp_sublayers: float = 2.0
    """Sublayers per block Megatron TP all-reduces after (2: attention and FFN; the mean over the stacks)."""
    head_dim: int = 0
    """Width of one attention head as the config states it (0: hidden / heads)."""
    model_type: str = ""
    """The config's ``model_type`` (``t5``, ``bart``...; empty when it has none): which engines have the model."""
    encoder_output_bytes: int = 0
    """Encoder-decoder models: the encoder's output of one micro-batch (tokens × hidden × compute bytes),
    which every decoder pipeline stage receives and keeps for its cross-attention's backward."""
    module_dtype_trace: LazyActivations | None = field(default=None, compare=False, repr=False)
    """Under AMP: the activations of the same step traced with the model itself in the 16-bit compute dtype
    (``Workload.module_dtype_precision``), as engines that hold the 16-bit compute copy run it (FSDP2's
    MixedPrecisionPolicy, DeepSpeed, Megatron-LM: residual stream, norms, embeddings' output and checkpointed
    block inputs in 16 bits, where autocast leaves them fp32), traced when a layout first asks for them: a search
    over DDP layouts alone never traces that second program. None: the traced program's stand for every engine."""

    @property
    def module_dtype_activations(self) -> Activations | None:
        """The 16-bit-module program's activations (``module_dtype_trace``; traced on first use), None without one."""
        return None if self.module_dtype_trace is None else self.module_dtype_trace.get()

    def activations(self, sixteen_bit_modules: bool) -> Activations:
        """The activations of the program an engine runs: ``sixteen_bit_modules`` (the engine holds the 16-bit
        compute copy: ``not Layout.fp32_weights_with_autocast``) the 16-bit-module trace's, else the traced one's."""
        if sixteen_bit_modules and self.module_dtype_activations is not None:
            return self.module_dtype_activations
        return Activations(self.block_act_bytes, self.block_act_replicated_bytes, self.first_act_bytes,
                           self.last_act_bytes, self.transient_bytes, self.block_host_copy_bytes,
                           tuple((st.act_bytes, st.act_replicated_bytes) for st in self.stacks))

    @property
    def encoder_layers(self) -> int:
        """Blocks of the encoder stack (0 for single-stack models)."""
        return self.stacks[0].layers if self.stacks else 0

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
    if len(counts) > 2:
        raise ConfigError(
            f"{source.name} has {len(counts)} stacks of blocks ({', '.join(counts)}); "
            "the planner splits single-stack and encoder-decoder (two-stack) models only"
        )
    cc = gpu.compute_capability or (9, 0)
    if step is None:
        step = trace_step(source, workload, compute_capability=cc)
    return profile_from_step(step, source, workload, gpu,
                             module_dtype_step=lambda: module_dtype_step(source, workload, cc))


def module_dtype_step(source: ModelSource, workload: Workload, cc: tuple[int, int]) -> TracedStep | None:
    """The training step of ``workload`` traced with the model itself in autocast's 16-bit dtype (None without
    autocast, or for a model the planner cannot split): the program of the engines that hold the 16-bit compute
    copy. The same 3-block trace through the same cache; only its activations are read."""
    from gpuplan.trace.step import trace_step

    if workload.module_dtype_precision is None or not workload.trains or len(layer_counts_of(source)) > 2:
        return None
    try:
        return trace_step(source, _module_dtype_workload(workload), compute_capability=cc)
    except (TraceError, ConfigError):
        # a program that does not run with its weights in 16 bits (a vision model's fp32 images into fp16
        # convolutions): the autocast trace's activations stand for every engine, as ModelProfile says
        return None


@dataclass(frozen=True, slots=True)
class ParamProfile:
    """Where one traced step's parameters sit, untimed: the part of :class:`ModelProfile` a caller that reads
    only parameters needs (serve's weight split), so a GPU with no catalog rate still gets its answer."""

    layers: int
    block_expert_params: int
    block_unquantized_params: int
    outer_unquantized_params: int


def param_profile(step: TracedStep, source: ModelSource) -> ParamProfile:
    """The parameter split :func:`profile_from_step` makes (same blocks, same ``_param_split``), without
    pricing anything on a GPU."""
    run = step.run
    if run is None:
        raise ConfigError(f"{source.name}: only the weights are known (no config.json); the planner needs the model")
    blocks = _blocks_of(run, layer_counts_of(source))
    params = _param_split(step, run, blocks)
    return ParamProfile(sum(blocks.full_layers), params.expert_params, params.block_unquantized_params,
                        params.outer_unquantized_params)


def profile_from_step(
    step: TracedStep, source: ModelSource, workload: Workload, gpu: GPU, *, megatron_gemm_scale: float | None = None,
    module_dtype_step: TracedStep | Callable[[], TracedStep | None] | None = None,
) -> ModelProfile:
    """Per-block quantities of one traced step, timed on ``gpu`` (arithmetic only: the record's
    run at 3 repeated blocks is split by module, nothing is traced or built again).
    ``megatron_gemm_scale`` overrides the fitted engine factor (scripts/fit_engine_factors.py);
    ``module_dtype_step``: the same step with the model in 16 bits (``module_dtype_step()``), whose activations
    the engines that hold the 16-bit compute copy take — or a function that traces it, called only when a layout
    first asks for those activations."""
    run = step.run
    if run is None:
        raise ConfigError(f"{source.name}: only the weights are known (no config.json); the planner needs the model")
    counts = layer_counts_of(source)
    blocks = _blocks_of(run, counts)
    params = _param_split(step, run, blocks)
    acts = _activation_split(run, blocks, workload, source.name)
    module_acts = None
    if module_dtype_step is not None:
        half = module_dtype_step
        module_acts = LazyActivations(
            lambda: _module_dtype_activations(half() if callable(half) else half, counts, workload, source.name))
    own = _activations(acts, blocks, step)
    times = _time_split(run, blocks, workload, gpu, megatron_gemm_scale)
    stacks = _stacks(blocks, params, acts, times)
    cfg = ConfigView(getattr(source, "config_dict", None))
    hidden = cfg.hidden_size or 0
    heads = cfg.attention_heads or 1
    # Tokens per sample as the trace ran them: the one rule estimate uses (the workload's, else
    # the model's default), never a config's position-table size.
    from gpuplan.perf.summary import seq_len_of

    seq = seq_len_of(source, workload) or 1
    mean = _Mean(blocks.full_layers)
    return ModelProfile(
        name=source.name,
        workload=workload,
        micro_batch=workload.batch_size,
        seq_len=int(seq),
        layers=sum(blocks.full_layers),
        hidden=hidden,
        heads=heads,
        kv_heads=cfg.kv_heads or heads,
        vocab=cfg.vocab_size or 0,
        ffn=cfg.ffn_size or 4 * hidden,
        params_count=params.params_count,
        block_params=mean.of(params.block_params),
        outer_params=params.outer_params,
        embedding_params=params.embedding_params,
        largest_layer_params=params.largest_layer_params,
        param_bytes_per_param=params.per_param["parameters"],
        grad_bytes_per_param=params.per_param["gradients"],
        optimizer_bytes_per_param=params.per_param["optimizer_state"],
        compute_bytes=times.compute_bytes,
        block_act_bytes=own.block_bytes,
        block_weight_cast_bytes=mean.of(acts.block_cast),
        outer_weight_cast_bytes=acts.outer_cast,
        block_act_replicated_bytes=own.block_replicated_bytes,
        first_act_bytes=own.first_bytes,
        last_act_bytes=own.last_bytes,
        transient_bytes=own.transient_bytes,
        optimizer_temp_bytes_per_param=acts.opt_temp / max(run.params_count, 1),
        allocator_slack_fraction=max(0.0, acts.slack),
        block_time=mean.time(times.block),
        block_attention_time=mean.time(times.attention),
        first_time=times.first,
        last_time=times.last,
        block_cast_time=mean.time(times.cast_block),
        outer_cast_time=times.cast_outer,
        optimizer_s_per_param=times.optimizer_s / max(run.params_count, 1),
        block_model_flops=mean.of(times.block_model_flops),
        outer_model_flops=times.outer_model_flops,
        block_hw_flops=mean.of(times.block_hw_flops),
        outer_hw_flops=times.outer_hw_flops,
        peak_tflops=times.peak_tflops,
        compute_dtype=times.compute_dtype,
        assumptions=_assumptions(source.name, blocks, workload, params),
        block_expert_params=params.expert_params,
        experts=cfg.experts if params.expert_params else 0,
        experts_per_token=(cfg.positive("num_experts_per_tok", "moe_topk") or 1) if params.expert_params else 0,
        block_param_modules=params.block_modules or 1,
        block_unquantized_params=params.block_unquantized_params,
        outer_unquantized_params=params.outer_unquantized_params,
        megatron_time=EngineTime(mean.time(times.megatron_block), times.megatron.first, times.megatron.last),
        copy_s_per_byte=times.copy_s_per_byte,
        trainable_fraction=params.trainable_fraction,
        frozen_float_params_per_param=params.frozen_float_params_per_param,
        frozen_float_bytes_per_param=params.frozen_float_bytes_per_param,
        frozen_packed_bytes_per_param=params.frozen_packed_bytes_per_param,
        kind=workload_kind(str(getattr(source, "task", "custom")), run.trace.ops),
        block_host_copy_bytes=own.block_host_copy_bytes,
        stacks=stacks,
        block_tp_sublayers=sum(s.tp_sublayers * s.layers for s in stacks) / sum(blocks.full_layers) if stacks else 2.0,
        encoder_output_bytes=int(workload.batch_size * seq * hidden * times.compute_bytes) if stacks else 0,
        head_dim=cfg.head_dim or 0,
        model_type=str(getattr(source, "config_dict", {}).get("model_type", "")),
        module_dtype_trace=module_acts,
    )


def _module_dtype_activations(step: TracedStep | None, counts: dict[str, int], workload: Workload,
                              name: str) -> Activations | None:
    """The activations of ``step`` (the 16-bit-module trace of ``workload``), split as the traced step's are."""
    if step is None or step.run is None:
        return None
    half_run, half_w = step.run, _module_dtype_workload(workload)
    half_blocks = _blocks_of(half_run, counts)
    return _activations(_activation_split(half_run, half_blocks, half_w, name), half_blocks, step)


def _module_dtype_workload(workload: Workload) -> Workload:
    """The workload ``module_dtype_step`` traces."""
    return workload.with_(precision=workload.module_dtype_precision or workload.precision)


def _activations(acts: _ActSplit, b: _Blocks, step: TracedStep) -> Activations:
    """The ``Activations`` of one split trace (the same rules as ``ModelProfile``'s fields)."""
    mean = _Mean(b.full_layers)
    return Activations(
        block_bytes=mean.of(acts.block_act),
        block_replicated_bytes=mean.of(acts.block_rep),
        first_bytes=acts.first_act,
        last_bytes=acts.outer_act - acts.first_act,
        transient_bytes=max(0, acts.transient),
        block_host_copy_bytes=step.host_copy_bytes / max(sum(b.full_layers), 1),
        stacks=tuple(zip(acts.block_act, acts.block_rep, strict=True)) if b.encoder_decoder else (),
    )


@dataclass(frozen=True, slots=True)
class _Blocks:
    """Where the repeated blocks sit in the traced run: one stack, or an encoder's and a decoder's
    (per-stack tuples, in the order of the model's layer counts)."""

    containers: tuple[str, ...]
    traced_layers: tuple[int, ...]
    full_layers: tuple[int, ...]
    middle_prefixes: tuple[str, ...]
    """Module path of each stack's middle traced block (empty: no blocks to split)."""
    block_re: re.Pattern[str] | None

    @property
    def middle_prefix(self) -> str | None:
        return self.middle_prefixes[0] if self.middle_prefixes else None

    @property
    def encoder_decoder(self) -> bool:
        return len(self.middle_prefixes) > 1

    def in_block(self, module: str) -> bool:
        return self.block_re is not None and bool(self.block_re.match(module))

    def middle_of(self, module: str) -> int | None:
        """Index of the stack whose middle block holds ``module`` (None: none)."""
        for i, m in enumerate(self.middle_prefixes):
            if module == m or module.startswith(f"{m}."):
                return i
        return None

    def in_middle(self, module: str) -> bool:
        return self.middle_of(module) is not None

    def stack_of(self, module: str) -> int:
        """Index of the stack whose blocks hold ``module`` (a module in a block)."""
        return next(i for i, c in enumerate(self.containers) if module.startswith(f"{c}."))

    def first_side(self, module: str) -> bool:
        """Outside the blocks, on the first pipeline stage: the embeddings (encoder-decoder: the
        encoder's side, its embeddings, dropout and final norm; the decoder's side sits with the head)."""
        if self.encoder_decoder:  # T5's ``encoder.*``, a wrapped model's ``model.encoder.*``
            stack = _STACK_OF.search(module)
            if stack is not None:
                return stack.group(1) == "encoder"
            return "emb" in module or module.split(".")[-1] == "shared"
        return "emb" in module or module.endswith((".drop", "wte", "wpe"))


def _blocks_of(run: RunResult, counts: dict[str, int]) -> _Blocks:
    """The traced run's repeated blocks: the first stack of a single-stack model, both stacks of an
    encoder-decoder one (each with a middle traced block; else the step is one block)."""
    keys = [k for k in counts if run.containers.get(k)]
    if len(counts) > 1 and len(keys) == len(counts):
        traced = tuple(run.block_counts.get(k, 1) for k in keys)
        if min(traced) < TRACED_BLOCKS:
            keys = []  # a stack traced whole at fewer than 3 blocks: no middle block to stand for it
    else:
        keys = keys[:1] if len(counts) == 1 else []
    containers = tuple(run.containers[k] for k in keys)
    traced = tuple(run.block_counts.get(k, 1) for k in keys)
    middles = tuple(f"{c}.{MIDDLE}" for c, n in zip(containers, traced, strict=True) if n >= TRACED_BLOCKS)
    return _Blocks(
        containers=containers,
        traced_layers=traced or (1,),
        full_layers=tuple(counts[k] for k in keys) or (1,),
        middle_prefixes=middles if len(middles) == len(containers) else (),
        block_re=re.compile("|".join(rf"^{re.escape(c)}\.\d+(\.|$)" for c in containers)) if containers else None,
    )


@dataclass(frozen=True, slots=True)
class _Mean:
    """Per-block quantities as the mean over every block of every stack (exact in whole-model sums)."""

    layers: tuple[int, ...]

    def of(self, values: tuple[int, ...]) -> int:
        if len(values) == 1:
            return values[0]
        return round(sum(v * n for v, n in zip(values, self.layers, strict=True)) / sum(self.layers))

    def time(self, values: tuple[PhaseTime, ...]) -> PhaseTime:
        if len(values) == 1:
            return values[0]
        total = sum(self.layers)
        w = [n / total for n in self.layers]
        return PhaseTime(*(sum(getattr(t, f) * x for t, x in zip(values, w, strict=True))
                           for f in ("forward_s", "backward_s", "overhead_s")))


def _stacks(b: _Blocks, params: _ParamSplit, acts: _ActSplit, times: _TimeSplit) -> tuple[StackBlock, ...]:
    """Each stack's block of an encoder-decoder model (empty for a single stack)."""
    if not b.encoder_decoder:
        return ()
    names = ("encoder", "decoder")
    # Megatron's T5 decoder layer adds cross-attention to the encoder layer's self-attention and MLP
    return tuple(
        StackBlock(name=names[i], layers=b.full_layers[i], params=params.block_params[i],
                   act_bytes=acts.block_act[i], act_replicated_bytes=acts.block_rep[i],
                   weight_cast_bytes=acts.block_cast[i], time=times.block[i], cast_time=times.cast_block[i],
                   megatron_time=times.megatron_block[i], tp_sublayers=2 + i)
        for i in range(2)
    )


@dataclass(frozen=True, slots=True)
class _ParamSplit:
    params_count: int
    block_params: tuple[int, ...]
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
    block_unquantized_params: int = 0
    outer_unquantized_params: int = 0


def _param_split(step: TracedStep, run: RunResult, b: _Blocks) -> _ParamSplit:
    """Parameters by module (per block, outside the blocks) from the traced run; bytes per parameter
    and the trainable/frozen split from the step's full-depth counts (one rule: the trace's own
    totals over its parameter count, so a 3-block run's embeddings do not stand for a third of
    the model)."""
    pmap = run.module_params
    traced_params = sum(pmap.values())
    block_params: tuple[int, ...]
    if b.encoder_decoder:
        # each stack's middle block; what only the first block holds (T5's relative position bias
        # table) stays outside the blocks, so the full-depth count is exact
        block_params = tuple(sum(n for m, n in pmap.items() if b.middle_of(m) == i) for i in range(len(b.containers)))
        outer_params = traced_params - sum(n * t for n, t in zip(block_params, b.traced_layers, strict=True))
    elif b.block_re is not None:
        block_params_traced = sum(n for m, n in pmap.items() if b.in_block(m))
        block_params = (block_params_traced // b.traced_layers[0],)
        outer_params = traced_params - block_params_traced
    else:
        block_params, outer_params = (traced_params,), 0
    from gpuplan.memory.weight_quant import engine_keeps_16bit

    kept = {m: n for m, n in pmap.items() if engine_keeps_16bit(m, pmap)}
    expert_params = block_modules = 0
    if b.block_re is not None:
        in_block = [(m, n) for m, n in pmap.items() if b.in_block(m) and n > 0]
        expert_params = sum(n for m, n in in_block if _EXPERTS.search(m)) // sum(b.traced_layers)
        block_modules = max(1, len(in_block) // sum(b.traced_layers))
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
        params_count=outer_params + sum(n * f for n, f in zip(block_params, b.full_layers, strict=True)),
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
        block_unquantized_params=sum(n for m, n in kept.items() if b.in_block(m)) // max(1, sum(b.traced_layers)),
        outer_unquantized_params=sum(n for m, n in kept.items() if not b.in_block(m)),
    )


@dataclass(frozen=True, slots=True)
class _ActSplit:
    block_act: tuple[int, ...]
    block_rep: tuple[int, ...]
    outer_act: int
    first_act: int
    block_cast: tuple[int, ...]
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
    stacks = max(len(b.middle_prefixes), 1)
    block_act, block_rep, block_cast = [0] * stacks, [0] * stacks, [0] * stacks
    outer_act = first_act = outer_cast = 0
    other = [0] * stacks  # encoder-decoder: activations of each stack's first and last traced blocks
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
        stack = b.middle_of(mod)
        if is_cast and (stack is not None or not b.in_block(mod)):
            if stack is not None:
                block_cast[stack] += size
            else:
                outer_cast += size
            continue
        if stack is not None:
            block_act[stack] += size
            middle = b.middle_prefixes[stack]
            if _REPLICATED.search(mod[len(middle) + 1 :] if mod != middle else ""):
                block_rep[stack] += size
        elif b.in_block(mod):
            if b.encoder_decoder:
                other[b.stack_of(mod)] += size
            continue  # blocks 0 and 2: the middle block stands for every block
        else:
            outer_act += size
            if b.first_side(mod):
                first_act += size
    for i, n in enumerate(other):
        # what a stack's first block holds beyond the middle one (T5: the relative position bias it computes
        # for every block, the extended masks) stays outside the blocks, beside that stack's embeddings
        extra = max(0, n - (b.traced_layers[i] - 1) * block_act[i])
        outer_act += extra
        first_act += extra if i == 0 else 0
    if not b.middle_prefix:  # no blocks to split: the whole step's activations are one "block"
        block_act, block_rep, outer_act, first_act = [outer_act], [outer_act], 0, 0
        block_cast, outer_cast = [outer_cast], 0
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
    return _ActSplit(tuple(block_act), tuple(block_rep), outer_act, first_act, tuple(block_cast), outer_cast,
                     transient, opt_temp, slack)


@dataclass(frozen=True, slots=True)
class _TimeSplit:
    block: tuple[PhaseTime, ...]
    attention: tuple[PhaseTime, ...]
    first: PhaseTime
    last: PhaseTime
    cast_block: tuple[PhaseTime, ...]
    cast_outer: PhaseTime
    megatron: EngineTime
    """Megatron's first and last (outside the blocks); its blocks: ``megatron_block``."""
    megatron_block: tuple[PhaseTime, ...]
    optimizer_s: float
    block_model_flops: tuple[int, ...]
    outer_model_flops: int
    block_hw_flops: tuple[int, ...]
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
    blks: list[list[OpRecord]]
    if b.middle_prefix:
        mids = [f"{c}:{MIDDLE}" for c in b.containers]
        cast_block = tuple(subset_time([op for op in casts if op.block == m])[0] for m in mids)
        cast_outer, _, _ = subset_time([op for op in casts if op.block is None])
        blks = [[op for op in train_ops if op.block == m] for m in mids]
        outer = [op for op in train_ops if op.block is None]
    else:
        cast_block = (subset_time(casts)[0],)
        cast_outer = PhaseTime(0.0, 0.0, 0.0)
        blks, outer = [train_ops], []
    block_split = [subset_time(blk) for blk in blks]
    attention_time = tuple(subset_time([op for op in blk if op.op_class == "attention"])[0] for blk in blks)
    first_ops = [op for op in outer if b.first_side(op.module)]
    last_ops = [op for op in outer if op not in first_ops]
    # encoder-decoder: the work a stack's traced blocks do beyond traced × the middle block's (T5's first
    # block computes the relative position bias every block adds) goes with that stack's outer ops
    extras = [_excess(subset_time([op for op in train_ops if (op.block or "").startswith(f"{c}:")]), n, split)
              for c, n, split in zip(b.containers, b.traced_layers, block_split, strict=True)
              ] if b.encoder_decoder else []
    first_time, first_mf, first_hf = _plus(subset_time(first_ops), extras[:1])
    last_time, last_mf, last_hf = _plus(subset_time(last_ops), extras[1:])
    # Megatron-LM's program: its fused softmax in place of HF's chain, at its GEMM rate
    # the 16-bit compute copy: mixed and half precision, and the scaled ones (fp8 / mxfp8 / nvfp4 cast bf16
    # weights and activations per GEMM: Workload.param_dtype is bf16 for them)
    cb_bytes = 2 if workload.precision in ("amp-bf16", "amp-fp16", "bf16", "fp16") or workload.scaled_training else 4
    meg_eff = megatron_efficiency(efficiency_for(gpu), megatron_gemm_scale)
    megatron_block = tuple(subset_time(megatron_ops(blk, cb_bytes), meg_eff)[0] for blk in blks)
    megatron_time = EngineTime(
        megatron_block[0],
        subset_time(megatron_ops(first_ops, cb_bytes), meg_eff)[0],
        subset_time(megatron_ops(last_ops, cb_bytes), meg_eff)[0],
    )
    opt_ops = [op for op in ops if op.phase in ("optimizer", "zero_grad")]
    opt_s = step_time(_as_step(opt_ops, run.params_count, run.param_bytes), gpu, workload).total_s if opt_ops else 0.0
    full = step_time(_as_step(list(ops[:1]), run.params_count, run.param_bytes), gpu, workload)
    return _TimeSplit(
        block=tuple(t for t, _, _ in block_split),
        attention=attention_time,
        first=first_time,
        last=last_time,
        cast_block=cast_block,
        cast_outer=cast_outer,
        megatron=megatron_time,
        megatron_block=megatron_block,
        optimizer_s=opt_s,
        block_model_flops=tuple(mf for _, mf, _ in block_split),
        outer_model_flops=first_mf + last_mf,
        block_hw_flops=tuple(hf for _, _, hf in block_split),
        outer_hw_flops=first_hf + last_hf,
        peak_tflops=full.peak_tflops,
        compute_dtype=full.compute_dtype,
        compute_bytes=cb_bytes,
        copy_s_per_byte=memory_bound_s(1.0, gpu, efficiency_for(gpu)),
    )


_Timed = tuple[PhaseTime, int, int]
"""(time, model FLOPs, hardware FLOPs) of a subset of the traced ops."""


def _excess(whole: _Timed, traced: int, middle: _Timed) -> _Timed:
    """What ``whole`` (every traced block of a stack) has beyond ``traced`` × its ``middle`` block (the cost
    model is per-op and additive, so a subset's time is its share)."""
    (w, wm, wh), (m, mm, mh) = whole, middle
    return (PhaseTime(max(0.0, w.forward_s - traced * m.forward_s), max(0.0, w.backward_s - traced * m.backward_s),
                      max(0.0, w.overhead_s - traced * m.overhead_s)),
            max(0, wm - traced * mm), max(0, wh - traced * mh))


def _plus(base: _Timed, extras: list[_Timed]) -> _Timed:
    t, mf, hf = base
    for e, emf, ehf in extras:
        t = PhaseTime(t.forward_s + e.forward_s, t.backward_s + e.backward_s, t.overhead_s + e.overhead_s)
        mf, hf = mf + emf, hf + ehf
    return t, mf, hf


def _assumptions(name: str, b: _Blocks, workload: Workload, params: _ParamSplit) -> tuple[str, ...]:
    traced = " + ".join(str(n) for n in b.traced_layers)
    full = " + ".join(str(n) for n in b.full_layers)
    out: tuple[str, ...] = (
        f"traced once: {name} with {traced} of {full} blocks at micro-batch "
        f"{workload.batch_size}; other micro-batches scale activations and kernel time linearly "
        "(launch overhead fixed)",
        "TP shards every block activation except the residual stream, norms and output dropouts "
        "(Megatron, Korthikanti et al. 2022); sequence parallelism shards those too",
    )
    if b.encoder_decoder:
        out += (
            "encoder-decoder: encoder and decoder blocks profiled apart (the decoder's with its cross-attention); "
            "pipeline stages run blocks of one stack, the encoder on the first stages (Megatron-LM's "
            "--encoder-pipeline-model-parallel-size), in proportion to the blocks; each decoder stage receives "
            "and keeps the encoder's output per micro-batch in flight; the decoder reads --seq-len tokens as "
            "estimate traces it",
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
