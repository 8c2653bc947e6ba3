"""Read the GPUs through NVML (the ``nvidia-ml-py`` package) into plain data.

Returns the same mapping a recorded environment stores under ``nvml:``, so the probe treats live and
recorded NVML readings alike. ``None`` when nvidia-ml-py is not installed; ``{"error": ...}`` when it is
but NVML cannot start (no driver, driver not loaded), which the probe reports.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _try(call: Callable[[], T]) -> T | None:
    try:
        return call()
    except Exception:  # NVML raises NVMLError subclasses for "not supported" fields
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml() -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return {"error": _text(exc) or type(exc).__name__}
    try:
        out: dict[str, Any] = {
            "driver_version": _try(lambda: _text(pynvml.nvmlSystemGetDriverVersion())),
            "cuda_driver_version": _try(pynvml.nvmlSystemGetCudaDriverVersion),
            "gpus": [],
        }
        count = _try(pynvml.nvmlDeviceGetCount) or 0
        for index in range(count):
            handle = _try(functools.partial(pynvml.nvmlDeviceGetHandleByIndex, index))
            if handle is None:
                continue
            out["gpus"].append(_read_device(pynvml, handle, index))
        return out
    finally:
        _try(pynvml.nvmlShutdown)


def _read_device(pynvml: Any, handle: Any, index: int) -> dict[str, Any]:
    cc = _try(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    memory = _try(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    mig = _try(lambda: pynvml.nvmlDeviceGetMigMode(handle))
    mig_devices = None
    if mig and mig[0]:
        slots = _try(functools.partial(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)) or 0
        mig_devices = sum(
            1
            for i in range(int(slots))
            if _try(functools.partial(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)) is not None
        )
    ecc = _try(lambda: pynvml.nvmlDeviceGetEccMode(handle))
    procs = _try(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    return {
        "index": index,
        "name": _try(lambda: _text(pynvml.nvmlDeviceGetName(handle))),
        "cc": f"{cc[0]}.{cc[1]}" if cc else None,
        "memory_total_bytes": int(memory.total) if memory else None,
        "memory_used_bytes": int(memory.used) if memory else None,
        "mig_mode": bool(mig[0]) if mig else None,
        "mig_devices": mig_devices,
        "ecc": bool(ecc[0]) if ecc else None,
        "processes": len(procs) if procs is not None else None,
    }
