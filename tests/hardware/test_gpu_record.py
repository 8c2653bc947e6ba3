"""The GPU record's derived values: peaks, MIG slices, interconnect, tiers, JSON."""

from __future__ import annotations

import json
import math

import pytest

from gpuplan.errors import ConfigError
from gpuplan.hardware import DTYPES, GPU, all_gpus, get_gpu, pcie_gb_per_s_per_direction


def test_peak_tflops_is_the_dense_fp32_accumulate_rate() -> None:
    h100 = get_gpu("H100-SXM")
    assert h100.peak_tflops("bf16") == 989.4  # datasheet 1,979 is with sparsity
    assert h100.peak_flops_per_s("bf16") == pytest.approx(989.4e12)
    rtx = get_gpu("RTX-4090")
    assert rtx.peak_tflops("bf16") == 165.2  # not the 330.3 FP16-accumulate figure
    assert rtx.fp16_fp16acc_tflops == 330.3
    assert get_gpu("V100-SXM2-16GB").peak_tflops("bf16") is None  # Volta has no BF16
    assert get_gpu("M3-Max").peak_tflops("fp32") is None  # Apple publishes no rate


def test_unknown_dtype_is_a_config_error() -> None:
    allowed = r"\(allowed: fp32, tf32, fp16, bf16, fp8, int8, fp4\)"
    with pytest.raises(ConfigError, match=r"unknown dtype 'fp64' " + allowed):
        get_gpu("H100-SXM").peak_tflops("fp64")


@pytest.mark.parametrize(
    ("gpu_id", "bf16", "tf32", "fp8"),
    [("H100-SXM", True, True, True), ("A100-80GB-SXM", True, True, False),
     ("V100-SXM2-16GB", False, False, False), ("T4", False, False, False), ("RTX-4090", True, True, True),
     ("MI300X", True, True, True), ("RX-7900-XTX", True, False, False)],
)
def test_dtype_support_follows_the_architecture(gpu_id: str, bf16: bool, tf32: bool, fp8: bool) -> None:
    gpu = get_gpu(gpu_id)
    assert (gpu.has_bf16, gpu.has_tf32, gpu.has_fp8) == (bf16, tf32, fp8)


def test_bf16_needs_ampere_or_newer_on_nvidia() -> None:
    for gpu in all_gpus():
        if gpu.vendor_key == "nvidia" and gpu.compute_capability is not None:
            assert gpu.has_bf16 == (gpu.compute_capability >= (8, 0)), gpu.id
            assert gpu.has_fp8 == (gpu.compute_capability >= (8, 9)), gpu.id


def test_identity_fields() -> None:
    gpu = get_gpu("A100-80GB-SXM")
    assert gpu.compute_capability == (8, 0)
    assert gpu.arch == "Ampere" and gpu.vendor_key == "nvidia"
    assert gpu.memory_bandwidth_bytes_per_s == 2039e9


def test_mig_slice_scales_memory_bandwidth_and_compute() -> None:
    parent = get_gpu("A100-80GB-SXM")
    part = get_gpu("A100-80GB-SXM:3g.40gb")
    profile = next(p for p in parent.mig_profiles if p.name == "3g.40gb")
    assert part.memory_total_bytes == profile.memory_bytes < parent.memory_total_bytes
    assert part.memory_bandwidth_gb_per_s == pytest.approx(parent.memory_bandwidth_gb_per_s * 4 / 8)
    for dtype in DTYPES:
        full = parent.peak_tflops(dtype)
        assert part.peak_tflops(dtype) == (None if full is None else pytest.approx(full * 3 / 7))
    assert part.nvlink_gb_per_s_per_direction is None and part.intra_node_gb_per_s_per_direction is None
    assert part.is_mig and not parent.is_mig and part.mig_profiles == ()
    assert part.compute_capability == parent.compute_capability


def test_measured_mig_sizes_are_nvidia_smi_values() -> None:
    # nvidia-smi mig -lgip printouts cited in the data files
    assert get_gpu("H200-SXM:3g.71gb").memory_total_bytes == round(69.50 * 2**30)
    assert get_gpu("B200:1g.23gb").memory_total_bytes == round(20.50 * 2**30)
    assert get_gpu("A100-80GB-SXM:2g.20gb").memory_total_bytes == round(19.50 * 2**30)


def test_pcie_bandwidth_per_direction() -> None:
    assert pcie_gb_per_s_per_direction(4) == pytest.approx(31.5, rel=1e-3)
    assert pcie_gb_per_s_per_direction(5) == pytest.approx(63.0, rel=1e-3)
    assert pcie_gb_per_s_per_direction(3) == pytest.approx(15.75, rel=1e-3)
    assert pcie_gb_per_s_per_direction(4, 8) == pytest.approx(15.75, rel=1e-3)
    x8_card = get_gpu("RTX-4060-Ti-16GB")
    assert x8_card.pcie_gb_per_s_per_direction == pytest.approx(15.75, rel=1e-3)


@pytest.mark.parametrize(
    ("gen", "lanes", "message"), [(7, 16, "unknown PCIe generation 7"), (4, 12, "1, 2, 4, 8 or 16")]
)
def test_bad_pcie_link_is_a_config_error(gen: int, lanes: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        pcie_gb_per_s_per_direction(gen, lanes)


def test_intra_node_links() -> None:
    assert get_gpu("H100-SXM").nvlink_gb_per_s_per_direction == 450
    assert get_gpu("A100-80GB-SXM").nvlink_gb_per_s_per_direction == 300
    assert get_gpu("MI300X").nvlink_gb_per_s_per_direction is None
    assert get_gpu("MI300X").intra_node_gb_per_s_per_direction == 448  # Infinity Fabric 896 both ways
    assert get_gpu("RTX-4090").nvlink_gb_per_s_per_direction is None  # NVLink removed on Ada GeForce
    # PCIe Gen4 x16
    assert get_gpu("RTX-4090").intra_node_gb_per_s_per_direction == pytest.approx(31.5, rel=1e-3)
    assert get_gpu("RTX-3090").nvlink_gb_per_s_per_direction == 56.25  # 2-way bridge
    assert get_gpu("M3-Max").intra_node_gb_per_s_per_direction is None


def test_nvlink_only_where_the_interconnect_says_nvlink() -> None:
    for gpu in all_gpus():
        if gpu.nvlink_gb_per_s_per_direction is not None:
            assert (gpu.interconnect or "").startswith("NVLink"), gpu.id


@pytest.mark.parametrize(
    ("gpu_id", "tier"),
    [("H100-SXM", "enterprise"), ("MI300X", "enterprise"), ("A100-40GB-PCIe", "enterprise"),
     ("L40S", "enterprise"),
     ("RTX-4090", "research"), ("RTX-A6000", "research"), ("A10G", "research"), ("L4", "research"),
     ("V100-SXM2-32GB", "research"), ("M3-Max", "research"), ("T4", "entry"), ("RTX-3060", "entry"),
     ("V100-SXM2-16GB", "entry"), ("RTX-A4000", "entry")],
)
def test_tiers(gpu_id: str, tier: str) -> None:
    assert get_gpu(gpu_id).tier == tier


def test_tier_rule_holds_for_every_gpu() -> None:
    for gpu in all_gpus():
        gb, dc = gpu.memory_labelled_gb, gpu.segment.startswith("datacenter")
        expected = "enterprise" if dc and gb >= 40 else "entry" if gb < 24 else "research"
        assert gpu.tier == expected, gpu.id


def test_to_dict_is_json_ready_and_complete() -> None:
    for gpu in (get_gpu("H100-SXM"), get_gpu("A100-80GB-SXM:1g.10gb"), get_gpu("M3-Max")):
        data = json.loads(json.dumps(gpu.to_dict()))
        assert data["id"] == gpu.id and data["source"] and data["retrieved"]
        assert data["dense"] is True and data["tier"] == gpu.tier
        assert set(data) >= {f for f in GPU.__dataclass_fields__}


def test_memory_gib_is_binary() -> None:
    assert math.isclose(get_gpu("A100-80GB-SXM").memory_gib, 80.0)
    assert math.isclose(get_gpu("H100-SXM").memory_gib, 81559 / 1024)
