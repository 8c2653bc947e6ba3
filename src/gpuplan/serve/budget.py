"""The engine's memory budget on one GPU, term by term, as the engine computes it.

vLLM 0.10.0 ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``::

    requested = total_gpu_memory × gpu_memory_utilization
    kv_cache  = requested − weights − activation peak (torch, profile run) − non-torch increase

CUDA graphs are captured *after* the KV cache is allocated (``compile_or_warm_up_model`` runs after
``initialize_from_config``; vllm-project/vllm ``vllm/v1/worker/gpu_worker.py`` at 0012cf691b7e), so
0.10.0 does not subtract them: vLLM PR #21489 ("The estimation does not include CUDAGraph memory since
the estimation happens before CUDAGraph capture ... OOM later") and issue #17549. They take what the KV
cache leaves free: ``total − CUDA context − (requested − activation peak)`` (the profile's activations
are released before the capture); more than that is a CUDA OOM at capture. vLLM ≥ 0.21 estimates the
graphs first and subtracts them (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, default since v0.21.0,
gpustack/runner PR #251's log) — not the version modelled here.

and ``vllm/v1/core/kv_cache_utils.py`` refuses to start when ``kv_cache <= 0`` ("No available memory for
the cache blocks") or when one sequence of ``max_model_len`` does not fit (``check_enough_kv_cache_memory``).
SGLang 0.4.6 ``model_runner.py`` ``profile_max_num_token``: ``rest = free after weights − total ×
(1 − mem_fraction_static)``, i.e. ``total × mem_fraction_static − context − weights``; its activations
live in the ``1 − mem_fraction_static`` left over. The hf engine (``model.generate()``) has no budget
flag: everything not holding weights, activations and the context holds KV.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.memory.overheads import cublas_workspace_bytes
from gpuplan.models.config_view import ConfigView
from gpuplan.units import GIB

CUBLAS_HANDLES = 2
"""Non-torch memory of one process after the profile run: the cuBLAS and cuBLASLt workspaces (torch
allocates a cuBLASLt workspace of the cuBLAS size beside the cuBLAS one, ``CublasHandlePool.cpp``
``getCUDABlasLtWorkspace``); with TP > 1 NCCL's buffers come on top (``memory/nccl.py``)."""
GRAPH_BYTES_PER_CAPTURE = 214 * 1024
"""Driver memory per captured piecewise CUDA graph. FITTED on the one public figure we have (vLLM
PR #21489, gemma-3-4b-it: 0.65 GiB for 67 sizes × 35 pieces, less the pieces' output buffers), so the
CUDA-graph term of that example is not an independent check."""


def rope_cache_bytes(config: Mapping[str, Any], dtype_bytes: int) -> int:
    """vLLM's rotary cos/sin caches, buffers counted with the weights (``rotary_embedding.py``: one
    ``[max_position × scaling factor, rotary_dim]`` cache per distinct RoPE, shared by the layers)."""
    cfg = ConfigView(config)
    positions, heads, hidden = cfg.positive("max_position_embeddings"), cfg.attention_heads, cfg.hidden_size
    if positions is None or heads is None or hidden is None:
        return 0
    if not any(key in cfg for key in ("rope_theta", "rope_parameters", "rope_scaling")):
        return 0  # learned or ALiBi positions (GPT-2, OPT, BLOOM): no rotary cache
    if cfg.get("kv_lora_rank"):
        dim = int(cfg.get("qk_rope_head_dim") or 0)
    else:
        dim = cfg.head_dim or hidden // heads
        dim = int(dim * float(cfg.get("partial_rotary_factor") or 1.0))
    return sum(int(positions * factor) * dim * dtype_bytes for factor in _rope_factors(cfg))


def _rope_factors(cfg: Mapping[str, Any]) -> list[float]:
    """Position-scaling factor of each distinct RoPE: only ``linear`` scaling lengthens vLLM's cache
    (``LinearScalingRotaryEmbedding``); transformers 5 writes ``rope_parameters`` (one per layer type),
    older configs ``rope_scaling`` (+ ``rope_local_base_freq`` for Gemma 3's second, unscaled RoPE)."""
    params = cfg.get("rope_parameters")
    if isinstance(params, Mapping) and params and all(isinstance(v, Mapping) for v in params.values()):
        ropes = list(params.values())
    elif isinstance(params, Mapping) and params:
        ropes = [params]
    else:
        scaling = cfg.get("rope_scaling")
        ropes = [scaling if isinstance(scaling, Mapping) else {}]
        if cfg.get("rope_local_base_freq"):
            ropes.append({})
    return [float(r.get("factor", 1.0)) if r.get("rope_type", r.get("type")) == "linear" else 1.0 for r in ropes]


def non_torch_bytes(compute_capability: tuple[int, int] | None, vendor: str, arch: str) -> int:
    return CUBLAS_HANDLES * cublas_workspace_bytes(compute_capability, vendor, arch)


def cuda_graph_bytes(capture_sizes: int, attention_layers: int, hidden_size: int, dtype_bytes: int,
                     largest_capture: int) -> int:
    """Piecewise CUDA graphs (vLLM 0.10.0 ``compilation/cuda_piecewise_backend.py``): the model is cut at
    each attention op into ``attention_layers + 1`` pieces, each captured at every size; the pieces keep
    their static outputs (hidden states and residual at the largest size) in the shared graph pool."""
    pieces = attention_layers + 1
    outputs = pieces * 2 * largest_capture * hidden_size * dtype_bytes
    return capture_sizes * pieces * GRAPH_BYTES_PER_CAPTURE + outputs


@dataclass(frozen=True, slots=True)
class Budget:
    """One GPU's memory as the engine splits it. Every field is bytes."""

    total_bytes: int
    requested_bytes: int
    """vLLM: total × utilization; SGLang: total × mem_fraction_static; hf: the total."""
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    context_bytes: int
    """CUDA context: inside the budget where the engine counts it (SGLang, hf), else 0 (vLLM leaves it in
    the 1 − utilization margin)."""
    kv_cache_bytes: int
    outside_pool_bytes: int
    """SGLang: what activations, graphs and non-torch memory have outside the static pool
    (total − requested); they fit when their sum is at most this. vLLM: what the CUDA graphs have once
    the KV cache is allocated (total − context − requested + activation peak). hf: 0 (subtracted)."""

    @property
    def engine_bytes(self) -> int:
        """What the engine holds on the GPU while it generates, its CUDA context aside: weights, KV cache,
        the activation peak, non-torch memory and CUDA graphs."""
        return (self.weights_bytes + max(0, self.kv_cache_bytes) + self.activation_peak_bytes + self.non_torch_bytes
                + self.cuda_graph_bytes)

    @property
    def asleep_bytes(self) -> int:
        """What the engine keeps while it sleeps (vLLM ``LLM.sleep(level=1|2)``, SGLang
        ``release_memory_occupation``): both free the weights and the KV cache (level 1 keeps the weights in
        host RAM, level 2 drops them; the GPU memory freed is the same) and the activations' cached blocks;
        the CUDA graphs and the non-torch memory (cuBLAS workspaces, NCCL buffers) stay."""
        return self.non_torch_bytes + self.cuda_graph_bytes


def vllm_budget(total_bytes: int, utilization: float, *, weights_bytes: int, activation_peak_bytes: int,
                non_torch: int, graphs: int, context_bytes: int = 0) -> Budget:
    """vLLM 0.10.0: the KV cache is what the profile leaves of the requested memory; the CUDA graphs come
    after it, in the memory outside (module docstring). ``context_bytes``: the CUDA context, outside
    ``requested`` (vLLM's baseline snapshot is taken after it), needed only for the graphs' room."""
    requested = int(total_bytes * utilization)
    kv = requested - weights_bytes - activation_peak_bytes - non_torch
    room = total_bytes - context_bytes - requested + activation_peak_bytes
    return Budget(total_bytes, requested, weights_bytes, activation_peak_bytes, non_torch, graphs, 0, kv, room)


def sglang_budget(total_bytes: int, mem_fraction_static: float, *, weights_bytes: int, context_bytes: int,
                  activation_peak_bytes: int, non_torch: int, graphs: int) -> Budget:
    requested = int(total_bytes * mem_fraction_static)
    kv = requested - weights_bytes - context_bytes
    return Budget(total_bytes, requested, weights_bytes, activation_peak_bytes, non_torch, graphs, context_bytes,
                  kv, total_bytes - requested)


def hf_budget(total_bytes: int, *, weights_bytes: int, activation_peak_bytes: int, non_torch: int,
              context_bytes: int) -> Budget:
    kv = total_bytes - weights_bytes - activation_peak_bytes - non_torch - context_bytes
    return Budget(total_bytes, total_bytes, weights_bytes, activation_peak_bytes, non_torch, 0, context_bytes, kv, 0)


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"

