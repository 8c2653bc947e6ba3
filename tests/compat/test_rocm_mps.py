"""AMD (ROCm) and Apple (MPS): gfx targets read from every tool, the wheels' targets, the safe HSA override,
the install command per GPU and ROCm version, and the HIP / MPS error messages.

Expected values come from data/rocm.yaml's sources: the manywheel PYTORCH_ROCM_ARCH lists
(S-PT-MANYWHEEL-ROCM for torch >= 2.13, S-BUILDER-ROCM-6 for every ROCm >= 6.0 wheel), the RDNA2
override (S-ISS-ROCM-NOBINARY), the MPS allocator's watermark defaults (S-PT-MPS-ALLOC) and the real
messages of the threads cited beside each test.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.cli.main import main
from gpuplan.compat import parsers, rocm
from gpuplan.compat.explain import explain_error
from gpuplan.compat.install import InstallRequest, plan_install
from gpuplan.compat.oom import parse_mps_oom
from gpuplan.units import GIB, MIB

IDX = "https://download.pytorch.org/whl"

# rocm-smi of an RX 9070 XT with ROCm 7.13 (public notes, code index id 66124933240)
ROCM_SMI_GFX = (
    "GPU[0]\t\t: Card Series: \t\tAMD Radeon RX 9070 XT\n"
    "GPU[0]\t\t: Card Model: \t\t0x7550\n"
    "GPU[0]\t\t: GFX Version: \t\tgfx1201\n"
)
# amd-smi static (rocprofiler docs excerpt, code index id 1213070537), two GPUs, the first without a name
AMD_SMI = (
    "GPU: 0\n    ASIC:\n        MARKET_NAME: N/A\n        TARGET_GRAPHICS_VERSION: gfx1100\n"
    "    BUS:\n        BDF: 0000:03:00.0\n"
    "GPU: 1\n    ASIC:\n        MARKET_NAME: Navi 33 [Radeon Pro W7500]\n        NUM_COMPUTE_UNITS: 28\n"
    "        TARGET_GRAPHICS_VERSION: gfx1102\n"
)
ROCMINFO = (
    "*******                  \nAgent 1                  \n*******                  \n"
    "  Name:                    AMD Ryzen 9 7950X 16-Core Processor\n  Device Type:             CPU\n"
    "*******                  \nAgent 2                  \n*******                  \n"
    "  Name:                    gfx1100                            \n"
    "  Marketing Name:          Radeon RX 7900 XTX                 \n"
    "  Device Type:             GPU                                \n"
    "  ISA Info:                \n    ISA 1                    \n"
    "      Name:                    amdgcn-amd-amdhsa--gfx1100\n"
)


def test_rocm_smi_reads_the_gfx_line() -> None:
    assert parsers.parse_rocm_smi_targets(ROCM_SMI_GFX) == [("AMD Radeon RX 9070 XT", "gfx1201")]
    assert parsers.parse_rocm_smi(ROCM_SMI_GFX) == ["AMD Radeon RX 9070 XT"]


def test_amd_smi_blocks_and_missing_names() -> None:
    assert parsers.parse_amd_smi_static(AMD_SMI) == [(None, "gfx1100"), ("Navi 33 [Radeon Pro W7500]", "gfx1102")]


def test_rocminfo_skips_cpu_agents_and_nested_isa_names() -> None:
    assert parsers.parse_rocminfo(ROCMINFO) == [("Radeon RX 7900 XTX", "gfx1100")]


@given(st.text(max_size=400))
def test_amd_parsers_never_raise(text: str) -> None:
    for parse in (parsers.parse_rocm_smi_targets, parsers.parse_amd_smi_static, parsers.parse_rocminfo):
        assert isinstance(parse(text), list)


@pytest.mark.parametrize(("name", "gfx"), [
    ("AMD Radeon RX 7900 XTX", "gfx1100"), ("AMD Radeon RX 6700 XT", "gfx1031"), ("AMD Radeon RX 9070 XT", "gfx1201"),
    ("AMD Instinct MI300X", "gfx942"), ("AMD Instinct MI250X", "gfx90a"),
    ("Navi 33 [Radeon Pro W7500] gfx1102", "gfx1102"),
    ("GeForce RTX 4090", None),
])
def test_gfx_from_product_names(name: str, gfx: str | None) -> None:
    assert rocm.gfx_for_name(name) == gfx  # S-HFJS-AMD


def test_every_amd_catalog_gpu_has_a_target_that_agrees_with_the_name_table() -> None:
    from gpuplan.hardware import all_gpus

    amd = [g for g in all_gpus() if g.vendor.lower() == "amd"]
    assert amd
    for gpu in amd:
        from_chip = rocm.gfx_in(gpu.chip)
        assert from_chip or rocm.gfx_for_name(gpu.name), gpu.id
        if from_chip:
            assert rocm.gfx_for_name(gpu.name) in (None, from_chip), gpu.id


def test_wheel_lists_only_grow_and_pin_213_onwards() -> None:
    from gpuplan.compat.dataload import rocm_data

    lists = rocm_data().arch_lists
    for older, newer in itertools.pairwise(lists):
        assert set(older.gfx) <= set(newer.gfx)
    assert rocm.wheel_arch_list("2.14.1+rocm7.2") is lists[-1]
    assert rocm.wheel_arch_list("2.5.1+rocm6.2") is None
    assert rocm.first_release_with("gfx1201") == "2.13"
    assert not rocm.in_any_official_wheel("gfx1031") and not rocm.in_any_official_wheel("gfx803")


@pytest.mark.parametrize(("gfx", "variable"), [
    ("gfx1031", "HSA_OVERRIDE_GFX_VERSION=10.3.0"), ("gfx1036", "HSA_OVERRIDE_GFX_VERSION=10.3.0"),
    ("gfx1102", "HSA_OVERRIDE_GFX_VERSION=11.0.0"), ("gfx1201", None), ("gfx803", None), ("gfx1012", None),
])
def test_override_only_within_one_instruction_set(gfx: str, variable: str | None) -> None:
    override = rocm.safe_override(gfx)
    assert (override.variable if override else None) == variable


ROCM_CASES = [
    # gfx1100 is in the 15-target list pinned to 2.13+: the newest release with ROCm wheels, 2.14, on ROCm 7.2
    (InstallRequest("linux", "x86_64", "3.12", "AMD Radeon RX 7900 XTX", amd=True, gfx="gfx1100"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/rocm7.2", None),
    # RDNA4 gfx1201: in the 2.13+ list
    (InstallRequest("linux", "x86_64", "3.12", "AMD Radeon RX 9070 XT", amd=True, gfx="gfx1201"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/rocm7.2", None),
    # gfx1031 is in no list: the same wheel with the RDNA2 override
    (InstallRequest("linux", "x86_64", "3.12", "AMD Radeon RX 6700 XT", amd=True, gfx="gfx1031"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/rocm7.2", "HSA_OVERRIDE_GFX_VERSION=10.3.0"),
    # --rocm 6.4: 2.10-2.14 ship ROCm 7.x only; 2.9 is the newest with a rocm6.4 index
    (InstallRequest("linux", "x86_64", "3.12", "AMD Radeon RX 7900 XTX", amd=True, gfx="gfx1100", rocm="6.4"),
     f"pip install torch==2.9.1 torchvision==0.24.* --index-url {IDX}/rocm6.4", None),
]


@pytest.mark.parametrize(("req", "command", "note"), ROCM_CASES)
def test_install_picks_a_rocm_wheel_with_the_gpus_target(req: InstallRequest, command: str, note: str | None) -> None:
    plan = plan_install(req)
    assert plan.ok and plan.command == command
    if note:
        assert any(note in n for n in plan.notes)


def test_install_refuses_a_target_no_wheel_has_and_no_override_saves() -> None:
    plan = plan_install(InstallRequest("linux", "x86_64", "3.12", "AMD Radeon RX 580", amd=True, gfx="gfx803"))
    assert not plan.ok and "gfx803" in plan.reason and "PYTORCH_ROCM_ARCH=gfx803" in plan.reason


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_install_cli_by_amd_name_target_and_apple(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--python", "3.12", "--driver", "550.54.15")
    code, out, _ = _run(capsys, "install", "--gpu", "RX 7900 XTX", "--os", "linux", *common)
    assert code == 0 and out.splitlines()[0].endswith("/rocm7.2") and "gfx1100 kernels" in out
    code, out, _ = _run(capsys, "install", "--gpu", "gfx1031", "--os", "linux", *common)
    assert code == 0 and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in out
    code, out, _ = _run(capsys, "install", "--gpu", "gfx803", "--os", "linux", *common)
    assert code == 1 and "No compatible PyTorch build found." in out
    code, out, _ = _run(capsys, "install", "--gpu", "M3 Max", "--python", "3.12")
    assert code == 0 and out.startswith("pip install torch==") and "bfloat16 from macOS 14.0" in out


@pytest.mark.parametrize(("argv", "needle"), [
    (["install", "--gpu", "RX 7900 XTX", "--rocm", "9.9", "--python", "3.12", "--os", "linux", "--driver", "550.54.15"],
     "unknown --rocm '9.9'"),
    (["install", "--gpu", "RTX 4090", "--rocm", "6.4", "--python", "3.12", "--os", "linux", "--driver", "550.54.15"],
     "--rocm applies to AMD GPUs"),
    (["install", "--gpu", "M3 Max", "--os", "linux", "--python", "3.12"], "is an Apple GPU"),
])
def test_bad_amd_and_apple_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1


def test_explain_hip_no_code_object_names_the_target_and_the_override() -> None:
    # message of ROCm/legacy-rocm-build#2061 (RX 6600) with the ISA name rocminfo prints
    expl = explain_error("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n"
                         "agent: amdgcn-amd-amdhsa--gfx1032")
    assert expl is not None and expl.family == "hip-no-code-object"
    assert any("gfx1032" in d and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in d for d in expl.details)
    expl = explain_error("RuntimeError: HIP error: invalid device function\nHIP kernel errors might be "
                         "asynchronously reported at some other API call, so the stacktrace below might be incorrect.")
    assert expl is not None and expl.family == "hip-no-code-object"


def test_explain_mps_oom_reads_its_numbers() -> None:
    # pytorch/pytorch#96814 (GB printed, 1024-based)
    text = ("MPS backend out of memory (MPS allocated: 7.43 GB, other allocations: 24.46 GB, max allowed: 32.00 GB). "
            "Tried to allocate 129.21 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper "
            "limit for memory allocations (may cause system failure).")
    numbers = parse_mps_oom(text)
    assert numbers is not None
    assert numbers.allocated_bytes == round(7.43 * GIB) and numbers.other_bytes == round(24.46 * GIB)
    assert numbers.max_allowed_bytes == 32 * GIB and numbers.tried_bytes == round(129.21 * MIB)
    expl = explain_error(text)
    assert expl is not None and expl.family == "mps-oom"
    # 32 GiB cap / 1.7 (default ratio, S-PT-MPS-ALLOC) = 18.82 GiB working set; other allocations dominate
    assert any("18.82 GiB" in d for d in expl.details)
    assert any("empty_cache" in d for d in expl.details)
    # a HIP OOM is still the allocator family with its numbers
    hip = explain_error("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                        "capacity of 23.98 GiB of which 1.20 GiB is free.")
    assert hip is not None and hip.family == "cuda-oom" and hip.oom is not None
