"""The ladder a diffusion pipeline climbs to fit a GPU, for ``recommend`` and ``fit``.

Inference only (diffusers' offload is an inference feature; training has fit's own ladder): diffusers'
offload modes from the one given, cheapest in time first — ``none`` → ``model`` (each component moved to
the GPU while it runs: a few copies per generation) → ``group`` (block-level groups streamed, copies
overlapped with the denoiser) → ``sequential`` (every module copied at every call: the slowest) — as
checkpointing is a rung for training. ``recommend`` then tries the quantized weight formats serve names
(serve/pipeline.py: ``fp8`` diffusers layerwise casting, ``int4`` bitsandbytes NF4, on the
``--quantize-components``), each with the offload modes again; they change the images slightly, so
they come after every offload mode of the weights as given.

Memory of every rung is estimate's (estimate.estimate_from_step on one trace per weight format and kernel
class: offload modes share their trace, memory/pipeline_offload.py applies them), so no rung has
arithmetic of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.workload import PIPELINE_OFFLOADS

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

OFFLOAD_LADDER: tuple[str, ...] = ("none", "model", "group", "sequential")
"""diffusers' offload modes, cheapest in time first (module docstring)."""
QUANTIZATION_RUNGS: tuple[str, ...] = ("fp8", "int4")
"""serve's --quantization values recommend tries after the offload modes (serve/pipeline.py)."""
OFFLOAD_WORDS: dict[str, str] = {
    "model": "--offload model: each component on the GPU only while it runs (enable_model_cpu_offload)",
    "group": "--offload group: block-level groups streamed with CUDA streams (enable_group_offload)",
    "sequential": "--offload sequential: every module copied to the GPU when it runs "
    "(enable_sequential_cpu_offload; the slowest)",
}
assert set(OFFLOAD_LADDER) == set(PIPELINE_OFFLOADS)


@dataclass(frozen=True, slots=True)
class Rung:
    """One configuration tried: the workload and the serve-style quantization name it carries."""

    workload: Workload
    quantization: str = "none"

    @property
    def label(self) -> str:
        parts = [f"--offload {self.workload.offload}"]
        if self.quantization != "none":
            parts.append(f"--quantization {self.quantization}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"offload": self.workload.offload, "quantization": self.quantization}


def offload_rungs(base: Workload) -> list[tuple[str, str, dict[str, Any]]]:
    """fit's ladder rungs for a pipeline: (name, description, workload changes), the offload modes after
    the given one (inference only)."""
    if base.trains:
        return []
    start = OFFLOAD_LADDER.index(base.offload)
    return [(f"offload-{mode}", OFFLOAD_WORDS[mode], {"offload": mode}) for mode in OFFLOAD_LADDER[start + 1 :]]


def ladder(base: Workload, *, quantize: bool = True) -> list[Rung]:
    """Every configuration recommend tries, in order (module docstring)."""
    if base.trains:
        return [Rung(base)]
    from gpuplan.serve.pipeline import pipeline_quantization

    modes = OFFLOAD_LADDER[OFFLOAD_LADDER.index(base.offload) :]
    rungs = [Rung(base.with_(offload=m)) for m in modes]
    if quantize and base.load_in == "none" and base.component_quant == "none":
        for q in QUANTIZATION_RUNGS:
            quantized = base.with_(**pipeline_quantization(q))
            rungs += [Rung(quantized.with_(offload=m), q) for m in modes]
    return rungs


class Traces:
    """One trace per (kernel class, weight format, precision) of a pipeline, traced when first asked for."""

    def __init__(self, source: ModelSource) -> None:
        self.source = source
        self.steps: dict[tuple[tuple[int, int], str, str], TracedStep | Exception] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def step(self, rung: Rung, cls: tuple[int, int]) -> TracedStep:
        from gpuplan.errors import GpuplanError
        from gpuplan.estimate import traced_workload
        from gpuplan.trace.step import trace_source

        key = (cls, rung.quantization, rung.workload.precision)
        if key not in self.steps:
            try:
                self.steps[key] = trace_source(
                    self.source, traced_workload(self.source, rung.workload), cls, fake=True, cuda=True
                )
            except GpuplanError as exc:  # a weight format this environment cannot trace: that rung is out
                self.steps[key] = exc
        found = self.steps[key]
        if isinstance(found, Exception):
            raise found
        return found


def first_fit(
    source: ModelSource, traces: Traces, gpu: GPU, rungs: list[Rung], cls: tuple[int, int]
) -> tuple[Rung | None, Estimate | None, list[str]]:
    """The first rung that fits ``gpu`` (timed), else None; the last rung's estimate (memory only) and why
    rungs were skipped."""
    from gpuplan.errors import GpuplanError
    from gpuplan.estimate import estimate_from_step
    from gpuplan.hardware.support import refusal

    shape = source.check_workload(rungs[0].workload)  # type: ignore[attr-defined]
    pipeline_shape = {"steps": shape.steps, "height": shape.height, "width": shape.width, "frames": shape.frames}
    last: Estimate | None = None
    skipped: list[str] = []
    for rung in rungs:
        found = refusal(rung.workload, gpu)
        if found is not None:
            skipped.append(f"{rung.label}: {found.reason}")
            continue
        try:
            step = traces.step(rung, cls)
        except GpuplanError as exc:
            skipped.append(f"{rung.label}: {exc}")
            continue
        est = estimate_from_step(source, step, rung.workload, gpu, pipeline_shape=pipeline_shape, timed=False)
        last = est
        if est.fits:
            return rung, estimate_from_step(source, step, rung.workload, gpu, pipeline_shape=pipeline_shape), skipped
    return None, last, skipped


__all__ = ["OFFLOAD_LADDER", "QUANTIZATION_RUNGS", "Rung", "Traces", "first_fit", "ladder", "offload_rungs"]
