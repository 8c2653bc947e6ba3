"""Fit the cost model's shared factors on the public throughput rows, print residuals and the
leave-one-family-out check, and (``--write``) store them in ``perf/data/arch_factors.json``.

    .venv/bin/python scripts/calibrate_fit.py [--csv PATH] [--write]

A developer script, not part of the installed package. The published rows come from
``../shared/reference/calibration.csv`` beside the repository (absent elsewhere: the check is skipped).
Only the public rows of ``calibration.CASES`` are used; the held-out sources the issues name are never read.

Fitted (shared by all architectures): ``tensor_core_matmul`` (large-GEMM fraction of the dense
peak), ``conv_tensor_core`` (cuDNN convolution fraction of that), ``conv_backward`` (backward
convolutions' share of the forward rate: cuDNN wgrad reduces over N·H·W; ``conv_backward_16bit`` the
same for fp16/bf16 convolutions, fitted on the AMP training row), ``fp32_matmul`` and
``launch_overhead_s`` (eager CPU dispatch per kernel) and ``gemm_k_half`` (the K-loop cost of a GEMM,
perf/gemm_shape.py). The per-architecture priors (GEMM scale,
attention, bandwidth, tiles) stay as the data file states them. Loss: sum of squared log errors
over the rows except the MFU row (it restates an iteration time). Method: coordinate descent over
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
GRIDS: dict[str, list[float]] = {
    "tensor_core_matmul": [x / 100 for x in range(40, 99)],
    "conv_tensor_core": [x / 100 for x in range(10, 101, 2)],
    "conv_backward": [x / 100 for x in range(30, 101, 2)],
    "conv_backward_16bit": [x / 100 for x in range(10, 101, 2)],
    "fp32_matmul": [x / 100 for x in range(40, 99)],
    "launch_overhead_s": [x * 1e-6 for x in range(2, 41)],
    "gemm_k_half": [16.0, 32.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0],
}
START: dict[str, float] = {
    "tensor_core_matmul": 0.75,
    "conv_tensor_core": 0.5,
    "conv_backward": 1.0,
    "conv_backward_16bit": 1.0,
    "fp32_matmul": 0.82,
    "launch_overhead_s": 6.5e-6,
    "gemm_k_half": 32.0,
}
"""Start values (what a factor keeps when no row constrains it in a leave-one-family-out fit)."""
FIT_EXCLUDED = frozenset({"kor-t5-22b-mfu"})

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
    return [Residual(c, predict(c, step, w, gpu, effs[arch_key(gpu.arch)])) for c, step, w, gpu in traced]


def _loss(traced: Sequence[Traced], fitted: dict[str, float]) -> float:
    rows = [t for t in traced if t[0].row_id not in FIT_EXCLUDED]
    return sum(math.log(r.estimate / r.case.published) ** 2 for r in residuals(rows, fitted))


def fit(traced: Sequence[Traced], start: dict[str, float] = START, rounds: int = 20) -> dict[str, float]:
    """Coordinate descent until a whole round changes nothing (at most ``rounds``): the convolution
    factors trade off along a valley (forward × backward share), which takes ~10 rounds to cross."""
    fitted = dict(start)
    for _ in range(rounds):
        before = dict(fitted)
        for name, grid in GRIDS.items():
            losses = {v: _loss(traced, {**fitted, name: v}) for v in grid}
            best = min(losses.values())
            # flat loss (no row depends on the factor): keep the start value
            if max(losses.values()) - best > 1e-12:
                fitted[name] = min(grid, key=lambda v: losses[v])
        if fitted == before:
            break
    return fitted


def leave_one_family_out(traced: Sequence[Traced]) -> list[Residual]:
    out: list[Residual] = []
    for family in sorted({c.family for c, *_ in traced}):
        rest = [t for t in traced if t[0].family != family]
        fitted = fit(rest, rounds=2)
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
        where = f"{c.model} on {c.gpu}" + (f", TP {c.tp}" if c.tp > 1 else "")
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


def write_factors(fitted: dict[str, float], res: Sequence[Residual], lofo: Sequence[Residual],
                  loss: float, path: Path = FACTORS_FILE) -> None:
    data = load_factors(path)
    ids = [c.row_id for c in CASES if c.row_id not in FIT_EXCLUDED]
    data["fitted"] = {
        **{k: round(v, 9) for k, v in fitted.items()},
        "fitted_on": ids,
        "method": "scripts/calibrate_fit.py: coordinate descent, sum of squared log errors",
        "loss": round(loss, 6),
        "leave_one_family_out": {r.case.row_id: round(r.error, 4) for r in lofo},
    }
    for key, arch in data["architectures"].items():
        arch["residuals"] = {r.case.row_id: round(r.error, 4) for r in res if arch_key(get_gpu(r.case.gpu).arch) == key}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--csv", type=Path, default=REFERENCE_CSV)
    parser.add_argument("--write", action="store_true", help="store the fit in perf/data/arch_factors.json")
    parser.add_argument("--no-lofo", action="store_true", help="skip the leave-one-family-out refits")
    args = parser.parse_args(argv)
    for problem in check_reference(args.csv):
        print("WARNING:", problem)
    t0 = time.perf_counter()
    traced = traced_cases()
    t1 = time.perf_counter()
    fitted = fit(traced)
    t2 = time.perf_counter()
    loss = _loss(traced, fitted)
    print(f"traced {len(traced)} cases in {t1 - t0:.1f} s, fitted in {t2 - t1:.1f} s")
    print("fitted: " + " ".join(f"{k}={v:.3g}" for k, v in fitted.items()) + f" (loss {loss:.4f})")
    res = residuals(traced, fitted)
    print("\nwith the fitted factors:\n" + markdown_table(res) + "\n\n" + family_summary(res))
    lofo: list[Residual] = []
    if not args.no_lofo:
        lofo = leave_one_family_out(traced)
        print("\nleave one family out (refit without it, predict it):\n" + markdown_table(lofo)
              + "\n\n" + family_summary(lofo))
    if args.write:
        write_factors(fitted, res, lofo, loss)
        print(f"\nwrote {FACTORS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
