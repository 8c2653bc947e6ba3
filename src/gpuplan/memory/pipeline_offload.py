"""Where a diffusion pipeline's weights live under diffusers' offload modes: the GPU peak, host RAM and the
weight traffic of one generation.

The trace holds every component on the GPU (``--offload none``) and records the most live bytes of each
phase (``encode:NAME`` per text encoder, ``denoise``, ``vae_decode``; trace/step.py ``phase_peaks``). What
runs in a phase is one component, so under offload a phase's peak is its non-weight bytes (activations,
embeddings, latents: they stay on the GPU) plus the weights that mode keeps there while that component runs:

* ``model`` — ``enable_model_cpu_offload`` (accelerate ``cpu_offload_with_hook``, chained): the previous
  component is moved to the CPU before the next one is moved to the GPU, so the running component's weights
  alone; the CPU holds the others;
* ``sequential`` — ``enable_sequential_cpu_offload`` (accelerate ``cpu_offload``: a hook on every module with
  weights of its own): one module's own weights at a time; the CPU keeps every weight (its ``weights_map``);
* ``group`` — ``enable_group_offload(offload_type="block_level", num_blocks_per_group=1, use_stream=True)``:
  the component's top-level ``ModuleList`` entries are groups of one block, everything else of the component
  one group resident while it runs; with streams the next block is prefetched, so two blocks; the CPU keeps a
  pinned copy of every weight. A component with no top-level block list (a CLIP or T5 encoder: their layers
  sit inside ``text_model`` / ``encoder``; a VAE) is one group: the whole component.

Weight traffic per generation: ``model`` moves each component once; ``sequential`` and ``group`` move the
denoiser's weights at every denoiser call (steps × passes) and the others once; ``group`` overlaps its copies
with compute (streams), ``model`` and ``sequential`` do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuplan.memory.offload import host_link_time_s

PREFETCHED_BLOCKS = 2
"""Blocks of the denoiser resident under group offloading with streams: the running one and the next."""
TRAIN_PHASES = ("forward", "loss", "backward", "optimizer", "zero_grad")


@dataclass(frozen=True, slots=True)
class ComponentPlacement:
    name: str
    weight_bytes: int
    gpu_bytes: int
    """Its weights on the GPU while it runs."""
    where: str
    """gpu | cpu-offloaded (model) | streamed by module (sequential) | streamed by block (group)."""
    phase_peak_bytes: int | None
    """Most live tensor bytes on the GPU while it runs (None: it does not run in this step)."""


@dataclass(frozen=True, slots=True)
class PipelinePlacement:
    offload: str
    tensor_peak_bytes: int
    """Live tensor bytes on the GPU at the peak under this offload mode."""
    peak_phase: str
    weight_bytes_at_peak: int
    host_memory_bytes: int
    """Weights held in host RAM at most (pinned or pageable), besides the process itself."""
    transfer_bytes: int
    """Weight bytes copied host → GPU in one generation."""
    overlapped: bool
    components: tuple[ComponentPlacement, ...]


def component_of(phase: str, denoiser: str) -> str | None:
    """The component a phase runs (None: nothing runs)."""
    if phase.startswith("encode:"):
        return phase.removeprefix("encode:")
    if phase in ("vae_decode", "vae_encode"):
        return "vae"
    if phase == "denoise" or phase in TRAIN_PHASES:
        return denoiser
    return None


def _resident(offload: str, name: str, weights: Mapping[str, list[int]], full_bytes: Mapping[str, int]) -> int:
    total = full_bytes.get(name, 0)
    if offload in ("none", "model"):
        return total
    info = weights.get(name, [total, total, total, 0])
    if offload == "sequential":
        return info[1]
    unmatched, block = info[2], info[3]
    if block == 0:
        return total
    return min(total, unmatched + PREFETCHED_BLOCKS * block)


def place(*, offload: str, denoiser: str, phase_peaks: Mapping[str, int], component_bytes: Mapping[str, int],
          child_weights: Mapping[str, list[int]], denoiser_calls: int) -> PipelinePlacement:
    """The pipeline's GPU peak and host memory under ``offload`` (see the module docstring).

    ``component_bytes``: each component's weights at full depth; ``child_weights``: the traced run's per-component
    [total, largest module, outside block lists, largest block] (block and module sizes do not change with depth).
    """
    all_weights = sum(component_bytes.values())
    best_bytes, best_phase, best_weights = 0, "", 0
    peaks: dict[str, int] = {}
    for phase, live in phase_peaks.items():
        comp = component_of(phase, denoiser)
        if comp is None:
            continue
        if offload == "none":
            resident = all_weights
        else:
            resident = _resident(offload, comp, child_weights, component_bytes)
        on_gpu = live - all_weights + resident
        peaks[comp] = max(peaks.get(comp, 0), on_gpu)
        if on_gpu > best_bytes:
            best_bytes, best_phase, best_weights = on_gpu, phase, resident
    where = {"none": "gpu", "model": "cpu-offloaded", "sequential": "streamed by module",
             "group": "streamed by block"}[offload]
    components = tuple(
        ComponentPlacement(name, size, size if offload == "none" else _resident(offload, name, child_weights,
                                                                                 component_bytes),
                           where, peaks.get(name))
        for name, size in component_bytes.items())
    if offload == "none":
        host = 0
    elif offload == "model":
        host = max((all_weights - c.gpu_bytes for c in components if c.phase_peak_bytes is not None), default=0)
    else:
        host = all_weights
    den = component_bytes.get(denoiser, 0)
    if offload == "none":
        transfer = 0
    elif offload == "model":
        transfer = all_weights
    else:
        transfer = all_weights - den + den * denoiser_calls
    return PipelinePlacement(offload, best_bytes, best_phase, best_weights, host, transfer, offload == "group",
                             components)


def transfer_time_s(transfer_bytes: int, host_link_gb_per_s: float | None) -> float:
    """Seconds the host link takes for ``transfer_bytes`` of weights (memory/offload.py's link model)."""
    return host_link_time_s(transfer_bytes, host_link_gb_per_s)


__all__ = ["ComponentPlacement", "PipelinePlacement", "component_of", "place", "transfer_time_s"]
