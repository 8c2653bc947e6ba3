"""Facts about the machine a measurement ran on: device, driver, torch, CUDA, host.

Each measurement is stored with these facts so calibration only ever pools measurements taken on
the same GPU with the same software (a context size or an efficiency factor measured with one
driver/torch/CUDA combination is not evidence about another).
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class Environment:
    device: str
    """``cuda`` or ``cpu``: where the step ran."""
    device_name: str
    """torch's device name (``NVIDIA H200``) or the CPU model."""
    gpu_id: str | None
    """The catalog id the device name resolves to (``H200-SXM``), None on CPU or if unknown."""
    device_count: int
    """GPUs visible to torch (0 on CPU)."""
    device_memory_bytes: int
    """Total memory of one device (GPU memory, or the host's RAM on CPU)."""
    compute_capability: tuple[int, int] | None
    driver_version: str | None
    torch_version: str
    cuda_version: str | None
    """CUDA runtime torch was built with (``torch.version.cuda``)."""
    cudnn_version: int | None
    python_version: str
    hostname: str
    cpu_count: int

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["compute_capability"] = list(self.compute_capability) if self.compute_capability else None
        return out

    @property
    def software_key(self) -> tuple[str, str, str]:
        """What calibration is keyed by: (GPU, torch, CUDA)."""
        return (self.gpu_id or self.device_name, self.torch_version, self.cuda_version or "none")


def host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX hosts
        return 0


def host_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (what the kernel can hand out without swapping)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return host_memory_bytes()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _driver_version() -> str | None:
    """The NVIDIA driver version through NVML (nvidia-ml-py), None when NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # NVML absent, no driver, or no permission: the fact is simply unknown
        return None


def _catalog_id(device_name: str) -> str | None:
    from gpuplan.errors import UnknownGPUError
    from gpuplan.hardware import get_gpu

    try:
        return get_gpu(device_name).id
    except UnknownGPUError:
        return None


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def collect(device: str | None = None) -> Environment:
    """Facts about ``device`` (``cuda`` or ``cpu``; default: CUDA if available)."""
    device = device or ("cuda" if cuda_available() else "cpu")
    cudnn_ok = torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]
    cudnn = torch.backends.cudnn.version() if cudnn_ok else None  # type: ignore[no-untyped-call]
    common = dict(torch_version=torch.__version__, cuda_version=torch.version.cuda, cudnn_version=cudnn,
                  python_version=platform.python_version(), hostname=socket.gethostname(),
                  cpu_count=os.cpu_count() or 1)
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return Environment(device="cuda", device_name=props.name, gpu_id=_catalog_id(props.name),
                           device_count=torch.cuda.device_count(),
                           device_memory_bytes=int(props.total_memory),
                           compute_capability=(props.major, props.minor), driver_version=_driver_version(),
                           **common)  # type: ignore[arg-type]
    return Environment(device="cpu", device_name=_cpu_name(), gpu_id=None, device_count=0,
                       device_memory_bytes=host_memory_bytes(), compute_capability=None, driver_version=None,
                       **common)  # type: ignore[arg-type]
