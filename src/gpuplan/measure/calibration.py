"""Calibration from stored measurements: the CUDA context size and a step-time factor per
(GPU, torch, CUDA), fitted by ``gpuplan calibrate``. The command line loads the matching entry once
(:func:`calibration_for`) and passes it to ``estimate(..., calibration=...)``, which applies it
inside the computation; the library never reads the file unless asked.

The CUDA context comes from single-process CUDA measurements only (a multi-process run's context also
holds NCCL's buffers, which are outside PyTorch's allocator). The step-time factor is the median of
measured / predicted step time over runs: a single-process run against its estimate, and a multi-process
run stored by ``gpuplan sweep`` (its slowest rank: a synchronous step waits for it) against the plan's
prediction for that layout on the same GPU (``estimated["sweep_plan"]``); a multi-process run without a
plan's prediction (``measure --nproc``) has no predicted step and gives no ratio. The factor then scales the
kernel times of estimates, so a sweep's collectives time is folded into it. Each figure is a median over
the matching measurements, so one disturbed run cannot move it far. The file is JSON, written atomically
(temporary file + rename), at ``$GPUPLAN_CALIBRATION`` or ``$XDG_CONFIG_HOME/gpuplan/calibration.json``
(``~/.config`` without it); ``GPUPLAN_CALIBRATION=off`` disables it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuplan.errors import ConfigError
from gpuplan.estimate import Calibration

FILE_VERSION = 1


CalibrationEntry = Calibration
"""One entry of the file: the typed input ``gpuplan.estimate(..., calibration=...)`` takes."""
MAX_FILE_BYTES = 1 << 20
"""A calibration file holds a few entries per GPU and software stack; anything larger is not one."""
_MAX_CONTEXT_BYTES = 64 << 30
_MAX_STEP_TIME_FACTOR = 1000.0


def default_calibration_path() -> Path | None:
    env = os.environ.get("GPUPLAN_CALIBRATION")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "none", "0") else Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuplan" / "calibration.json"


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


PLAN_PREDICTION = "sweep_plan"
"""The key of a swept run's ``estimated`` object that holds the plan's prediction for its layout (written by
gpuplan.measure.sweep; the single-process estimate under ``step_time_s`` is not a multi-process step: it has
no collectives)."""


def step_times(run: list[Any], gpu: str) -> tuple[float, float] | None:
    """``(measured, predicted)`` step time of one run (its stored rows, one per rank) on ``gpu``, or None when
    the run has no prediction to compare with: one process against its estimate, several against the plan's
    prediction for their layout on that GPU, measured as the slowest rank."""
    if len(run) == 1 and run[0].world_size == 1:
        predicted = run[0].estimated.get("step_time_s")
    else:
        plan = run[0].estimated.get(PLAN_PREDICTION)
        if not isinstance(plan, dict) or plan.get("gpu") != gpu or len(run) != run[0].world_size:
            return None  # no plan, a plan for another GPU, or ranks missing from the store
        predicted = plan.get("step_time_s")
    measured = [r.measured.get("step_time_s") for r in run]
    if not predicted or not all(measured):
        return None
    return max(float(m) for m in measured), float(predicted)


def fit(records: Iterable[Any]) -> list[CalibrationEntry]:
    """Entries from :class:`gpuplan.measure.store.StoredMeasurement` rows: CUDA runs, the context from
    single-process ones, the step-time factor from every run with a prediction (:func:`step_times`)."""
    groups: dict[tuple[str, str, str], dict[str, list[Any]]] = {}
    for r in records:
        if r.device != "cuda":
            continue
        key = (r.gpu or r.device_name, r.torch_version, r.cuda_version or "none")
        groups.setdefault(key, {}).setdefault(r.run_id, []).append(r)
    entries = []
    for (gpu, torch_version, cuda_version), runs in sorted(groups.items()):
        rows = [r for run in runs.values() for r in run]
        contexts = [float(r.measured["cuda_context_bytes"]) for r in rows
                    if r.world_size == 1 and (r.measured.get("cuda_context_bytes") or 0) > 0]
        pairs = [t for t in (step_times(run, gpu) for run in runs.values()) if t is not None]
        ratios = [measured / predicted for measured, predicted in pairs]
        context = _median(contexts)
        entries.append(CalibrationEntry(
            gpu=gpu, torch_version=torch_version, cuda_version=cuda_version,
            cuda_context_bytes=int(context) if context is not None else None,
            step_time_factor=_median(ratios),
            context_samples=len(contexts), step_time_samples=len(ratios),
            driver_versions=tuple(sorted({r.driver_version for r in rows if r.driver_version}))))
    return entries


def write(entries: list[CalibrationEntry], path: Path, *, store: str) -> None:
    """Write (replacing entries with the same key, keeping others) atomically."""
    existing = {(e.gpu, e.torch_version, e.cuda_version): e for e in load(path)} if path.exists() else {}
    for e in entries:
        existing[(e.gpu, e.torch_version, e.cuda_version)] = e
    data = {"version": FILE_VERSION, "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "store": store, "entries": [asdict(e) for e in existing.values()]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".calibration-", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write calibration file {str(path)!r}: {exc.strerror or exc}; "
                          "pass --out FILE to a writable location") from exc


def load(path: Path) -> list[CalibrationEntry]:
    """The entries of a calibration file; anything else is a one-line ConfigError naming the file and
    the field."""
    where = f"calibration file {str(path)!r}"
    fix = "rerun gpuplan calibrate or set GPUPLAN_CALIBRATION=off"
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {where}: {exc.strerror or exc}; {fix}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{where} is not a gpuplan calibration (larger than {MAX_FILE_BYTES // 1024} KiB); {fix}")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{where} is not a gpuplan calibration (not JSON: {str(exc)[:80]}); {fix}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ConfigError(f"{where} is not a gpuplan calibration (no \"entries\" list); {fix}")
    return [_entry(e, f"{where}: entries[{i}]", fix) for i, e in enumerate(data["entries"])]


def _entry(raw: object, where: str, fix: str) -> CalibrationEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} is not an object; {fix}")
    allowed = {f.name for f in fields(CalibrationEntry)}
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        raise ConfigError(f"{where} has unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))}); {fix}")

    def bad(name: str, what: str) -> ConfigError:
        return ConfigError(f"{where}.{name} = {str(raw.get(name))[:40]!r} is not {what}; {fix}")

    for name in ("gpu", "torch_version", "cuda_version"):
        if not isinstance(raw.get(name), str) or not raw[name] or len(raw[name]) > 200:
            raise bad(name, "a non-empty name")
    for name in ("context_samples", "step_time_samples"):
        v = raw.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 31:
            raise bad(name, "a count of measurements")
    context = raw.get("cuda_context_bytes")
    if context is not None and (isinstance(context, bool) or not isinstance(context, int)
                                or not 0 < context <= _MAX_CONTEXT_BYTES):
        raise bad("cuda_context_bytes", f"null or a whole number of bytes in 1..{_MAX_CONTEXT_BYTES}")
    factor = raw.get("step_time_factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, int | float)
                               or not math.isfinite(factor) or not 0 < factor <= _MAX_STEP_TIME_FACTOR):
        raise bad("step_time_factor", f"null or a finite number in (0, {_MAX_STEP_TIME_FACTOR:g}]")
    drivers = raw.get("driver_versions", [])
    if not isinstance(drivers, list) or not all(isinstance(d, str) for d in drivers):
        raise bad("driver_versions", "a list of driver versions")
    return CalibrationEntry(
        gpu=raw["gpu"], torch_version=raw["torch_version"], cuda_version=raw["cuda_version"],
        cuda_context_bytes=context, step_time_factor=float(factor) if factor is not None else None,
        context_samples=raw["context_samples"], step_time_samples=raw["step_time_samples"],
        driver_versions=tuple(drivers))


def calibration_for_gpu(gpu: str | None) -> CalibrationEntry | None:
    """The user's calibration for ``gpu`` (any name the catalog resolves) and the installed torch/CUDA:
    ``$GPUPLAN_CALIBRATION`` or the default file, if there is one. The front ends (CLI and web page) read
    it once per answer; the library never reads it by itself."""
    if gpu is None:
        return None
    from gpuplan.hardware import resolve_gpu

    target = resolve_gpu(gpu)
    return calibration_for(target.id) if target is not None else None


def calibration_for(gpu_id: str, torch_version: str | None = None, cuda_version: str | None = None,
                    path: Path | None = None) -> CalibrationEntry | None:
    """The entry for ``gpu_id`` and the installed torch/CUDA (or those given), if any."""
    path = path if path is not None else default_calibration_path()
    if path is None or not path.exists():
        return None
    if torch_version is None:
        import torch

        torch_version, cuda_version = torch.__version__, torch.version.cuda or "none"
    for e in load(path):
        if (e.gpu, e.torch_version, e.cuda_version) == (gpu_id, torch_version, cuda_version or "none"):
            return e
    return None
