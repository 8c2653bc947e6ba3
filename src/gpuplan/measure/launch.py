"""Multi-process measurement: validate, estimate per rank, launch torchrun, gather the ranks.

torchrun (``python -m torch.distributed.run --standalone``) starts one worker per process with
RANK / LOCAL_RANK / WORLD_SIZE set and a free rendezvous port; workers use NCCL on GPUs and gloo
on the CPU. The process count is capped by what is present: the visible GPUs on a CUDA machine,
``os.cpu_count()`` on a CPU-only one (more gloo processes than cores would only time-slice, and
the step times would measure the scheduler).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.measure.environment import Environment
from gpuplan.measure.layouts import LAYOUTS, check_layout
from gpuplan.measure.local import Options
from gpuplan.measure.results import Measured, Measurement
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.memory.on_gpu import GpuMemory
    from gpuplan.models.sources import ModelSource


class LaunchError(GpuplanError):
    """A rank failed; the message is that rank's one-line error."""

    exit_code = 1


def max_processes() -> tuple[int, str]:
    """How many processes this machine can run a layout on, and what that counts."""
    if torch.cuda.is_available():
        return torch.cuda.device_count(), "GPUs visible"
    return os.cpu_count() or 1, "CPU cores (gloo, one process per core)"


def check_nproc(nproc: int, layout: str | None, workload: Workload) -> str:
    if layout is None:
        raise ConfigError(f"--nproc {nproc} needs --layout (allowed: {', '.join(LAYOUTS)})")
    check_layout(layout, workload)
    limit, what = max_processes()
    if nproc < 2:
        raise ConfigError(f"--nproc {nproc} is out of range for --layout {layout}: "
                          f"allowed 2..{limit} ({what})")
    if nproc > limit:
        raise ConfigError(f"--nproc {nproc} is more than the {limit} {what} here; allowed 2..{limit}")
    return layout


def torchrun_command(model: str, workload: Workload, layout: str, nproc: int, options: Options,
                     out_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "gpuplan.measure.worker", "--model", model, "--workload", json.dumps(workload.to_dict()),
           "--layout", layout, "--steps", str(options.steps), "--warmup", str(options.warmup),
           "--out", str(out_dir)]
    if not options.record:
        cmd.append("--no-record")
    return cmd


def _gather(out_dir: Path, nproc: int, proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for rank in range(nproc):
        path = out_dir / f"rank{rank}.json"
        if not path.exists():
            tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
            raise LaunchError(f"rank {rank} wrote no result (torchrun exit {proc.returncode}): {tail[0]}")
        data = json.loads(path.read_text())
        if "error" in data:
            raise LaunchError(f"rank {rank} failed: {data['error'].splitlines()[0]}")
        results.append(data)
    return results


def run_ranks(model: str, workload: Workload, layout: str, nproc: int, options: Options,
              timeout_s: float | None = None) -> tuple[list[Measured], Environment]:
    """Launch the workers and return each rank's measurement and rank 0's environment."""
    with tempfile.TemporaryDirectory(prefix="gpuplan-measure-") as tmp:
        out_dir = Path(tmp)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        try:
            proc = subprocess.run(torchrun_command(model, workload, layout, nproc, options, out_dir),
                                  capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise LaunchError(f"the {nproc}-process run did not finish within {timeout_s:.0f} s") from exc
        results = _gather(out_dir, nproc, proc)
    ranks = [Measured.from_dict(r["measured"]) for r in sorted(results, key=lambda r: int(r["rank"]))]
    e = results[0]["environment"]
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


def measure_distributed(model: str | ModelSource, *, workload: Workload, options: Options, nproc: int,
                        layout: str | None, timeout_s: float | None = None) -> Measurement:
    """Run ``workload`` on ``nproc`` processes with ``layout`` and compare each rank with the
    per-rank estimate (gpuplan.measure.per_rank)."""
    from gpuplan.estimate import estimate
    from gpuplan.measure.environment import collect
    from gpuplan.measure.per_rank import compare_ranks, per_rank_estimate, planner_per_rank
    from gpuplan.models.sources import ModelSource, resolve_model

    options.check(workload)
    name = layout or ""
    check_nproc(nproc, layout, workload)
    source = model if isinstance(model, ModelSource) else resolve_model(model)
    from gpuplan.models.base import refuse_pipeline

    refuse_pipeline(source, "measure")
    spec = model if isinstance(model, str) else source.name
    here = collect("cpu") if not torch.cuda.is_available() else None  # no CUDA context in the launcher
    gpu_id = None
    if here is None:
        from gpuplan.measure.cuda import nvml_device_name
        from gpuplan.measure.environment import _catalog_id

        name_here = nvml_device_name()
        gpu_id = _catalog_id(name_here) if name_here else None
    est = estimate(source, workload=workload, gpu=gpu_id)
    rank_est = per_rank_estimate(source, workload, name, nproc, cuda=here is None)
    notes: list[str] = []
    if options.force:
        notes.append("--force: the fit check was skipped")
    else:
        _check_rank_fit(est, rank_est, nproc, here)
    planner = planner_per_rank(source, workload, name, nproc, gpu_id)
    ranks, env = run_ranks(spec, workload, name, nproc, options, timeout_s)
    estimated = {**est.to_dict(), "per_rank": rank_est.to_dict(), "planner": planner}
    notes.extend(rank_est.notes)
    if name in ("ddp", "zero1"):
        from gpuplan.measure.layouts import GRADIENT_AS_BUCKET_VIEW

        notes.append(f"DDP ran with gradient_as_bucket_view={GRADIENT_AS_BUCKET_VIEW}, as the planner plans "
                     "and plan --emit writes it (gradients are views into DDP's buckets)")
    if planner is not None and "per_rank_bytes" in planner and here is not None:
        notes.append(f"planner rows: CUDA-semantics profile on {planner['gpu']} (a stand-in on this CPU)")
    return Measurement(model=source.name, workload=workload, environment=env, ranks=tuple(ranks),
                       estimated=estimated, comparisons=compare_ranks(rank_est, ranks, planner),
                       notes=tuple(notes), layout=name)
