"""Typed results of a measurement, and their JSON form (``measured`` / ``estimated`` objects)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuplan.measure.environment import Environment
from gpuplan.presentation import to_json, to_text
from gpuplan.trace.records import RawTrace
from gpuplan.workload import Workload


@dataclass(frozen=True, slots=True)
class Measured:
    """What one process (one rank) measured. Every ``*_bytes`` is an int of bytes."""

    device: str
    steps: int
    warmup: int
    step_time_s: float
    """Median over the timed steps (a whole generation counts as one step in generate mode)."""
    step_times_s: tuple[float, ...]
    tracked_peak_bytes: int | None = None
    """Peak of live tensor-storage bytes over one recorded step (the trace's own accounting)."""
    tracked_peak_phase: str | None = None
    tracked_components: dict[str, int] = field(default_factory=dict)
    peak_allocated_bytes: int | None = None
    """``torch.cuda.max_memory_allocated`` over the timed steps (CUDA only)."""
    peak_reserved_bytes: int | None = None
    cuda_context_bytes: int | None = None
    total_bytes: int | None = None
    """Peak reserved plus the context: what nvidia-smi shows for the process at its peak."""
    context_method: str | None = None
    allocator_stats: dict[str, int] = field(default_factory=dict)
    rank: int = 0
    world_size: int = 1
    layout: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["step_times_s"] = list(self.step_times_s)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measured:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["step_times_s"] = tuple(known.get("step_times_s", ()))
        return cls(**known)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One quantity, estimated and measured; ``error`` = (estimated − measured) / measured."""

    quantity: str
    unit: str
    """``bytes`` or ``s``."""
    estimated: float | None
    measured: float | None

    @property
    def error(self) -> float | None:
        if self.estimated is None or self.measured is None or self.measured == 0:
            return None
        return (self.estimated - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        return {"quantity": self.quantity, "unit": self.unit, "estimated": self.estimated,
                "measured": self.measured, "error": self.error}


@dataclass(frozen=True, slots=True)
class Measurement:
    """A real run next to its estimate. ``ranks`` has one entry per process (one when local)."""

    model: str
    workload: Workload
    environment: Environment
    ranks: tuple[Measured, ...]
    estimated: dict[str, Any]
    """The estimator's JSON object (per rank for a multi-process layout)."""
    comparisons: tuple[Comparison, ...]
    notes: tuple[str, ...] = ()
    layout: str | None = None
    store_id: int | None = None
    store_path: str | None = None

    @property
    def measured(self) -> Measured:
        """Rank 0 (the process itself when local)."""
        return self.ranks[0]

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.measure.measurement_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.measure.render_measurement


def median(values: tuple[float, ...] | list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def components_at_peak(trace: RawTrace) -> dict[str, int]:
    """Live bytes by category at the trace's peak allocation."""
    if trace.peak_event_index < 0:
        return {}
    live: dict[int, int] = {}
    for ev in trace.events[: trace.peak_event_index + 1]:
        live[ev.storage_id] = live.get(ev.storage_id, 0) + ev.size_bytes
        if live[ev.storage_id] <= 0:
            del live[ev.storage_id]
    out: dict[str, int] = {}
    for sid, size in live.items():
        cat = trace.storages[sid].category
        out[cat] = out.get(cat, 0) + size
    return out
