"""The calibration cases copy shared/reference/calibration.csv faithfully; the fitted factors name them."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripts.calibrate_fit import FIT_EXCLUDED, REFERENCE_CSV, check_reference

from gpuplan.perf import DEFAULT_EFFICIENCY
from gpuplan.perf.calibration import CASES
from gpuplan.perf.efficiency import efficiency_for, load_factors


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
    assert "hf-bertl-vanilla-tput" in text and "eager dispatch" in text


def test_factors_file_has_every_architecture_with_source_and_residuals() -> None:
    """Issue 10: factors are data per architecture, each with its source, the fit and residuals."""
    data = load_factors()
    assert set(data["architectures"]) == {
        "volta", "turing", "ampere", "ampere-ga10x", "ada", "hopper", "blackwell-gb20x", "blackwell", "cdna"
    }
    assert data["fitted"]["method"] and data["fitted"]["fitted_on"]
    for key, arch in data["architectures"].items():
        assert arch["source"] and arch["attention_source"] and arch["bandwidth_source"], key
        assert isinstance(arch["residuals"], dict), key
    # the rows sit under the architecture of their GPU
    assert "hf-bertl-vanilla-tput" in data["architectures"]["volta"]["residuals"]
    assert "timm-infer-vitb-4090" in data["architectures"]["ada"]["residuals"]
    assert set(data["fitted"]["leave_one_family_out"]) == {c.row_id for c in CASES}


@pytest.mark.parametrize(
    ("gpu", "arch"),
    [("V100-SXM2-16GB", "volta"), ("T4", "turing"), ("A100-80GB-SXM", "ampere"), ("RTX-4090", "ada"),
     ("H100-SXM", "hopper"), ("B200", "blackwell"), ("MI300X", "cdna"),
     # GeForce/workstation Blackwell (sm_120) runs mma.sync kernels: Ada's factors, not B200's
     ("RTX-5090", "blackwell-gb20x"), ("RTX-PRO-6000", "blackwell-gb20x")],
)
def test_each_gpu_gets_its_architectures_factors(gpu: str, arch: str) -> None:
    from gpuplan.hardware import get_gpu

    assert efficiency_for(get_gpu(gpu)).arch == arch


def test_the_fit_table_charges_backward_convolutions_their_transform_bytes() -> None:
    """scripts/calibrate_fit.op_table (what accuracy.py refits per generation) is step_time's arithmetic with
    conv_backward_traffic a multiplier of backward convolutions' memory time: equal to step_time on a tiny CNN
    training step at 1 and at 6, and slower at 6 on an H100, where those convolutions are bandwidth-bound (a batch
    of 256 112-px images: GPU-bound, not dispatch-bound)."""
    from scripts.calibrate_fit import check_table, factor_vector, op_table, table_time

    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import FactorySource
    from gpuplan.trace.step import trace_step
    from gpuplan.workload import Workload

    fixture = Path(__file__).parent.parent / "fixtures" / "tiny_models.py"
    workload = Workload(mode="train", batch_size=256, image_size=112, precision="amp-fp16", optimizer="sgd")
    step = trace_step(FactorySource(f"{fixture}:small_cnn"), workload)
    h100 = get_gpu("H100-SXM")
    times = []
    for traffic in (1.0, 6.0):
        eff = efficiency_for(h100).with_(conv_backward_traffic=traffic)
        assert abs(check_table(step, workload, h100, eff)) < 1e-9
        times.append(table_time(op_table(step, workload, h100, eff), factor_vector(eff), eff.launch_overhead_s))
    assert times[1] > times[0]
