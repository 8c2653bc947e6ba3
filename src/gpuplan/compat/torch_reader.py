"""Facts only an imported torch knows (arch list, cuDNN/NCCL as loaded, is_available).

Used only with ``gpuplan doctor --import-torch``: importing torch costs seconds, and the doctor must
also work when torch is broken. Every field is read on its own so one failure leaves the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _try(call: Callable[[], T]) -> T | None:
    try:
        return call()
    except Exception:  # any torch failure becomes "unknown" for that field
        return None


def read_torch_runtime() -> dict[str, Any] | None:
    try:
        import torch
    except Exception as exc:  # a broken install raises anything from ImportError to OSError
        return {"import_error": f"{type(exc).__name__}: {exc}"}
    cudnn = _try(lambda: torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
    nccl = _try(lambda: ".".join(str(p) for p in torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
    mps = _try(lambda: bool(torch.backends.mps.is_available()))
    return {
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "arch_list": _try(lambda: list(torch.cuda.get_arch_list())),
        "cudnn": str(cudnn) if cudnn else None,
        "nccl": nccl,
        "cuda_available": _try(torch.cuda.is_available),
        "device_count": _try(torch.cuda.device_count),
        "mps_available": mps,
    }
