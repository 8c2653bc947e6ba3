"""One reading of a Hugging Face ``config.json``: the decoder's dimensions under every name the
architectures use, so the planner, the serving budget and the KV cache read a model the same way.

Multimodal configs (Gemma 3, Llava, Qwen2-VL, ...) nest the language model under ``text_config``; its
keys win over the outer ones (the outer ``torch_dtype`` stays readable as :attr:`ConfigView.outer`).
A dimension is a positive integer or absent: ``0``, ``None``, booleans and strings are "not stated".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with its ``text_config`` (if any) merged over it, ``None`` values skipped."""
    text = config.get("text_config")
    merged = dict(config)
    if isinstance(text, Mapping):
        merged.update({k: v for k, v in text.items() if v is not None})
    return merged


class ConfigView(Mapping[str, Any]):
    """A read-only view of a model config with the decoder's dimensions named once."""

    __slots__ = ("_merged", "outer")

    def __init__(self, config: Mapping[str, Any] | None) -> None:
        self.outer: Mapping[str, Any] = config or {}
        self._merged = text_config(self.outer)

    def __getitem__(self, key: str) -> Any:
        return self._merged[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged)

    def __len__(self) -> int:
        return len(self._merged)

    def positive(self, *keys: str, default: int | None = None) -> int | None:
        """The first of ``keys`` that holds a positive integer, else ``default``."""
        for key in keys:
            value = self._merged.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return default

    @property
    def layers(self) -> int | None:
        return self.positive("num_hidden_layers", "n_layer", "num_layers")

    @property
    def attention_heads(self) -> int | None:
        return self.positive("num_attention_heads", "n_head", "num_heads")

    @property
    def hidden_size(self) -> int | None:
        return self.positive("hidden_size", "n_embd", "d_model", "dim")

    @property
    def kv_heads(self) -> int | None:
        """Key/value heads: one for multi-query attention (Falcon's ``multi_query`` without the new
        decoder architecture), else the GQA count, else one per attention head."""
        if self._merged.get("multi_query") is True and not self._merged.get("new_decoder_architecture"):
            return 1
        return self.positive("num_key_value_heads", "num_kv_heads", "n_head_kv", default=self.attention_heads)

    @property
    def head_dim(self) -> int | None:
        heads, hidden = self.attention_heads, self.hidden_size
        # T5 states its per-head width as d_kv (t5-3b: 32 heads of 128 on a 1024-wide model)
        return self.positive("head_dim", "d_kv", default=hidden // heads if heads and hidden else None)

    @property
    def vocab_size(self) -> int | None:
        return self.positive("vocab_size")

    @property
    def ffn_size(self) -> int | None:
        """The MLP's inner width as the config states it (no default: callers say what they assume)."""
        return self.positive("intermediate_size", "n_inner", "d_ff", "ffn_dim")

    @property
    def experts(self) -> int:
        """Routed experts per MoE layer (0: a dense model)."""
        return self.positive("num_local_experts", "num_experts", "n_routed_experts", default=0) or 0

    @property
    def max_context(self) -> int | None:
        """The context the model was trained for, if the config says."""
        return self.positive("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
