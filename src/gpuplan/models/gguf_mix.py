"""The GGUF file a catalog / config.json model would become under ``llama-quantize`` with a file type
(``--gguf-type Q4_K_M``): its tensors with llama.cpp's names and shapes, the ggml type each one gets,
and its bytes — without any file.

Two rules, each read from llama.cpp's source:

* **bytes of a type**: ggml's own type table (``ggml/src/ggml.c`` ``type_traits``: ``blck_size`` and
  ``type_size``, ggml-org/llama.cpp @ 1f08e2d6), as the ``gguf`` package mirrors it
  (``gguf.GGML_QUANT_SIZES``: Q4_K = 144 bytes per 256 weights, Q6_K = 210 / 256, Q8_0 = 34 / 32, ...).
  A row of ``n`` weights takes ``n / blck_size × type_size`` bytes (``ggml_row_size``).
* **type of a tensor**: ``src/llama-quant.cpp`` (ggml-org/llama.cpp @ 8784689f): ``llama_model_quantize_impl``
  quantizes tensors whose name ends in ``weight`` with two or more dimensions, except ``*_norm.weight``
  and ``ffn_gate_inp.weight`` (kept F32 here, as the HF conversions write them); ``llama_tensor_get_type``
  then moves some tensors off the file type's base type. What is modelled, for the K-quant mixes and the
  legacy types: ``output.weight`` (or the token embedding when the output is tied) → Q6_K (Q8_0 stays
  Q8_0; rows not a multiple of the block → Q8_0); ``attn_v`` → Q6_K on the ``use_more_bits`` layers
  for Q4_K_M / Q5_K_M (the first and last eighth and every third layer between), Q5_K on the first 4
  for Q4_K_S, Q4_K/Q3_K for Q2_K, Q5_K/Q4_K for Q3_K_M, Q5_K for Q3_K_L, a Q3_K/Q4_K ``attn_v`` of an
  80-layer (LLM_TYPE_70B) model → Q5_K, Q8_0 for 8-expert models (also ``attn_k``); ``ffn_down``
  (experts too, by layer) → Q6_K on the ``use_more_bits`` layers for Q4_K_M / Q5_K_M, Q5_K on the first
  eighth for Q4_K_S, Q3_K for Q2_K, Q5_K then Q4_K for Q3_K_M, Q5_K for Q3_K_L; ``attn_output`` → Q5_K
  for 8-expert models under Q2_K/Q3_K_S/Q3_K_M/Q4_K_S/Q4_K_M, else Q3_K for Q2_K, Q4_K for Q3_K_M, Q5_K
  for Q3_K_L; the fallback of rows that are not whole blocks (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0,
  Q2_K/Q3_K → IQ4_NL, else F16). Not modelled: imatrix-only choices (IQ types; Q4_0/Q5_0 ``ffn_down``
  with an imatrix), Falcon's own rules, ``--pure`` and per-tensor overrides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuplan.errors import ConfigError, ModelSourceError
from gpuplan.models.config_view import ConfigView
from gpuplan.models.gguf import GGUFModel, GGUFTensor, _require_gguf

BASE_TYPE: Final[dict[str, str]] = {
    "F32": "F32",
    "F16": "F16",
    "BF16": "BF16",
    "Q8_0": "Q8_0",
    "Q4_0": "Q4_0",
    "Q4_1": "Q4_1",
    "Q5_0": "Q5_0",
    "Q5_1": "Q5_1",
    "Q2_K": "Q2_K",
    "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_L": "Q3_K",
    "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K",
    "Q5_K_S": "Q5_K",
    "Q5_K_M": "Q5_K",
    "Q6_K": "Q6_K",
}
"""``--gguf-type`` (llama-quantize's file type) → the base ggml type (``llama_model_quantize_impl``'s switch)."""
GGUF_TYPES: Final = tuple(BASE_TYPE)
_UNQUANTIZED: Final = ("F32", "F16", "BF16")
_FALLBACK: Final = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL"}
_MOE8_ATTN_OUTPUT_Q5K: Final = ("Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M")
_DENSE_ARCH: Final = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "mixtral": "llama",
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
}
"""HF ``model_type`` → llama.cpp architecture, for the decoders whose tensors are laid out here."""


def check_gguf_type(name: str) -> str:
    if name not in BASE_TYPE:
        raise ConfigError(
            f"unknown --gguf-type {name!r} (allowed: {', '.join(GGUF_TYPES)}); IQ types need an "
            "importance matrix: pass the .gguf file itself"
        )
    return name


def block_layout(type_name: str) -> tuple[int, int]:
    """(weights per block, bytes per block) of a ggml type (ggml.c ``type_traits`` via ``gguf``)."""
    gguf = _require_gguf()
    return tuple(gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]])  # type: ignore[return-value]


def row_bytes(type_name: str, elements: int) -> int:
    """``ggml_row_size``: bytes of ``elements`` values of a type (whole blocks)."""
    block, size = block_layout(type_name)
    return elements // block * size


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp: the first and last eighth of the layers and every third one between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


@dataclass(frozen=True, slots=True)
class _Shape:
    """A decoder's dimensions as llama.cpp's hparams name them."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ff_shexp: int
    tied: bool
    qkv_bias: bool
    qk_norm: bool
    ctx_train: int
    rope_freqs: bool


def _shape(config: Mapping[str, Any], name: str) -> _Shape:
    cfg = ConfigView(config)
    model_type = str(cfg.get("model_type", ""))
    arch = _DENSE_ARCH.get(model_type)
    layers, heads, hidden, vocab = cfg.layers, cfg.attention_heads, cfg.hidden_size, cfg.vocab_size
    if arch is None or cfg.get("kv_lora_rank") or layers is None or heads is None or hidden is None or vocab is None:
        raise ModelSourceError(
            f"{name}: gpuplan lays out the GGUF tensors of llama-style decoders "
            f"({', '.join(sorted(_DENSE_ARCH))}), not model_type {model_type!r}; pass the .gguf "
            "file itself (its tensors are read from the header)"
        )
    experts = cfg.experts
    ff = cfg.ffn_size or 0
    ff_exp = cfg.positive("moe_intermediate_size", default=ff) or ff
    return _Shape(
        arch,
        layers,
        hidden,
        heads,
        cfg.kv_heads or heads,
        cfg.head_dim or hidden // heads,
        ff,
        vocab,
        experts,
        cfg.positive("num_experts_per_tok", "num_experts_per_token", default=0) or 0,
        ff_exp,
        cfg.positive("shared_expert_intermediate_size", default=0) or 0,
        bool(cfg.get("tie_word_embeddings", False)),
        model_type in ("qwen2", "qwen2_moe"),
        model_type in ("qwen3", "qwen3_moe"),
        cfg.max_context or 0,
        _llama3_rope(cfg),
    )


def _llama3_rope(cfg: ConfigView) -> bool:
    scaling = cfg.get("rope_scaling")
    return isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "llama3"


def _layer_tensors(s: _Shape, i: int) -> list[tuple[str, tuple[int, ...]]]:
    """One block's tensors, ggml order (``ne[0]`` = the input width), as convert_hf_to_gguf names them."""
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    b = f"blk.{i}."
    out: list[tuple[str, tuple[int, ...]]] = [
        (b + "attn_norm.weight", (s.n_embd,)),
        (b + "attn_q.weight", (s.n_embd, q)),
        (b + "attn_k.weight", (s.n_embd, kv)),
        (b + "attn_v.weight", (s.n_embd, kv)),
        (b + "attn_output.weight", (q, s.n_embd)),
        (b + "ffn_norm.weight", (s.n_embd,)),
    ]
    if s.qkv_bias:
        out += [(b + "attn_q.bias", (q,)), (b + "attn_k.bias", (kv,)), (b + "attn_v.bias", (kv,))]
    if s.qk_norm:
        out += [(b + "attn_q_norm.weight", (s.head_dim,)), (b + "attn_k_norm.weight", (s.head_dim,))]
    if s.n_expert:
        e = s.n_expert
        out += [
            (b + "ffn_gate_inp.weight", (s.n_embd, e)),
            (b + "ffn_gate_exps.weight", (s.n_embd, s.n_ff_exp, e)),
            (b + "ffn_up_exps.weight", (s.n_embd, s.n_ff_exp, e)),
            (b + "ffn_down_exps.weight", (s.n_ff_exp, s.n_embd, e)),
        ]
        if s.n_ff_shexp:
            out += [
                (b + "ffn_gate_inp_shexp.weight", (s.n_embd,)),
                (b + "ffn_gate_shexp.weight", (s.n_embd, s.n_ff_shexp)),
                (b + "ffn_up_shexp.weight", (s.n_embd, s.n_ff_shexp)),
                (b + "ffn_down_shexp.weight", (s.n_ff_shexp, s.n_embd)),
            ]
    else:
        out += [
            (b + "ffn_gate.weight", (s.n_embd, s.n_ff)),
            (b + "ffn_up.weight", (s.n_embd, s.n_ff)),
            (b + "ffn_down.weight", (s.n_ff, s.n_embd)),
        ]
    return out


def _quantized(name: str, shape: tuple[int, ...]) -> bool:
    """``llama_model_quantize_impl``: which tensors the quantizer touches."""
    return (
        name.endswith("weight") and len(shape) >= 2 and "_norm.weight" not in name and "ffn_gate_inp.weight" not in name
    )


def tensor_type(name: str, row: int, ftype: str, s: _Shape) -> str:
    """``llama_tensor_get_type`` for the modelled file types (module docstring)."""
    base = BASE_TYPE[ftype]
    if ftype in _UNQUANTIZED:
        return base
    new = base
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if name == "output.weight" or (s.tied and name == "token_embd.weight"):
        new = "Q8_0" if row % block_layout(base)[0] else base if base == "Q8_0" else "Q6_K"
    elif "attn_v.weight" in name:
        new = _attn_v(ftype, base, layer, s)
    elif "attn_k.weight" in name and s.n_expert == 8:
        new = "Q8_0"
    elif "ffn_down" in name:
        new = _ffn_down(ftype, base, layer, s.n_layer)
    elif "attn_output.weight" in name:
        if s.n_expert == 8:
            new = "Q5_K" if ftype in _MOE8_ATTN_OUTPUT_Q5K else base
        else:
            new = {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(ftype, base)
    if row % block_layout(new)[0]:
        fallback = _FALLBACK.get(new)
        if fallback is None:
            raise ModelSourceError(
                f"{name}: rows of {row} are not whole {new} blocks and llama-quantize has no "
                f"fallback for {new} (it refuses); pick another --gguf-type"
            )
        new = fallback if row % block_layout(fallback)[0] == 0 else "F16"
    return new


def _attn_v(ftype: str, base: str, i: int, s: _Shape) -> str:
    gqa = s.n_head // s.n_head_kv
    new = base
    if ftype == "Q2_K":
        new = "Q4_K" if gqa >= 4 else "Q3_K"
    elif ftype == "Q3_K_M":
        new = "Q5_K" if i < 2 else "Q4_K"
    elif ftype == "Q3_K_L":
        new = "Q5_K"
    elif ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, s.n_layer):
        new = "Q6_K"
    elif ftype == "Q4_K_S" and i < 4:
        new = "Q5_K"
    if s.n_layer == 80 and s.arch in ("llama", "qwen2") and new in ("Q3_K", "Q4_K"):
        new = "Q5_K"  # LLM_TYPE_70B: 8 heads share each attn_v
    return "Q8_0" if s.n_expert == 8 else new


def _ffn_down(ftype: str, base: str, i: int, n: int) -> str:
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if i < n // 16 else "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, n):
        return "Q6_K"
    if ftype == "Q4_K_S" and i < n // 8:
        return "Q5_K"
    return base


def _metadata(s: _Shape) -> dict[str, Any]:
    a = s.arch
    meta: dict[str, Any] = {
        "general.architecture": a,
        f"{a}.block_count": s.n_layer,
        f"{a}.embedding_length": s.n_embd,
        f"{a}.attention.head_count": s.n_head,
        f"{a}.attention.head_count_kv": s.n_head_kv,
        f"{a}.attention.key_length": s.head_dim,
        f"{a}.attention.value_length": s.head_dim,
        f"{a}.feed_forward_length": s.n_ff,
        f"{a}.context_length": s.ctx_train,
        f"{a}.vocab_size": s.n_vocab,
    }
    if s.n_expert:
        meta |= {f"{a}.expert_count": s.n_expert, f"{a}.expert_used_count": s.n_expert_used}
    return meta


def gguf_from_config(config: Mapping[str, Any], gguf_type: str, name: str = "model") -> GGUFModel:
    """The GGUF model ``llama-quantize`` would write for ``config`` at file type ``gguf_type``."""
    check_gguf_type(gguf_type)
    s = _shape(config, name)
    specs: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (s.n_embd, s.n_vocab))]
    for i in range(s.n_layer):
        specs += _layer_tensors(s, i)
    if s.rope_freqs:  # convert_hf_to_gguf writes llama3 rope scaling as per-dimension factors
        specs.append(("rope_freqs.weight", (s.head_dim // 2,)))
    specs.append(("output_norm.weight", (s.n_embd,)))
    if not s.tied:
        specs.append(("output.weight", (s.n_embd, s.n_vocab)))
    tensors = []
    for tensor_name, shape in specs:
        kind = tensor_type(tensor_name, shape[0], gguf_type, s) if _quantized(tensor_name, shape) else "F32"
        elements = 1
        for d in shape:
            elements *= d
        tensors.append(GGUFTensor(tensor_name, kind, shape, row_bytes(kind, elements)))
    return GGUFModel(tuple(tensors), _metadata(s), s.arch)


# -- diffusion denoisers: city96's image-model rule ------------------------------------------------------------
# The FLUX / SD GGUF files diffusers loads (``GGUFQuantizationConfig``, ``from_single_file``) are written by
# llama-quantize patched with ``img_tensor_get_type`` (city96/ComfyUI-GGUF tools/lcpp.patch @ df6f1ab3): the
# embedders and the final layer are kept 16/32-bit, the rest takes the file type's base type with a few bumps,
# and rows that are not whole K-quant blocks fall back to F16. diffusers splits the original fused tensors
# (FLUX ``img_attn.qkv`` → ``to_q``/``to_k``/``to_v``) row-wise, so each diffusers linear keeps its row type.
# Kept tensors are loaded in the pipeline's torch_dtype: they are not quantized here (None).

DIFFUSERS_KEPT: Final[tuple[str, ...]] = ("x_embedder", "context_embedder", "time_text_embed", "norm_out", "proj_out",
                                          "conv_in", "conv_out", "time_embedding", "add_embedding")
"""Top-level diffusers modules whose tensors the patch keeps in F32/F16 (FLUX ``img_in``, ``txt_in``, ``time_in``,
``vector_in``, ``guidance_in``, ``final_layer``; SD/SDXL ``conv_in``/``conv_out``, time/add embeddings). FLUX's
single blocks have a ``proj_out`` of their own (``linear2``): quantized, hence top level only."""
_UNET_KEPT: Final = ("proj_in", "proj_out")
"""Kept at any depth in a UNet (its transformer blocks' ``proj_in``/``proj_out``)."""
_FUSED_QKV: Final = {"Q3_K_M": "Q4_K", "Q3_K_L": "Q4_K", "Q4_K_M": "Q5_K", "Q5_K_M": "Q6_K"}
"""The patch's ``attn.qkv`` rule (FLUX double blocks' fused q/k/v)."""
_TO_V: Final = {"Q2_K": "Q3_K", "Q3_K_L": "Q5_K", "Q4_K_M": "Q6_K", "Q5_K_M": "Q6_K"}
"""The patch's ``.to_v.weight`` rule (separate value projections; Q3_K_M and Q4_K_S depend on the layer index)."""
_K_QUANTS: Final = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def denoiser_tensor_type(path: str, in_features: int, gguf_type: str, *, fused_qkv: bool,
                         unet: bool = False, separate_v: bool = True) -> str | None:
    """The ggml type of a diffusers denoiser's linear weight (module ``path``) in a ``gguf_type`` file; None: kept
    16/32-bit (loaded in the torch dtype). ``fused_qkv``: the original checkpoint fuses this layer into a
    ``qkv`` tensor (FLUX double blocks); ``separate_v``: the original names its value projections ``.to_v``
    (FLUX's do not: fused into ``qkv`` or ``linear1``)."""
    check_gguf_type(gguf_type)
    parts = path.split(".")
    if parts[0] in DIFFUSERS_KEPT or (unet and any(p in _UNET_KEPT for p in parts)) or gguf_type in _UNQUANTIZED:
        return None
    new = BASE_TYPE[gguf_type]
    leaf = path.rsplit(".", 1)[-1]
    if fused_qkv:
        new = _FUSED_QKV.get(gguf_type, new)
    elif leaf == "to_v" and separate_v:
        new = _TO_V.get(gguf_type, new)
    if new in _K_QUANTS and in_features % block_layout(new)[0]:
        return None  # the patch's fallback: F16, loaded in the torch dtype
    return new
