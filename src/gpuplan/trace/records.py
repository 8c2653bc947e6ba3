"""What a trace records: one entry per dispatched op, and the allocation/free events of storages.

These records are the hinge of gpuplan (DESIGN.md): memory for any GPU, time on any GPU and
sharding across any layout are computed from them without tracing again. They are plain data —
no torch objects — so they can be kept, scaled and serialised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Phases of a step, in the order they run.
PHASES: tuple[str, ...] = ("setup", "forward", "loss", "backward", "optimizer", "zero_grad", "prefill", "decode",
                           "denoise", "vae_encode", "vae_decode")
"""(a diffusion pipeline adds ``encode:COMPONENT`` per text encoder before ``denoise``)"""

# Memory categories of the JSON contract that a trace can tell apart (the GPU-specific ones —
# cuda_context, workspaces, allocator_overhead — are added by gpuplan.memory).
CATEGORIES: tuple[str, ...] = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "kv_cache",
)

# How an op would run on a GPU; the cost model picks the rate from this and the dtype.
OP_CLASSES: tuple[str, ...] = ("matmul", "conv", "attention", "other")


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One aten op as it ran in the traced step."""

    name: str
    """aten overload, e.g. ``aten.mm.default``."""
    phase: str
    module: str
    """Innermost module path (``model.layers.1.mlp.up_proj``) or '' outside any module."""
    op_class: str
    dtype: str
    """dtype of the first floating input (the compute dtype), e.g. ``bfloat16``."""
    flops: int
    bytes_read: int
    bytes_written: int
    block: str | None = None
    """Repeated-block key (``model.layers:1``) the op ran in, or None."""
    count: int = 1
    """How many times the full model runs this op (blocks traced once and scaled)."""


@dataclass(frozen=True, slots=True)
class StepPoint:
    """Live tensor bytes around one op: the timeline the peak and the scaling work on."""

    phase: str
    block: str | None
    peak_bytes: int
    """Most bytes live while the op ran (before its inputs could be freed)."""
    live_after_bytes: int
    event_count: int
    """Number of memory events recorded when the op finished (to replay the state at this op)."""
    live_before_bytes: int = 0
    """Live bytes when the op started: after the frees of whatever the program dropped before it."""
    event_start: int = 0
    """Number of memory events recorded when the op started."""
    repeat: int = -1
    """Index of the decode step the op ran in (generate mode), else -1."""


@dataclass(slots=True)
class StorageInfo:
    """One storage seen by the trace (a tensor's memory; views share it)."""

    storage_id: int
    size_bytes: int
    phase: str
    module: str
    category: str = "temporaries"


@dataclass(slots=True)
class MemEvent:
    """An allocation (``size_bytes > 0``) or free (``size_bytes < 0``) of one storage, in order."""

    storage_id: int
    size_bytes: int


@dataclass(slots=True)
class RawTrace:
    """Everything one traced run recorded, before scaling to the full model."""

    ops: list[OpRecord] = field(default_factory=list)
    points: list[StepPoint] = field(default_factory=list)
    events: list[MemEvent] = field(default_factory=list)
    storages: dict[int, StorageInfo] = field(default_factory=dict)
    peak_bytes: int = 0
    peak_event_index: int = -1
    """Index into ``events`` of the allocation that reached the peak."""
    peak_phase: str = ""
    worst_case_ops: dict[str, int] = field(default_factory=dict)
    """Ops with a data-dependent output shape (``aten.nonzero``, boolean-mask indexing) traced at
    their worst case, every element selected: op name -> calls."""
    released_output_bytes: int = 0
    """Training: bytes freed when the step drops the model's output before backward (what a loop
    keeping ``out`` alive through backward would hold on to)."""
    host_peak_bytes: int = 0
    """Most host (pinned CPU) bytes live at once: activation offload's copies of checkpointed block inputs."""
    host_copy_bytes: int = 0
    """Bytes copied to the host during the step (the same come back before each block's recompute)."""


@dataclass(slots=True)
class RunResult:
    """One traced run (3 repeated blocks, 2, or the whole model), before scaling: plain data, so the
    trace cache (trace/cache.py) can keep it."""

    trace: RawTrace
    params_count: int
    param_bytes: int
    containers: dict[str, str] = field(default_factory=dict)
    """config key -> module path of the repeated blocks it counts."""
    block_counts: dict[str, int] = field(default_factory=dict)
    """config key -> blocks built in this run."""
    attention_backends: dict[str, int] = field(default_factory=dict)
    decode_steps_traced: int = 0
    decode_steps_full: int = 0
    accum_steps_traced: int = 0
    """Training: micro-batches traced (at most trace/accumulation.py's ACCUM_STEPS_TRACED) of
    ``accum_steps_full``."""
    accum_steps_full: int = 0
    accum_last_ops: tuple[int, int] = (0, 0)
    """[start, end) indices in ``trace.ops`` of the last traced micro-batch's forward, loss and backward."""
    module_params: dict[str, int] = field(default_factory=dict)
    """module path -> elements of the parameters it owns (a tied weight counted once, at its first
    owner): the planner's split of parameters per block and outside the blocks."""
    module_param_sizes: dict[str, frozenset[int]] = field(default_factory=dict)
    """module path -> element counts of its own parameters, a tied weight under every module using
    it: how the planner recognises autocast's 16-bit copy of a module's weight."""
    trainable_params: int | None = None
    """Elements of the parameters that train (``requires_grad``; PEFT freezes the base): what a
    sharded engine keeps fp32 master weights, gradients and optimizer state for. None: every
    parameter trains (a record made without the split)."""
    frozen_float_params: int = 0
    """Elements of frozen floating-point parameters (an engine may recast them to 16 bits)."""
    frozen_float_param_bytes: int = 0
    """Their stored bytes; the other frozen parameters (quantized packed weights) hold ``param_bytes``
    less these and the trainable parameters' bytes."""
    trainable_param_bytes: int = 0
    """Stored bytes of the trainable parameters (PEFT keeps adapters in fp32 over a 16-bit base)."""
    child_weights: dict[str, list[int]] = field(default_factory=dict)
    """Top-level child module -> [parameter and buffer bytes, largest single module's own bytes, bytes outside
    its repeated-block lists, largest repeated block's bytes]: what each diffusers offload mode keeps on the
    GPU for a pipeline's component (trace/pipeline_memory.py)."""


@dataclass(frozen=True, slots=True)
class TracedStep:
    """The scaled trace: what the cost model and the planner read (no torch objects)."""

    ops: tuple[OpRecord, ...]
    tensor_peak_bytes: int
    """Peak of live tensor storage bytes: the exact-accounting figure, before GPU-specific terms."""
    tensor_components: dict[str, int]
    peak_phase: str
    params_count: int
    param_bytes: int
    block_counts: dict[str, int]
    """config key -> repeated blocks in the full model (empty: traced whole)."""
    traced_blocks: dict[str, int]
    rounded_peak_bytes: int
    """Peak of allocations rounded to the allocator's 512-byte granularity."""
    reserved_peak_bytes: int
    """Peak reserved by the caching allocator model for the tensors (no workspaces), on a device
    with room to spare (cached blocks are never released)."""
    top_activation_modules: tuple[tuple[str, int], ...]
    attention_backends: dict[str, int]
    min_reserved_bytes: int = 0
    """Smallest capacity for the tensors with which the step runs: under pressure the allocator
    releases cached segments and retries, so this is below ``reserved_peak_bytes``."""
    gradient_bytes: int = 0
    """Every gradient storage of the step (steady state, all micro-batches accumulated)."""
    optimizer_state_bytes: int = 0
    trainable_params_count: int | None = None
    """Parameters that train at full depth (``requires_grad``: PEFT's adapters and modules to save), scaled
    from the traced blocks like ``params_count``; None where the trace has no split (weights-only steps)."""
    trainable_param_bytes: int = 0
    """Stored bytes of the trainable parameters at full depth (scaled like ``param_bytes``)."""
    frozen_float_params_count: int = 0
    """Frozen floating-point parameters at full depth (an engine may recast them to 16 bits); the
    other frozen parameters (quantized packed weights) hold ``param_bytes`` less these bytes and the
    trainable ones'. The planner's per-parameter figures are these full-depth totals over
    ``params_count`` (a 3-block run's ratio weighs the embeddings as if they were a third of the model)."""
    frozen_float_param_bytes: int = 0
    notes: tuple[str, ...] = ()
    phase_peaks: dict[str, int] = field(default_factory=dict)
    """Phase -> most live tensor bytes during it at full depth (a pipeline's ``encode:NAME``, ``denoise``,
    ``vae_decode``: where each component runs)."""
    child_param_bytes: dict[str, int] = field(default_factory=dict)
    """Top-level child module -> its parameter and buffer bytes at full depth (a pipeline's components)."""
    host_peak_bytes: int = 0
    """Host memory the step holds at most (``--offload activations``: the checkpointed block inputs), full depth."""
    host_copy_bytes: int = 0
    """Bytes the step copies to the host (and back) at full depth: activation offload's traffic each way."""
    run: RunResult | None = None
    """The traced run this record was made from (3 repeated blocks, or the whole model): what the
    planner splits per block and per module (parallel/profile.py). None for weights-only steps."""

    @property
    def model_state_bytes(self) -> int:
        """Parameters + gradients + optimizer state: what ZeRO's Table 1 counts."""
        return self.param_bytes + self.gradient_bytes + self.optimizer_state_bytes

    @property
    def flops(self) -> int:
        return sum(op.flops * op.count for op in self.ops)

    def flops_by_phase(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.ops:
            out[op.phase] = out.get(op.phase, 0) + op.flops * op.count
        return out
