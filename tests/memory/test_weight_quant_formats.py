"""Quantized base-weight layouts (gpuplan.memory.weight_quant.layer_layout) against the real libraries' tensors.

bitsandbytes 0.50 quantizes on the CPU (``quantize_4bit``, ``int8_vectorwise_quant``), so its formats are
compared tensor by tensor with what it really produces. GPTQ, AWQ and MXFP4 kernels/packers are not installable
here (CUDA-only packages); their layouts are checked against the documented packing, each cited.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.dtypes import DTYPE_BYTES
from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.memory.weight_quant import (
    BNB_4BIT_BLOCK,
    format_from_config,
    layer_bytes,
    layer_layout,
    weight_format,
)
from gpuplan.models.quant_config import parse_quantization_config

torch = pytest.importorskip("torch")
bnb_functional = pytest.importorskip("bitsandbytes.functional")

# odd sizes on purpose: a partial 64-block, a partial 256-block of absmax values
SHAPES = [(96, 200), (128, 64), (33, 77)]


@pytest.mark.parametrize(("out_features", "in_features"), SHAPES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("double_quant", [False, True])
def test_bnb_4bit_layout_is_what_bitsandbytes_stores(out_features: int, in_features: int, quant_type: str,
                                                     double_quant: bool) -> None:
    """Every tensor of bitsandbytes' QuantState (as_dict(packed=True), the checkpoint tensors) has our name,
    shape and dtype; the JSON blob ``quant_state.bitsandbytes__*`` is parsed at load (not resident), and the
    second-level offset it carries stays on the GPU as a 0-dim fp32 tensor (QuantState.offset)."""
    weight = torch.randn(out_features, in_features, dtype=torch.bfloat16)
    packed, state = bnb_functional.quantize_4bit(weight, blocksize=BNB_4BIT_BLOCK, quant_type=quant_type,
                                                 compress_statistics=double_quant)
    real = {"weight": packed}
    real.update({f"weight.{k}": v for k, v in state.as_dict(packed=True).items() if not k.startswith("quant_state.")})
    if double_quant:
        real["weight.nested_offset"] = state.offset.reshape(())
    fmt = weight_format(f"bnb-{quant_type}", double_quant=double_quant)
    ours = {t.name: (t.shape, t.dtype) for t in layer_layout(fmt, out_features, in_features)}
    assert ours == {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in real.items()}
    assert layer_bytes(fmt, out_features, in_features) == sum(v.numel() * v.element_size() for v in real.values())


@pytest.mark.parametrize(("out_features", "in_features"), SHAPES)
def test_llm_int8_layout_is_what_bitsandbytes_stores(out_features: int, in_features: int) -> None:
    """Int8Params: CB int8 [n, k] and SCB fp32 [n] from int8_vectorwise_quant (what .cuda() stores)."""
    cb, scb, _ = bnb_functional.int8_vectorwise_quant(torch.randn(out_features, in_features, dtype=torch.float16))
    layout = layer_layout(weight_format("bnb-int8"), out_features, in_features)
    assert [(t.shape, t.dtype) for t in layout] == [(tuple(cb.shape), "int8"), (tuple(scb.shape), "float32")]
    assert layer_bytes(weight_format("bnb-int8"), out_features, in_features) == cb.numel() + 4 * scb.numel()


def test_fp8_layout_is_a_float8_weight_and_a_scale_per_channel() -> None:
    """FbgemmFp8Linear (transformers): weight float8_e4m3fn [n, k], weight_scale fp32 [n, 1]; torch's own
    float8 dtype gives the byte size."""
    w = torch.randn(96, 200).to(torch.float8_e4m3fn)
    scale = torch.ones(96, 1, dtype=torch.float32)
    assert layer_bytes(weight_format("fp8"), 96, 200) == w.numel() * w.element_size() + scale.numel() * 4
    block = weight_format("fp8", fp8_block=(128, 128))  # DeepSeek-V3 style weight_scale_inv per 128x128 block
    assert [t.shape for t in layer_layout(block, 300, 200)] == [(300, 200), (3, 2)]


def test_gptq_and_awq_pack_eight_4bit_values_per_int32() -> None:
    """AutoGPTQ QuantLinear: qweight [k/8, n], qzeros [k/g, n/8], scales fp16 [k/g, n], g_idx [k];
    AutoAWQ WQLinear_GEMM: qweight [k, n/8] (pack order 0 2 4 6 1 3 5 7: same bytes), qzeros, scales."""
    n, k, g = 4096, 11008, 128
    gptq = {t.name: t for t in layer_layout(weight_format("gptq", group_size=g), n, k)}
    awq = {t.name: t for t in layer_layout(weight_format("awq", group_size=g), n, k)}
    assert (gptq["qweight"].shape, gptq["qzeros"].shape, gptq["scales"].shape, gptq["g_idx"].shape) == \
        ((k // 8, n), (k // g, n // 8), (k // g, n), (k,))
    assert (awq["qweight"].shape, awq["qzeros"].shape, awq["scales"].shape) == ((k, n // 8), (k // g, n // 8),
                                                                                  (k // g, n))
    # 4 bits + an fp16 scale and a 4-bit zero per 128: 4 + 16/128 + 4/128 bits per weight, g_idx on top for GPTQ
    assert layer_bytes(weight_format("awq"), n, k) * 8 == n * k * (4 + 20 / 128)
    assert layer_bytes(weight_format("gptq"), n, k) - layer_bytes(weight_format("awq"), n, k) == 4 * k


def test_mxfp4_is_four_and_a_quarter_bits() -> None:
    """OCP MX: 32 fp4 (e2m1) values in 16 bytes + one e8m0 byte per block (transformers Mxfp4 *_blocks
    [.., n, k/32, 16] and *_scales [.., n, k/32])."""
    n, k = 2880, 2880
    assert layer_bytes(weight_format("mxfp4"), n, k) * 8 == n * k * 4.25


@pytest.mark.parametrize(("config", "method", "bytes_per_weight_bound"), [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
      "bnb_4bit_use_double_quant": True}, "bnb-nf4", 0.52),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bnb-int8", 1.01),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq", 0.53),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}, "awq", 0.52),
    ({"quant_method": "fbgemm_fp8"}, "fp8", 1.01),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 1.01),
    ({"quant_method": "mxfp4"}, "mxfp4", 0.54),
])
def test_quantization_config_gives_the_layout(config: dict[str, object], method: str,
                                              bytes_per_weight_bound: float) -> None:
    fmt = format_from_config(parse_quantization_config(config, where="config.json"))
    assert fmt.method == method
    n, k = 4096, 4096
    assert n * k * bytes_per_weight_bound * 0.95 < layer_bytes(fmt, n, k) < n * k * bytes_per_weight_bound


def test_skip_modules_come_from_the_config() -> None:
    qc = parse_quantization_config({"quant_method": "bitsandbytes", "load_in_8bit": True,
                                    "llm_int8_skip_modules": ["lm_head", "mlp.gate"]}, where="config.json")
    assert format_from_config(qc).skip == ("lm_head", "mlp.gate")
    assert weight_format("bnb-nf4").skip == ("lm_head",)  # the libraries' default: the output head


def test_unsupported_settings_are_one_line() -> None:
    with pytest.raises(ConfigError, match="3-bit values is not modelled"):
        weight_format("gptq", bits=3)
    with pytest.raises(GpuplanError, match="quant_method 'int3' is not"):
        parse_quantization_config({"quant_method": "int3"}, where="config.json")
    with pytest.raises(ConfigError, match="AWQ version 'gemv' is not modelled"):
        format_from_config(parse_quantization_config({"quant_method": "awq", "version": "gemv"}, where="c"))


@given(n=st.integers(1, 5000), k=st.integers(1, 5000),
       method=st.sampled_from(["bnb-nf4", "bnb-fp4", "bnb-int8", "gptq", "awq", "fp8", "mxfp4", "int4", "int8"]))
def test_the_packed_weight_holds_every_value(n: int, k: int, method: str) -> None:
    """Invariant: the stored tensors hold at least the packed values (bits · n · k) and never more than
    16-bit weights plus the per-layer constants (bnb codes, GPTQ g_idx, scales of tiny rows)."""
    fmt = weight_format(method)
    bits = {"bnb-int8": 8, "fp8": 8, "int8": 8}.get(method, 4)
    total = layer_bytes(fmt, n, k)
    assert total >= math.ceil(n * k * bits / 8)
    assert total <= 4 * n * k + 4 * k + 2 * 1024 + 16 * n
    assert all(t.dtype in DTYPE_BYTES for t in layer_layout(fmt, n, k))
