"""Recorded environments (tests/compat/fixtures/*.yaml) give exactly their expected findings.

Each fixture holds raw tool outputs and package facts of one machine -- nvidia-smi -q / table / -L,
NVML readings, torch/version.py, pip distributions -- with `recorded_from` naming the public thread
(or the machine) its values come from. They are read through RecordedFacts, the same FactsSource
interface the live machine uses, and go through the same probe and rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.compat.facts import LiveFacts, RecordedFacts, RecordingFacts
from gpuplan.compat.findings import Severity
from gpuplan.compat.probe import probe
from gpuplan.compat.rules import diagnose

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_corpus_has_at_least_25_environments() -> None:
    assert len(FIXTURES) >= 25


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture_gives_exactly_its_findings(path: Path) -> None:
    data = _load(path)
    assert data["description"] and data["recorded_from"]
    env = probe(RecordedFacts(data), path.name)
    codes = sorted(f.code for f in diagnose(env))
    assert codes == sorted(data["expected_findings"])


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_finding_has_message_and_fix(path: Path) -> None:
    for finding in diagnose(probe(RecordedFacts(_load(path)))):
        assert finding.message.strip() and finding.fix.strip()
        assert finding.code.isupper()


def _env(name: str):
    return probe(RecordedFacts(_load(Path(__file__).parent / "fixtures" / f"{name}.yaml")))


def test_corpus_covers_the_required_kinds_of_machine() -> None:
    kinds = {
        "consumer GPU": "rtx5090_torch271_cu126",
        "datacenter GPU": "h100_torch214_cu130_ok",
        "old driver": "titanxp_driver45057_torch1121_cu113",
        "new GPU on an old wheel": "rtx5090_torch201_cu118",
        "MIG": "a100_mig_no_instance",
        "WSL": "wsl_rtx4070_torch260_cu124_ok",
        "no driver": "wsl_no_windows_driver",
        "CPU wheel on a GPU machine": "rtx4090_torch251_cpu_wheel",
        "ROCm": "rocm_mi300x_torch251_rocm62",
        "macOS": "macos_arm64_torch280",
        "Windows": "windows_gtx1080ti_driver44292_torch1121_cu113",
        "NVML reading": "nvml_titanv_rtx5880_torch211_cu128",
    }
    names = {p.stem for p in FIXTURES}
    assert set(kinds.values()) <= names


def test_real_table_is_parsed_into_facts() -> None:
    # nvidia_gpu_exporter#203: "NVIDIA A800-SXM4-80GB ... 36537MiB / 81920MiB ... Enabled", driver 535.86.10
    env = _env("a800_mig_table_torch251_cu124")
    assert env.nvidia.source == "nvidia-smi"
    assert env.nvidia.driver_version == "535.86.10" and env.nvidia.driver_cuda == "12.2"
    gpu = env.nvidia.gpus[0]
    assert gpu.name == "NVIDIA A800-SXM4-80GB" and gpu.cc == "8.0" and gpu.cc_source == "name table"
    assert gpu.memory_used_bytes == 36537 * 2**20 and gpu.memory_total_bytes == 81920 * 2**20
    assert gpu.mig_mode is True and gpu.mig_devices == 2


def test_cuda_version_na_is_filled_from_nvidias_driver_table() -> None:
    # libc6-shim#14 prints "CUDA Version: N/A" for driver 575.64.03;
    # NVIDIA Table 3: 12.9 GA needs >= 575.51.03
    env = _env("rtx5070_cuda_version_na_torch271_cu128")
    assert env.nvidia.driver_cuda == "12.9" and env.nvidia.driver_cuda_source == "toolkit table"
    assert env.nvidia.gpus[0].processes == 2


def test_windows_query_output() -> None:
    # anderskm/gputil#38: Windows nvidia-smi -q, Driver Version 442.92, CUDA Version 10.2
    env = _env("windows_gtx1080ti_driver44292_torch1121_cu113")
    assert (env.nvidia.driver_version, env.nvidia.driver_cuda) == ("442.92", "10.2")
    assert env.nvidia.gpus[0].cc == "6.1"
    too_old = next(f for f in diagnose(env) if f.code == "DRIVER_TOO_OLD")
    assert "452.39" in too_old.message  # NVIDIA's CUDA 11.x Windows floor (S-NV-RN132U2 footnote)


def test_driver_too_old_names_the_floor_and_torch_message() -> None:
    # S-3P-VLLM-12040: torch 2.13.0+cu130 on driver 550.163.01 -> "found version 12040"
    finding = next(f for f in diagnose(_env("a100_torch213_cu130_driver550")) if f.code == "DRIVER_TOO_OLD")
    assert finding.severity is Severity.ERROR
    assert "580.65.06" in finding.message and "found version 12040" in finding.message
    assert "pip install torch==2.14.1" in finding.fix and "cu126" in finding.fix


def test_arch_fix_reinstalls_same_release_from_the_right_index() -> None:
    # pytorch#150733: RTX 5090 on a cu126 build -> cu128 of the same release (torch >= 2.7)
    finding = diagnose(_env("rtx5090_torch271_cu126"))[0]
    assert finding.code == "ARCH_NOT_IN_WHEEL"
    assert "torch==2.7.1" in finding.fix and "/whl/cu128" in finding.fix


def test_gpu_newer_than_release_names_first_release() -> None:
    finding = diagnose(_env("rtx5090_torch201_cu118"))[0]
    assert "first release with sm_120 kernels is torch 2.7" in finding.message


def test_dropped_architecture_names_last_release() -> None:
    finding = next(f for f in diagnose(_env("p100_torch215_cu132")) if f.code == "ARCH_NOT_IN_RELEASE")
    assert "last release with kernels for it is torch 2.14 (cu126)" in finding.message


def test_identical_gpus_are_reported_once() -> None:
    findings = diagnose(_env("v100_torch271_cu128"))
    assert len(findings) == 1 and "GPUs 0, 1" in findings[0].message


def test_recording_this_machine_and_replaying_it_gives_the_same_environment(tmp_path: Path) -> None:
    """The live path and the recorded path are one code path: record, replay, compare."""
    recorder = RecordingFacts(LiveFacts())
    live = probe(recorder, "x")
    replayed = probe(RecordedFacts(yaml.safe_load(recorder.dump())), "x")
    assert replayed == live
    assert diagnose(replayed) == diagnose(live)


def test_verbatim_query_output_of_a_recent_driver() -> None:
    # nvidia-smi -q of driver 565.57.01 kept verbatim (see the fixture's recorded_from): "ECC Mode" is
    # capitalised there, where older drivers print "Ecc Mode"
    env = _env("h100_r565_real_q_torch2110_pypi")
    assert (env.nvidia.driver_version, env.nvidia.driver_cuda) == ("565.57.01", "12.7")
    gpu = env.nvidia.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.cc == "9.0"
    assert gpu.memory_total_bytes == 81559 * 2**20 and gpu.memory_used_bytes == 1 * 2**20
    assert (gpu.mig_mode, gpu.ecc, gpu.processes) == (False, True, 0)
