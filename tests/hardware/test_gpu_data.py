"""The shipped data files: parity with the reference table, sources, dense-only rates."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from gpuplan.hardware import all_gpus, get_gpu

# gpus.csv column -> data-file key (the data files put the unit in the name).
CSV_TO_KEY = {
    "name": "name", "vendor": "vendor", "segment": "segment", "architecture": "arch", "chip": "chip",
    "compute_capability": "compute_capability", "memory_gb": "memory_labelled_gb",
    "memory_type": "memory_type", "memory_bandwidth_gbps": "memory_bandwidth_gb_per_s",
    "boost_clock_mhz": "boost_clock_mhz", "fp32_tflops": "fp32_tflops", "tf32_tflops": "tf32_tflops",
    "fp16_tflops": "fp16_tflops", "bf16_tflops": "bf16_tflops", "fp16_fp16acc_tflops": "fp16_fp16acc_tflops",
    "fp8_tflops": "fp8_tflops", "fp8_fp16acc_tflops": "fp8_fp16acc_tflops", "int8_tops": "int8_tops",
    "fp4_tflops": "fp4_tflops", "tensor_dtypes": "tensor_dtypes", "interconnect": "interconnect",
    "interconnect_bw_gbps_bidir": "interconnect_gb_per_s_bidirectional", "pcie_gen": "pcie_gen",
    "tdp_w": "tdp_w", "mig_max_instances": "mig_max_instances", "form_factor": "form_factor",
    "release_year": "release_year", "launch_price_usd": "launch_price_usd",
    "derived_fields": "derived_fields", "source": "source", "verification": "verification", "notes": "notes",
}
Rows = list[dict[str, str]]
Files = dict[str, dict[str, Any]]
LEAD_IDS = ("H100-SXM", "H200-SXM", "A100-80GB-SXM", "RTX-4090", "V100-SXM2-16GB", "T4", "L4", "A10G")
FILLED_SINCE_THE_TABLE: dict[str, frozenset[str]] = {
    "A10G": frozenset({"boost_clock_mhz", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops",
                       "derived_fields", "notes"}),
}
"""Fields a data file (the record) filled where the reference table is blank, with the derivation in
the file's ``derived_fields`` (issue 17: the A10G had no rate, so no step time at all)."""


def _same(csv_text: str, value: Any) -> bool:
    text = csv_text.strip()
    if text == "":
        return value is None
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return math.isclose(float(text), float(value), rel_tol=0, abs_tol=1e-9)
    return bool(text == value)


def test_every_reference_row_has_exactly_one_file(reference_rows: Rows, raw_files: Files) -> None:
    by_name: dict[str, list[str]] = {}
    for stem, data in raw_files.items():
        by_name.setdefault(data["name"], []).append(stem)
    missing = [r["name"] for r in reference_rows if r["name"] not in by_name]
    doubled = {n: s for n, s in by_name.items() if len(s) > 1}
    assert not missing and not doubled
    assert len(reference_rows) == 66 <= len(raw_files)


def test_every_shared_field_matches_the_reference_table(reference_rows: Rows, raw_files: Files) -> None:
    by_name = {data["name"]: data for data in raw_files.values()}
    mismatches = []
    for row in reference_rows:
        data = by_name[row["name"]]
        filled = FILLED_SINCE_THE_TABLE.get(data["id"], frozenset())
        for column, key in CSV_TO_KEY.items():
            if key in filled:
                assert data[key] is not None and (row[column].strip() == "" or key in ("derived_fields", "notes"))
                continue
            if not _same(row[column], data[key]):
                mismatches.append(f"{data['id']}.{key}: file {data[key]!r} vs csv {row[column]!r}")
    assert mismatches == []


def test_loaded_records_carry_the_file_values(raw_files: Files) -> None:
    for gpu in all_gpus():
        data = raw_files[gpu.id]
        assert gpu.memory_bandwidth_gb_per_s == data["memory_bandwidth_gb_per_s"]
        assert gpu.peak_tflops("bf16") == data["bf16_tflops"]
        assert gpu.peak_tflops("int8") == data["int8_tops"]
        cc = data["compute_capability"]
        assert gpu.compute_capability == (None if cc is None else tuple(int(x) for x in cc.split(".")))


def test_filename_is_the_id_and_ids_are_typeable(raw_files: Files) -> None:
    for stem, data in raw_files.items():
        assert data["id"] == stem
        assert all(ch.isalnum() or ch == "-" for ch in stem), stem


@pytest.mark.parametrize("gpu_id", LEAD_IDS)
def test_ids_the_cost_model_uses_exist(gpu_id: str) -> None:
    assert get_gpu(gpu_id).id == gpu_id


def test_every_file_names_its_source_and_retrieval_date(raw_files: Files) -> None:
    for stem, data in raw_files.items():
        assert data["source"].strip(), stem
        assert data["reference"].strip(), stem
        datetime.date.fromisoformat(data["retrieved"])
        assert data["memory_total_source"].strip(), stem
        total_source = data["memory_total_source"]
        if not total_source.startswith("derived"):
            # a measured total says where its printout is
            assert total_source.startswith("nvidia-smi Total"), stem
            assert "http" in total_source or "public nvidia-smi printouts" in total_source, stem
        if data["cuda_total_memory_bytes"] is not None:
            cuda_source = data["cuda_total_memory_source"]
            assert "http" in cuda_source or "public torch" in cuda_source, stem
        for profile in data["mig_profiles"]:
            assert profile["memory_source"].startswith(("derived", "nvidia-smi")), (stem, profile["name"])
        if data["mig_profiles"]:
            assert data["mig_source"], stem


def test_dense_is_explicit_everywhere(raw_files: Files) -> None:
    assert all(data["dense"] is True for data in raw_files.values())


def test_nvidia_tensor_rates_are_consistently_dense() -> None:
    # Dense TF32 is half of dense FP16 and dense FP8 twice it on every NVIDIA part with tensor TF32/FP8;
    # a sparse figure slipped into one column breaks the ratio by 2x. 5% covers vendor rounding
    # (B200: TF32 1100 vs FP16 2250).
    checked = 0
    for gpu in all_gpus():
        if gpu.vendor_key != "nvidia" or gpu.fp16_tflops is None:
            continue
        if gpu.tf32_tflops is not None:
            assert math.isclose(gpu.tf32_tflops * 2, gpu.fp16_tflops, rel_tol=0.05), gpu.id
            checked += 1
        if gpu.fp8_tflops is not None:
            assert math.isclose(gpu.fp8_tflops, gpu.fp16_tflops * 2, rel_tol=0.05), gpu.id
            checked += 1
    assert checked > 40


def test_geforce_half_rate_flag_matches_the_rates() -> None:
    flagged = [g for g in all_gpus() if g.fp32_accumulate_half_rate]
    assert {"RTX-4090", "RTX-3090", "RTX-5090", "RTX-2080-Ti"} <= {g.id for g in flagged}
    for gpu in flagged:
        assert gpu.fp16_fp16acc_tflops is not None and gpu.fp16_tflops is not None
        assert math.isclose(gpu.fp16_fp16acc_tflops, 2 * gpu.fp16_tflops, rel_tol=0.01), gpu.id
        assert gpu.peak_tflops("fp16") == gpu.fp16_tflops  # what PyTorch gets, not the FP16-acc rate
    assert not any(g.fp32_accumulate_half_rate for g in all_gpus() if g.segment != "consumer")


def test_memory_totals_are_plausible() -> None:
    for gpu in all_gpus():
        labelled = gpu.memory_labelled_gb * 2**30
        # nvidia-smi totals sit at or below the binary-sized label: a little (H100: 81559 of 81920 MiB),
        # or 1/16 less where GDDR ECC is on (T4: 15360 of 16384 MiB).
        assert 0.93 * labelled <= gpu.memory_total_bytes <= labelled, gpu.id
        if gpu.cuda_total_memory_bytes is not None:
            cuda, smi = gpu.cuda_total_memory_bytes, gpu.memory_total_bytes
            assert 0.95 * smi <= cuda <= smi, gpu.id


def test_measured_totals_match_their_printouts() -> None:
    # nvidia-smi "Total" column, cited in each file.
    assert get_gpu("H100-SXM").memory_total_bytes == 81559 * 2**20
    assert get_gpu("A100-80GB-SXM").memory_total_bytes == 81920 * 2**20
    assert get_gpu("RTX-4090").memory_total_bytes == 24564 * 2**20
    assert get_gpu("A100-40GB-SXM").usable_memory_bytes == 42298834944
    assert get_gpu("T4").memory_total_bytes == 15360 * 2**20  # ECC on: 15/16 of 16 GiB
    assert get_gpu("V100-SXM2-16GB").memory_total_bytes == 16160 * 2**20


@pytest.mark.parametrize("gpu_id", LEAD_IDS)
def test_gpus_the_cost_model_uses_have_measured_totals(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.memory_total_source.startswith("nvidia-smi Total")
    assert gpu.cuda_total_memory_bytes is not None or gpu_id in ("L4",)  # no torch printout found for L4


def test_derived_totals_follow_the_documented_rule() -> None:
    for gpu in all_gpus():
        if not gpu.memory_total_source.startswith("derived"):
            continue
        labelled = gpu.memory_labelled_gb * 2**30
        ecc_gddr = gpu.segment.startswith("datacenter") and (gpu.memory_type or "").startswith("GDDR")
        assert gpu.memory_total_bytes == int(labelled * 15 // 16 if ecc_gddr else labelled), gpu.id


def test_mig_profiles_fit_their_gpu() -> None:
    for gpu in all_gpus():
        assert bool(gpu.mig_profiles) == bool(gpu.mig_max_instances), gpu.id
        for p in gpu.mig_profiles:
            assert p.memory_bytes <= gpu.memory_total_bytes, (gpu.id, p.name)
            assert p.max_instances * p.compute_slices <= p.max_compute_slices, (gpu.id, p.name)
            assert p.max_instances * p.memory_bytes <= gpu.memory_total_bytes, (gpu.id, p.name)
            assert p.max_instances <= (gpu.mig_max_instances or 0), (gpu.id, p.name)
            assert f"{p.compute_slices}g." in p.name


def test_mig_capable_gpus_are_the_ones_in_nvidia_mig_guide() -> None:
    mig = {g.id for g in all_gpus() if g.mig_profiles}
    assert {"A100-80GB-SXM", "A100-40GB-SXM", "A30", "H100-SXM", "H200-SXM", "B200"} <= mig
    assert not mig & {"RTX-4090", "L4", "L40S", "A10", "T4", "MI300X"}
