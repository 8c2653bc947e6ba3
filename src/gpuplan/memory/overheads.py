"""Memory the tensors of a step do not account for: CUDA context and library workspaces.

Each figure carries its source. The CUDA context (driver state, kernel images) lives outside
PyTorch's allocator: ``nvidia-smi`` shows it, ``max_memory_reserved`` does not. The cuBLAS
workspace is allocated through the caching allocator, once per (thread, stream) handle: the
forward runs on the Python thread and backward on the autograd engine's device thread, so a
training step holds two.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.units import KIB, MIB

# cuBLAS workspace, aten/src/ATen/cuda/CublasHandlePool.cpp getChosenWorkspaceSize():
# ":4096:2:16:8" by default, 32 MiB (":4096:8") for compute capability 9.x, 10.x, 11.x and 12.x;
# on ROCm 32 MiB, 128 MiB for gfx942/gfx950 (MI300 series, MI355X).
CUBLAS_WORKSPACE_DEFAULT_BYTES = 4096 * KIB * 2 + 16 * KIB * 8
CUBLAS_WORKSPACE_HOPPER_PLUS_BYTES = 4096 * KIB * 8
ROCBLAS_WORKSPACE_BYTES = 32 * MIB
ROCBLAS_WORKSPACE_MI300_BYTES = 128 * MIB

# CUDA context, measured (shared/reference/published-figures-notes.md §2, calibration.csv):
# eager module loading, CUDA 11.2, V100: 1343 MiB (HF perf docs, NVML after torch.ones(1).cuda()).
# lazy module loading (CUDA >= 11.7, PyTorch default since 2.0): 287 MB vs 667 MB eager for the
# same program (pytorch PR #86509); 256 MiB on an RTX 3090 with torch 2.7.1; 426 MiB on an
# RTX 6000 Ada with torch 2.10.
CONTEXT_EAGER_V100_CUDA112_BYTES = 1343 * MIB
CONTEXT_LAZY_AMPERE_BYTES = 256 * MIB
CONTEXT_LAZY_ADA_BYTES = 426 * MIB
# No published lazy-loading figure for Hopper/Blackwell in the reference set: the Ada figure (the
# newest measured) is used and the assumption printed.
CONTEXT_LAZY_DEFAULT_BYTES = CONTEXT_LAZY_ADA_BYTES


@dataclass(frozen=True, slots=True)
class Overheads:
    cuda_context_bytes: int
    workspace_bytes: int
    notes: tuple[str, ...]


def cublas_workspace_bytes(compute_capability: tuple[int, int] | None, vendor: str = "nvidia",
                           arch: str = "") -> int:
    if vendor.lower() == "amd":
        return ROCBLAS_WORKSPACE_MI300_BYTES if arch.upper().startswith("CDNA 3") or "CDNA3" in arch.upper() \
            or "CDNA 4" in arch.upper() else ROCBLAS_WORKSPACE_BYTES
    if compute_capability is not None and compute_capability[0] >= 9:
        return CUBLAS_WORKSPACE_HOPPER_PLUS_BYTES
    return CUBLAS_WORKSPACE_DEFAULT_BYTES


def cuda_context_bytes(arch: str, module_loading: str = "lazy") -> tuple[int, str]:
    """Context size and the source of the figure used."""
    if module_loading == "eager":
        return CONTEXT_EAGER_V100_CUDA112_BYTES, "1343 MiB: eager module loading, CUDA 11.2 (HF perf docs, V100)"
    a = arch.lower()
    if "ampere" in a:
        return CONTEXT_LAZY_AMPERE_BYTES, "256 MiB: lazy loading, RTX 3090, torch 2.7.1 (measured)"
    if "ada" in a:
        return CONTEXT_LAZY_ADA_BYTES, "426 MiB: lazy loading, RTX 6000 Ada, torch 2.10 (measured)"
    return CONTEXT_LAZY_DEFAULT_BYTES, (f"426 MiB assumed for {arch or 'this GPU'}: the newest measured lazy-loading "
                                        "context (RTX 6000 Ada, torch 2.10); no figure for this architecture")


def overheads_for(*, arch: str, vendor: str, compute_capability: tuple[int, int] | None, trains: bool,
                  module_loading: str = "lazy", measured_context_bytes: int | None = None) -> Overheads:
    """``measured_context_bytes`` (a calibration from real runs on this GPU and software) replaces the
    published figure."""
    if measured_context_bytes is not None:
        context, context_note = measured_context_bytes, (f"{measured_context_bytes / MIB:.0f} MiB: calibrated from "
                                                         "measurements on this GPU and software (gpuplan calibrate)")
    else:
        context, context_note = cuda_context_bytes(arch, module_loading)
    per_handle = cublas_workspace_bytes(compute_capability, vendor, arch)
    handles = 2 if trains else 1
    notes = (
        f"CUDA context {context_note}",
        f"cuBLAS workspace {per_handle // KIB} KiB × {handles} handle(s) "
        f"({'forward thread + autograd thread' if trains else 'one thread'}), through the caching allocator",
    )
    return Overheads(context, per_handle * handles, notes)
