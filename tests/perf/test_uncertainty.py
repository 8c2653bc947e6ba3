"""The 80% prediction interval (perf/uncertainty.py) read from the cross-validated residuals of the
public rows (perf/data/residuals.json, written by scripts/accuracy.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.hardware import get_gpu
from gpuplan.perf.efficiency import arch_key, generation_key
from gpuplan.perf.uncertainty import (
    ARCH_NAMES,
    FAMILIES,
    MIN_ROWS,
    _group,
    bounds,
    family_key,
    interval,
    load_residuals,
    log_bounds,
    spread,
)


@given(
    t=st.floats(min_value=1e-6, max_value=1e6),
    family=st.sampled_from([*FAMILIES, "no-such-family"]),
    arch=st.sampled_from([*ARCH_NAMES, "no-such-arch"]),
)
def test_interval_is_the_residual_quantiles_of_its_basis(t: float, family: str, arch: str) -> None:
    """The bounds are t·exp(q10) and t·exp(q90) of the residuals the basis names, widened to contain t
    (uncertainty.bounds: what keeps the interval's coverage of held-out sources in 75-85%)."""
    low, high, basis = interval(t, family, arch)
    assert 0 < low <= t <= high and math.isfinite(high)
    assert "n=" in basis
    q10, q90 = bounds(spread(_group(load_residuals(), family, arch)[0]))
    if not basis.startswith("no public rows"):  # an unmeasured generation: widened (the test below)
        assert low == pytest.approx(t * math.exp(q10)) and high == pytest.approx(t * math.exp(q90))


def test_a_generation_without_rows_says_so_and_is_wider() -> None:
    """A GPU generation no public row measures (the GTX 1080 Ti's Pascal; the cost model borrows Ampere's
    factors for it) is named in the basis as unmeasured, never as the generation whose factors it borrows,
    and its interval is never narrower than the measured generations' pooled rows of the family (perf/uncertainty
    .log_bounds: the wider of the between-generation spread and the pool's own on each side; where the
    between-generation spread is the narrower on both sides, as for CNN training, the two are equal)."""
    gen = generation_key(get_gpu("GTX-1080-Ti"))
    assert gen == "pascal" and arch_key(get_gpu("GTX-1080-Ti")) == "ampere"
    rows = load_residuals()["rows"]
    for family in {r["family"] for r in rows}:
        low, high, basis = interval(1.0, family, gen)
        assert basis.startswith("no public rows on Pascal") and "Ampere" not in basis, basis
        pool = [r["log_residual"] for r in rows if r["family"] == family]
        if len(pool) < MIN_ROWS:
            pool = [r["log_residual"] for r in rows]
        q10, q90 = bounds(spread(pool))
        assert math.log(low) <= q10 + 1e-9 and math.log(high) >= q90 - 1e-9, (family, basis)


def test_thin_cell_is_pooled_and_says_so() -> None:
    """A (family, generation) cell with fewer than MIN_ROWS rows borrows the rows of its family or
    generation (or all rows) and names the pool in the basis."""
    rows = load_residuals()["rows"]
    thin = [(f, a) for f in FAMILIES for a in ARCH_NAMES
            if sum(r["family"] == f and r["arch"] == a for r in rows) < MIN_ROWS]
    assert thin
    for family, arch in thin:
        _, _, basis = interval(1.0, family, arch)
        assert "too few" in basis or "none" in basis or basis.startswith("no public rows on"), (family, arch, basis)


def test_spread_quantiles_follow_numpy_linear_rule() -> None:
    s = spread([0.0, 1.0, 2.0, 3.0, 4.0])
    assert (s.q10, s.median, s.q90, s.rows) == (0.4, 2.0, 3.6, 5)


def test_family_keys() -> None:
    assert family_key("llm", "train", 8) == "llm-train-multi"
    assert family_key("llm", "generate") == "llm-infer"
    assert family_key("cnn", "infer") == "cnn-infer"
    assert all(family_key(k, m) in FAMILIES for k in ("cnn", "vit", "encoder", "llm") for m in ("train", "infer"))


def test_the_memoised_bounds_follow_the_loaded_residuals(tmp_path: Path) -> None:
    """interval() memoises each (family, arch)'s bounds per loaded residuals file; once the loader's cache is
    cleared (scripts/accuracy.py after it rewrites the file) a new file's rows are read, not the old bounds."""
    from gpuplan.perf import uncertainty

    shipped = interval(1.0, "llm-train", "hopper")
    assert shipped[:2] == pytest.approx(tuple(math.exp(b) for b in log_bounds(load_residuals(), "llm-train",
                                                                                  "hopper")[:2]))
    other = tmp_path / "residuals.json"
    rows = [{"family": "llm-train", "arch": "hopper", "log_residual": v, "source": "s"} for v in [-0.5, 0.5] * 5]
    other.write_text(json.dumps({"rows": rows}), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:  # as if the file were rewritten and its loader's cache cleared
        mp.setattr(uncertainty, "load_residuals", lambda: load_residuals(other))
        low, high, basis = interval(1.0, "llm-train", "hopper")
    assert (low, high) == pytest.approx((math.exp(-0.5), math.exp(0.5))) and "n=10" in basis
    assert interval(1.0, "llm-train", "hopper") == shipped
