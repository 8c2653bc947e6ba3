"""Fit the cost model's shared factors on the public throughput rows, print residuals and the
leave-one-family-out check, and (``--write``) store them in ``perf/data/arch_factors.json``.

The per-generation fit on the public benchmark matrices (``fit_generations``, ``op_table``) lives
here too and is driven by ``scripts/accuracy.py``, which writes each generation's own factors
(``architectures.<arch>.fitted``) over these shared ones.

    .venv/bin/python scripts/calibrate_fit.py [--csv PATH] [--write]

A developer script, not part of the installed package. The published rows come from
``../shared/reference/calibration.csv`` beside the repository (absent elsewhere: the check is skipped).
Only the public rows of ``calibration.CASES`` are used; the held-out sources the issues name are never read.

Fitted (shared by all architectures): ``tensor_core_matmul`` (large-GEMM fraction of the dense
peak), ``conv_tensor_core`` (cuDNN convolution fraction of that), ``conv_backward`` (backward
convolutions' share of the forward rate: cuDNN wgrad reduces over N·H·W; ``conv_backward_16bit`` the
same for fp16/bf16 convolutions, fitted on the AMP training row), ``conv_backward_traffic`` (DRAM bytes a
backward convolution moves per traced operand byte: cuDNN's NCHW<->NHWC transforms, a multiplier of its memory
time; profiled: each value of its grid with the others refitted, the best kept),
``fp32_matmul`` and
``launch_overhead_s`` (eager CPU dispatch per kernel) and ``gemm_k_half`` (the K-loop cost of a GEMM,
perf/gemm_shape.py). The per-architecture priors (GEMM scale,
attention, bandwidth, tiles) stay as the data file states them. Loss: sum of squared log errors
over the rows. Method: coordinate descent over
1-D grids (no SciPy), each case traced once. Leave-one-family-out: refit without a family's rows
(a factor no remaining row constrains keeps its start value) and predict that family.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.hardware import get_gpu
from gpuplan.perf.calibration import CASES, Case, predict, trace_case
from gpuplan.perf.efficiency import FACTORS_FILE, arch_key, build_efficiencies, load_factors

# the shared reference data sits beside the repository checkout, never at a fixed machine path
REFERENCE_CSV = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "calibration.csv"


def _bounds() -> tuple[float, float]:
    """Upper bounds of the shared GEMM fractions, from the factors file (sourced there): the large-GEMM
    fraction times no generation's ``gemm_scale`` may pass that generation's public ``gemm_cap`` (the
    binding one is the A100's MAMF 0.87), and the CUDA-core fp32 fraction stays under ``bounds.fp32_matmul``
    (the largest public cuBLAS SGEMM fraction)."""
    data = load_factors()
    archs = data["architectures"].values()
    return min(float(a["gemm_cap"]) / float(a["gemm_scale"]) for a in archs), float(data["bounds"]["fp32_matmul"])


TENSOR_CORE_BOUND, FP32_BOUND = _bounds()
GRIDS: dict[str, list[float]] = {
    "tensor_core_matmul": [x / 100 for x in range(40, 99) if x / 100 <= TENSOR_CORE_BOUND + 1e-9],
    "conv_tensor_core": [x / 100 for x in range(10, 101, 2)],
    "conv_backward": [x / 100 for x in range(30, 101, 2)],
    "conv_backward_16bit": [x / 100 for x in range(10, 101, 2)],
    "conv_backward_traffic": [x / 2 for x in range(2, 17)],
    "fp32_matmul": [x / 100 for x in range(40, 99) if x / 100 <= FP32_BOUND + 1e-9],
    "elementwise": [x / 100 for x in range(20, 101, 2)],
    "launch_overhead_s": [x * 1e-6 for x in range(2, 41)],
    "gemm_k_half": [16.0, 32.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0],
}
START: dict[str, float] = {
    "tensor_core_matmul": 0.75,
    "conv_tensor_core": 0.5,
    "conv_backward": 1.0,
    "conv_backward_16bit": 1.0,
    "conv_backward_traffic": 1.0,
    "fp32_matmul": 0.82,
    "elementwise": 1.0,
    "launch_overhead_s": 6.5e-6,
    "gemm_k_half": 32.0,
}
"""Start values (what a factor keeps when no row constrains it in a leave-one-family-out fit)."""
FIT_EXCLUDED: frozenset[str] = frozenset()
"""Rows of CASES kept out of the loss (none: the Korthikanti Megatron rows, one of them an MFU restating an
iteration time, left CASES for the planner's Megatron engine, perf/calibration.py's docstring)."""

Traced = tuple[Case, Any, Any, Any]


@dataclass(frozen=True, slots=True)
class Residual:
    case: Case
    estimate: float

    @property
    def error(self) -> float:
        return self.estimate / self.case.published - 1.0


def traced_cases(cases: Sequence[Case] = CASES) -> list[Traced]:
    """Each case with its trace, workload and GPU; identical (model, workload) traced once."""
    cache: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
    out = []
    for case in cases:
        key = (case.model, repr(sorted(case.workload.items())) + case.gpu)
        if key not in cache:
            cache[key] = trace_case(case)
        out.append((case, *cache[key]))
    return out


def residuals(traced: Sequence[Traced], fitted: dict[str, float], data: dict[str, Any] | None = None) -> list[Residual]:
    base = data or load_factors()
    effs = build_efficiencies({**base, "fitted": {**base["fitted"], **fitted}})
    return [Residual(c, predict(c, step, w, gpu, effs[arch_key(gpu)])) for c, step, w, gpu in traced]


def _loss(traced: Sequence[Traced], fitted: dict[str, float]) -> float:
    rows = [t for t in traced if t[0].row_id not in FIT_EXCLUDED]
    return sum(math.log(r.estimate / r.case.published) ** 2 for r in residuals(rows, fitted))


PROFILED: tuple[str, ...] = ("conv_backward_traffic",)
"""Factors fitted by profiling: every value of the grid, the other searched factors refitted at each, the
lowest loss kept. Coordinate descent alone stalls at the start: a backward convolution's extra bytes cost
more loss than they save until its FLOP fractions move with them (the A100 training rows fit either way)."""


def fit(traced: Sequence[Traced], start: dict[str, float] = START, rounds: int = 20,
        only: frozenset[str] | None = None) -> dict[str, float]:
    """The factors of GRIDS (``only``: these alone, the others kept at ``start``) by coordinate descent,
    the PROFILED ones by profiling over their grids (a flat profile, no row depending on it: its start)."""
    searched = [n for n in GRIDS if only is None or n in only]
    if only is not None:  # rows no searched factor moves add a constant to every loss: leave them out
        traced = _depending_on(traced, start, searched)
    for name in (n for n in PROFILED if n in searched):
        rest = [n for n in searched if n != name]
        fits = [_descend(traced, {**start, name: v}, rounds, rest) for v in GRIDS[name]]
        losses = [_loss(traced, f) for f in fits]
        if max(losses) - min(losses) <= 1e-12:
            return _descend(traced, dict(start), rounds, rest)
        return fits[losses.index(min(losses))]
    return _descend(traced, dict(start), rounds, searched)


def _depending_on(traced: Sequence[Traced], start: dict[str, float], names: Sequence[str]) -> list[Traced]:
    """The cases whose estimate changes when one of ``names`` goes to either end of its grid (each op's
    time is monotone in every factor, so a row the ends leave alone no value moves)."""
    base = [r.estimate for r in residuals(traced, start)]
    moved: set[int] = set()
    for name in names:
        for value in (GRIDS[name][0], GRIDS[name][-1]):
            est = [r.estimate for r in residuals(traced, {**start, name: value})]
            moved |= {i for i, (a, b) in enumerate(zip(base, est, strict=True)) if a != b}
    return [t for i, t in enumerate(traced) if i in moved]


def _descend(traced: Sequence[Traced], start: dict[str, float], rounds: int, names: Sequence[str]) -> dict[str, float]:
    """Coordinate descent over ``names`` until a whole round changes nothing (at most ``rounds``): the
    convolution factors trade off along a valley (forward × backward share), which takes ~10 rounds to cross."""
    fitted = dict(start)
    for _ in range(rounds):
        before = dict(fitted)
        for name in names:
            grid = GRIDS[name]
            losses = {v: _loss(traced, {**fitted, name: v}) for v in grid}
            best = min(losses.values())
            # flat loss (no row depends on the factor): keep the start value
            if max(losses.values()) - best > 1e-12:
                fitted[name] = min(grid, key=lambda v: losses[v])
        if fitted == before:
            break
    return fitted


def leave_one_family_out(traced: Sequence[Traced], start: dict[str, float] = START,
                         only: frozenset[str] | None = None) -> list[Residual]:
    out: list[Residual] = []
    for family in sorted({c.family for c, *_ in traced}):
        rest = [t for t in traced if t[0].family != family]
        fitted = fit(rest, start, rounds=2, only=only)
        out.extend(residuals([t for t in traced if t[0].family == family], fitted))
    return out


def check_reference(path: Path = REFERENCE_CSV) -> list[str]:
    """Differences between CASES and the reference CSV (empty when they agree or it is absent)."""
    if not path.exists():
        return []
    rows = {r["id"]: r for r in csv.DictReader(path.open(encoding="utf-8"))}
    problems = []
    for case in CASES:
        row = rows.get(case.row_id)
        if row is None:
            problems.append(f"{case.row_id}: not in {path}")
        elif abs(float(row["value"]) - case.published) > 1e-9:
            problems.append(f"{case.row_id}: {case.published} here, {row['value']} in {path}")
    return problems


def markdown_table(res: Sequence[Residual]) -> str:
    lines = [
        "| row (calibration.csv) | family | model / GPU | quantity | estimate | published | error |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for r in res:
        c = r.case
        where = f"{c.model} on {c.gpu}" + (f", {c.dp} GPUs (DDP)" if c.dp > 1 else "")
        lines.append(
            f"| `{c.row_id}` | {c.family} | {where} | {c.quantity} ({c.unit}) | {r.estimate:.4g} "
            f"| {c.published:g} | {100 * r.error:+.1f}% |"
        )
    return "\n".join(lines)


def family_summary(res: Sequence[Residual]) -> str:
    lines = ["| family | rows | median abs error | worst abs error |", "|---|---:|---:|---:|"]
    for family in sorted({r.case.family for r in res}):
        errs = [abs(r.error) for r in res if r.case.family == family]
        lines.append(f"| {family} | {len(errs)} | {100 * statistics.median(errs):.1f}% | {100 * max(errs):.1f}% |")
    errs = [abs(r.error) for r in res]
    lines.append(f"| all | {len(errs)} | {100 * statistics.median(errs):.1f}% | {100 * max(errs):.1f}% |")
    return "\n".join(lines)


def keep_megatron_product(old_ampere: float, new_ampere: float, by: str) -> None:
    """Megatron's engine factor multiplies Ampere's large-GEMM fraction (parallel/engine.py): rescale it so
    the product its Megatron fit found (scripts/fit_engine_factors.py, Korthikanti Table 5) is kept and the
    Megatron rows are costed as before a refit of the architecture factors."""
    from gpuplan.parallel.engine import ENGINE_FACTORS_FILE

    if abs(new_ampere - old_ampere) <= 1e-9:
        return
    engine = json.loads(ENGINE_FACTORS_FILE.read_text(encoding="utf-8"))
    meg = engine["megatron"]
    meg["gemm_scale"] = round(meg["gemm_scale"] * old_ampere / new_ampere, 4)
    meg["rescaled"] = (f"{by} rescaled gemm_scale by {old_ampere:.4g}/{new_ampere:.4g} (Ampere's refitted large-GEMM "
                       "fraction) so gemm_scale x that fraction is what scripts/fit_engine_factors.py fitted; refit it "
                       "there to re-derive")
    ENGINE_FACTORS_FILE.write_text(json.dumps(engine, indent=2) + "\n", encoding="utf-8")
    print(f"rescaled megatron gemm_scale to {meg['gemm_scale']}")


def write_factors(fitted: dict[str, float], res: Sequence[Residual], lofo: Sequence[Residual],
                  loss: float, path: Path = FACTORS_FILE, only: frozenset[str] | None = None) -> None:
    """Store the fit; after a restricted one (``only``) the stored leave-one-family-out residuals of the rows
    it did not refit are kept."""
    from gpuplan.perf.efficiency import ARCH_EFFICIENCY

    data = load_factors(path)
    old_ampere = ARCH_EFFICIENCY["ampere"].tensor_core_matmul
    ids = [c.row_id for c in CASES if c.row_id not in FIT_EXCLUDED]
    method = "scripts/calibrate_fit.py: coordinate descent, sum of squared log errors"
    if only is not None:
        method += f"; last refit restricted to {', '.join(sorted(only))} (--only), the rest as fitted before"
    kept = data["fitted"].get("leave_one_family_out", {}) if only is not None else {}
    data["fitted"] = {
        **{k: round(v, 9) for k, v in fitted.items()},
        "fitted_on": ids,
        "method": method,
        "loss": round(loss, 6),
        "leave_one_family_out": {**kept, **{r.case.row_id: round(r.error, 4) for r in lofo}},
    }
    for key, arch in data["architectures"].items():
        arch["residuals"] = {r.case.row_id: round(r.error, 4) for r in res if arch_key(get_gpu(r.case.gpu)) == key}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    new_ampere = build_efficiencies(data)["ampere"].tensor_core_matmul
    keep_megatron_product(old_ampere, new_ampere, "scripts/calibrate_fit.py --write")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--csv", type=Path, default=REFERENCE_CSV)
    parser.add_argument("--write", action="store_true", help="store the fit in perf/data/arch_factors.json")
    parser.add_argument("--no-lofo", action="store_true", help="skip the leave-one-family-out refits")
    parser.add_argument("--only", help="comma-separated factors to refit (coordinate descent over these alone, "
                                       "the others kept at the shipped values), e.g. conv_tensor_core,conv_traffic")
    args = parser.parse_args(argv)
    only = frozenset(args.only.split(",")) if args.only else None
    if only is not None and not only <= GRIDS.keys():
        parser.error(f"--only {args.only}: unknown factor {', '.join(sorted(only - GRIDS.keys()))}; "
                     f"choose from {', '.join(GRIDS)}")
    # a restricted refit keeps the other factors as they ship; the searched ones start where a full fit does
    # (so a leave-one-family-out fold that no remaining row constrains never inherits the shipped fit)
    shipped = load_factors()["fitted"]
    start = START if only is None else {k: v if k in only else float(shipped.get(k, v)) for k, v in START.items()}
    for problem in check_reference(args.csv):
        print("WARNING:", problem)
    t0 = time.perf_counter()
    from gpuplan.trace.cache import TraceCache, use_trace_cache

    with use_trace_cache(TraceCache.default()):  # the user's trace cache: a rerun re-traces nothing
        traced = traced_cases()
    t1 = time.perf_counter()
    fitted = fit(traced, start, only=only)
    t2 = time.perf_counter()
    loss = _loss(traced, fitted)
    print(f"traced {len(traced)} cases in {t1 - t0:.1f} s, fitted in {t2 - t1:.1f} s")
    print("fitted: " + " ".join(f"{k}={v:.3g}" for k, v in fitted.items()) + f" (loss {loss:.4f})")
    res = residuals(traced, fitted)
    print("\nwith the fitted factors:\n" + markdown_table(res) + "\n\n" + family_summary(res))
    lofo: list[Residual] = []
    if not args.no_lofo:
        lofo = leave_one_family_out(traced, start, only)
        if only is not None:
            # a row whose estimate its family's fold moves by under 1% (no searched factor, or the fold refits them
            # as the whole fit did) keeps the stored full refit's residual: that fold refitted every factor
            fitted_estimate = {r.case.row_id: r.estimate for r in res}
            lofo = [r for r in lofo if abs(r.estimate / fitted_estimate[r.case.row_id] - 1) > 0.01]
        print("\nleave one family out (refit without it, predict it):\n" + markdown_table(lofo)
              + "\n\n" + family_summary(lofo))
    if args.write:
        write_factors(fitted, res, lofo, loss, only=only)
        print(f"\nwrote {FACTORS_FILE}")
    return 0


# ---------------------------------------------------------------------------------------------------
# Per-generation fit on the public benchmark matrices (scripts/accuracy.py drives it).
#
# A row's step time is step_time's sum, rewritten so the fitted factors can change without re-walking
# the trace: each kernel's compute time at factor 1 (op_time with the fitted factors set to 1), its
# memory time and GPU gap (priors, fixed), its phase, and which fitted factors divide its compute
# (an exponent vector). ``table_time`` is then step_time's arithmetic: per op max(compute / Π factors,
# memory) + gap, per phase the longer of the GPU sum and the eager CPU dispatch (launch × kernels).
# ``check_table`` proves it equals step_time on the row.

GEN_FACTORS: tuple[str, ...] = ("tensor_core_matmul", "conv_tensor_core", "conv_backward", "conv_backward_16bit",
                                "fp32_matmul", "elementwise", "conv_backward_traffic")
ELEMENTWISE = GEN_FACTORS.index("elementwise")
"""The factor that divides the memory time (not the compute) of memory-bound non-GEMM kernels."""
CONV_TRAFFIC = GEN_FACTORS.index("conv_backward_traffic")
"""The factor that multiplies a backward convolution's memory time (exponent -1 on the memory side)."""
MEMORY_SIDE = (ELEMENTWISE, CONV_TRAFFIC)
"""Columns of OpTable.exps that act on the memory time, not the compute time."""
"""Factors fitted per GPU generation (the launch overhead is the host CPU's: shared)."""
GEN_GRIDS: dict[str, list[float]] = {k: v for k, v in GRIDS.items() if k not in ("gemm_k_half", "launch_overhead_s")}
"""The shared fit's grids. The K-loop cost stays a shared prior here, and the eager dispatch cost
(the host CPU's, fitted by this script's own fit) is not refitted: on the public matrices it runs to
the grid's end (40 µs), absorbing per-step host work the rows do not state."""


@dataclass(frozen=True)
class OpTable:
    base_s: Any
    """(n,) compute seconds of one execution at fitted factors 1"""
    memory_s: Any
    gap_s: Any
    count: Any
    phase: Any
    """(n,) phase index"""
    exps: Any
    """(n, len(GEN_FACTORS)) 1 where the factor divides the op's compute (the MEMORY_SIDE columns: its memory
    time; -1 where it multiplies it, conv_traffic)"""
    kernels_by_phase: Any
    """(phases,) kernel launches per phase (what eager dispatch pays for)"""
    const_by_phase: Any
    """(phases,) GPU seconds of the ops no fitted factor touches (attention; every gap), summed"""
    elem_by_phase: Any = None
    """(phases,) memory seconds of the purely memory-bound elementwise ops at factor 1, summed (each
    divided by the elementwise factor; kept out of the per-op arrays, which keeps a fold's refit fast)"""


def op_table(step: Any, workload: Any, gpu: Any, eff: Any) -> OpTable:
    import numpy as np

    from gpuplan.perf.roofline import launches_kernel, op_time, rate_key, streams_at_copy_rate

    unit = eff.with_(**dict.fromkeys(GEN_FACTORS, 1.0))
    phases: dict[str, int] = {}
    base, mem, gap, cnt, ph, ex = [], [], [], [], [], []
    kernels: dict[int, float] = {}
    const: dict[int, float] = {}
    for op in step.ops:
        if not launches_kernel(op):
            continue
        t = op_time(op, gpu, workload.precision, unit)
        p = phases.setdefault(op.phase, len(phases))
        e = [0.0] * len(GEN_FACTORS)
        if op.op_class == "other":
            e[ELEMENTWISE] = 0.0 if streams_at_copy_rate(op) else 1.0
        elif op.flops > 0 and op.op_class in ("matmul", "conv", "attention"):
            _, tensor = rate_key(op, workload.precision, gpu)
            if op.op_class == "attention":
                e[4] = 0.0 if tensor else 1.0
            else:
                e[0 if tensor else 4] = 1.0
                if op.op_class == "conv":
                    e[1] = 1.0
                    if op.phase == "backward":
                        e[3 if op.dtype in ("float16", "bfloat16") else 2] = 1.0
                        e[CONV_TRAFFIC] = -1.0  # multiplies its memory time
        kernels[p] = kernels.get(p, 0.0) + op.count
        if not any(e):
            const[p] = const.get(p, 0.0) + t.total_s * op.count
            continue
        base.append(t.compute_s)
        mem.append(t.memory_s)
        gap.append(t.overhead_s)
        cnt.append(op.count)
        ph.append(p)
        ex.append(e)
    n = len(phases)
    return compact(OpTable(np.array(base), np.array(mem), np.array(gap), np.array(cnt, dtype=float),
                           np.array(ph, dtype=int), np.array(ex).reshape(len(base), len(GEN_FACTORS)),
                           np.array([kernels.get(i, 0.0) for i in range(n)]),
                           np.array([const.get(i, 0.0) for i in range(n)])))


def compact(t: OpTable) -> OpTable:
    """Fold the ops whose time is their memory time over the elementwise factor (no compute) into
    per-phase sums: max(0, m / f) + gap summed is Σm / f + Σgap."""
    import numpy as np

    if t.elem_by_phase is not None:
        return t
    n = len(t.kernels_by_phase)
    pure = (t.exps[:, ELEMENTWISE] > 0) & (t.base_s <= 0) if len(t.base_s) else np.zeros(0, dtype=bool)
    keep = ~pure
    elem = np.bincount(t.phase[pure], weights=(t.memory_s * t.count)[pure], minlength=n)
    const = t.const_by_phase + np.bincount(t.phase[pure], weights=(t.gap_s * t.count)[pure], minlength=n)
    return OpTable(t.base_s[keep], t.memory_s[keep], t.gap_s[keep], t.count[keep], t.phase[keep], t.exps[keep],
                   t.kernels_by_phase, const, elem)


def table_time(t: OpTable, factors: Any, launch_s: float) -> float:
    """Step seconds of a table at ``factors`` (array in GEN_FACTORS order) and the eager launch cost."""
    import numpy as np

    logf = np.log(factors)
    side = list(MEMORY_SIDE)
    compute = t.exps.copy()
    compute[:, side] = 0.0
    per_op = (np.maximum(t.base_s / np.exp(compute @ logf), t.memory_s / np.exp(t.exps[:, side] @ logf[side]))
              + t.gap_s) * t.count
    gpu_by_phase = (np.bincount(t.phase, weights=per_op, minlength=len(t.kernels_by_phase)) + t.const_by_phase
                    + t.elem_by_phase / factors[ELEMENTWISE])
    return float(np.maximum(gpu_by_phase, launch_s * t.kernels_by_phase).sum())


def factor_vector(eff: Any) -> Any:
    import numpy as np

    return np.array([getattr(eff, f) for f in GEN_FACTORS])


def check_table(step: Any, workload: Any, gpu: Any, eff: Any) -> float:
    """Relative difference between table_time and step_time on one row (0 up to rounding)."""
    from gpuplan.perf.step_time import step_time

    ref = step_time(step, gpu, workload, efficiency=eff).total_s
    return table_time(op_table(step, workload, gpu, eff), factor_vector(eff), eff.launch_overhead_s) / ref - 1


@dataclass(frozen=True)
class FitRow:
    """One public row in the generation fit: its table, generation, measured step seconds and the
    step seconds the fit does not touch (exposed multi-GPU communication)."""

    row_id: str
    arch: str
    table: OpTable
    measured_s: float
    fixed_s: float = 0.0


class Batch:
    """Many rows' tables stacked, so one numpy pass times them all (what makes a refit per
    cross-validation fold affordable)."""

    def __init__(self, rows: Sequence[FitRow]) -> None:
        import numpy as np

        self.rows = list(rows)
        self.archs = sorted({r.arch for r in rows})
        self.arch_of_row = np.array([self.archs.index(r.arch) for r in rows], dtype=int)
        offsets = np.cumsum([0] + [len(r.table.kernels_by_phase) for r in rows])
        self.row_of_op = np.concatenate([np.full(len(r.table.base_s), i, dtype=int) for i, r in enumerate(rows)])
        self.slot_of_op = np.concatenate([r.table.phase + offsets[i] for i, r in enumerate(rows)]).astype(int)
        self.row_of_slot = np.concatenate([np.full(len(r.table.kernels_by_phase), i, dtype=int)
                                           for i, r in enumerate(rows)])
        self.base_s = np.concatenate([r.table.base_s for r in rows])
        self.memory_s = np.concatenate([r.table.memory_s for r in rows])
        self.gap_s = np.concatenate([r.table.gap_s for r in rows])
        self.count = np.concatenate([r.table.count for r in rows])
        exps = np.concatenate([r.table.exps for r in rows])
        self.mem_exps = exps[:, list(MEMORY_SIDE)].copy()
        exps[:, list(MEMORY_SIDE)] = 0.0
        self.exps = exps
        self.kernels = np.concatenate([r.table.kernels_by_phase for r in rows])
        self.const = np.concatenate([r.table.const_by_phase for r in rows])
        self.elem = np.concatenate([r.table.elem_by_phase for r in rows])
        self.arch_of_slot = self.arch_of_row[self.row_of_slot]
        self.fixed_s = np.array([r.fixed_s for r in rows])
        self.log_measured = np.log(np.array([r.measured_s for r in rows]))
        self.n_slots = len(self.kernels)

    def times(self, factors_by_arch: dict[str, Any], launch_s: float) -> Any:
        """Step seconds of every row; ``factors_by_arch`` maps each generation to a GEN_FACTORS array."""
        import numpy as np

        logf = np.log(np.array([factors_by_arch[a] for a in self.archs]))[self.arch_of_row]  # (rows, F)
        frac = np.exp((self.exps * logf[self.row_of_op]).sum(axis=1))
        mem = self.memory_s / np.exp((self.mem_exps * logf[self.row_of_op][:, list(MEMORY_SIDE)]).sum(axis=1))
        per_op = (np.maximum(self.base_s / frac, mem) + self.gap_s) * self.count
        elem_f = np.array([factors_by_arch[a][ELEMENTWISE] for a in self.archs])[self.arch_of_slot]
        gpu = np.bincount(self.slot_of_op, weights=per_op, minlength=self.n_slots) + self.const + self.elem / elem_f
        slot = np.maximum(gpu, launch_s * self.kernels)
        return np.bincount(self.row_of_slot, weights=slot, minlength=len(self.rows)) + self.fixed_s

    def loss(self, factors_by_arch: dict[str, Any], launch_s: float) -> float:
        import numpy as np

        return float(((np.log(self.times(factors_by_arch, launch_s)) - self.log_measured) ** 2).sum())


def fit_generations(rows: Sequence[FitRow], caps: dict[str, float], start: dict[str, float],
                    shrink: float = 2.0, rounds: int = 6) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per-generation factors: first one shared set over every row (coordinate descent over
    GEN_GRIDS, large-GEMM fraction capped at the highest generation cap), then each generation's own
    set with a penalty ``shrink`` × Σ log²(own / shared) that pulls a generation with few rows to the
    shared values (a generation with no row keeps them). The large-GEMM fraction of a generation is
    capped at ``caps[arch]`` (public GEMM benchmarks). Returns (per-generation, shared)."""
    import numpy as np

    batch = Batch(rows)
    top = max(caps.values())
    shared = dict(start)

    def vec(d: dict[str, float]) -> Any:
        return np.array([d[f] for f in GEN_FACTORS])

    def shared_loss(d: dict[str, float]) -> float:
        return batch.loss(dict.fromkeys(batch.archs, vec(d)), d["launch_overhead_s"])

    for _ in range(rounds):
        before = dict(shared)
        for name, grid in GEN_GRIDS.items():
            grid = [g for g in grid if name != "tensor_core_matmul" or g <= top]
            losses = {g: shared_loss({**shared, name: g}) for g in grid}
            if max(losses.values()) - min(losses.values()) > 1e-12:
                shared[name] = min(grid, key=lambda g: losses[g])
        if shared == before:
            break
    launch = shared["launch_overhead_s"]
    own: dict[str, dict[str, float]] = {}
    for arch in batch.archs:
        mine = Batch([r for r in rows if r.arch == arch])
        cap = caps.get(arch, top)
        cur = {f: min(shared[f], cap) if f == "tensor_core_matmul" else shared[f] for f in GEN_FACTORS}

        def loss(d: dict[str, float], mine: Batch = mine, arch: str = arch) -> float:
            penalty = shrink * sum(math.log(d[f] / shared[f]) ** 2 for f in GEN_FACTORS)
            return mine.loss({arch: vec(d)}, launch) + penalty

        for _ in range(rounds):
            before = dict(cur)
            for name in GEN_FACTORS:
                grid = [g for g in GEN_GRIDS[name] if name != "tensor_core_matmul" or g <= cap]
                losses = {g: loss({**cur, name: g}) for g in grid}
                cur[name] = min(grid, key=lambda g: losses[g])
            if cur == before:
                break
        own[arch] = cur
    return own, shared


if __name__ == "__main__":
    raise SystemExit(main())
