"""`gpuplan install` picks the right build for (GPU, driver, Python) combinations from the reference data.

Each expected answer was worked out by hand from ../shared/reference/compat (carried into
compat/data): torch_releases.yaml (arch lists, Python lists, PyPI default per release; ids S-REL-ZH,
S-PR175253, S-PYPI, S-TI ...), cuda_drivers.yaml (minor-version floors 11.x >= 450.80.02 / 452.39,
12.x >= 525.60.13 / 527.41, 13.x >= 580.65.06, and NVIDIA Table 3 rows; ids S-NV-MVC, S-NV-RN132U2),
compute_capability.yaml (same-major cubin rule; S-TORCH213).
"""

from __future__ import annotations

import pytest

from gpuplan.compat.install import InstallRequest, plan_install

IDX = "https://download.pytorch.org/whl"

CASES = [
    # (id, request, expected command) -- the comment says why, from the data
    # RTX 5090 sm_120 on R570: 2.12+ ship sm_120 only in CUDA 13 builds (need >= 580); 2.11 cu128 has 12.0.
    ("rtx5090-r570-py312", InstallRequest("linux", "x86_64", "3.12", "RTX 5090", "12.0", "570.124.06"),
     f"pip install torch==2.11.0 torchvision==0.26.* --index-url {IDX}/cu128"),
    # Same GPU, R580 (CUDA 13.0): 2.15 cu130 is fully supported; cu132 (PyPI default) only via minor compat.
    ("rtx5090-r580-py312", InstallRequest("linux", "x86_64", "3.12", "RTX 5090", "12.0", "580.95.05"),
     f"pip install torch==2.15.0 torchvision --index-url {IDX}/cu130"),
    # R595 supports CUDA 13.2 (Table 3: 13.2 GA >= 595.45.04): the plain PyPI wheel of 2.15 is cu132.
    ("rtx5090-r595-py313", InstallRequest("linux", "x86_64", "3.13", "RTX 5090", "12.0", "595.58.03"),
     "pip install torch==2.15.0 torchvision"),
    # Pascal sm_61: no kernels from 2.15; 2.14 cu126 (5.0;6.0;...); R535 runs CUDA 12.6 via minor compat.
    ("gtx1080ti-r535-py311", InstallRequest("linux", "x86_64", "3.11", "GTX 1080 Ti", "6.1", "535.183.01"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    ("gtx1080ti-r550-py313", InstallRequest("linux", "x86_64", "3.13", "GTX 1080 Ti", "6.1", "550.54.15"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    # Volta sm_70: dropped from cu128 in 2.11 and from everything in 2.15; 2.14 cu126 keeps 7.0.
    ("v100-r570-py312", InstallRequest("linux", "x86_64", "3.12", "V100", "7.0", "570.124.06"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    # Kepler sm_37: only cu118 builds up to 2.7 (S-MOI90-PR3); R470 (CUDA 11.4) >= 450.80.02 floor.
    ("k80-r470-py311", InstallRequest("linux", "x86_64", "3.11", "K80", "3.7", "470.82.01"),
     f"pip install torch==2.7.1 torchvision==0.22.* --index-url {IDX}/cu118"),
    # H100 on R535 with Python 3.10: 2.15 has no 3.10 wheels; 2.14 CUDA 13 builds need R580 -> cu126.
    ("h100-r535-py310", InstallRequest("linux", "x86_64", "3.10", "H100", "9.0", "535.104.05"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    ("h100-r580-py312", InstallRequest("linux", "x86_64", "3.12", "H100", "9.0", "580.95.05"),
     f"pip install torch==2.15.0 torchvision --index-url {IDX}/cu130"),
    # A100 on exactly the CUDA 11 floor with Python 3.9: 2.8 (last with 3.9) is CUDA 12 only -> 2.7 cu118.
    ("a100-r450-py39", InstallRequest("linux", "x86_64", "3.9", "A100", "8.0", "450.80.02"),
     f"pip install torch==2.7.1 torchvision==0.22.* --index-url {IDX}/cu118"),
    # Windows RTX 4090, driver 566.36 (>= 560.76, the Windows 12.6 row); Windows CUDA always needs the index.
    ("rtx4090-win566-py312", InstallRequest("windows", "AMD64", "3.12", "RTX 4090", "8.9", "566.36"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    # Windows RTX 5090 on 572.61 (12.8 U1 Windows row): 2.11 cu128 Windows list has 12.0.
    ("rtx5090-win572-py312", InstallRequest("windows", "AMD64", "3.12", "RTX 5090", "12.0", "572.61"),
     f"pip install torch==2.11.0 torchvision==0.26.* --index-url {IDX}/cu128"),
    # RTX 3090 on the very first CUDA 12 driver: 12.x minor compat from 525.60.13.
    ("rtx3090-r525-py311", InstallRequest("linux", "x86_64", "3.11", "RTX 3090", "8.6", "525.60.13"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    # T4 on a CUDA 10.2 driver with Python 3.8: only 1.12 cu102 (exact 10.2 driver >= 440.33;
    # sm_75 runs sm_70 cubins).
    ("t4-r440-py38", InstallRequest("linux", "x86_64", "3.8", "T4", "7.5", "440.33.01"),
     f"pip install torch==1.12.1+cu102 torchvision==0.13.* --extra-index-url {IDX}/cu102"),
    # GB10 sm_121 runs sm_120 cubins (same major, lower minor;
    # S-TORCH213 DEVICE_REQUIREMENT 120: >=12.0,<13.0).
    ("gb10-r580-py312", InstallRequest("linux", "aarch64", "3.12", "GB10", "12.1", "580.95.05"),
     f"pip install torch==2.15.0 torchvision --index-url {IDX}/cu130"),
    # Jetson Thor sm_110 on Linux aarch64: the x86_64 lists have no 11.0; 2.13's aarch64 cu130 list
    # (8.0;9.0;10.0;11.0;12.0+PTX, S-TORCH213 PYTORCH_RELEASES_CODE_CC) is the newest in the data that has it.
    ("thor-aarch64-r580-py312", InstallRequest("linux", "aarch64", "3.12", "T5000", "11.0", "580.95.05"),
     f"pip install torch==2.13.0 torchvision==0.28.* --index-url {IDX}/cu130"),
    # GH200 (sm_90, aarch64) on R535: CUDA 13 needs R580; 2.14 cu126 has 9.0; non-x86 always uses the index.
    ("gh200-aarch64-r535-py312", InstallRequest("linux", "aarch64", "3.12", "GH200", "9.0", "535.183.06"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cu126"),
    # Pinned release: RTX 5090 on torch 2.7 -> its cu128 build (2.7's PyPI default is cu126).
    ("rtx5090-pin27", InstallRequest("linux", "x86_64", "3.12", "RTX 5090", "12.0", "575.57.08", torch="2.7"),
     f"pip install torch==2.7.1 torchvision==0.22.* --index-url {IDX}/cu128"),
    # No GPU: the CPU index on Linux (the PyPI Linux wheel carries CUDA).
    ("cpu-linux-py310", InstallRequest("linux", "x86_64", "3.10"),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/cpu"),
    # macOS: PyPI wheels are CPU + MPS builds (S-TI get_wheel_install_command).
    ("macos-py312", InstallRequest("macos", "arm64", "3.12"), "pip install torch==2.15.0 torchvision"),
    # AMD: newest release with a ROCm wheel set in the data is 2.14 (ROCm 7.2, test-infra list).
    ("amd-py311", InstallRequest("linux", "x86_64", "3.11", amd=True),
     f"pip install torch==2.14.1 torchvision==0.29.* --index-url {IDX}/rocm7.2"),
]


@pytest.mark.parametrize(("request_", "command"), [(r, c) for _, r, c in CASES], ids=[i for i, _, _ in CASES])
def test_install_command(request_: InstallRequest, command: str) -> None:
    plan = plan_install(request_)
    assert plan.ok, plan.reason
    assert plan.command == command


def test_at_least_15_gpu_driver_python_combinations() -> None:
    assert sum(1 for _, r, _ in CASES if r.cc and r.driver_version and r.python) >= 15


@pytest.mark.parametrize(
    "request_",
    [
        # Kepler needs torch <= 2.7, which has no Python 3.14 wheels.
        InstallRequest("linux", "x86_64", "3.14", "K80", "3.7", "470.82.01"),
        # CUDA 10.1 driver: below every floor in the data (10.2 exact 440.33, 11.x 450.80.02).
        InstallRequest("linux", "x86_64", "3.8", "T4", "7.5", "418.87.01"),
        # Kepler sm_30 (K10): no wheel in the data has it.
        InstallRequest("linux", "x86_64", "3.10", "K10", "3.0", "470.82.01"),
    ],
    ids=["k80-py314", "t4-driver418", "k10"],
)
def test_no_build_fits(request_: InstallRequest) -> None:
    plan = plan_install(request_)
    assert not plan.ok and plan.command is None
    assert plan.excluded  # says what was ruled out and why


def test_reason_and_exclusions_are_explained() -> None:
    plan = plan_install(InstallRequest("linux", "x86_64", "3.12", "RTX 5090", "12.0", "570.124.06"))
    assert "native kernels for sm_120" in plan.reason
    reasons = {e.what: e.reason for e in plan.excluded}
    assert "580.65.06" in reasons["torch 2.15"]  # CUDA 13 floor
    assert "no kernels for sm_120" in reasons["torch 2.11 cu126"]


def test_minor_compat_is_stated() -> None:
    plan = plan_install(InstallRequest("linux", "x86_64", "3.11", "GTX 1080 Ti", "6.1", "535.183.01"))
    # 535.183.01 supports CUDA 12.2 (Table 3: 12.2 GA >= 535.54.03); full 12.6 support needs 560.28.03
    assert "minor-version compatibility" in plan.reason and "560.28.03" in plan.reason


def test_conda_command_only_while_the_channel_shipped() -> None:
    # R535 fully supports CUDA 12.2, so 2.5's cu121 build (full support) wins over cu124 (minor compat)
    old = plan_install(InstallRequest("linux", "x86_64", "3.10", "A100", "8.0", "535.104.05", torch="2.5"))
    assert old.command == f"pip install torch==2.5.1 torchvision==0.20.* --index-url {IDX}/cu121"
    conda = "conda install pytorch==2.5.1 torchvision=0.20 pytorch-cuda=12.1 -c pytorch -c nvidia"
    assert old.conda_command == conda
    new = plan_install(InstallRequest("linux", "x86_64", "3.12", "H100", "9.0", "580.95.05"))
    assert new.conda_command is None and any("2.5" in n for n in new.notes)


def test_driver_older_than_the_gpu_architecture_gets_no_build() -> None:
    """Issue 9 item 13: RTX 5090 (sm_120) on 560.35.03. sm_120 first appears in CUDA 12.8 (S-LLVM-CUDA), whose
    driver branch is R570 (Table 3: 570.26, S-NV-RN132U2); R560 cannot run the card with any wheel. Old main
    recommended torch 2.11 cu128 'through minor-version compatibility'."""
    plan = plan_install(InstallRequest("linux", "x86_64", "3.12", "RTX 5090", "12.0", "560.35.03"))
    assert not plan.ok and plan.command is None
    assert "predates" in plan.reason and ">= 570.26" in plan.reason and "CUDA 12.8" in plan.reason
    # only the reported CUDA version known (nvidia-smi 'CUDA Version: 12.6', no driver string)
    plan = plan_install(InstallRequest("linux", "x86_64", "3.12", "RTX 5090", "12.0", None, driver_cuda="12.6"))
    assert not plan.ok and "predates" in plan.reason


@pytest.mark.parametrize(("name", "cc", "driver"), [
    ("RTX 5090", "12.0", "570.86.16"),  # first Linux driver of the RTX 50 launch: same branch as the 12.8 row
    ("RTX 4090", "8.9", "520.56.06"),   # RTX 4090 launch driver: earlier than the 11.8 row 520.61.05, same branch
    ("H100", "9.0", "515.65.01"),       # Hopper is left out of first_cuda (not verified): never refused
])
def test_first_release_of_the_architecture_branch_is_not_refused(name: str, cc: str, driver: str) -> None:
    plan = plan_install(InstallRequest("linux", "x86_64", "3.11", name, cc, driver))
    assert "predates" not in plan.reason
