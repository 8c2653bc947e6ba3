"""KV-cache bytes of a decoder, per attention kind, read from its Hugging Face config: what a paged
serving engine allocates per token and per sequence on one GPU.

The per-layer page arithmetic follows vLLM 0.10.0 (``vllm/v1/kv_cache_interface.py``):

* full attention (MHA / GQA / MQA): ``page_size_bytes = 2 · block_size · kv_heads · head_dim · dtype``
  (K and V); one sequence of L tokens holds ``cdiv(L, block_size)`` pages
  (``FullAttentionSpec.max_memory_usage_bytes``);
* MLA (DeepSeek-V2/V3): one latent per token, ``block_size · (kv_lora_rank + qk_rope_head_dim) · dtype``
  (``MLAAttentionSpec``: no factor 2), not sharded by tensor parallelism (every rank keeps the latent);
* sliding-window layers hold ``cdiv(min(window − 1 + max_num_batched_tokens, L), block_size) + 1`` pages
  (``SlidingWindowSpec.max_memory_usage_bytes``);
* linear-attention / Mamba layers hold one fixed state per sequence (``MambaSpec``: conv + SSM state,
  ``vllm/model_executor/layers/mamba/mamba_utils.py``), sharded over the TP ranks by heads.

KV heads per GPU are ``max(1, kv_heads // tp)`` (``vllm/config.py`` ``get_num_kv_heads``): with more
ranks than KV heads each head is replicated on ``tp // kv_heads`` ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.dtypes import DTYPE_BYTES
from gpuplan.errors import ConfigError, ModelSourceError
from gpuplan.models.config_view import ConfigView

SERVED_DTYPES: tuple[str, ...] = ("float16", "bfloat16")
"""The dtypes ``--dtype auto`` serves a checkpoint in (float32 and anything else: bfloat16)."""
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp8")
DECODER_TASKS: tuple[str, ...] = ("causal-lm",)


@dataclass(frozen=True, slots=True)
class KVLayout:
    """The attention layers of a decoder as a paged KV cache sees them (whole model, no sharding)."""

    kind: str
    """mha | gqa | mqa | mla: the attention kind of the KV-holding layers."""
    full_layers: int
    sliding_layers: int
    sliding_window: int | None
    kv_heads: int
    attention_heads: int
    head_dim: int
    latent_dim: int = 0
    """MLA: kv_lora_rank + qk_rope_head_dim (0 for other kinds)."""
    state_layers: int = 0
    """Linear-attention / Mamba layers (a fixed state per sequence)."""
    state_elements: int = 0
    """Elements of one state-layer's conv + recurrent state for one sequence, whole (before TP)."""
    state_kind: str = ""
    max_context: int | None = None
    """The context the model was trained for (config), if it says."""

    @property
    def attention_layers(self) -> int:
        return self.full_layers + self.sliding_layers

    def describe(self) -> str:
        parts = [f"{self.kind.upper()} {self.full_layers} full-attention layer(s)"]
        if self.sliding_layers:
            parts.append(f"{self.sliding_layers} sliding-window layer(s) (window {self.sliding_window:,})")
        if self.state_layers:
            parts.append(f"{self.state_layers} {self.state_kind} layer(s) with a fixed per-sequence state")
        if self.kind == "mla":
            parts.append(f"latent {self.latent_dim} per token (kv_lora_rank + qk_rope_head_dim)")
        else:
            parts.append(f"{self.kv_heads} KV head(s) × head_dim {self.head_dim}")
        return ", ".join(parts)


def model_dtype(config: Mapping[str, Any]) -> str:
    """The dtype the engine runs the model in with ``--dtype auto``: the config's, with float32
    configs served in bfloat16 (vLLM 0.10.0 ``vllm/config.py`` ``_get_and_verify_dtype``: a float32
    checkpoint is cast to 16 bits)."""
    cfg = ConfigView(config)
    name = cfg.get("torch_dtype") or cfg.get("dtype") or cfg.outer.get("torch_dtype") or "bfloat16"
    name = str(name).replace("torch.", "")
    return name if name in SERVED_DTYPES else "bfloat16"


def kv_layout(config: Mapping[str, Any], name: str = "model") -> KVLayout:
    """The KV layout of a decoder from its config.json; a model that is not a decoder is refused."""
    cfg = ConfigView(config)
    layers, heads, hidden = cfg.layers, cfg.attention_heads, cfg.hidden_size
    if layers is None or heads is None or hidden is None:
        raise ModelSourceError(f"{name}: config has no layer count / attention heads / hidden size, so it is "
                               "not a decoder a serving engine can page; pass a causal language model")
    max_context = cfg.max_context
    head_dim = cfg.head_dim or hidden // heads
    kv_heads = cfg.kv_heads or heads
    state_layers, state_elements, state_kind = _state(cfg, layers, hidden)
    attention_layers = _attention_layer_count(cfg, layers)
    types = cfg.get("layer_types")
    window = cfg.positive("sliding_window")
    sliding = 0
    if isinstance(types, list) and types:
        sliding = sum(1 for t in types if t == "sliding_attention")
        if sliding and window is None:
            raise ModelSourceError(f"{name}: layer_types names sliding_attention layers but sliding_window is unset")
    elif window is not None and cfg.get("use_sliding_window", True) is not False \
            and cfg.get("model_type") in ("mistral", "mixtral", "ministral", "starcoder2"):
        sliding = attention_layers  # Mistral v0.1 style: every layer slides
    full = attention_layers - sliding
    kv_lora = cfg.positive("kv_lora_rank")
    if kv_lora is not None:
        rope = cfg.positive("qk_rope_head_dim", default=0) or 0
        return KVLayout("mla", full, sliding, window if sliding else None, 1, heads, 0, kv_lora + rope,
                        state_layers, state_elements, state_kind, max_context)
    kind = "mha" if kv_heads == heads else "mqa" if kv_heads == 1 else "gqa"
    return KVLayout(kind, full, sliding, window if sliding else None, kv_heads, heads, head_dim, 0,
                    state_layers, state_elements, state_kind, max_context)


def _attention_layer_count(cfg: ConfigView, layers: int) -> int:
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if t in ("full_attention", "sliding_attention", "attention"))
    block_types = cfg.get("layers_block_type")
    if isinstance(block_types, list) and block_types:
        return sum(1 for t in block_types if t == "attention")
    period, offset = cfg.positive("attn_layer_period"), cfg.get("attn_layer_offset")
    if period is not None and isinstance(offset, int):  # Jamba: one attention layer every `period`
        return sum(1 for i in range(layers) if i % period == offset)
    return layers


def _state(cfg: ConfigView, layers: int, hidden: int) -> tuple[int, int, str]:
    """(state layers, elements of one layer's state for one sequence, kind)."""
    types = cfg.get("layer_types")
    model_type = cfg.get("model_type", "")
    if isinstance(types, list) and "linear_attention" in types:
        # Qwen3-Next gated DeltaNet (vLLM mamba_utils.gated_delta_net_state_shape): conv over q, k, v
        # channels with (kernel − 1) taps, and a dk × dv recurrent state per value head.
        nk, nv = cfg.positive("linear_num_key_heads") or 0, cfg.positive("linear_num_value_heads") or 0
        dk, dv = cfg.positive("linear_key_head_dim") or 0, cfg.positive("linear_value_head_dim") or 0
        kernel = cfg.positive("linear_conv_kernel_dim", default=4) or 4
        conv = (kernel - 1) * (2 * nk * dk + nv * dv)
        return sum(1 for t in types if t == "linear_attention"), conv + nv * dk * dv, "gated-DeltaNet"
    if model_type.startswith("falcon_h1"):
        # Mamba-2 mixer beside attention in every layer (mamba_utils.mamba2_state_shape)
        n_heads = cfg.positive("mamba_n_heads") or 0
        d_head = cfg.positive("mamba_d_head") or 0
        d_ssm = cfg.positive("mamba_d_ssm", default=n_heads * d_head) or n_heads * d_head
        groups, d_state = cfg.positive("mamba_n_groups", default=1) or 1, cfg.positive("mamba_d_state") or 0
        d_conv = cfg.positive("mamba_d_conv", default=4) or 4
        conv = (d_conv - 1) * (d_ssm + 2 * groups * d_state)
        return layers, conv + n_heads * d_head * d_state, "Mamba-2"
    if model_type == "jamba" or "mamba_d_state" in cfg:
        # Mamba-1 mixer (mamba_utils.mamba1_state_shape): conv (d_conv − 1) × inner, ssm inner × d_state
        inner = (cfg.positive("mamba_expand", default=2) or 2) * hidden
        d_conv, d_state = cfg.positive("mamba_d_conv", default=4) or 4, cfg.positive("mamba_d_state", default=16) or 16
        attention = _attention_layer_count(cfg, layers)
        return layers - attention, (d_conv - 1) * inner + inner * d_state, "Mamba"
    return 0, 0, ""


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_name: str) -> int:
    """Bytes of one cached element: the model dtype (``auto``) or one byte (``fp8``, e4m3 / e5m2)."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ConfigError(f"unknown --kv-cache-dtype {kv_cache_dtype!r} (allowed: {', '.join(KV_CACHE_DTYPES)})")
    return 1 if kv_cache_dtype == "fp8" else DTYPE_BYTES[model_dtype_name]


def kv_heads_per_gpu(layout: KVLayout, tp: int) -> int:
    """KV heads one TP rank holds: sharded when tp divides them, replicated when tp is a multiple.
    Anything else is what vLLM refuses (QKVParallelLinear asserts either division)."""
    if layout.kind == "mla":
        return 1
    if layout.attention_heads % tp:
        raise ConfigError(f"--tp {tp} does not divide the {layout.attention_heads} attention heads: vLLM refuses "
                          "('Total number of attention heads must be divisible by tensor parallel size'); "
                          "use a --tp that divides it")
    if tp <= layout.kv_heads:
        if layout.kv_heads % tp:
            raise ConfigError(f"--tp {tp} does not divide the {layout.kv_heads} KV heads: vLLM shards KV heads when "
                              "tp divides them and replicates each head on tp/kv_heads ranks when tp is a multiple "
                              f"of them, else refuses; use a --tp that divides {layout.kv_heads} or is a multiple")
        return layout.kv_heads // tp
    if tp % layout.kv_heads:
        raise ConfigError(f"--tp {tp} is not a multiple of the {layout.kv_heads} KV heads: vLLM replicates KV "
                          "heads only when tp is a multiple of them; use a --tp that is")
    return 1


def layers_per_gpu(count: int, pp: int) -> int:
    """Layers of one kind on the fullest pipeline stage (vLLM ``get_pp_indices`` splits evenly)."""
    return -(-count // pp)


@dataclass(frozen=True, slots=True)
class KVCost:
    """KV bytes on one GPU (one TP rank of the fullest PP stage)."""

    layout: KVLayout
    element_bytes: int
    block_size: int
    full_layer_token_bytes: int
    """One token of one full-attention layer."""
    sliding_layer_token_bytes: int
    full_layers: int
    sliding_layers: int
    state_bytes_per_sequence: int
    max_num_batched_tokens: int
    extra_token_bytes: int = 0
    """A speculative drafter's full-attention KV per token on this GPU (a draft model's layers or the MTP
    layers: pages in the same cache as the target's, serve/speculative.py)."""

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token adds on this GPU while the context is within every window."""
        return (self.full_layer_token_bytes * self.full_layers + self.sliding_layer_token_bytes * self.sliding_layers
                + self.extra_token_bytes)

    @property
    def page_bytes(self) -> int:
        """One block of ``block_size`` tokens across this GPU's attention layers."""
        return self.bytes_per_token * self.block_size

    def sequence_bytes(self, context: int) -> int:
        """What one sequence of ``context`` tokens holds at most (vLLM ``max_memory_usage_bytes``)."""
        full_pages = -(-context // self.block_size)
        total = full_pages * self.block_size * (self.full_layer_token_bytes * self.full_layers + self.extra_token_bytes)
        if self.sliding_layers:
            window = self.layout.sliding_window or context
            tokens = min(window - 1 + self.max_num_batched_tokens, context)
            pages = -(-tokens // self.block_size) + 1
            total += pages * self.block_size * self.sliding_layer_token_bytes * self.sliding_layers
        return total + self.state_bytes_per_sequence

    def cache_tokens(self, kv_cache_bytes: int) -> int:
        """Tokens the cache holds, in whole blocks (vLLM: num_blocks × block_size)."""
        if self.page_bytes <= 0 or kv_cache_bytes <= 0:
            return 0
        return (kv_cache_bytes // self.page_bytes) * self.block_size

    def max_concurrency(self, kv_cache_bytes: int, context: int) -> int:
        """Sequences of ``context`` tokens the cache holds at once."""
        per = self.sequence_bytes(context)
        return max(0, kv_cache_bytes) // per if per > 0 else 0

    def max_context(self, kv_cache_bytes: int, upper: int) -> int:
        """The longest context one sequence can have (vLLM ``estimate_max_model_len``: binary search)."""
        lo, hi = 0, upper
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.sequence_bytes(mid) <= kv_cache_bytes:
                lo = mid
            else:
                hi = mid - 1
        return lo


def kv_cost(layout: KVLayout, *, element_bytes: int, state_element_bytes: int, tp: int = 1, pp: int = 1,
            block_size: int = 16, max_num_batched_tokens: int = 8192) -> KVCost:
    """KV bytes on one GPU for ``tp`` × ``pp``; ``state_element_bytes`` is the Mamba / linear state dtype."""
    heads = kv_heads_per_gpu(layout, tp)
    if layout.kind == "mla":
        per_layer = layout.latent_dim * element_bytes
    else:
        per_layer = 2 * heads * layout.head_dim * element_bytes
    state = 0
    if layout.state_layers:
        state = layers_per_gpu(layout.state_layers, pp) * -(-layout.state_elements // tp) * state_element_bytes
    return KVCost(layout, element_bytes, block_size, per_layer, per_layer,
                  layers_per_gpu(layout.full_layers, pp), layers_per_gpu(layout.sliding_layers, pp), state,
                  max_num_batched_tokens)
