"""FLUX.1-dev on one H100 against the Hugging Face blog "Exploring Quantization Backends in Diffusers"
(huggingface/blog diffusers-quantization.md @ 0b53cb19406564a21da2bff693a71a08e73538ee): 1024², 50 steps,
max_sequence_length 512, bf16; ``torch.cuda.max_memory_reserved() / 1024**3`` after loading and after the
generation. Residuals in docs/accuracy-diffusion.md. Full-size traces: slow tier."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.workload import Workload

GIB = 2**30


@pytest.mark.slow
@pytest.mark.parametrize(("fields", "after_load_gib", "peak_gib"), [
    ({}, 31.447, 36.166),  # BF16
    ({"load_in": "4bit", "quantize_components": ("transformer", "text_encoder_2")}, 12.584, 17.281),  # bnb NF4
])
def test_flux_dev_h100_memory(fields: dict[str, object], after_load_gib: float, peak_gib: float) -> None:
    w = Workload(mode="infer", precision="bf16", image_size=1024, steps=50, **fields)  # type: ignore[arg-type]
    est = gpuplan.estimate("flux.1-dev", workload=w, gpu="H100-SXM")
    assert est.components["parameters"] / GIB == pytest.approx(after_load_gib, rel=0.01)
    assert est.peak_reserved_bytes / GIB == pytest.approx(peak_gib, rel=0.04)
