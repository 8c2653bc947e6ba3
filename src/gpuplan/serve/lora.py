"""Multi-LoRA serving memory (``--max-loras N --max-lora-rank R``) as vLLM allocates it.

vLLM wraps every LoRA-capable linear layer of the model, whatever the adapters target, and allocates its
slots up front at ``max_loras × max_lora_rank`` (vllm-project/vllm ``vllm/lora/layers/base_linear.py`` at
01235a494f17, ``create_lora_weights``): per output slice ``lora_a`` ``[max_loras, 1, rank, input]`` and
``lora_b`` ``[max_loras, 1, output, rank]`` in the model dtype; a column-parallel layer (qkv, gate_up) keeps
the whole input and ``1/tp`` of the output, a row-parallel one (o, down) ``1/tp`` of the input and the whole
output. The slots are created in ``load_lora_model`` inside the model-loading measurement, so vLLM V1 counts
them with the weights (V0 left them out of its KV profile: vLLM issue #14450, fixed by PR #14469).

The punica wrapper (``vllm/lora/punica_wrapper/punica_gpu.py`` at 010c9386c45d) keeps index tensors over
``max_num_batched_tokens`` (two ``LoRAKernelMeta`` of int32 token maps, the base wrapper's int64 token,
embedding and sampler indices) and, in every LoRA linear, a float32 shrink buffer ``[slices, tokens, rank]``
(``add_lora_linear``) — live during the forward, so the profile run's activation peak holds it.

Where vLLM's own profile misjudges it (``vllm/v1/worker/lora_model_runner_mixin.py`` at 01d36ea091ac): the
profile run activates ``max_loras`` dummy adapters of ``LORA_WARMUP_RANK = 8``, not of ``max_lora_rank``;
the slots are sized at the max rank whatever the dummies' rank, but the CUDA graphs captured with LoRA come
after the KV cache is sized (vLLM 0.10.0, ``budget.py``), and the adapters cached on the host
(``--max-cpu-loras``) are host memory, outside the GPU budget altogether.

Not counted here: LoRA slots on the embedding and lm_head (``--lora-extra-vocab-size``), on MoE experts
(vLLM 0.10.0 has no LoRA on fused MoE layers), and on MLA / Mamba projections (refused: not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.errors import ConfigError
from gpuplan.models.config_view import ConfigView
from gpuplan.serve.kv import KVLayout, kv_heads_per_gpu, layers_per_gpu

VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""``vllm/config.py`` ``LoRAConfig.__post_init__``: the max_lora_rank values vLLM 0.10.0 accepts."""
DEFAULT_MAX_LORA_RANK = 16
MAX_LORAS_UPPER = 1024
_UNGATED_ACTIVATIONS = frozenset({"gelu_new", "gelu", "relu", "gelu_fast"})
"""MLPs with one up projection (GPT-2, OPT, Falcon); the rest (SiLU / GELU-tanh GLUs) have gate + up."""


@dataclass(frozen=True, slots=True)
class LoRABudget:
    """The LoRA memory of one GPU (bytes) and the adapter size the decode step reads."""

    max_loras: int
    max_lora_rank: int
    slot_bytes: int
    """``max_loras`` adapter slots at ``max_lora_rank`` on this GPU (counted with the weights)."""
    punica_bytes: int
    """The punica wrapper's index tensors (counted with the weights: created with the LoRA manager)."""
    shrink_buffer_bytes: int
    """The widest float32 shrink buffer of one forward of ``max_num_batched_tokens`` (activation peak)."""
    params_per_adapter: int
    """Parameters of one adapter slot in the whole model (before TP), for the decode step's reads."""


def check_lora(max_loras: int, max_lora_rank: int) -> None:
    if isinstance(max_loras, bool) or not 1 <= max_loras <= MAX_LORAS_UPPER:
        raise ConfigError(f"--max-loras {max_loras!r} is out of range: allowed 1..{MAX_LORAS_UPPER}")
    if max_lora_rank not in VLLM_LORA_RANKS:
        raise ConfigError(f"--max-lora-rank {max_lora_rank!r} is not one vLLM accepts: allowed "
                          f"{', '.join(map(str, VLLM_LORA_RANKS))}; pass the largest rank of your adapters rounded up")


def lora_budget(config: dict[str, Any], layout: KVLayout, *, max_loras: int, max_lora_rank: int, tp: int, pp: int,
                dtype_bytes: int, max_num_batched_tokens: int, max_num_seqs: int) -> LoRABudget:
    """vLLM's LoRA slots, punica buffers and shrink buffer on one GPU (module docstring)."""
    check_lora(max_loras, max_lora_rank)
    if layout.kind == "mla" or layout.state_layers:
        raise ConfigError(f"--max-loras on a model with {'MLA' if layout.kind == 'mla' else 'Mamba / linear'} "
                          "attention is not modelled (its projections differ from q/k/v/o); drop --max-loras")
    cfg = ConfigView(config)
    hidden = cfg.hidden_size or 0
    heads = layout.attention_heads
    head_dim = layout.head_dim
    layers = cfg.layers or 1
    moe = bool(cfg.get("num_experts_per_tok"))
    dense_mlp_layers = (int(cfg.get("first_k_dense_replace") or 0) + len(cfg.get("mlp_only_layers") or [])) if moe \
        else layers
    inner = cfg.ffn_size or 4 * hidden
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or cfg.get("hidden_activation") or "silu")
    ups = 1 if act in _UNGATED_ACTIVATIONS else 2
    r = max_lora_rank
    kv_out = kv_heads_per_gpu(layout, tp) * head_dim
    q_out = heads * head_dim // tp
    # per layer, one adapter on this GPU: qkv (3 slices, column), o (row)
    attention = 3 * r * hidden + r * (q_out + 2 * kv_out) + r * (heads * head_dim // tp) + r * hidden
    mlp = ups * r * hidden + r * ups * inner // tp + r * inner // tp + r * hidden  # gate_up (column), down (row)
    attention_layers = layers_per_gpu(layout.attention_layers, pp)
    mlp_layers = layers_per_gpu(dense_mlp_layers, pp)
    per_adapter = attention * attention_layers + mlp * mlp_layers
    whole_attention = 3 * r * hidden + r * (heads + 2 * layout.kv_heads) * head_dim + r * heads * head_dim + r * hidden
    whole_mlp = ups * r * hidden + r * ups * inner + r * inner + r * hidden
    params = whole_attention * layout.attention_layers + whole_mlp * dense_mlp_layers
    tokens = max_num_batched_tokens
    # LoRAKernelMeta × 2 (int32: token map, sorted indices, per-LoRA counts) + base wrapper (int64: token,
    # 2 × embedding indices; sampler and padded sampler indices over the sequences)
    punica = 2 * (2 * tokens * 4 + 3 * (max_loras + 2) * 4) + 8 * (3 * tokens + 2 * max_num_seqs)
    return LoRABudget(max_loras, max_lora_rank, max_loras * per_adapter * dtype_bytes, punica,
                      3 * tokens * r * 4, params)
