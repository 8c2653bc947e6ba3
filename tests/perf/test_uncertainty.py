"""The 80% prediction interval (perf/uncertainty.py) read from the cross-validated residuals of the
public rows (perf/data/residuals.json, written by scripts/accuracy.py)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from gpuplan.perf.uncertainty import ARCH_NAMES, FAMILIES, MIN_ROWS, family_key, interval, load_residuals, spread


@given(
    t=st.floats(min_value=1e-6, max_value=1e6),
    family=st.sampled_from([*FAMILIES, "no-such-family"]),
    arch=st.sampled_from([*ARCH_NAMES, "no-such-arch"]),
)
def test_interval_brackets_the_estimate(t: float, family: str, arch: str) -> None:
    low, high, basis = interval(t, family, arch)
    assert 0 < low <= t <= high and math.isfinite(high)
    assert "n=" in basis


def test_thin_cell_is_pooled_and_says_so() -> None:
    """A (family, generation) cell with fewer than MIN_ROWS rows borrows the rows of its family or
    generation (or all rows) and names the pool in the basis."""
    rows = load_residuals()["rows"]
    thin = [(f, a) for f in FAMILIES for a in ARCH_NAMES
            if sum(r["family"] == f and r["arch"] == a for r in rows) < MIN_ROWS]
    assert thin
    for family, arch in thin:
        _, _, basis = interval(1.0, family, arch)
        assert "too few" in basis or "none" in basis, (family, arch, basis)


def test_spread_quantiles_follow_numpy_linear_rule() -> None:
    s = spread([0.0, 1.0, 2.0, 3.0, 4.0])
    assert (s.q10, s.median, s.q90, s.rows) == (0.4, 2.0, 3.6, 5)


def test_family_keys() -> None:
    assert family_key("llm", "train", 8) == "llm-train-multi"
    assert family_key("llm", "generate") == "llm-infer"
    assert family_key("cnn", "infer") == "cnn-infer"
    assert all(family_key(k, m) in FAMILIES for k in ("cnn", "vit", "encoder", "llm") for m in ("train", "infer"))
