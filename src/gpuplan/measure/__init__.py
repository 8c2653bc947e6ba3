"""Real runs on the present device, the torchrun launcher, the measurements store, calibration.

Heavy modules (torch) are imported on use: ``from gpuplan.measure import measure`` pulls them in,
``import gpuplan.measure`` alone does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.measure.local import measure
    from gpuplan.measure.results import Comparison, Measured, Measurement

__all__ = ["Comparison", "Measured", "Measurement", "measure"]


def __getattr__(name: str) -> Any:
    if name == "measure":
        from gpuplan.measure.local import measure

        return measure
    if name in ("Comparison", "Measured", "Measurement"):
        from gpuplan.measure import results

        return getattr(results, name)
    raise AttributeError(name)
