"""Multi-process measurement: validate, estimate per rank, launch torchrun, gather the ranks.

torchrun (``python -m torch.distributed.run --standalone``) starts one worker per process with
RANK / LOCAL_RANK / WORLD_SIZE set and a free rendezvous port; workers use NCCL on GPUs and gloo
on the CPU. The process count is capped by what is present: the visible GPUs on a CUDA machine,
``os.cpu_count()`` on a CPU-only one (more gloo processes than cores would only time-slice, and
the step times would measure the scheduler).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.measure.environment import Environment
from gpuplan.measure.executor import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    Executor,
    LaunchError,
    LocalExecutor,
    RankJob,
    RankResults,
)
from gpuplan.measure.layouts import LAYOUTS, check_layout
from gpuplan.measure.local import Options
from gpuplan.measure.results import Measured, Measurement
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.memory.on_gpu import GpuMemory
    from gpuplan.models.sources import ModelSource


MAX_REMOTE_RANKS = MAX_NODES * MAX_GPUS_PER_NODE
"""A cluster job's ranks: the bounds SlurmSettings checks, multiplied."""


def max_processes() -> tuple[int, str]:
    """How many processes this machine can run a layout on, and what that counts."""
    if torch.cuda.is_available():
        return torch.cuda.device_count(), "GPUs visible"
    return os.cpu_count() or 1, "CPU cores (gloo, one process per core)"


def check_nproc(nproc: int, layout: str | None, workload: Workload, *, here: bool = True, flag: str = "--nproc"
                ) -> str:
    """``layout`` on ``nproc`` ranks; ``here``: the ranks run on this host, so its GPUs or cores cap them.
    ``flag``: the option that gave ``nproc`` (sweep's is ``--gpus``)."""
    if layout is None:
        raise ConfigError(f"--nproc {nproc} needs --layout (allowed: {', '.join(LAYOUTS)})")
    check_layout(layout, workload)
    limit, what = max_processes() if here else (MAX_REMOTE_RANKS, "ranks (a cluster job)")
    if nproc < 2:
        raise ConfigError(f"{flag} {nproc} is out of range for --layout {layout}: "
                          f"allowed 2..{limit} ({what})")
    if nproc > limit:
        raise ConfigError(f"{flag} {nproc} is more than the {limit} {what} here; allowed 2..{limit}")
    return layout


def run_ranks(model: str, workload: Workload, layout: str, nproc: int, options: Options,
              timeout_s: float | None = None, executor: Executor | None = None
              ) -> tuple[list[Measured], Environment]:
    """Run the workers through ``executor`` (torchrun here by default) and return each rank's
    measurement and rank 0's environment."""
    job = RankJob(model=model, workload=workload, layout=layout, nproc=nproc, steps=options.steps,
                  warmup=options.warmup, record=options.record)
    (outcome,) = (executor or LocalExecutor()).run([job], timeout_s)
    if isinstance(outcome, LaunchError):
        raise outcome
    return ranks_of(outcome)


def ranks_of(results: RankResults) -> tuple[list[Measured], Environment]:
    """The workers' result dicts as measurements, and rank 0's environment."""
    ranks = [Measured.from_dict(r["measured"]) for r in results]
    e = dict(results[0]["environment"])
    e["compute_capability"] = tuple(e["compute_capability"]) if e.get("compute_capability") else None
    return ranks, Environment(**e)


def _check_rank_fit(est: Any, rank_est: Any, nproc: int, here: Environment | None) -> None:
    """Refuse a run whose per-rank estimate cannot fit: all ranks in the host's RAM on a CPU, one
    rank plus context and workspaces in the GPU on CUDA."""
    from gpuplan.measure.environment import host_available_bytes
    from gpuplan.measure.local import HOST_MEMORY_SHARE, WouldNotFitError
    from gpuplan.units import format_bytes

    peaks = list(rank_est.tensor_peak_bytes) or [est.tensor_peak_bytes] * nproc
    if here is not None:
        room = int(host_available_bytes() * HOST_MEMORY_SHARE)
        if sum(peaks) > room:
            raise WouldNotFitError(f"{nproc} ranks need about {format_bytes(sum(peaks))} of tensors but this "
                                   f"host has {format_bytes(room)} to spare; use a smaller workload or "
                                   "--force")
        return
    if est.gpu is None:
        return
    mem = rank_memory_on_gpu(est, max(peaks))
    if mem.fits is False:
        raise WouldNotFitError(f"one rank needs about {format_bytes(mem.min_required_bytes)} but {est.gpu.id} has "
                               f"{format_bytes(est.gpu.usable_memory_bytes)} usable; use more processes, a "
                               "smaller workload, or --force")


def rank_memory_on_gpu(est: Estimate, rank_tensor_peak_bytes: int) -> GpuMemory:
    """One rank on the estimate's GPU, through the one place GPU terms and the fit rule live
    (``memory_on_gpu``): the single-process step with its tensor peak moved to the rank's, the
    allocator's rounding and slack carried over as traced, the estimate's own context."""
    from dataclasses import replace

    from gpuplan.memory.on_gpu import memory_on_gpu

    step = est.step
    shift = rank_tensor_peak_bytes - step.tensor_peak_bytes
    rank_step = replace(step, tensor_peak_bytes=rank_tensor_peak_bytes,
                        rounded_peak_bytes=step.rounded_peak_bytes + shift,
                        reserved_peak_bytes=step.reserved_peak_bytes + shift,
                        min_reserved_bytes=step.min_reserved_bytes + shift)
    return memory_on_gpu(rank_step, est.gpu, trains=est.workload.trains,
                         cuda_context_bytes=est.components.get("cuda_context"))


@dataclass(frozen=True, slots=True)
class Run:
    """One measurement of a batch: the workload on ``nproc`` ranks with the measured ``layout``."""

    workload: Workload
    layout: str
    nproc: int


@dataclass(slots=True)
class _Expected:
    """What a run is compared with: the single-process estimate, the per-rank accounting, the planner."""

    est: Any
    rank_est: Any
    planner: dict[str, Any] | None


def measure_distributed(model: str | ModelSource, *, workload: Workload, options: Options, nproc: int,
                        layout: str | None, timeout_s: float | None = None,
                        executor: Executor | None = None) -> Measurement:
    """Run ``workload`` on ``nproc`` processes with ``layout`` and compare each rank with the
    per-rank estimate (gpuplan.measure.per_rank). ``executor``: where the ranks run (torchrun here by
    default; gpuplan.measure.executor)."""
    options.check(workload)
    check_nproc(nproc, layout, workload, here=executor is None or not executor.remote)
    (outcome,) = measure_runs(model, [Run(workload, layout or "", nproc)], options=options, timeout_s=timeout_s,
                              executor=executor, keep_going=False)
    if isinstance(outcome, GpuplanError):
        raise outcome
    return outcome


def measure_runs(model: str | ModelSource, runs: Sequence[Run], *, options: Options,
                 timeout_s: float | None = None, executor: Executor | None = None, keep_going: bool = True
                 ) -> list[Measurement | GpuplanError]:
    """Measure several runs of one model through one executor (a Slurm job array for ``gpuplan sweep``).
    Runs are validated by the caller (:func:`check_nproc`). On this host the fit check runs before
    anything starts; on a remote executor the estimate waits for rank 0's environment (its GPU).
    ``keep_going``: a run that would not fit or fails comes back as its error instead of raising."""
    from gpuplan.models.base import refuse_pipeline
    from gpuplan.models.sources import ModelSource, resolve_model

    executor = executor or LocalExecutor()
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    refuse_pipeline(source, "measure")
    spec = model if isinstance(model, str) else source.name
    here, gpu_id = (None, None) if executor.remote else _here()
    expected: dict[int, _Expected] = {}
    refused: dict[int, GpuplanError] = {}
    if not executor.remote:
        for i, r in enumerate(runs):
            expected[i] = _expect(source, r, gpu_id, cuda=here is None)
            if not options.force:
                try:
                    _check_rank_fit(expected[i].est, expected[i].rank_est, r.nproc, here)
                except GpuplanError as exc:
                    if not keep_going:
                        raise
                    refused[i] = exc
    todo = [i for i in range(len(runs)) if i not in refused]
    jobs = [RankJob(model=spec, workload=runs[i].workload, layout=runs[i].layout, nproc=runs[i].nproc,
                    steps=options.steps, warmup=options.warmup, record=options.record) for i in todo]
    outcomes: dict[int, Measurement | GpuplanError] = dict(refused)
    for i, outcome in zip(todo, executor.run(jobs, timeout_s), strict=True):
        if isinstance(outcome, LaunchError):
            if not keep_going:
                raise outcome
            outcomes[i] = outcome
            continue
        ranks, env = ranks_of(outcome)
        if i not in expected:  # remote: the estimate for the GPU the ranks ran on
            expected[i] = _expect(source, runs[i], env.gpu_id, cuda=env.device == "cuda")
        outcomes[i] = _measurement(source, runs[i], ranks, env, expected[i], options,
                                   cpu_here=here is not None or env.device == "cpu")
    return [outcomes[i] for i in range(len(runs))]


def _here() -> tuple[Environment | None, str | None]:
    """This host: its CPU environment (no CUDA context in the launcher), or its GPU's catalog id."""
    if not torch.cuda.is_available():
        from gpuplan.measure.environment import collect

        return collect("cpu"), None
    from gpuplan.measure.cuda import nvml_device_name
    from gpuplan.measure.environment import _catalog_id

    name_here = nvml_device_name()
    return None, _catalog_id(name_here) if name_here else None


def _expect(source: ModelSource, run: Run, gpu_id: str | None, *, cuda: bool) -> _Expected:
    from gpuplan.estimate import estimate
    from gpuplan.measure.per_rank import per_rank_estimate, planner_per_rank

    est = estimate(source, workload=run.workload, gpu=gpu_id)
    rank_est = per_rank_estimate(source, run.workload, run.layout, run.nproc, cuda=cuda)
    return _Expected(est, rank_est, planner_per_rank(source, run.workload, run.layout, run.nproc, gpu_id))


def _measurement(source: ModelSource, run: Run, ranks: list[Measured], env: Environment, expected: _Expected,
                 options: Options, *, cpu_here: bool) -> Measurement:
    from gpuplan.measure.per_rank import compare_ranks

    name, planner = run.layout, expected.planner
    estimated = {**expected.est.to_dict(), "per_rank": expected.rank_est.to_dict(), "planner": planner}
    notes: list[str] = []
    if options.force:
        notes.append("--force: the fit check was skipped")
    notes.extend(expected.rank_est.notes)
    if name in ("ddp", "zero1"):
        from gpuplan.measure.layouts import GRADIENT_AS_BUCKET_VIEW

        notes.append(f"DDP ran with gradient_as_bucket_view={GRADIENT_AS_BUCKET_VIEW}, as the planner plans "
                     "and plan --emit writes it (gradients are views into DDP's buckets)")
    if planner is not None and "per_rank_bytes" in planner and cpu_here:
        notes.append(f"planner rows: CUDA-semantics profile on {planner['gpu']} (a stand-in on this CPU)")
    return Measurement(model=source.name, workload=run.workload, environment=env, ranks=tuple(ranks),
                       estimated=estimated, comparisons=compare_ranks(expected.rank_est, ranks, planner),
                       notes=tuple(notes), layout=name)
