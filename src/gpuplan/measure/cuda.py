"""What only a CUDA device can tell: allocator peaks, the context, per-step times from events.

The CUDA context (driver state, kernel images, and anything else allocated outside PyTorch's
caching allocator) is what ``nvidia-smi`` shows for the process beyond ``memory_reserved()``.
It is read two ways: NVML's per-process used memory minus what the allocator reserves (exact,
unaffected by other processes), else the device's used memory after the run minus before CUDA was
initialised minus reserved (``mem_get_info``; other processes' allocations in between would
count). Nothing here runs without a GPU; the CPU tests cover the code around it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class ContextReading:
    context_bytes: int | None
    method: str
    process_used_bytes: int | None = None


def _nvml_handle(pynvml: Any, index: int) -> Any:
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            key = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
            return pynvml.nvmlDeviceGetHandleByUUID(key)
        except Exception:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def device_used_bytes_before_init() -> int | None:
    """Used memory of the device CUDA will pick, read through NVML without creating a context.

    Which physical device that is needs CUDA_VISIBLE_DEVICES (its first entry, if numeric);
    None when NVML or the mapping is not available."""
    try:
        import pynvml

        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        local = int(os.environ.get("LOCAL_RANK", "0"))
        pynvml.nvmlInit()
        try:
            if visible.isdigit():
                ids = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
                index = int(ids[local]) if ids and local < len(ids) and ids[local].isdigit() else local
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(visible)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def process_used_bytes(index: int) -> int | None:
    """GPU memory NVML attributes to this process (what nvidia-smi lists), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = _nvml_handle(pynvml, index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory:
                    return int(proc.usedGpuMemory)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
    return None


def read_context(index: int, used_before_bytes: int | None) -> ContextReading:
    reserved = torch.cuda.memory_reserved(index)
    used = process_used_bytes(index)
    if used is not None:
        return ContextReading(used - reserved, "nvml per-process used memory minus memory_reserved()", used)
    if used_before_bytes is not None:
        free, total = torch.cuda.mem_get_info(index)
        return ContextReading(total - free - used_before_bytes - reserved,
                              "mem_get_info used after run minus NVML used before CUDA init minus "
                              "memory_reserved()")
    return ContextReading(None, "unavailable: no NVML reading")


class EventTimer:
    """Step times from CUDA events (device time between two points on the current stream)."""

    def __init__(self) -> None:
        self.start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        self.end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def __enter__(self) -> EventTimer:
        self.start.record()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end.record()

    def seconds(self) -> float:
        self.end.synchronize()
        return float(self.start.elapsed_time(self.end)) / 1000.0


ALLOCATOR_STATS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
                   "allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak",
                   "inactive_split_bytes.all.peak", "requested_bytes.all.peak")


def allocator_stats(index: int) -> dict[str, int]:
    """The memory_stats() entries worth keeping with a measurement."""
    stats = torch.cuda.memory_stats(index)
    return {k: int(stats[k]) for k in ALLOCATOR_STATS if k in stats}


def nvml_device_name(index: int = 0) -> str | None:
    """Device name through NVML, without initialising CUDA in this process (the launcher must
    not hold a context on a GPU its ranks are measuring)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
        finally:
            pynvml.nvmlShutdown()
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return None
