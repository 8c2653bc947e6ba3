"""The scaled low-precision training recipes (``--precision fp8 | mxfp8 | nvfp4``): one row each.

All three run every eligible linear layer's three GEMMs (forward, input gradient, weight gradient) on
casts of bf16 tensors, keep bf16 parameters, gradients and optimizer state, and save the bf16 input and
weight for backward. The trace runs torchao's float8 conversion (``trace/float8.py``) for all three — the
same program of casts and GEMMs —; what differs, and is priced from this table
(``perf/step_time.py``, ``perf/float8_cast.py``, ``perf/roofline.py``), is:

* the GEMM rate: fp8 and MXFP8 run at the GPU's dense FP8 rate (Blackwell's block-scaled MMA takes MXFP8
  at the FP8 rate: NVIDIA Blackwell architecture technical brief), NVFP4 at its dense FP4 rate;
* the bytes a cast writes per element, scales included: fp8 1 (one fp32 scale per tensor); MXFP8
  1 + 1/32 (e4m3 data, one e8m0 scale per 32 elements: OCP Microscaling Formats v1.0); NVFP4 0.5 + 1/16
  (e2m1 data, one e4m3 scale per 16 elements, one fp32 scale per tensor: NVIDIA, "Pretraining Large
  Language Models with NVFP4", arXiv 2509.25149, §2);
* which blocks stay in bf16: none by default for fp8 and MXFP8 (torchao / torchtitan keep only the output
  head in bf16: torchtitan ``job_config.py`` ``MX.filter_fqns = ["output"]``); for NVFP4 the paper keeps
  about 15% of the linear layers in bf16, mostly the last blocks (arXiv 2509.25149 §4.1: training diverges
  with every linear layer in FP4), so the default is the last round(0.15 × blocks);
  ``--high-precision-blocks N`` sets it for any recipe;
* the GPUs that run it: FP8 from compute capability 8.9 (Ada, Hopper); MXFP8 and NVFP4 from 10.0
  (Blackwell's fifth-generation tensor cores: sm_100, sm_103, sm_120).

Not modelled, and said so in the assumptions: NVFP4's random Hadamard transform of the weight-gradient
GEMM inputs (16 × 16, fused into the cast by Transformer Engine) and its 2-D 16 × 16 weight scaling; the
cast temporaries are traced at fp8's one byte per element (an upper bound for NVFP4's, freed per layer).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScaledFormat:
    precision: str
    gemm_rate: str
    """Catalog dtype key whose dense peak bounds the recipe's GEMMs."""
    cast_bytes_per_element: float
    """Bytes a cast writes per element, block and tensor scales included."""
    min_compute_capability: tuple[int, int]
    default_high_precision_fraction: float
    """Share of the repeated blocks whose linear layers stay in bf16 when --high-precision-blocks is not given."""
    recipe: str
    """What runs it, for the assumptions."""


SCALED_FORMATS: dict[str, ScaledFormat] = {
    "fp8": ScaledFormat("fp8", "fp8", 1.0, (8, 9), 0.0, "torchao Float8Linear, tensorwise dynamic scaling"),
    "mxfp8": ScaledFormat(
        "mxfp8",
        "fp8",
        1.0 + 1.0 / 32,
        (10, 0),
        0.0,
        "torchao MX training (torchtitan --model.converters mx, recipe mxfp8): e4m3 with an e8m0 scale per 32",
    ),
    "nvfp4": ScaledFormat(
        "nvfp4",
        "fp4",
        0.5 + 1.0 / 16,
        (10, 0),
        0.15,
        "Transformer Engine NVFP4BlockScaling: e2m1 with an e4m3 scale per 16 and an fp32 scale per tensor",
    ),
}


def high_precision_blocks(precision: str, explicit: int | None, blocks: int) -> int:
    """Repeated blocks (of ``blocks``) whose linear layers stay in bf16 under the recipe."""
    if explicit is not None:
        return min(explicit, blocks)
    return round(SCALED_FORMATS[precision].default_high_precision_fraction * blocks)
