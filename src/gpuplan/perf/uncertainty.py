"""The 80% prediction interval of a modelled time, from the cross-validated residuals of the public
benchmark rows (``perf/data/residuals.json``, written by ``scripts/accuracy.py``; never by hand).

A residual is ``log(measured time / modelled time)`` of a public row predicted by factors fitted
without that row's source (leave-one-source-out). The interval of a new estimate ``t`` is
``[t·exp(q10), t·exp(q90)]``, the 10th and 90th percentiles of the residuals of the rows of the same
workload family on the same GPU generation. Where that cell has fewer than ``MIN_ROWS`` rows the
residuals are pooled, first across generations (the family's rows), then over every row, widened by the
spread between families' offsets (another family's offset has its own causes); the ``basis`` text says
which. A generation no row measures
(Pascal, RDNA, Gaudi, Apple: perf/efficiency.generation_key) gets the family's rows of the other
generations widened by their spread between generations, and says so. Torch-free: the CLI reads it
for every verb.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

RESIDUALS_FILE = Path(__file__).with_name("data") / "residuals.json"
MIN_ROWS = 8
"""Fewest rows whose 10th/90th percentiles are used as they stand (fewer: pooled, wider)."""

FAMILIES: dict[str, str] = {
    "cnn-train": "CNN training",
    "cnn-infer": "CNN inference",
    "vit-train": "ViT training",
    "vit-infer": "ViT inference",
    "encoder-train": "transformer encoder training",
    "encoder-infer": "transformer encoder inference",
    "llm-train": "LLM training, one GPU",
    "llm-train-multi": "LLM training, several GPUs",
    "llm-infer": "LLM inference / generation",
}
"""Workload family keys of residuals.json and what each covers."""

ARCH_NAMES: dict[str, str] = {
    "volta": "Volta",
    "turing": "Turing",
    "ampere": "Ampere",
    "ampere-ga10x": "Ampere GA10x",
    "ada": "Ada",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
    "blackwell-gb20x": "Blackwell GB20x",
    "cdna": "CDNA",
}
"""Architecture keys (perf/efficiency.arch_key) and their display names."""


@dataclass(frozen=True, slots=True)
class Spread:
    """The residual quantiles of one group of rows."""

    rows: int
    q10: float
    q90: float
    median: float


def family_key(kind: str, mode: str, gpus: int = 1) -> str:
    """The family key of a workload: ``kind`` is cnn | vit | encoder | llm, ``mode`` the workload
    mode (train | infer | generate), ``gpus`` the GPU count (LLM training on several GPUs pays
    communication, so it is its own family)."""
    phase = "train" if mode == "train" else "infer"
    if kind == "llm" and phase == "train" and gpus > 1:
        return "llm-train-multi"
    key = f"{kind}-{phase}"
    return key if key in FAMILIES else "llm-infer" if kind == "llm" else key


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default rule) of a sorted non-empty list."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def spread(log_residuals: list[float]) -> Spread:
    """10th/50th/90th percentiles of log residuals (log measured / modelled)."""
    s = sorted(log_residuals)
    return Spread(len(s), _quantile(s, 0.1), _quantile(s, 0.9), _quantile(s, 0.5))


@lru_cache(maxsize=4)
def load_residuals(path: Path = RESIDUALS_FILE) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def between(rows: list[dict[str, Any]], key: str) -> list[float]:
    """Residuals for a group of ``key`` no row comes from (``arch``: a GPU generation no row measures):
    each measured group's median offset combined with every row's residual about its own group's median
    (``m_g + (r − m_{g(r)})`` over all g, r). The spread between groups adds to the spread within one."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(str(r.get(key, "")), []).append(r["log_residual"])
    medians = {g: spread(v).median for g, v in by.items()}
    within = [r["log_residual"] - medians[str(r.get(key, ""))] for r in rows]
    return [m + w for m in medians.values() for w in within]


def _group(data: dict[str, Any], family: str, arch: str) -> tuple[list[float], str]:
    """The residuals the interval of (family, arch) is built from, and the basis text."""
    rows: list[dict[str, Any]] = data["rows"]
    fam_name = FAMILIES.get(family, family)
    arch_name = ARCH_NAMES.get(arch, arch.title())
    if not any(r["arch"] == arch for r in rows):
        fam_rows = [r for r in rows if r["family"] == family]
        pool, what = (fam_rows, f"{fam_name} rows") if len(fam_rows) >= MIN_ROWS else (rows, "all public rows")
        gens = len({r["arch"] for r in pool})
        return between(pool, "arch"), (f"no public rows on {arch_name}: {what} of {gens} other generations, "
                                       f"widened by their spread between generations (n={len(pool)})")
    cell = [r["log_residual"] for r in rows if r["family"] == family and r["arch"] == arch]
    if len(cell) >= MIN_ROWS:
        return cell, f"{arch_name}, {fam_name} rows (n={len(cell)})"
    fam = [r["log_residual"] for r in rows if r["family"] == family]
    if len(fam) >= MIN_ROWS:
        return fam, (f"{fam_name} rows of all generations (n={len(fam)}; {len(cell)} on {arch_name}: "
                     "too few alone)")
    # Too few rows of this family: other families' rows carry their own offsets (on Hopper the public rows are
    # CNN and DLE SQuAD training, both slower than modelled for reasons of their own: cuDNN layouts, the
    # trainer's host work), so their sign says nothing of this family's. As for an unmeasured generation, each
    # family's median offset is combined with every row's spread about its own family's median, over all rows.
    return between(rows, "family"), (f"all public rows, widened by their spread between families (n={len(rows)}; "
                                     f"{len(fam)} {fam_name} rows: too few alone)")


def interval(time_s: float, family: str, arch: str) -> tuple[float, float, str]:
    """The 80% prediction interval ``(low_s, high_s, basis)`` of a modelled time ``time_s`` of a
    workload of ``family`` (a FAMILIES key) on a GPU of architecture ``arch`` (an arch_key)."""
    low, high, basis = _shipped_log_bounds(family, arch)
    return time_s * math.exp(low), time_s * math.exp(high), basis


_SHIPPED_BOUNDS: dict[int, tuple[dict[str, Any], dict[tuple[str, str], tuple[float, float, str]]]] = {}
"""log_bounds of the loaded residuals per (family, arch): a plan prints an interval per layout and recommend one
per GPU, and a thin family's bounds pool every row (uncertainty.between: ~0.35 ms). Keyed by the loaded
dict, so ``load_residuals.cache_clear()`` (scripts/accuracy.py after rewriting the file) starts afresh."""


def _shipped_log_bounds(family: str, arch: str) -> tuple[float, float, str]:
    data = load_residuals()
    entry = _SHIPPED_BOUNDS.get(id(data))
    if entry is None or entry[0] is not data:
        _SHIPPED_BOUNDS.clear()
        entry = _SHIPPED_BOUNDS[id(data)] = (data, {})
    found = entry[1].get((family, arch))
    if found is None:
        found = entry[1][(family, arch)] = log_bounds(data, family, arch)
    return found


def log_bounds(data: dict[str, Any], family: str, arch: str) -> tuple[float, float, str]:
    """The interval of (family, arch) in log(measured / modelled), and its basis. A generation no row
    measures takes, on each side, the wider of its pool's own quantiles and those of ``unseen_generation``:
    never narrower than the generations it borrows from."""
    values, basis = _group(data, family, arch)
    low, high = bounds(spread(values))
    if basis.startswith("no public rows"):
        rows = data["rows"]
        pool = [r for r in rows if r["family"] == family]
        pool = pool if len(pool) >= MIN_ROWS else rows
        plain = bounds(spread([r["log_residual"] for r in pool]))
        low, high = min(low, plain[0]), max(high, plain[1])
    return low, high, basis


def bounds(s: Spread) -> tuple[float, float]:
    """The 80% interval in log(measured / modelled): the residuals' 10th and 90th percentiles, widened to
    contain 0 (the model's own figure) where a group's rows all run slower, or all faster, than modelled.
    Checked out of sample (scripts/accuracy.py ``coverage``: each row's interval from the other sources'
    rows): the plain percentiles cover 70.2% of the held-out rows, this rule 75-80%. Rows of one source
    share its stack's offset, so a group's one-sided residuals say less about a stack it never saw than
    their count suggests; a new user's stack may be the one the model gets right."""
    return min(s.q10, 0.0), max(s.q90, 0.0)
