"""Fit Megatron-LM's GEMM-rate factor (``parallel/data/engine_factors.json``: ``megatron.gemm_scale``)
on one group of public Megatron rows and check it on the other, both ways.

    .venv/bin/python scripts/fit_engine_factors.py [--write]

A developer script, not part of the installed package. Rows (public, ``shared/reference/calibration.csv``):
``kor-t5-22b-iter-sel`` / ``-iter-full`` (Korthikanti et al. 2022 Table 5, iteration seconds) and
``meg-t1-*`` (Narayanan et al. 2021 Table 1, TFLOP/s per GPU). The stored factor is the one fitted on
the Korthikanti rows; the Table 1 rows are its check (and the reverse fit is printed for comparison).
Each row is planned once (its layout as the test plans it), traced once, and re-timed per factor
value (``profile_from_step(..., megatron_gemm_scale=g)``). Loss: sum of squared log errors.
No held-out source is read: only the rows named here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "parallel"))

from megatron_configs import MEGATRON_T1, SEQ, gpt_config, megatron_flops  # noqa: E402
from test_megatron import KORTHIKANTI_T5, korthikanti_plan, megatron_plan  # noqa: E402

from gpuplan.memory.overheads import overheads_for  # noqa: E402
from gpuplan.models.sources import HFConfigSource  # noqa: E402
from gpuplan.parallel.engine import ENGINE_FACTORS_FILE  # noqa: E402
from gpuplan.parallel.evaluate import Context, evaluate  # noqa: E402
from gpuplan.parallel.profile import profile_from_step  # noqa: E402
from gpuplan.trace.step import trace_step  # noqa: E402

GRID = [x / 100 for x in range(50, 121)]


@dataclass
class Row:
    row_id: str
    measured: float
    estimate: Callable[[float], float]
    """Modelled value in the row's unit at a factor value."""


def _source(row_id: str) -> HFConfigSource:
    """The model source of a row, built as its test builds it."""
    if row_id in MEGATRON_T1:
        h, layers, heads = MEGATRON_T1[row_id][:3]
        return HFConfigSource(row_id, gpt_config(h, layers, heads), default_seq_len=SEQ)
    return HFConfigSource("gpt-22b", gpt_config(6144, 48, 64), default_seq_len=SEQ)


def _timer(p: Any, src: HFConfigSource) -> Callable[[float], float]:
    """Step seconds of plan ``p``'s chosen layout as a function of the factor (``src`` traced once)."""
    w, gpu = p.profile.workload, p.gpu
    step = trace_step(src, w, compute_capability=gpu.compute_capability or (9, 0))
    over = overheads_for(arch=gpu.arch, vendor=gpu.vendor, compute_capability=gpu.compute_capability, trains=True)
    cache: dict[float, float] = {}

    def at(g: float) -> float:
        if g not in cache:
            prof_g = profile_from_step(step, src, w, gpu, megatron_gemm_scale=g)
            ctx = Context(prof_g, p.topology, p.usable_bytes, over.cuda_context_bytes + over.workspace_bytes)
            cache[g] = evaluate(ctx, p.best.layout).step_time_s
        return cache[g]

    return at


def rows() -> tuple[list[Row], list[Row]]:
    kor, meg = [], []
    for row_id, (_, _, measured) in KORTHIKANTI_T5.items():
        kor.append(Row(row_id, measured, _timer(korthikanti_plan(row_id), _source(row_id))))
    for row_id, (h, layers, _, tp, pp, dp, gb, measured) in MEGATRON_T1.items():
        t = _timer(megatron_plan(row_id), _source(row_id))
        flops = megatron_flops(gb, layers, h)

        def tflops(g: float, t: Callable[[float], float] = t, f: float = flops, n: int = tp * pp * dp) -> float:
            return f / (t(g) * n) / 1e12

        meg.append(Row(row_id, measured, tflops))
    return kor, meg


def loss(group: list[Row], g: float) -> float:
    return sum(math.log(r.estimate(g) / r.measured) ** 2 for r in group)


def fit(group: list[Row]) -> float:
    # coarse grid, then the neighbourhood of its best at the grid's step
    coarse = GRID[::5]
    best = min(coarse, key=lambda g: loss(group, g))
    fine = [g for g in GRID if abs(g - best) <= 0.05 + 1e-9]
    return min(fine, key=lambda g: loss(group, g))


def residuals(group: list[Row], g: float) -> dict[str, float]:
    return {r.row_id: round(r.estimate(g) / r.measured - 1, 4) for r in group}


def _signed(errs: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:+.1%}" for k, v in errs.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="store the Korthikanti-fitted factor")
    args = ap.parse_args(argv)
    kor, meg = rows()
    g_kor = fit(kor)
    g_meg = fit(meg)
    fit_res, check_res = residuals(kor, g_kor), residuals(meg, g_kor)
    rev_fit, rev_check = residuals(meg, g_meg), residuals(kor, g_meg)
    print(f"fit on Korthikanti Table 5: gemm_scale = {g_kor:.2f}")
    print(f"  fitted rows: {_signed(fit_res)}")
    print(f"  check, Megatron Table 1: {_signed(check_res)}")
    print(f"reverse: fit on Megatron Table 1: gemm_scale = {g_meg:.2f}")
    print(f"  fitted rows: {_signed(rev_fit)}")
    print(f"  check, Korthikanti Table 5: {_signed(rev_check)}")
    if args.write:
        data = json.loads(ENGINE_FACTORS_FILE.read_text(encoding="utf-8"))
        data["megatron"] = {
            "gemm_scale": g_kor,
            "source": "Megatron-LM 2021/22 runs on DGX A100 (Selene): Korthikanti et al. 2022 "
            "(arXiv:2205.05198) Table 5 iteration times; checked on Narayanan et al. 2021 "
            "(arXiv:2104.04473) Table 1",
            "method": "scripts/fit_engine_factors.py: 1-D grid 0.50-1.20 (step 0.01), sum of squared log "
            "errors, each row traced once at the layout its test plans",
            "fitted_on": sorted(fit_res),
            "residuals": fit_res,
            "check": check_res,
            "reverse_fit": {"fitted_on": sorted(rev_fit), "gemm_scale": g_meg, "residuals": rev_fit,
                            "check": rev_check},
        }
        ENGINE_FACTORS_FILE.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {ENGINE_FACTORS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
