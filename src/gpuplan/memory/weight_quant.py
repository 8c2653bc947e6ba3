"""Weight-only quantized weights: the one layout that both the memory total and the decode time use.

Layout (per weight element, group size 128 along the input dimension):

* ``int4``: 4-bit values packed two per byte, one fp16 scale and one fp16 zero point per group
  (GPTQ / AWQ style): 4 + 2·16/128 = 4.25 bits per weight;
* ``int8`` and ``fp8``: one byte per weight and one fp16 scale per group: 8 + 16/128 = 8.125 bits.
  Per-output-channel layouts (bitsandbytes LLM.int8, torchao int8 weight-only) store fewer scales,
  at most 1.6% of the weight bytes less.

Every parameter counts as quantized (embeddings and norms included: GPTQ/AWQ usually keep the
embeddings in 16 bits, so the saving is an upper bound), and the matmuls read the packed weights
directly (fused dequantizing kernels: no 16-bit copy of a layer is materialised).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import ConfigError, require_choice
from gpuplan.workload import WEIGHT_QUANTS

QUANT_GROUP_SIZE = 128
"""Weights sharing one scale (and zero point for int4)."""
WEIGHT_QUANT_BITS: dict[str, float] = {"none": 16.0, "int8": 8.0, "fp8": 8.0, "int4": 4.0}
"""Bits of one quantized value, before its share of the group's scale (and zero point)."""
_GROUP_METADATA_BYTES: dict[str, int] = {"int8": 2, "fp8": 2, "int4": 4}
"""fp16 scale per group; int4 adds an fp16 zero point."""


def bits_per_weight(scheme: str) -> float:
    """Bits one weight costs in memory and in DRAM traffic, its share of the group metadata included."""
    require_choice("weight quantization", scheme, WEIGHT_QUANTS)
    if scheme == "none":
        return WEIGHT_QUANT_BITS["none"]
    return WEIGHT_QUANT_BITS[scheme] + 8 * _GROUP_METADATA_BYTES[scheme] / QUANT_GROUP_SIZE


def quantized_weight_bytes(params_count: int, scheme: str) -> int:
    """Exact bytes of ``params_count`` weights in ``scheme``: packed values plus one group's metadata per
    (started) group of :data:`QUANT_GROUP_SIZE`."""
    require_choice("weight quantization", scheme, WEIGHT_QUANTS)
    if scheme == "none":
        raise ValueError("quantized_weight_bytes needs a quantization scheme, not 'none'")
    packed = -(-params_count * int(WEIGHT_QUANT_BITS[scheme]) // 8)
    groups = -(-params_count // QUANT_GROUP_SIZE)
    return packed + groups * _GROUP_METADATA_BYTES[scheme]


def check_weight_quant(scheme: str, *, trains: bool) -> None:
    """A known scheme, and only for inference: weight-only quantized weights are not trained."""
    require_choice("weight quantization", scheme, WEIGHT_QUANTS)
    if scheme != "none" and trains:
        raise ConfigError(f"--weight-quant {scheme} applies to --mode infer or generate, not train "
                          "(weight-only quantized weights are not trained); drop --weight-quant")


def describe_layout(scheme: str) -> str:
    if scheme == "int4":
        return (f"int4 packed 2 per byte + fp16 scale and zero point per {QUANT_GROUP_SIZE} weights "
                f"({bits_per_weight(scheme):g} bits/weight, GPTQ/AWQ style)")
    return f"{scheme} 1 byte + fp16 scale per {QUANT_GROUP_SIZE} weights ({bits_per_weight(scheme):g} bits/weight)"


@dataclass(frozen=True, slots=True)
class QuantizedWeights:
    """How a weight-only quantization changes the parameters component of a traced step."""

    scheme: str
    weight_bytes: int
    """The quantized weights (packed values + scales): the parameters component."""
    traced_weight_bytes: int
    """The weights as traced (model dtype)."""

    @property
    def memory_saved_bytes(self) -> int:
        return self.traced_weight_bytes - self.weight_bytes


def quantize_weights(params_count: int, traced_weight_bytes: int, scheme: str) -> QuantizedWeights:
    """The step's weights in ``scheme``; never larger than as traced."""
    return QuantizedWeights(scheme, min(traced_weight_bytes, quantized_weight_bytes(params_count, scheme)),
                            traced_weight_bytes)
