"""Quantized weights: the one layout rule that memory and time read.

Two parts: ``--weight-quant`` (below: a generic per-group layout applied to every parameter count, for
inference), and quantized checkpoints layer by layer (:func:`layer_layout`: the exact tensors of bnb NF4/FP4,
LLM.int8, GPTQ, AWQ, FP8, compressed-tensors and MXFP4, which trace/quantized.py builds on the fake device).

Layout (per weight element, group size 128 along the input dimension):

* ``int4``: 4-bit values packed two per byte, one fp16 scale and one fp16 zero point per group
  (GPTQ / AWQ style): 4 + 2·16/128 = 4.25 bits per weight;
* ``int8`` and ``fp8``: one byte per weight and one fp16 scale per group: 8 + 16/128 = 8.125 bits.
  Per-output-channel layouts (bitsandbytes LLM.int8, torchao int8 weight-only) store fewer scales,
  at most 1.6% of the weight bytes less.

Every parameter counts as quantized (embeddings and norms included: GPTQ/AWQ usually keep the
embeddings in 16 bits, so the saving is an upper bound), and the matmuls read the packed weights
directly (fused dequantizing kernels: no 16-bit copy of a layer is materialised).

Serving engines (vLLM, SGLang) quantize less: only linear layers and the fused MoE experts
(:func:`engine_keeps_16bit`), each format with its own scales (:func:`served_quantized_bytes`: a checkpoint's
FP8 block scales, vLLM's online ``--quantization fp8`` per-tensor scales).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.dtypes import DTYPE_BYTES
from gpuplan.errors import ConfigError, require_choice
from gpuplan.workload import WEIGHT_QUANTS

if TYPE_CHECKING:
    from gpuplan.models.quant_config import QuantizationConfig

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
    if scheme == "fp8-storage":
        raise ConfigError("--weight-quant fp8-storage is diffusers' layerwise casting of a diffusion pipeline's "
                          "components; for this model use --weight-quant fp8")
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


# -- Quantized checkpoints, layer by layer ------------------------------------------------------------------
# The formats real libraries store, each as the exact tensors one quantized linear layer holds on the GPU.
# trace/quantized.py builds these tensors on the fake device (so the trace counts them like any weight), and
# tests compare their bytes with the real libraries' tensors. One rule: :func:`layer_layout`.

QUANT_METHODS: tuple[str, ...] = ("bnb-nf4", "bnb-fp4", "bnb-int8", "gptq", "awq", "fp8", "int8", "int4", "mxfp4",
                                  "gguf")
"""Quantized base-weight formats (``--load-in-4bit`` = bnb-nf4 with double quantization, ``--load-in-8bit`` =
bnb-int8, or a checkpoint's ``quantization_config``); the names of gpuplan.models.quant_config.SCHEMES, where
``int8`` / ``int4`` are compressed-tensors integer weights; ``gguf`` a ggml block type (``ggml_type``) as diffusers'
``GGUFQuantizationConfig`` loads it."""

BNB_4BIT_BLOCK = 64
"""bitsandbytes Params4bit blocksize (weights per absmax)."""
BNB_NESTED_BLOCK = 256
"""Double quantization: absmax values per second-level fp32 absmax (bitsandbytes requires 256)."""
MXFP4_BLOCK = 32
"""OCP microscaling: fp4 values per shared e8m0 scale."""
_DEFAULT_SKIP: tuple[str, ...] = ("lm_head",)


@dataclass(frozen=True, slots=True)
class StoredTensor:
    """One tensor of a quantized layer, named as the checkpoint names it (suffix after the module path)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """A quantized base-weight format and its parameters."""

    method: str
    group_size: int = 0
    """Weights per scale along the input dimension (bnb 4-bit blocksize, GPTQ/AWQ group, MXFP4 block);
    -1 for GPTQ/AWQ: one group per row. 0: per output channel (bnb-int8, fp8)."""
    bits: int = 4
    """GPTQ/AWQ value width (2, 4 or 8)."""
    double_quant: bool = False
    """bnb 4-bit: absmax quantized to uint8 per 256 (+ fp32 second-level absmax, code and offset)."""
    fp8_block: tuple[int, int] | None = None
    """fp8 with block scales (``weight_block_size``, DeepSeek-V3 style): (rows, columns) per fp32 scale."""
    strategy: str = "channel"
    """fp8 and compressed-tensors integer scales: ``channel`` (one per output row), ``tensor`` or ``group``."""
    symmetric: bool = True
    """compressed-tensors integer: False stores a zero point per scale."""
    skip: tuple[str, ...] = _DEFAULT_SKIP
    """Module names left unquantized (``modules_to_not_convert`` / ``llm_int8_skip_modules``; lm_head by default)."""
    ggml_type: str = ""
    """gguf: the ggml type of the layer's weight (``Q4_K``, ``Q8_0``...; models/gguf_mix.py has the byte table)."""
    dequantizes: bool = False
    """The library's linear dequantizes the whole weight to the compute dtype at every call, then runs a 16-bit
    matmul (torchao weight-only int8/fp8 without torch.compile, diffusers' GGUFLinear): a transient copy per
    layer and its write/read time. False: a fused kernel reads the stored weight."""

    def __post_init__(self) -> None:
        require_choice("quantization format", self.method, QUANT_METHODS)
        if self.method in ("gptq", "awq") and self.bits not in (2, 4, 8):
            raise ConfigError(f"{self.method} with {self.bits}-bit values is not modelled: allowed bits 2, 4, 8 "
                              "(packed into int32); use a 4-bit checkpoint's config")
        if self.method in ("gptq", "awq") and not (self.group_size == -1 or self.group_size > 0):
            raise ConfigError(f"{self.method} group_size {self.group_size} is not valid: allowed -1 (one group per "
                              "row) or a positive number of weights (128 is usual)")

    def describe(self) -> str:
        if self.method in ("bnb-nf4", "bnb-fp4"):
            dq = " + double quantization" if self.double_quant else ""
            return f"bitsandbytes {self.method[4:].upper()} (absmax per {self.group_size}{dq})"
        if self.method == "bnb-int8":
            return "bitsandbytes LLM.int8 (int8 + fp32 scale per row; outlier columns not modelled)"
        if self.method in ("gptq", "awq"):
            group = "per row" if self.group_size == -1 else f"group {self.group_size}"
            return f"{self.method.upper()} {self.bits}-bit ({group}, packed int32 + fp16 scales + packed zeros)"
        if self.method == "fp8":
            scale = (f"fp32 scale per {self.fp8_block[0]}x{self.fp8_block[1]} block" if self.fp8_block
                     else f"fp32 scale per {'tensor' if self.strategy == 'tensor' else 'output channel'}")
            return f"FP8 e4m3 ({scale})"
        if self.method in ("int4", "int8"):
            per = f"group {self.group_size}" if self.group_size > 0 else f"per {self.strategy}"
            return f"compressed-tensors {self.method} ({per}, bf16 scales{'' if self.symmetric else ' + zero points'})"
        if self.method == "gguf":
            return f"GGUF {self.ggml_type} (ggml blocks, dequantized to the compute dtype per layer)"
        return f"MXFP4 (fp4 blocks of {MXFP4_BLOCK} + uint8 e8m0 scale)"


def weight_format(method: str, *, group_size: int | None = None, bits: int = 4, double_quant: bool | None = None,
                  skip: tuple[str, ...] | None = None, fp8_block: tuple[int, int] | None = None,
                  strategy: str = "channel", symmetric: bool = True, ggml_type: str = "",
                  dequantizes: bool = False) -> WeightFormat:
    """``method`` with the libraries' defaults for what is not given (bnb 4-bit: blocksize 64; GPTQ/AWQ: group
    128; ``--load-in-4bit``: double quantization on, as QLoRA runs it)."""
    require_choice("quantization format", method, QUANT_METHODS)
    defaults = {"bnb-nf4": BNB_4BIT_BLOCK, "bnb-fp4": BNB_4BIT_BLOCK, "gptq": 128, "awq": 128, "mxfp4": MXFP4_BLOCK}
    return WeightFormat(method, group_size if group_size is not None else defaults.get(method, 0), bits,
                        bool(double_quant) if double_quant is not None else method in ("bnb-nf4", "bnb-fp4"),
                        fp8_block, strategy, symmetric, skip if skip is not None else _DEFAULT_SKIP, ggml_type,
                        dequantizes or method == "gguf")


def format_from_config(qc: QuantizationConfig) -> WeightFormat:
    """The layer layout of a checkpoint's parsed ``quantization_config`` (gpuplan.models.quant_config)."""
    skip = qc.skip_modules or None
    if qc.scheme in ("bnb-nf4", "bnb-fp4"):
        return weight_format(qc.scheme, group_size=qc.group_size, double_quant=qc.double_quant, skip=skip)
    if qc.scheme in ("gptq", "awq"):
        if qc.scheme == "awq" and (qc.version or "gemm").lower() != "gemm":
            raise ConfigError(f"AWQ version {qc.version!r} is not modelled (allowed: gemm, AutoAWQ's default); "
                              "use a GEMM checkpoint's config or --weight-quant int4")
        return weight_format(qc.scheme, group_size=qc.group_size or -1, bits=qc.bits, skip=skip)
    if qc.scheme in ("int4", "int8"):
        return weight_format(qc.scheme, group_size=qc.group_size or 0, bits=qc.bits, skip=skip,
                             strategy=qc.strategy, symmetric=qc.symmetric)
    if qc.scheme == "fp8":
        return weight_format("fp8", skip=skip, fp8_block=qc.block_shape,
                             strategy="tensor" if qc.strategy == "tensor" else "channel")
    return weight_format(qc.scheme, skip=skip)


def layer_layout(fmt: WeightFormat, out_features: int, in_features: int) -> tuple[StoredTensor, ...]:
    """The tensors one quantized ``in_features -> out_features`` linear layer holds on the GPU (bias excluded:
    it stays in the model dtype). The first is the packed weight. Sources, per format:

    * bnb 4-bit: ``bitsandbytes.functional.quantize_4bit`` (0.50): uint8 [(n·k+1)//2, 1], QuantState absmax
      fp32 per 64 and its 16-entry fp32 code; with double quantization the absmax is uint8 per 64 and
      ``state2`` holds an fp32 absmax per 256 of them, a 256-entry fp32 code and an fp32 offset;
    * bnb-int8: ``bitsandbytes.functional.int8_vectorwise_quant``: int8 [n, k] + fp32 SCB [n];
    * GPTQ (AutoGPTQ / GPTQModel QuantLinear): qweight int32 [k·b/32, n], qzeros int32 [groups, n·b/32],
      scales fp16 [groups, n], g_idx int32 [k];
    * AWQ (AutoAWQ WQLinear_GEMM): qweight int32 [k, n·b/32] (values in the order 0 2 4 6 1 3 5 7 within an
      int32: no effect on bytes), qzeros int32 [groups, n·b/32], scales fp16 [groups, n];
    * fp8 (transformers FbgemmFp8Linear, compressed-tensors channel strategy): float8_e4m3fn [n, k] + fp32
      scale [n, 1]; with ``weight_block_size`` (FP8Linear) fp32 ``weight_scale_inv`` per block;
    * compressed-tensors integer (``pack-quantized`` int4: int32 ``weight_packed`` [n, k/8] + ``weight_shape``;
      ``int-quantized`` int8: int8 [n, k]); scales in the checkpoint dtype (bf16 here) per channel or group,
      packed zero points when asymmetric;
    * MXFP4 (transformers Mxfp4 for gpt-oss): uint8 blocks [n, k/32, 16] + uint8 e8m0 scales [n, k/32];
    * GGUF (diffusers ``GGUFParameter``): the file's uint8 rows, ``ggml_row_size(type, k)`` bytes each
      (models/gguf_mix.py ``row_bytes``: scales live inside the blocks).
    """
    n, k = out_features, in_features
    m = fmt.method
    if m in ("bnb-nf4", "bnb-fp4"):
        blocks = -(-n * k // fmt.group_size)
        tensors = [StoredTensor("weight", ((n * k + 1) // 2, 1), "uint8")]
        if fmt.double_quant:
            tensors += [StoredTensor("weight.absmax", (blocks,), "uint8"),
                        StoredTensor("weight.quant_map", (16,), "float32"),
                        StoredTensor("weight.nested_absmax", (-(-blocks // BNB_NESTED_BLOCK),), "float32"),
                        StoredTensor("weight.nested_quant_map", (256,), "float32"),
                        StoredTensor("weight.nested_offset", (), "float32")]
        else:
            tensors += [StoredTensor("weight.absmax", (blocks,), "float32"),
                        StoredTensor("weight.quant_map", (16,), "float32")]
        return tuple(tensors)
    if m == "bnb-int8":
        return (StoredTensor("weight", (n, k), "int8"), StoredTensor("SCB", (n,), "float32"))
    if m in ("gptq", "awq"):
        per_int32 = 32 // fmt.bits
        groups = 1 if fmt.group_size == -1 else -(-k // fmt.group_size)
        zeros = StoredTensor("qzeros", (groups, -(-n // per_int32)), "int32")
        scales = StoredTensor("scales", (groups, n), "float16")
        if m == "gptq":
            return (StoredTensor("qweight", (-(-k // per_int32), n), "int32"), zeros, scales,
                    StoredTensor("g_idx", (k,), "int32"))
        return (StoredTensor("qweight", (k, -(-n // per_int32)), "int32"), zeros, scales)
    if m == "fp8":
        if fmt.fp8_block is not None:
            rows, cols = fmt.fp8_block
            return (StoredTensor("weight", (n, k), "float8_e4m3fn"),
                    StoredTensor("weight_scale_inv", (-(-n // rows), -(-k // cols)), "float32"))
        scale_shape = (1,) if fmt.strategy == "tensor" else (n, 1)
        return (StoredTensor("weight", (n, k), "float8_e4m3fn"), StoredTensor("weight_scale", scale_shape, "float32"))
    if m in ("int4", "int8"):
        groups = -(-k // fmt.group_size) if fmt.group_size > 0 else 1
        scale_cols = groups if fmt.group_size > 0 else 1
        scale_rows = 1 if fmt.strategy == "tensor" else n
        if m == "int4":
            tensors = [StoredTensor("weight_packed", (n, -(-k // 8)), "int32"),
                       StoredTensor("weight_scale", (scale_rows, scale_cols), "bfloat16"),
                       StoredTensor("weight_shape", (2,), "int64")]
            if not fmt.symmetric:
                tensors.append(StoredTensor("weight_zero_point", (-(-scale_rows // 8), scale_cols), "int32"))
        else:
            tensors = [StoredTensor("weight", (n, k), "int8"),
                       StoredTensor("weight_scale", (scale_rows, scale_cols), "bfloat16")]
            if not fmt.symmetric:
                tensors.append(StoredTensor("weight_zero_point", (scale_rows, scale_cols), "int8"))
        return tuple(tensors)
    if m == "gguf":
        from gpuplan.models.gguf_mix import row_bytes

        return (StoredTensor("weight", (n, row_bytes(fmt.ggml_type, k)), "uint8"),)
    blocks32 = -(-k // MXFP4_BLOCK)
    return (StoredTensor("weight_blocks", (n, blocks32, MXFP4_BLOCK // 2), "uint8"),
            StoredTensor("weight_scales", (n, blocks32), "uint8"))


def layer_bytes(fmt: WeightFormat, out_features: int, in_features: int) -> int:
    """Bytes of one quantized linear layer's weight (packed values and every scale, zero and code)."""
    return sum(t.nbytes for t in layer_layout(fmt, out_features, in_features))


# -- What a serving engine quantizes (serve/capacity.py) -------------------------------------------------------
# vLLM gives the quantization method to linear layers (LinearBase) and the fused MoE experts only
# (vllm/model_executor/layers/quantization/fp8.py ``Fp8Config.get_quant_method``; the other methods alike):
# embeddings and lm_head (VocabParallelEmbedding / ParallelLMHead), norms and the MoE router
# (vllm/model_executor/models/qwen3_moe.py at 002456df: ``self.gate = ReplicatedLinear(..., quant_config=None)``)
# stay in the model dtype, as the block-FP8 checkpoints store them (Qwen/Qwen3-235B-A22B-FP8, weight_block_size
# [128, 128]: bf16 embeddings, lm_head, norms and router). vLLM holds each block's ``weight_scale_inv`` in fp32
# whatever the file stores (fp8.py ``create_weights``: ``BlockQuantScaleParameter(..., dtype=torch.float32)``).

_KEPT_16BIT = re.compile(r"(^|\.)(lm_head|[^.]*emb[^.]*|wte|wpe|[^.]*norm[^.]*|ln(_[^.]*)?|shared_expert_gate|conv1d)$")


def engine_keeps_16bit(module: str, modules: Collection[str]) -> bool:
    """Whether a serving engine keeps the parameters ``module`` owns in the model dtype under weight
    quantization (embeddings, lm_head, norms, the MoE router: a ``gate`` / ``router`` beside ``experts``);
    ``modules``: every module path of the model."""
    if _KEPT_16BIT.search(module):
        return True
    parent, _, leaf = module.rpartition(".")
    return leaf in ("gate", "router") and f"{parent}.experts" in modules


def served_fp8_flag_format() -> WeightFormat:
    """vLLM's ``--quantization fp8`` on a 16-bit checkpoint (online dynamic FP8): each weight matrix cast to
    e4m3 with one fp32 scale per tensor (``Fp8LinearMethod.process_weights_after_loading``,
    ``ops.scaled_fp8_quant(weight, scale=None)``)."""
    return weight_format("fp8", strategy="tensor")


def served_quantized_bytes(params_count: int, scheme: str, fmt: WeightFormat | None = None, *,
                           in_features: int = 0) -> int:
    """Bytes of ``params_count`` weights a serving engine stores quantized in ``scheme``. FP8 (``fmt``): one
    byte a weight and the format's scales — an fp32 ``weight_scale_inv`` per ``weight_block_size`` block (exact
    where the layers' widths are multiples of the block, as vLLM requires of every TP shard), an fp32 scale per
    output row (``in_features`` weights: the model's hidden size stands for every layer's input width), or one
    per tensor (a few bytes a layer, not counted). int8 / int4: :func:`quantized_weight_bytes`."""
    if fmt is None or fmt.method != "fp8":
        return quantized_weight_bytes(params_count, scheme)
    if fmt.fp8_block is not None:
        rows, cols = fmt.fp8_block
        return params_count + DTYPE_BYTES["float32"] * -(-params_count // (rows * cols))
    if fmt.strategy == "tensor" or in_features <= 0:
        return params_count
    return params_count + DTYPE_BYTES["float32"] * -(-params_count // in_features)
