"""What the probe found, as frozen records. ``None`` always means "could not be determined"."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PlatformInfo:
    system: str | None  # "Linux", "Windows", "Darwin"
    release: str | None
    machine: str | None  # "x86_64", "AMD64", "arm64", "aarch64"
    python: str | None  # "3.11.7"
    os_name: str | None  # PRETTY_NAME from /etc/os-release, "macOS 14.5", ...
    wsl: bool

    @property
    def os_family(self) -> str | None:
        """'linux', 'windows' or 'macos' (WSL counts as linux: it runs Linux wheels)."""
        return {"Linux": "linux", "Windows": "windows", "Darwin": "macos"}.get(self.system or "")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    vendor: str  # "nvidia" or "amd"
    name: str | None
    cc: str | None  # compute capability "8.6"; None for AMD or when unknown
    cc_source: str | None  # "driver" (NVML / nvidia-smi) or "name table"
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    mig_mode: bool | None = None
    mig_devices: int | None = None
    ecc: bool | None = None
    processes: int | None = None
    gfx: str | None = None  # AMD LLVM target ("gfx1100"); None for NVIDIA or when unknown
    gfx_source: str | None = None  # "amd-smi", "rocm-smi", "rocminfo" or "name table"


@dataclass(frozen=True)
class NvidiaInfo:
    source: str  # "nvml", "nvidia-smi -q", "nvidia-smi" or "none"
    driver_version: str | None
    driver_cuda: str | None  # newest CUDA the driver supports ("CUDA Version" in nvidia-smi)
    driver_cuda_source: str | None  # "driver" or "toolkit table"
    gpus: tuple[GpuInfo, ...]
    smi_present: bool
    problem: str | None  # a failure message from NVML / nvidia-smi, verbatim (first line)


@dataclass(frozen=True)
class TorchInfo:
    installed: bool
    version: str | None
    build: str | None  # "cuda", "rocm", "xpu", "cpu"
    cuda: str | None  # torch.version.cuda
    hip: str | None
    git_version: str | None
    arch_list: tuple[str, ...] | None
    arch_list_source: str | None  # "torch.cuda.get_arch_list()" or "release data (...)"
    arch_list_in_data: tuple[str, ...] | None  # what the release data says for this wheel (None: not in it)
    cudnn: str | None
    cudnn_source: str | None
    nccl: str | None
    torchvision: str | None
    torchaudio: str | None
    imported: bool  # True when facts came from an imported torch (--import-torch)
    import_error: str | None = None
    cuda_available: bool | None = None
    device_count: int | None = None


@dataclass(frozen=True)
class ToolkitInfo:
    nvcc_version: str | None
    nvcc_path: str | None
    cuda_home: str | None
    cudnn_header_version: str | None
    cudnn_header_path: str | None


@dataclass(frozen=True)
class RocmInfo:
    present: bool  # rocm-smi ran or /opt/rocm exists
    version: str | None
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True)
class Environment:
    platform: PlatformInfo
    torch: TorchInfo
    nvidia: NvidiaInfo
    toolkit: ToolkitInfo
    rocm: RocmInfo
    mps: str | None  # "available", "unavailable", "not applicable", or None (unknown)
    env_vars: dict[str, str] = field(default_factory=dict)
    source: str = "live"  # "live" or the recorded file's name
