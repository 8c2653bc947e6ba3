"""models/config_view.py: one reading of config.json for the planner, the serving budget and the KV cache."""

from __future__ import annotations

from gpuplan.models.config_view import ConfigView
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA, TINY_T5


def test_every_naming_scheme_reads_the_same_dimensions() -> None:
    gpt2, llama, t5 = ConfigView(TINY_GPT2), ConfigView(TINY_LLAMA), ConfigView(TINY_T5)
    assert (gpt2.layers, gpt2.attention_heads, gpt2.hidden_size, gpt2.kv_heads, gpt2.head_dim) == (5, 4, 64, 4, 16)
    assert (llama.layers, llama.attention_heads, llama.kv_heads) == (5, 4, 2)
    assert (llama.ffn_size, llama.max_context) == (128, 256)
    assert (t5.layers, t5.attention_heads, t5.hidden_size, t5.ffn_size) == (4, 4, 64, 128)
    assert gpt2.max_context == 128 and gpt2.vocab_size == 300 and gpt2.experts == 0 and gpt2.ffn_size is None


def test_text_config_wins_and_outer_keys_stay_readable() -> None:
    """Gemma 3 / Llava nest the decoder: before this view the planner read hidden size 0 from them."""
    view = ConfigView({"model_type": "gemma3", "torch_dtype": "bfloat16",
                       "text_config": {"hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4,
                                       "num_hidden_layers": 34, "head_dim": 256, "torch_dtype": None}})
    assert (view.hidden_size, view.attention_heads, view.kv_heads, view.layers, view.head_dim) == (2560, 8, 4, 34, 256)
    assert view["model_type"] == "gemma3" and view.get("torch_dtype") == "bfloat16"  # None in text_config skipped
    assert view.outer["text_config"]["hidden_size"] == 2560


def test_multi_query_falcon_has_one_kv_head_and_bad_values_are_absent() -> None:
    falcon = ConfigView({"hidden_size": 4544, "num_attention_heads": 71, "multi_query": True, "num_hidden_layers": 32})
    assert falcon.kv_heads == 1
    new_arch = ConfigView({"num_attention_heads": 128, "multi_query": True, "new_decoder_architecture": True,
                           "num_kv_heads": 8})
    assert new_arch.kv_heads == 8
    odd = ConfigView({"hidden_size": 0, "n_embd": True, "d_model": "64", "dim": 32, "num_experts": 8})
    assert odd.hidden_size == 32 and odd.experts == 8 and odd.head_dim is None
    assert ConfigView(None).layers is None and len(ConfigView({})) == 0
