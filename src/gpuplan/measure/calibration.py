"""Calibration from stored measurements: the CUDA context size and a step-time factor per
(GPU, torch, CUDA), fitted by ``gpuplan calibrate`` and applied by ``estimate`` on a match.

Only single-process CUDA measurements count (a multi-process run's context also holds NCCL's
buffers, which are outside PyTorch's allocator). Each figure is the median over the matching
measurements, so one disturbed run cannot move it far. The file is JSON, written atomically
(temporary file + rename), at ``$GPUPLAN_CALIBRATION`` or ``$XDG_CONFIG_HOME/gpuplan/calibration.json``
(``~/.config`` without it); ``GPUPLAN_CALIBRATION=off`` disables it.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuplan.errors import ConfigError

FILE_VERSION = 1


@dataclass(frozen=True, slots=True)
class CalibrationEntry:
    gpu: str
    torch_version: str
    cuda_version: str
    cuda_context_bytes: int | None
    """Median measured context (process GPU memory outside the caching allocator)."""
    step_time_factor: float | None
    """Median of measured / estimated step time; estimates multiply their step time by it."""
    context_samples: int
    step_time_samples: int
    driver_versions: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.cuda_context_bytes is not None:
            mib = self.cuda_context_bytes / 2**20
            parts.append(f"CUDA context {mib:.0f} MiB (median of {self.context_samples})")
        if self.step_time_factor is not None:
            parts.append(f"step time ×{self.step_time_factor:.3f} (median of {self.step_time_samples})")
        return (f"calibration applied for {self.gpu}, torch {self.torch_version}, CUDA {self.cuda_version}: "
                + "; ".join(parts))


def default_calibration_path() -> Path | None:
    env = os.environ.get("GPUPLAN_CALIBRATION")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "none", "0") else Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuplan" / "calibration.json"


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def fit(records: Iterable[Any]) -> list[CalibrationEntry]:
    """Entries from :class:`gpuplan.measure.store.StoredMeasurement` rows (CUDA, one process)."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for r in records:
        if r.device != "cuda" or r.world_size != 1:
            continue
        key = (r.gpu or r.device_name, r.torch_version, r.cuda_version or "none")
        groups.setdefault(key, []).append(r)
    entries = []
    for (gpu, torch_version, cuda_version), rows in sorted(groups.items()):
        contexts = [float(r.measured["cuda_context_bytes"]) for r in rows
                    if (r.measured.get("cuda_context_bytes") or 0) > 0]
        ratios = [float(r.measured["step_time_s"]) / float(r.estimated["step_time_s"]) for r in rows
                  if r.estimated.get("step_time_s") and r.measured.get("step_time_s")]
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
    try:
        data = json.loads(path.read_text())
        out = []
        for e in data["entries"]:
            e["driver_versions"] = tuple(e.get("driver_versions", ()))
            out.append(CalibrationEntry(**e))
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"calibration file {str(path)!r} is not a gpuplan calibration ({exc}); "
                          "rerun gpuplan calibrate or set GPUPLAN_CALIBRATION=off") from exc


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


def apply_calibration(est: Any, path: Path | None = None) -> Any:
    """``est`` (a :class:`gpuplan.estimate.Estimate`) with the matching calibration applied: the
    measured context replaces the assumed one, the step time is scaled by the fitted factor, and
    an assumption line says so. Unchanged without a GPU or a matching entry."""
    from dataclasses import replace

    if est.gpu is None:
        return est
    entry = calibration_for(est.gpu.id, path=path)
    if entry is None:
        return est
    changes: dict[str, Any] = {}
    components = dict(est.components)
    total = est.total_required_bytes
    if entry.cuda_context_bytes is not None:
        total += entry.cuda_context_bytes - components.get("cuda_context", 0)
        components["cuda_context"] = entry.cuda_context_bytes
        headroom = est.gpu.usable_memory_bytes - total
        changes.update(components=components, total_required_bytes=total, headroom_bytes=headroom,
                       fits=headroom >= 0)
    if entry.step_time_factor is not None and est.step_time_s is not None:
        f = entry.step_time_factor
        changes["step_time_s"] = est.step_time_s * f
        if est.throughput is not None:
            changes["throughput"] = {**est.throughput, "value": est.throughput["value"] / f}
        if est.mfu is not None:
            changes["mfu"] = est.mfu / f
    extra = dict(est.extra)
    extra["json"] = {**extra.get("json", {}), "calibration": asdict(entry)}
    assumptions = tuple(a for a in est.assumptions
                        if not (entry.cuda_context_bytes is not None and a.startswith("CUDA context ")))
    return replace(est, **changes, assumptions=(*assumptions, entry.describe()), extra=extra)
