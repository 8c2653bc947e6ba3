"""The calibration cases copy shared/reference/calibration.csv faithfully; the fitted factors name them."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripts.calibrate_fit import FIT_EXCLUDED, REFERENCE_CSV, check_reference

from gpuplan.perf import DEFAULT_EFFICIENCY
from gpuplan.perf.calibration import CASES


@pytest.mark.skipif(not REFERENCE_CSV.exists(), reason="shared reference data not present")
def test_cases_match_reference_csv() -> None:
    assert check_reference() == []


def test_missing_reference_is_not_an_error(tmp_path: Path) -> None:
    assert check_reference(tmp_path / "absent.csv") == []


def test_fitted_factors_name_their_rows() -> None:
    ids = {c.row_id for c in CASES}
    assert set(DEFAULT_EFFICIENCY.fitted_on) == ids - FIT_EXCLUDED
    assert all(0 < f <= 1 for f in (DEFAULT_EFFICIENCY.tensor_core_matmul, DEFAULT_EFFICIENCY.fp32_matmul,
                                    DEFAULT_EFFICIENCY.attention_fused, DEFAULT_EFFICIENCY.bandwidth))
    text = " ".join(DEFAULT_EFFICIENCY.describe())
    assert "hf-bertl-vanilla-tput" in text and "launch overhead" in text
