"""Driver version -> what CUDA it supports, and whether a wheel's CUDA can run on it.

Two NVIDIA notions (data/drivers.yaml): the minor-version-compatibility floor of a CUDA major, below
which CUDA cannot initialise at all, and the exact toolkit row, at or above which the driver fully
supports that CUDA release ("CUDA Version" in nvidia-smi).
"""

from __future__ import annotations

import enum

from gpuplan.compat.dataload import driver_data, gpu_data
from gpuplan.compat.versions import parse_version, version_at_least


class DriverFit(str, enum.Enum):
    FULL = "full"  # the driver fully supports the wheel's CUDA version
    MINOR_COMPAT = "minor-compat"  # same major, above the floor: runs with NVIDIA's "limited feature-set"
    TOO_OLD = "too-old"  # below the floor: CUDA cannot initialise
    UNKNOWN = "unknown"


def driver_max_cuda(driver_version: str | None, windows: bool = False) -> str | None:
    """Newest CUDA a driver fully supports, from NVIDIA's toolkit table ('550.54.15' -> '12.4')."""
    if parse_version(driver_version) is None:
        return None
    for row in driver_data().toolkit_rows:
        need = row.windows if windows else row.linux
        if need is None:
            need = row.linux  # no Windows row from 13.0: NVIDIA's Table 2 says >= 580 on both
        if version_at_least(driver_version, need):
            return row.cuda
    return None


def floor_for(cuda: str, windows: bool = False) -> str | None:
    """The driver below which nothing built with this CUDA major initialises ('12.8' -> '525.60.13')."""
    parts = parse_version(cuda)
    if parts is None:
        return None
    floor = driver_data().floors.get(parts[0])
    if floor is None:
        return None
    if floor.exact_only:
        row = next((r for r in driver_data().toolkit_rows if r.cuda == f"{parts[0]}.{parts[1]}"), None)
        if row is None:
            return None
        return row.windows if windows and row.windows else row.linux
    return floor.windows if windows else floor.linux


def fit(
    wheel_cuda: str | None,
    driver_version: str | None,
    driver_cuda: str | None = None,
    windows: bool = False,
) -> DriverFit:
    """How a driver serves a wheel built with ``wheel_cuda``.

    ``driver_cuda`` is what nvidia-smi/NVML reported ("CUDA Version"); when absent it is derived from the
    driver version through NVIDIA's toolkit table.
    """
    if wheel_cuda is None or (driver_version is None and driver_cuda is None):
        return DriverFit.UNKNOWN
    supported = driver_cuda or driver_max_cuda(driver_version, windows)
    if supported is not None and version_at_least(supported, wheel_cuda):
        return DriverFit.FULL
    floor = floor_for(wheel_cuda, windows)
    if driver_version is None or floor is None:
        # without a driver version only the reported CUDA version can decide
        if supported is None:
            return DriverFit.UNKNOWN
        same_major = (parse_version(supported) or (0,))[0] == (parse_version(wheel_cuda) or (0,))[0]
        return DriverFit.MINOR_COMPAT if same_major and floor is not None else DriverFit.TOO_OLD
    ok = version_at_least(driver_version, floor)
    if ok is None:
        return DriverFit.UNKNOWN
    return DriverFit.MINOR_COMPAT if ok else DriverFit.TOO_OLD


def full_support_driver(cuda: str, windows: bool = False) -> str | None:
    """The first driver that fully supports this CUDA minor ('12.8' -> '570.26' on Linux)."""
    key = ".".join(str(p) for p in (parse_version(cuda) or ())[:2])
    row = next((r for r in driver_data().toolkit_rows if r.cuda == key), None)
    if row is None:
        return None
    return (row.windows or row.linux) if windows else row.linux


def arch_driver_floor(cc: str | None, windows: bool = False) -> tuple[str, str] | None:
    """(oldest driver, CUDA) for a GPU of compute capability ``cc``: the toolkit-table driver of the first
    CUDA that knows the architecture ('12.0' -> ('570.26', '12.8') on Linux); None when not in the data."""
    cuda = gpu_data().first_cuda.get(cc or "")
    driver = full_support_driver(cuda, windows) if cuda else None
    return (driver, cuda) if cuda and driver else None


def predates_arch(cc: str | None, driver_version: str | None, driver_cuda: str | None = None,
                  windows: bool = False) -> tuple[str, str] | None:
    """(oldest driver, CUDA) when this driver is of a branch older than the GPU's architecture, so no
    build can run the GPU on it; None when it is new enough or nothing is known.

    Compared by branch (570 of 570.26): a branch's first release can come before the toolkit's row.
    Without a driver version, the CUDA version the driver reported decides.
    """
    floor = arch_driver_floor(cc, windows)
    if floor is None:
        return None
    need_driver, need_cuda = floor
    have, need = parse_version(driver_version), parse_version(need_driver)
    if have is not None and need is not None:
        return floor if have[0] < need[0] else None
    if driver_cuda is not None and version_at_least(driver_cuda, need_cuda) is False:
        return floor
    return None
