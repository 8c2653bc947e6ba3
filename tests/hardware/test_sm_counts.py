"""SM (AMD: compute unit) counts: every NVIDIA and AMD GPU of the catalog has one, within its die.

The cost model's wave quantization (perf/gemm_shape.py) divides a GEMM's tiles over the SMs; a GPU
without a count used to skip that term and come out faster than better GPUs (issue 10)."""

from __future__ import annotations

import pytest

from gpuplan.hardware import all_gpus

# SMs (CUs) of the full die, from the vendors' architecture whitepapers: a product enables at most these.
FULL_DIE_SMS = {
    "GP100": 60,  # NVIDIA Tesla P100 whitepaper
    "GP102": 30,  # NVIDIA GTX 1080 whitepaper family (GP102: 30 SMs in TITAN Xp)
    "GV100": 84,  # NVIDIA Tesla V100 GPU Architecture whitepaper
    "TU102": 72,  # NVIDIA Turing GPU Architecture whitepaper
    "TU104": 48,
    "GA100": 128,  # NVIDIA A100 Tensor Core GPU Architecture whitepaper
    "GA102": 84,  # NVIDIA Ampere GA102 GPU Architecture whitepaper
    "GA104": 48,
    "GA106": 30,
    "AD102": 144,  # NVIDIA Ada GPU Architecture whitepaper
    "AD103": 80,
    "AD104": 60,
    "AD106": 36,
    "GH100": 144,  # NVIDIA H100 Tensor Core GPU Architecture whitepaper
    "GB202": 192,  # NVIDIA RTX Blackwell GPU Architecture whitepaper
    "GB203": 84,
}
_MAIN = [g for g in all_gpus() if not g.is_mig]


@pytest.mark.parametrize("gpu", [g for g in _MAIN if g.vendor_key in ("nvidia", "amd")], ids=lambda g: g.id)
def test_every_nvidia_and_amd_gpu_has_an_sm_count(gpu: object) -> None:
    assert isinstance(gpu.sm_count, int) and gpu.sm_count > 0  # type: ignore[attr-defined]


def test_only_gpus_without_sms_lack_a_count() -> None:
    """Apple GPU cores and Gaudi's MME/TPC engines are not SMs: the only GPUs left without a count."""
    assert {g.vendor_key for g in _MAIN if not g.sm_count} <= {"apple", "intel"}


@pytest.mark.parametrize("gpu", [g for g in _MAIN if g.sm_count], ids=lambda g: g.id)
def test_sm_count_fits_its_die_and_mig_slices_fit_the_gpu(gpu: object) -> None:
    chip = str(gpu.chip or "").split()[0]  # type: ignore[attr-defined]
    sms: int = gpu.sm_count  # type: ignore[attr-defined]
    if chip in FULL_DIE_SMS:
        assert sms <= FULL_DIE_SMS[chip], (chip, sms)
    for profile in gpu.mig_profiles:  # type: ignore[attr-defined]
        if profile.sm_count:
            assert profile.sm_count <= sms
