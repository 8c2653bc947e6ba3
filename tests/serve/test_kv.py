"""KV bytes per token and per sequence for every attention kind, read from real configs.

Exact accounting: each expected figure is the published formula written out with the config's numbers
(the vLLM paper's 2 · layers · heads · head_dim · bytes for MHA; DeepSeek-V2 §2.1.2's (d_c + d_h^R) · l
for MLA; vLLM 0.10 ``kv_cache_interface.py`` for sliding windows and page rounding; ``mamba_utils.py`` for
recurrent states). The engine's own code computes the same in test_engine_parity.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import ConfigError, ModelSourceError
from gpuplan.models.sources import resolve_model
from gpuplan.serve.budget import vllm_budget
from gpuplan.serve.kv import KVLayout, kv_cost, kv_dtype_bytes, kv_layout

DATA = Path(__file__).parent / "data"


def layout_of(model: str) -> KVLayout:
    return kv_layout(resolve_model(model).hf_config().to_dict(), model)


def test_mha_opt_13b_matches_the_vllm_paper() -> None:
    # vLLM paper (Kwon et al. 2023, §3): OPT-13B holds 2 × 5120 × 40 × 2 B = 800 KB per token
    cost = kv_cost(layout_of("opt-13b"), element_bytes=2, state_element_bytes=2)
    assert layout_of("opt-13b").kind == "mha"
    assert cost.bytes_per_token == 2 * 5120 * 40 * 2 == 819_200


def test_gqa_llama_3_1_8b_and_tp_sharding() -> None:
    layout = layout_of("llama-3.1-8b")
    assert (layout.kind, layout.kv_heads, layout.head_dim, layout.full_layers) == ("gqa", 8, 128, 32)
    assert kv_cost(layout, element_bytes=2, state_element_bytes=2).bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert kv_cost(layout, element_bytes=2, state_element_bytes=2, tp=4).bytes_per_token == 2 * 32 * 2 * 128 * 2


def test_mqa_falcon_7b_one_kv_head() -> None:
    layout = layout_of("falcon-7b")
    assert (layout.kind, layout.kv_heads) == ("mqa", 1)
    assert kv_cost(layout, element_bytes=2, state_element_bytes=2).bytes_per_token == 2 * 32 * 1 * 64 * 2


def test_mla_deepseek_v3_latent_not_sharded() -> None:
    layout = layout_of(str(DATA / "deepseek-v3"))
    assert (layout.kind, layout.latent_dim) == ("mla", 512 + 64)
    for tp in (1, 8):  # every TP rank keeps the whole latent
        assert kv_cost(layout, element_bytes=2, state_element_bytes=2, tp=tp).bytes_per_token == 61 * 576 * 2


def test_sliding_window_layers_hold_only_the_window() -> None:
    layout = layout_of("gemma-2-2b")  # alternating: 13 sliding (window 4096) + 13 full
    assert (layout.sliding_layers, layout.full_layers, layout.sliding_window) == (13, 13, 4096)
    cost = kv_cost(layout, element_bytes=2, state_element_bytes=2, max_num_batched_tokens=2048)
    per_layer = 2 * 4 * 256 * 2
    sliding_pages = -(-min(4096 - 1 + 2048, 8192) // 16) + 1
    assert cost.sequence_bytes(8192) == 13 * 8192 * per_layer + 13 * sliding_pages * 16 * per_layer
    # a context within the window: both kinds grow alike (plus the sliding layers' spare page)
    assert cost.sequence_bytes(1024) == 26 * 1024 * per_layer + 13 * 16 * per_layer
    mistral = layout_of("mistral-7b")  # Mistral v0.1: every layer slides
    assert (mistral.sliding_layers, mistral.full_layers) == (32, 0)


def test_gemma_3_five_of_six_layers_slide() -> None:
    layout = layout_of(str(DATA / "gemma-3-4b-it"))
    assert (layout.sliding_layers, layout.full_layers, layout.sliding_window) == (29, 5, 1024)


def test_hybrid_states_per_sequence() -> None:
    nxt = layout_of(str(DATA / "qwen3-next-80b-a3b"))  # 3 gated-DeltaNet layers per full-attention layer
    assert (nxt.full_layers, nxt.state_layers) == (12, 36)
    assert nxt.state_elements == 3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128
    jamba = layout_of(str(DATA / "jamba-v0.1"))  # attention every 8th layer from 4
    assert (jamba.full_layers, jamba.state_layers) == (4, 28)
    assert jamba.state_elements == 3 * 8192 + 8192 * 16
    from transformers import FalconH1Config

    falcon = kv_layout(FalconH1Config().to_dict())  # Mamba-2 beside attention in every layer
    assert (falcon.full_layers, falcon.state_layers) == (32, 32)
    assert falcon.state_elements == 3 * (1024 + 2 * 256) + 128 * 8 * 256
    cost = kv_cost(nxt, element_bytes=2, state_element_bytes=2)
    # the state does not grow with the context
    assert cost.sequence_bytes(2) - cost.sequence_bytes(1) == 0
    assert cost.state_bytes_per_sequence == 36 * nxt.state_elements * 2


def test_page_rounding() -> None:
    cost = kv_cost(layout_of("llama-3.1-8b"), element_bytes=2, state_element_bytes=2)
    assert cost.sequence_bytes(17) == 32 * cost.bytes_per_token  # two 16-token blocks
    assert cost.cache_tokens(cost.page_bytes * 3 + 1) == 48


def test_fp8_halves_16_bit_kv() -> None:
    assert kv_dtype_bytes("fp8", "bfloat16") == 1 and kv_dtype_bytes("auto", "bfloat16") == 2
    with pytest.raises(ConfigError, match="allowed: auto, fp8"):
        kv_dtype_bytes("int3", "bfloat16")


def test_tp_that_divides_neither_way_is_refused_with_what_vllm_does() -> None:
    llama = layout_of("llama-3.1-8b")  # 32 heads, 8 KV heads: tp 16 replicates each KV head on 2 ranks
    assert kv_cost(llama, element_bytes=2, state_element_bytes=2, tp=16).bytes_per_token == 2 * 32 * 128 * 2
    with pytest.raises(ConfigError, match="attention heads"):
        kv_cost(llama, element_bytes=2, state_element_bytes=2, tp=3)
    odd = KVLayout("gqa", 4, 0, None, 6, 24, 128)  # 24 heads, 6 KV heads
    with pytest.raises(ConfigError, match=r"does not divide the 6 KV heads: vLLM shards .* replicates"):
        kv_cost(odd, element_bytes=2, state_element_bytes=2, tp=4)
    with pytest.raises(ConfigError, match="not a multiple of the 6 KV heads: vLLM replicates"):
        kv_cost(odd, element_bytes=2, state_element_bytes=2, tp=8)


def test_not_a_decoder_config() -> None:
    with pytest.raises(ModelSourceError, match="not a decoder"):
        kv_layout({"model_type": "resnet", "depths": [3, 4, 6, 3]})


# ---- invariants (hypothesis) -------------------------------------------------------------------------

layouts = st.builds(
    lambda full, sliding, window, heads, head_dim, states: KVLayout(
        "gqa", full, sliding, window if sliding else None, heads, heads * 4, head_dim, 0,
        states, 1000 if states else 0, "Mamba" if states else "", 131072),
    st.integers(0, 64), st.integers(0, 64), st.integers(128, 8192), st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([64, 128, 256]), st.integers(0, 40)).filter(lambda x: x.attention_layers > 0)


def _sequences(layout: KVLayout, total: int, context: int, element: int = 2) -> int:
    cost = kv_cost(layout, element_bytes=element, state_element_bytes=2)
    budget = vllm_budget(total, 0.9, weights_bytes=10 << 30, activation_peak_bytes=2 << 30, non_torch=1 << 26,
                         graphs=1 << 29)
    return cost.max_concurrency(budget.kv_cache_bytes, context)


@settings(max_examples=60, deadline=None)
@given(layouts, st.integers(16, 200).map(lambda g: g << 30), st.integers(1, 64).map(lambda g: g << 30),
       st.integers(1, 131072))
def test_more_gpu_memory_never_fewer_sequences(layout: KVLayout, total: int, extra: int, context: int) -> None:
    assert _sequences(layout, total + extra, context) >= _sequences(layout, total, context)


@settings(max_examples=60, deadline=None)
@given(layouts, st.integers(16, 200).map(lambda g: g << 30), st.integers(1, 131072), st.integers(1, 131072))
def test_longer_context_never_more_sequences(layout: KVLayout, total: int, context: int, more: int) -> None:
    assert _sequences(layout, total, context + more) <= _sequences(layout, total, context)


@settings(max_examples=60, deadline=None)
@given(layouts, st.integers(16, 200).map(lambda g: g << 30), st.integers(1, 131072))
def test_fp8_never_fewer_tokens_than_bf16(layout: KVLayout, total: int, context: int) -> None:
    kv_bytes = total - (13 << 30)
    fp8, bf16 = (kv_cost(layout, element_bytes=e, state_element_bytes=2) for e in (1, 2))
    assert fp8.cache_tokens(kv_bytes) >= bf16.cache_tokens(kv_bytes)
    assert _sequences(layout, total, context, 1) >= _sequences(layout, total, context, 2)
