"""Fit the cost model's efficiency factors on the published throughput rows, print the residuals.

    .venv/bin/python scripts/calibrate_fit.py [--csv PATH]

A developer script, not part of the installed package. The published rows come from
``../shared/reference/calibration.csv`` beside the repository (absent elsewhere: the check is skipped).

Fitted: ``tensor_core_matmul``, ``fp32_matmul`` and ``launch_overhead_s`` (the other factors are
priors, see perf/efficiency.py). Loss: sum of squared log errors over the rows of
``calibration.CASES`` except the MFU row, which restates the selective-recompute iteration time.
Method: coordinate descent over 1-D grids (no SciPy), each case traced once. The result is what
``DEFAULT_EFFICIENCY`` holds; the residual table goes into docs/accuracy.md ("## Throughput").
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.perf.calibration import CASES, Case, predict, trace_case
from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency

# the shared reference data sits beside the repository checkout, never at a fixed machine path
REFERENCE_CSV = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "calibration.csv"
GRIDS: dict[str, list[float]] = {
    "tensor_core_matmul": [x / 100 for x in range(30, 96)],
    "fp32_matmul": [x / 100 for x in range(40, 99)],
    "launch_overhead_s": [x * 0.5e-6 for x in range(2, 41)],
}
FIT_EXCLUDED = frozenset({"kor-t5-22b-mfu"})


@dataclass(frozen=True, slots=True)
class Residual:
    case: Case
    estimate: float

    @property
    def error(self) -> float:
        return self.estimate / self.case.published - 1.0


def traced_cases(cases: Sequence[Case] = CASES) -> list[tuple[Case, Any, Any, Any]]:
    """Each case with its trace, workload and GPU; identical (model, workload) traced once."""
    cache: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
    out = []
    for case in cases:
        key = (case.model, repr(sorted(case.workload.items())))
        if key not in cache:
            cache[key] = trace_case(case)
        out.append((case, *cache[key]))
    return out


def residuals(traced: Sequence[tuple[Case, Any, Any, Any]], eff: Efficiency) -> list[Residual]:
    return [Residual(case, predict(case, step, w, gpu, eff)) for case, step, w, gpu in traced]


def _loss(traced: Sequence[tuple[Case, Any, Any, Any]], eff: Efficiency) -> float:
    fitted = [t for t in traced if t[0].row_id not in FIT_EXCLUDED]
    return sum(math.log(r.estimate / r.case.published) ** 2 for r in residuals(fitted, eff))


def fit(
    traced: Sequence[tuple[Case, Any, Any, Any]], start: Efficiency = DEFAULT_EFFICIENCY, rounds: int = 3
) -> Efficiency:
    eff = start
    for _ in range(rounds):
        for name, grid in GRIDS.items():
            best = min(grid, key=lambda v, n=name: _loss(traced, eff.with_(**{n: v})))  # type: ignore[misc]
            eff = eff.with_(**{name: best})
    ids = tuple(case.row_id for case, *_ in traced if case.row_id not in FIT_EXCLUDED)
    return eff.with_(fitted_on=ids)


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
        "| row (calibration.csv) | model / GPU | quantity | estimate | published | error |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in res:
        c = r.case
        where = f"{c.model} on {c.gpu}" + (f", TP {c.tp}" if c.tp > 1 else "")
        lines.append(
            f"| `{c.row_id}` | {where} | {c.quantity} ({c.unit}) | {r.estimate:.3g} "
            f"| {c.published:g} | {100 * r.error:+.1f}% |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--csv", type=Path, default=REFERENCE_CSV)
    args = parser.parse_args(argv)
    for problem in check_reference(args.csv):
        print("WARNING:", problem)
    t0 = time.perf_counter()
    traced = traced_cases()
    t1 = time.perf_counter()
    eff = fit(traced)
    t2 = time.perf_counter()
    print(f"traced {len(traced)} cases in {t1 - t0:.1f} s, fitted in {t2 - t1:.1f} s")
    print(
        f"fitted: tensor_core_matmul={eff.tensor_core_matmul:.2f} fp32_matmul={eff.fp32_matmul:.2f} "
        f"launch_overhead_s={eff.launch_overhead_s:.2e} (loss {_loss(traced, eff):.4f})"
    )
    print("\nwith the fitted factors:\n" + markdown_table(residuals(traced, eff)))
    default_table = markdown_table(residuals(traced, DEFAULT_EFFICIENCY))
    print("\nwith DEFAULT_EFFICIENCY (what gpuplan uses):\n" + default_table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
