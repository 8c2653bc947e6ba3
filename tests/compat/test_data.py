"""The compat data files and the small rules built on them, checked against their sources."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from gpuplan.compat import dataload
from gpuplan.compat.archcodes import parse_arch_setting
from gpuplan.compat.archs import ArchSupport, support
from gpuplan.compat.drivers import DriverFit, driver_max_cuda, fit, floor_for, full_support_driver
from gpuplan.compat.gpunames import cc_from_name, cc_from_text
from gpuplan.compat.versions import cuda_from_driver_int, cuda_from_tag, local_tag, version_at_least

DATA = resources.files("gpuplan.compat").joinpath("data")


def test_every_source_id_in_the_data_resolves_in_sources_md() -> None:
    sources = DATA.joinpath("sources.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"^\|\s*(S-[A-Z0-9.-]+)\s*\|", sources, re.MULTILINE))
    for name in ("torch_wheels.yaml", "drivers.yaml", "gpus.yaml", "errors.yaml"):
        text = DATA.joinpath(name).read_text(encoding="utf-8")
        used = set(re.findall(r"\bS-[A-Z0-9]+(?:[-.][A-Z0-9]+)*", text))
        assert used <= defined, (name, sorted(used - defined))


def test_each_release_is_complete() -> None:
    for rel in dataload.releases():
        assert rel.python and rel.variants and rel.sources
        assert rel.variant(rel.pypi_default) is not None, rel.version
        for v in rel.variants:
            assert v.arch_linux and v.sources and v.tag.startswith("cu")


@pytest.mark.parametrize(
    ("driver", "windows", "cuda"),
    [
        # NVIDIA Table 3 (S-NV-RN132U2): first driver of each CUDA minor
        ("550.54.15", False, "12.4"),  # 12.4 GA >= 550.54.14
        ("535.104.05", False, "12.2"),  # 12.2 GA >= 535.54.03; 12.3 needs 545.23.06
        ("566.36", True, "12.6"),  # Windows 12.6 GA >= 560.76
        ("580.95.05", False, "13.0"),  # 13.0 GA >= 580.65.06; 13.1 needs 590.44.01
        ("595.71.05", False, "13.2"),
        ("450.57", False, "11.0"),  # 11.0.1 RC row >= 450.36.06
        ("418.39", False, "10.1"),
        ("390.30", False, None),  # older than every row in the table
    ],
)
def test_driver_to_cuda(driver: str, windows: bool, cuda: str | None) -> None:
    assert driver_max_cuda(driver, windows) == cuda


def test_minor_version_floors() -> None:
    # S-NV-MVC Table 1/2 and S-NV-RN132U2 GA rows
    assert floor_for("12.8") == "525.60.13" and floor_for("12.8", windows=True) == "527.41"
    assert floor_for("11.8") == "450.80.02" and floor_for("11.3", windows=True) == "452.39"
    assert floor_for("13.2") == "580.65.06"
    assert floor_for("10.2") == "440.33"  # no minor-version compat before 11: the exact row
    assert full_support_driver("12.6") == "560.28.03"


@pytest.mark.parametrize(
    ("wheel", "driver", "expected"),
    [
        ("13.0", "550.163.01", DriverFit.TOO_OLD),  # S-3P-VLLM-12040
        ("13.0", "570.172.08", DriverFit.TOO_OLD),  # S-3P-ERR-12080
        ("12.8", "535.104.05", DriverFit.MINOR_COMPAT),
        ("12.8", "570.124.06", DriverFit.FULL),
        ("11.3", "450.57", DriverFit.TOO_OLD),  # below 450.80.02
        ("10.2", "418.87.01", DriverFit.TOO_OLD),
        ("10.2", "440.33.01", DriverFit.FULL),
    ],
)
def test_driver_fit(wheel: str, driver: str, expected: DriverFit) -> None:
    assert fit(wheel, driver) is expected


def test_driver_fit_unknown_without_facts() -> None:
    assert fit("12.8", None) is DriverFit.UNKNOWN
    assert fit(None, "550.54.15") is DriverFit.UNKNOWN


@pytest.mark.parametrize(
    ("cc", "archs", "expected"),
    [
        # torch 2.13 DEVICE_REQUIREMENT (S-TORCH213): 86 -> >=8.6,<9.0; 80 excludes 8.7; 120 -> >=12.0,<13.0
        ("8.9", ["sm_80", "sm_86"], ArchSupport.NATIVE),
        ("8.7", ["sm_80", "sm_86"], ArchSupport.NONE),
        ("12.1", ["sm_90", "sm_120"], ArchSupport.NATIVE),
        ("6.1", ["sm_50", "sm_60", "sm_70"], ArchSupport.NATIVE),
        ("7.0", ["sm_75", "sm_80"], ArchSupport.NONE),
        ("12.0", ["sm_80", "sm_90", "compute_90"], ArchSupport.PTX_ONLY),  # PTX JIT to newer CC
        ("8.0", ["sm_90", "compute_90"], ArchSupport.NONE),  # PTX never runs on an older CC
        ("9.0", ["sm_90a"], ArchSupport.NATIVE),
        ("9.0", [], ArchSupport.UNKNOWN),
    ],
)
def test_arch_support(cc: str, archs: list[str], expected: ArchSupport) -> None:
    assert support(cc, archs) is expected


def test_arch_setting_parsing() -> None:
    assert parse_arch_setting("7.5;8.0;12.0+PTX") == ["sm_75", "sm_80", "sm_120", "compute_120"]
    assert parse_arch_setting("3.7+PTX;garbage;5.0") == ["sm_37", "compute_37", "sm_50"]


def test_measured_arch_list_of_the_installed_wheel_is_in_the_data() -> None:
    # S-TORCH2141-ARCH: torch.cuda.get_arch_list() of 2.14.1+cu130 measured in this venv
    rel = dataload.release("2.14.1")
    assert rel is not None
    variant = rel.variant("cu130")
    assert variant is not None
    assert variant.arch_linux == ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        # names as drivers report them; CCs from NVIDIA's CUDA GPUs pages (S-NV-CUDAGPUS, S-NV-LEGACY)
        ("NVIDIA GeForce RTX 5090 D", "12.0"),
        ("NVIDIA RTX PRO 6000 Blac...", "12.0"),  # truncated by the nvidia-smi table
        ("NVIDIA A100 80G...", "8.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("NVIDIA RTX 5880 Ada Generation", "8.9"),
        ("NVIDIA GeForce RTX 3060 Laptop GPU", "8.6"),
        ("Tesla T4", "7.5"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("TITAN Xp", "6.1"),
        ("NVIDIA GeForce GTX TITAN X", "5.2"),  # the Maxwell TITAN X, not the Pascal one
        ("Tesla K80", "3.7"),
        ("Some Future GPU 9000", None),
    ],
)
def test_cc_from_name(name: str, cc: str | None) -> None:
    assert cc_from_name(name) == cc


def test_small_version_helpers() -> None:
    assert cc_from_text("sm_120") == "12.0" and cc_from_text("8.6") == "8.6" and cc_from_text("RTX") is None
    assert cuda_from_driver_int(12040) == "12.4" and cuda_from_driver_int(0) is None
    assert cuda_from_tag("cu118") == "11.8" and cuda_from_tag("rocm6.2") is None
    assert local_tag("2.7.1+cu126") == "cu126" and local_tag("2.7.1") is None
    assert version_at_least("580.95.05", "580.65.06") is True and version_at_least("x", "1") is None


@pytest.mark.parametrize(
    ("value", "count", "visible", "reason"),
    [
        # torch 2.14.1 _parse_visible_devices / _device_count_nvml (S-TORCH2141-VISIBLE)
        ("", 2, 0, "empty"),
        ("-1", 2, 0, "invalid"),
        ("0,0", 2, 0, "repeated"),  # a repeated ordinal empties the list
        ("1,-1,0", 2, 1, "invalid"),  # a negative entry ends the list
        ("0,3,1", 2, 1, "missing-index"),  # cut at the first index that does not exist
        ("1gpu2,0", 4, 2, None),  # read like strtoul: '1gpu2' is 1
        ("1", 4, 1, None),
        ("GPU-aaa,GPU-aaa", 2, 0, "repeated"),
        ("MIG-aaa", 2, None, None),  # depends on UUIDs
    ],
)
def test_cuda_visible_devices(value: str, count: int, visible: int | None, reason: str | None) -> None:
    from gpuplan.compat.visible import visibility

    seen = visibility(value, count)
    assert (seen.visible, seen.reason) == (visible, reason)


def test_data_loader_does_not_import_the_arch_rules() -> None:
    """Issue 9: the runtime cycle compat.archs <-> compat.dataload is gone (the loader needs only the
    arch-list text functions, now in compat.archcodes, which import nothing of gpuplan)."""
    import ast
    from pathlib import Path

    import gpuplan.compat

    root = Path(gpuplan.compat.__file__).parent

    def imported(name: str) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert "gpuplan.compat.archs" not in imported("dataload")
    assert not {m for m in imported("archcodes") if m.startswith("gpuplan")}
