"""``measure()``: run the workload for real in this process and compare with the estimate.

Order matters on CUDA: the device's used memory is read through NVML before torch initialises
CUDA (the context is measured against it), the estimate is asked first (a workload that would not
fit is refused before anything is allocated), then warm-up steps (optimizer state, cuDNN/cuBLAS
handles and autotuning happen there), the allocator peaks are reset, and the timed steps run.
A last step runs under the storage recorder for the tracked bytes; it is not timed because the
recorder slows every op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from gpuplan.errors import ConfigError, GpuplanError, TraceError
from gpuplan.measure import cuda as cudamod
from gpuplan.measure.environment import Environment, collect, host_available_bytes
from gpuplan.measure.program import Program, build_program
from gpuplan.measure.results import Comparison, Measured, Measurement, components_at_peak, median
from gpuplan.units import format_bytes
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.models.sources import ModelSource
    from gpuplan.trace.step import TracedStep

# Share of MemAvailable a CPU run may plan to use: the rest is the interpreter, libraries and
# the allocator's own overhead, none of which the tracked bytes count.
HOST_MEMORY_SHARE = 0.8


class WouldNotFitError(GpuplanError):
    """The estimator says the workload does not fit the device here (an answer, not a usage error)."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class Options:
    steps: int = 5
    warmup: int = 2
    force: bool = False
    record: bool = True
    """Run one extra recorded step for the tracked bytes (slower, exact accounting)."""

    def check(self, workload: Workload) -> None:
        if not 1 <= self.steps <= 10_000:
            raise ConfigError(f"--steps {self.steps} is out of range: allowed 1..10000")
        low = 1 if workload.trains else 0
        if not low <= self.warmup <= 1000:
            raise ConfigError(f"--warmup {self.warmup} is out of range: allowed {low}..1000"
                              + (" (training needs one warm-up step to create the optimizer state)"
                                 if workload.trains else ""))


def present_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def estimate_for(source: ModelSource, workload: Workload, env: Environment
                 ) -> tuple[Estimate, TracedStep | None]:
    """The estimate for this device, and on a CPU the host-semantics trace the tracked bytes match."""
    from gpuplan.estimate import estimate
    from gpuplan.trace.step import trace_step

    est = estimate(source, workload=workload, gpu=env.gpu_id)
    host = trace_step(source, workload, cuda=False) if env.device == "cpu" else None
    return est, host


def check_fits(est: Estimate, host: TracedStep | None, env: Environment, free_bytes: int | None,
               nproc: int = 1) -> None:
    """Raise WouldNotFitError when the estimate says the run cannot fit here."""
    if env.device == "cpu":
        need = (host.tensor_peak_bytes if host is not None else est.tensor_peak_bytes) * nproc
        room = int(host_available_bytes() * HOST_MEMORY_SHARE)
        if need > room:
            raise WouldNotFitError(
                f"the step needs about {format_bytes(need)} of tensors ({nproc} process(es)) but this "
                f"host has {format_bytes(room)} to spare ({HOST_MEMORY_SHARE:.0%} of available RAM); use a "
                "smaller workload or --force")
        return
    where = env.gpu_id or env.device_name
    if est.fits is False:
        raise WouldNotFitError(
            f"estimated {format_bytes(est.total_required_bytes)} does not fit {where} "
            f"({format_bytes(est.gpu.usable_memory_bytes) if est.gpu else '?'} usable); use a smaller "
            "workload or --force to run anyway")
    # free_bytes is read after this process created its context: the rest must fit in it
    rest = est.total_required_bytes - est.components.get("cuda_context", 0)
    if free_bytes is not None and rest > free_bytes:
        raise WouldNotFitError(
            f"estimated {format_bytes(rest)} beyond the context exceeds the {format_bytes(free_bytes)} "
            f"free on {where} now (other processes hold the rest); free the GPU or use --force")


def time_steps(program: Program, options: Options) -> tuple[float, ...]:
    cuda = program.device.type == "cuda"
    for _ in range(options.warmup):
        program.run_step()
    if cuda:
        torch.cuda.synchronize(program.device)
        torch.cuda.reset_peak_memory_stats(program.device)
    times: list[float] = []
    for _ in range(options.steps):
        if cuda:
            with cudamod.EventTimer() as timer:
                program.run_step()
            times.append(timer.seconds())
        else:
            start = time.perf_counter()
            program.run_step()
            times.append(time.perf_counter() - start)
    return tuple(times)


def run_program(program: Program, options: Options, *, used_before_bytes: int | None = None, rank: int = 0,
                world_size: int = 1, layout: str | None = None) -> Measured:
    """Warm-up, timed steps, device counters, then one recorded step."""
    times = time_steps(program, options)
    extra: dict[str, Any] = {}
    if program.device.type == "cuda":
        index = program.device.index if program.device.index is not None else torch.cuda.current_device()
        reserved = int(torch.cuda.max_memory_reserved(index))
        context = cudamod.read_context(index, used_before_bytes)
        ctx = context.context_bytes
        extra = dict(peak_allocated_bytes=int(torch.cuda.max_memory_allocated(index)),
                     peak_reserved_bytes=reserved, cuda_context_bytes=ctx, context_method=context.method,
                     total_bytes=reserved + ctx if ctx is not None else None,
                     allocator_stats=cudamod.allocator_stats(index))
    tracked: dict[str, Any] = {}
    if options.record:
        trace = program.record_step()
        tracked = dict(tracked_peak_bytes=trace.peak_bytes, tracked_peak_phase=trace.peak_phase,
                       tracked_components=components_at_peak(trace))
    return Measured(device=program.device.type, steps=options.steps, warmup=options.warmup,
                    step_time_s=median(times), step_times_s=times, rank=rank, world_size=world_size,
                    layout=layout, **tracked, **extra)


def compare(est: Estimate | None, host: TracedStep | None, m: Measured) -> tuple[Comparison, ...]:
    """Side-by-side quantities: on CPU the tracked bytes; on CUDA the allocator, context and time.
    ``est`` is None when the estimator failed and the run was forced: measured values only."""
    if m.device == "cpu":
        return (
            Comparison("tracked peak (host semantics)", "bytes",
                       host.tensor_peak_bytes if host is not None else None, m.tracked_peak_bytes),
            Comparison("step time", "s", None, m.step_time_s),
        )
    def e(attr: str) -> Any:
        return getattr(est, attr) if est is not None else None

    return (
        Comparison("tracked tensor peak", "bytes", e("tensor_peak_bytes"), m.tracked_peak_bytes),
        Comparison("peak allocated", "bytes", e("peak_allocated_bytes"), m.peak_allocated_bytes),
        Comparison("peak reserved", "bytes", e("peak_reserved_bytes"), m.peak_reserved_bytes),
        Comparison("CUDA context", "bytes", est.components.get("cuda_context") if est else None,
                   m.cuda_context_bytes),
        Comparison("total (with context)", "bytes", e("total_required_bytes"), m.total_bytes),
        Comparison("step time", "s", e("step_time_s"), m.step_time_s),
    )


def estimated_dict(est: Estimate, host: TracedStep | None) -> dict[str, Any]:
    out = est.to_dict()
    if host is not None:
        out["host"] = {"semantics": "cpu", "tensor_peak_bytes": host.tensor_peak_bytes,
                       "components": dict(host.tensor_components), "peak_phase": host.peak_phase}
    return out


def measure(model: str | ModelSource, *, workload: Workload | None = None, options: Options | None = None,
            **workload_fields: Any) -> Measurement:
    """Run ``model`` for real on this machine's device (CUDA if present, else CPU) and compare.

    Example::

        m = gpuplan.measure.measure("gpt2", mode="train", batch_size=4, seq_len=256)
        m.measured.step_time_s, m.comparisons
    """
    from gpuplan.estimate import make_workload
    from gpuplan.models.sources import ModelSource, resolve_model

    workload = workload if workload is not None else make_workload(**workload_fields)
    options = options or Options()
    options.check(workload)
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    from gpuplan.models.base import refuse_pipeline

    refuse_pipeline(source, "measure")
    cuda = torch.cuda.is_available()
    used_before = cudamod.device_used_bytes_before_init() if cuda else None
    env = collect("cuda" if cuda else "cpu")
    device = present_device()
    notes: list[str] = []
    est: Estimate | None
    try:
        est, host = estimate_for(source, workload, env)
    except TraceError as exc:
        if not options.force:
            # the advice first: a long trace error is cut to one line at its end
            raise TraceError(f"the estimate failed, so the fit check cannot run (--force measures without an "
                             f"estimate): {exc}") from exc
        est, host = None, None
        notes.append(f"no estimate: {exc}")
    free = int(torch.cuda.mem_get_info(device)[0]) if cuda else None
    if options.force:
        notes.append("--force: the fit check was skipped")
    elif est is not None:
        check_fits(est, host, env, free)
    if cuda and env.gpu_id is None:
        notes.append(f"{env.device_name} is not in the GPU catalog: estimated for an sm_90 GPU without a "
                     "memory limit")
    try:
        program = build_program(source, workload, device, compute_capability=env.compute_capability)
        measured = run_program(program, options, used_before_bytes=used_before)
    except torch.OutOfMemoryError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        estimated = f"estimated total {format_bytes(est.total_required_bytes)}" if est else "no estimate"
        raise WouldNotFitError(f"the run ran out of device memory ({estimated}): {first}") from exc
    if env.device == "cpu":
        notes.append("CPU: memory is the storage-tracked peak of live tensors (no caching allocator, no "
                     "context); the estimate compared is the host-semantics trace")
    return Measurement(model=source.name, workload=workload, environment=env, ranks=(measured,),
                       estimated=estimated_dict(est, host) if est is not None else {"error": notes[0]},
                       comparisons=compare(est, host, measured),
                       notes=tuple(notes))
