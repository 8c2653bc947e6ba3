"""``gpuplan sweep``: the plan's top layouts measured for a few steps, predicted next to measured.

NeMo's auto-configurator does this on Slurm before a large run: plan, then try the best few layouts for
real. Each layout the measured-layout builders can run (``gpuplan.measure.layouts``: DDP, FSDP2, ZeRO 1-3;
tp = pp = cp = ep = 1, one micro-batch per step) becomes one multi-process run of the plan's workload at
the layout's micro-batch and checkpointing; all of them go to the executor at once (a Slurm job array,
or one torchrun after the other here). Layouts it cannot run are listed with the reason, not dropped.
Measurements are stored as ``gpuplan measure`` stores them, each with the plan's prediction for its layout
(``estimated["sweep_plan"]``, :data:`PLAN_PREDICTION`) so that ``gpuplan calibrate`` fits a step-time factor
from them as it does from single-process runs (gpuplan.measure.calibration).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.measure.calibration import PLAN_PREDICTION
from gpuplan.measure.results import Comparison
from gpuplan.parallel.layout import DDP, FSDP2, Zero
from gpuplan.presentation import to_json, to_text

if TYPE_CHECKING:
    from gpuplan.measure.executor import Executor
    from gpuplan.measure.results import Measurement
    from gpuplan.parallel.layout import Layout
    from gpuplan.parallel.plan import Plan
    from gpuplan.perf.workload_family import TimeInterval

MAX_TOP = 16
"""More layouts than a plan's distinct alternatives would only repeat the tail."""


def check_top(top: int) -> int:
    if not 1 <= top <= MAX_TOP:
        raise ConfigError(f"--top {top} is out of range: allowed 1..{MAX_TOP} (the plan's best layouts to measure)")
    return top


def measured_layout(lay: Layout) -> tuple[str | None, str | None]:
    """``(name, None)``: the ``gpuplan.measure.layouts`` name that runs ``lay`` as planned; ``(None, why)``
    when none does."""
    if lay.tp > 1 or lay.pp > 1 or lay.cp > 1 or lay.ep > 1:
        return None, f"tp={lay.tp} pp={lay.pp} cp={lay.cp} ep={lay.ep}: measure runs data-parallel layouts only"
    if lay.grad_accum > 1:
        return None, f"{lay.grad_accum} micro-batches per step: measure runs one micro-batch per step"
    s = lay.sharding
    if isinstance(s, DDP):
        return "ddp", None
    if isinstance(s, FSDP2):
        if s.hsdp_shard is not None:
            return None, "HSDP: measure's FSDP2 shards over all ranks"
        if not s.reshard_after_forward:
            return None, "FSDP2 without resharding after forward: measure reshards"
        if s.sharded_fp32:
            return None, "FSDP2 with fp32 shards (--fsdp-sharded-dtype fp32): measure shards the workload's parameters"
        return "fsdp", None
    if isinstance(s, Zero):
        if s.offload_optimizer or s.offload_params:
            return None, "ZeRO-Offload: measure keeps everything on the device"
        return f"zero{s.stage}", None  # stage 0 is planned as DDP
    return None, f"{s.name}: measure has no {s.name} layout"


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One planned layout: what the plan predicts and, when it ran, what was measured."""

    position: int
    """1 = the plan's best layout."""
    layout: str
    measured_layout: str | None
    gpus: int
    micro_batch_size: int
    predicted_step_time_s: float
    predicted_per_gpu_bytes: int
    predicted_interval: TimeInterval | None = None
    """The 80% interval of ``predicted_step_time_s``: the plan's own (``Plan.interval``) for that layout."""
    measurement: Measurement | None = None
    skipped: str | None = None
    """Why the layout was not measured (no measured layout runs it, or its run failed)."""
    store_id: int | None = None

    def prediction(self, gpu: str) -> dict[str, Any]:
        """What the plan predicted for this layout on ``gpu``, as stored next to the measurement."""
        interval = self.predicted_interval.to_list() if self.predicted_interval is not None else None
        return {"gpu": gpu, "layout": self.layout, "gpus": self.gpus, "step_time_s": self.predicted_step_time_s,
                "step_time_interval_s": interval, "per_gpu_peak_bytes": self.predicted_per_gpu_bytes}

    @property
    def measured_step_time_s(self) -> float | None:
        """The slowest rank's median step: a synchronous step waits for it."""
        if self.measurement is None:
            return None
        return max(r.step_time_s for r in self.measurement.ranks)

    @property
    def measured_peak_bytes(self) -> int | None:
        """Per GPU on CUDA: the largest rank's reserved memory plus context (what the prediction counts);
        on a CPU the largest rank's storage-tracked peak (no allocator, no context)."""
        if self.measurement is None:
            return None
        ranks = self.measurement.ranks
        values = [r.total_bytes if r.device == "cuda" else r.tracked_peak_bytes for r in ranks]
        known = [v for v in values if v is not None]
        return max(known) if known else None

    @property
    def comparisons(self) -> tuple[Comparison, ...]:
        """Predicted next to measured where both are about the same device: GPU runs only (a CPU rank's
        time and storage-tracked bytes are not what the plan predicts for its GPU)."""
        if self.measurement is None or self.measurement.environment.device != "cuda":
            return ()
        return (Comparison("step time", "s", self.predicted_step_time_s, self.measured_step_time_s),
                Comparison("per-GPU memory", "bytes", self.predicted_per_gpu_bytes, self.measured_peak_bytes))


@dataclass(frozen=True, slots=True)
class Sweep:
    model: str
    gpu: str
    launcher: str
    steps: int
    rows: tuple[SweepRow, ...]
    notes: tuple[str, ...] = ()
    store_path: str | None = None

    @property
    def measured(self) -> int:
        return sum(1 for r in self.rows if r.measurement is not None)

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.sweep.sweep_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.sweep.render_sweep


def top_layouts(p: Plan, top: int) -> list[tuple[Any, str]]:
    """The plan's best ``top`` layouts (evaluations) in its order, each with how the plan ranks it."""
    ranked = [(p.best, "best"), *p.alternatives]
    return ranked[:top]


def sweep(model: str, p: Plan, *, top: int, steps: int, executor: Executor | None = None, launcher: str = "local",
          timeout_s: float | None = None) -> Sweep:
    """Measure the top ``top`` layouts of ``p`` (the plan of ``model``: the name or path every rank
    resolves again) for ``steps`` steps each, after one warm-up step."""
    from gpuplan.measure.launch import Run, measure_runs
    from gpuplan.measure.layouts import check_layout
    from gpuplan.measure.local import Options

    check_top(top)
    options = Options(steps=steps, warmup=1)
    options.check(p.workload)
    planned: list[SweepRow] = []
    runs: list[Run] = []
    for position, (e, _) in enumerate(top_layouts(p, top), start=1):
        lay = e.layout
        name, why = measured_layout(lay)
        row = SweepRow(position=position, layout=lay.describe(), measured_layout=name, gpus=lay.gpus,
                       micro_batch_size=lay.micro_batch_size, predicted_step_time_s=e.step_time_s,
                       predicted_per_gpu_bytes=e.per_gpu_peak_bytes, predicted_interval=p.interval(e), skipped=why)
        workload = replace(p.workload, batch_size=lay.micro_batch_size, checkpointing=lay.checkpointing)
        if name is not None:
            try:
                check_layout(name, workload)  # e.g. DeepSpeed under AMP: refused here, not after a launch
            except GpuplanError as exc:
                row = replace(row, measured_layout=None, skipped=str(exc))
        planned.append(row)
        if row.measured_layout is not None:
            runs.append(Run(workload, row.measured_layout, lay.gpus))
    outcomes: list[Measurement | GpuplanError] = []
    if runs:
        outcomes = measure_runs(model, runs, options=options, timeout_s=timeout_s, executor=executor)
    results = iter(outcomes)
    rows = []
    for row in planned:
        if row.measured_layout is None:
            rows.append(row)
            continue
        outcome = next(results)
        if isinstance(outcome, GpuplanError):
            rows.append(replace(row, skipped=f"run failed: {outcome}"))
        else:
            estimated = {**outcome.estimated, PLAN_PREDICTION: row.prediction(p.gpu.id)}
            rows.append(replace(row, measurement=replace(outcome, estimated=estimated)))
    notes = []
    if any(r.measured_layout == "zero1" and r.measurement is not None for r in rows):
        notes.append("zero1 rows ran DDP with torch's ZeroRedundancyOptimizer (optimizer state sharded, as DeepSpeed "
                     "ZeRO-1 shards it), not DeepSpeed itself")
    devices = {r.measurement.environment.device for r in rows if r.measurement is not None}
    if "cpu" in devices:
        notes.append(f"measured on CPU ranks (gloo): the predicted times and memory are for {p.gpu.id}; the CPU "
                     "rows show the storage-tracked peak, and their times are not comparable")
    return Sweep(model=p.model, gpu=p.gpu.id, launcher=launcher, steps=steps, rows=tuple(rows),
                 notes=tuple(notes))


__all__ = ["MAX_TOP", "Sweep", "SweepRow", "check_top", "measured_layout", "sweep", "top_layouts"]
