"""A traced step on a GPU: the tensors plus CUDA context, library workspaces and allocator slack,
and the fit rule. The one place these terms are added: estimate, simulate, fit, recommend, plan
and measure all call :func:`memory_on_gpu`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gpuplan.hardware import DEFAULT_COMPUTE_CAPABILITY
from gpuplan.units import format_bytes

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.memory.weight_quant import QuantizedWeights


class StepFigures(Protocol):
    """What the GPU terms read of a traced step (trace/records.TracedStep has it; memory sits below
    trace, so it names the shape rather than importing the type)."""

    @property
    def params_count(self) -> int: ...
    @property
    def param_bytes(self) -> int: ...
    @property
    def tensor_components(self) -> Mapping[str, int]: ...
    @property
    def rounded_peak_bytes(self) -> int: ...
    @property
    def reserved_peak_bytes(self) -> int: ...
    @property
    def min_reserved_bytes(self) -> int: ...
    @property
    def attention_backends(self) -> Mapping[str, int]: ...
    @property
    def notes(self) -> Sequence[str]: ...

COMPONENT_NAMES: tuple[str, ...] = (
    "parameters", "gradients", "optimizer_state", "activations", "temporaries", "kv_cache",
    "cuda_context", "workspaces", "allocator_overhead",
)


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """A traced step's memory on a GPU: the tensors plus context, workspaces and allocator slack."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    total_required_bytes: int
    min_required_bytes: int
    components: dict[str, int]
    fits: bool | None
    headroom_bytes: int | None
    notes: tuple[str, ...]
    quantized_weights: QuantizedWeights | None = None
    """The weight-only quantization counted in every figure above, if any."""


def memory_on_gpu(step: StepFigures, gpu: GPU | None, *, trains: bool, module_loading: str = "lazy",
                  cuda_context_bytes: int | None = None, weight_quant: str = "none") -> GpuMemory:
    """Add the GPU-specific terms to a traced step and decide whether it fits ``gpu``.

    The step fits when the least it needs fits: on a smaller device the caching allocator releases
    cached segments under pressure instead of failing (memory/allocator.py). ``cuda_context_bytes``
    is a measured context (a calibration) replacing the assumed one. ``weight_quant`` (inference
    only) stores the weights quantized (memory/weight_quant.py): the weights are live through the whole
    step, so every peak drops by exactly what the parameters component saves."""
    from gpuplan.memory.overheads import overheads_for

    cc = gpu.compute_capability if gpu is not None and gpu.compute_capability else DEFAULT_COMPUTE_CAPABILITY
    over = overheads_for(arch=gpu.arch if gpu else "Hopper", vendor=gpu.vendor if gpu else "NVIDIA",
                         compute_capability=cc, trains=trains, module_loading=module_loading,
                         measured_context_bytes=cuda_context_bytes)
    quantized = None
    saved = 0
    if weight_quant != "none":
        from gpuplan.memory.weight_quant import check_weight_quant, describe_layout, quantize_weights

        check_weight_quant(weight_quant, trains=trains)
        quantized = quantize_weights(step.params_count, step.param_bytes, weight_quant)
        saved = quantized.memory_saved_bytes
    peak_reserved = step.reserved_peak_bytes - saved + over.workspace_bytes
    total = peak_reserved + over.cuda_context_bytes
    components = {c: step.tensor_components.get(c, 0) for c in COMPONENT_NAMES[:6]}
    components["parameters"] -= saved
    components["cuda_context"] = over.cuda_context_bytes
    components["workspaces"] = over.workspace_bytes
    components["allocator_overhead"] = (step.reserved_peak_bytes - saved
                                        - sum(components[c] for c in COMPONENT_NAMES[:6]))
    min_required = min(step.min_reserved_bytes - saved + over.workspace_bytes + over.cuda_context_bytes, total)
    notes = [*over.notes, *step.notes]
    if quantized is not None:
        notes.append(f"weight-only {describe_layout(weight_quant)}: weights {format_bytes(quantized.weight_bytes)} "
                     f"instead of {format_bytes(quantized.traced_weight_bytes)} as traced, counted in every figure; "
                     "every parameter quantized (embeddings too), fused kernels read the packed weights")
    if step.attention_backends:
        notes.append("attention kernels: " + ", ".join(f"{k} ×{v}" for k, v in step.attention_backends.items()))
    fits = headroom = None
    if gpu is not None:
        headroom = gpu.usable_memory_bytes - min_required
        fits = headroom >= 0
        if fits and total > gpu.usable_memory_bytes:
            notes.append(f"on a larger GPU the allocator would reserve up to {total / 2**30:.2f} GiB in all; under "
                         f"memory pressure it releases cached blocks and the step needs {min_required / 2**30:.2f} GiB")
    return GpuMemory(step.rounded_peak_bytes - saved + over.workspace_bytes, peak_reserved, total, min_required,
                     components, fits, headroom, tuple(notes), quantized)
