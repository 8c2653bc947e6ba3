"""GGUF denoisers (diffusers ``GGUFQuantizationConfig``): the bytes of a layer are ggml's (checked against the
``gguf`` package's own quantizer), and the tensor types follow the quantizer city96's FLUX/SD GGUF files were
written with (city96/ComfyUI-GGUF tools/lcpp.patch @ df6f1ab3, ``img_tensor_get_type``)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from gpuplan.memory.weight_quant import layer_bytes, weight_format
from gpuplan.models.gguf_mix import denoiser_tensor_type


@pytest.mark.parametrize("ggml_type", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])  # the types gguf quantizes in numpy
def test_a_gguf_layer_holds_the_bytes_ggml_writes(ggml_type: str) -> None:
    n, k = 3, 512
    weights = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    written = quantize(weights, GGMLQuantizationType[ggml_type])
    assert layer_bytes(weight_format("gguf", ggml_type=ggml_type), n, k) == written.nbytes


@pytest.mark.parametrize(("path", "in_features", "gguf_type", "flags", "expected"), [
    ("x_embedder", 64, "Q4_1", {}, None),  # FLUX img_in: kept F32
    ("context_embedder", 4096, "Q8_0", {}, None),  # txt_in: kept F16
    ("time_text_embed.timestep_embedder.linear_1", 256, "Q2_K", {}, None),
    ("proj_out", 3072, "Q8_0", {}, None),  # final_layer.linear
    ("single_transformer_blocks.3.proj_out", 15360, "Q4_1", {}, "Q4_1"),  # linear2: quantized (not top level)
    ("transformer_blocks.0.attn.to_q", 3072, "Q4_K_M", {"fused_qkv": True}, "Q5_K"),  # attn.qkv rule
    ("transformer_blocks.0.attn.to_v", 3072, "Q2_K", {"fused_qkv": True, "separate_v": False}, "Q2_K"),
    # SDXL to_v: Q2_K's bump to Q3_K, but 640 is not whole 256-blocks: the patch's F16 fallback
    ("down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_v", 640, "Q2_K", {"unet": True}, None),
    ("mid_block.attentions.0.transformer_blocks.0.attn1.to_v", 1280, "Q2_K", {"unet": True}, "Q3_K"),
    ("down_blocks.1.attentions.0.proj_in", 640, "Q8_0", {"unet": True}, None),
    ("transformer_blocks.0.ff.net.2", 12288, "Q6_K", {}, "Q6_K"),
    ("blocks.0.ffn.0", 1000, "Q4_K_M", {}, None),  # rows not whole 256-blocks: the patch falls back to F16
])
def test_denoiser_tensor_types_follow_the_image_quantizer(path: str, in_features: int, gguf_type: str,
                                                          flags: dict[str, bool], expected: str | None) -> None:
    got = denoiser_tensor_type(path, in_features, gguf_type, fused_qkv=flags.get("fused_qkv", False),
                               unet=flags.get("unet", False), separate_v=flags.get("separate_v", True))
    assert got == expected
