"""Prefill and decode time of a served model on one replica (tp × pp GPUs), through perf's roofline.

Each phase is expressed as per-layer operations (``OpRecord``) and timed by ``perf.roofline.op_time``
with perf's efficiency factors; TP all-reduces (two per layer: after attention and after the MLP) by
``perf.collectives``. Decode reads the weights once per step for the whole batch and each sequence's
KV once; it turns compute-bound when ``2 · params · batch / peak`` exceeds ``weights / bandwidth`` (the
crossover batch is reported). Decode runs as a CUDA-graph replay (vLLM, SGLang); prefill does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.perf.collectives import all_reduce_s, all_to_all_s, intra_node_group
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.perf.roofline import op_time
from gpuplan.trace.records import OpRecord

if TYPE_CHECKING:
    from gpuplan.hardware import GPU


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the timing needs of the model, for the whole replica (before sharding)."""

    params_count: int
    weight_bytes_16bit: int
    layers: int
    attention_layers: int
    hidden_size: int
    attention_heads: int
    head_dim: int
    dtype: str
    dtype_bytes: int
    moe_layers: int = 0
    """MoE layers (0: dense); with expert parallelism each dispatches and combines its tokens all-to-all."""
    experts_per_token: int = 0


@dataclass(frozen=True, slots=True)
class PhaseTime:
    seconds: float
    compute_s: float
    memory_s: float
    communication_s: float

    def to_dict(self) -> dict[str, float]:
        return {"seconds": self.seconds, "compute_s": self.compute_s, "memory_s": self.memory_s,
                "communication_s": self.communication_s}


def _ops_time(ops: list[OpRecord], gpu: GPU, precision: str, *, graph: bool,
              weight_quant: str) -> tuple[float, float, float]:
    total = compute = memory = 0.0
    eff = efficiency_for(gpu.arch)  # the GPU's own architecture factors, as step_time costs an estimate
    for op in ops:
        t = op_time(op, gpu, precision, eff, graph=graph, weight_quant=weight_quant)
        total += t.total_s * op.count
        compute += (t.compute_s if t.compute_bound else 0.0) * op.count
        memory += (0.0 if t.compute_bound else t.memory_s) * op.count
    return total, compute, memory


def _all_reduces_s(shape: ModelShape, gpu: GPU, tp: int, tokens: int) -> float:
    if tp <= 1:
        return 0.0
    link = gpu.intra_node_gb_per_s_per_direction or 0.0
    group = intra_node_group(tp, link)
    return 2 * shape.layers * all_reduce_s(group, tokens * shape.hidden_size * shape.dtype_bytes)


def _all_to_alls_s(shape: ModelShape, gpu: GPU, ep: int, tokens: int) -> float:
    """Expert parallelism: per MoE layer a dispatch and a combine all-to-all of each rank's ``tokens`` ×
    top-k hidden states (the one collectives model, perf/collectives.py)."""
    if ep <= 1 or not shape.moe_layers:
        return 0.0
    group = intra_node_group(ep, gpu.intra_node_gb_per_s_per_direction or 0.0)
    size = tokens * shape.experts_per_token * shape.hidden_size * shape.dtype_bytes
    return 2 * shape.moe_layers * all_to_all_s(group, size)


def _phase(shape: ModelShape, gpu: GPU, tp: int, *, tokens: int, attention_flops: float, kv_read_bytes: int,
           phase: str, weight_quant: str, ep: int = 1) -> PhaseTime:
    precision = "bf16" if shape.dtype == "bfloat16" else "fp16"
    per_layer_weights = shape.weight_bytes_16bit // max(1, tp * shape.layers)
    per_layer_flops = 2 * shape.params_count * tokens // max(1, tp * shape.layers)
    activations = 2 * tokens * shape.hidden_size * shape.dtype_bytes
    ops = [OpRecord("aten.mm.default", phase, "", "matmul", shape.dtype, per_layer_flops,
                    per_layer_weights + activations, activations, None, shape.layers)]
    if shape.attention_layers:
        ops.append(OpRecord("aten._flash_attention_forward.default", phase, "", "attention", shape.dtype,
                            int(attention_flops / tp / shape.attention_layers),
                            kv_read_bytes // shape.attention_layers + activations, activations, None,
                            shape.attention_layers))
    total, compute, memory = _ops_time(ops, gpu, precision, graph=phase == "decode", weight_quant=weight_quant)
    comm = _all_reduces_s(shape, gpu, tp, tokens) + _all_to_alls_s(shape, gpu, ep, tokens)
    return PhaseTime(total + comm, compute, memory, comm)


def decode_step(shape: ModelShape, gpu: GPU, tp: int, *, batch: int, context: int, kv_read_bytes: int,
                weight_quant: str = "none", ep: int = 1) -> PhaseTime:
    """One decode step (one new token for each of ``batch`` sequences at ``context`` tokens);
    ``kv_read_bytes``: the KV the batch reads, per GPU."""
    flops = 4.0 * batch * context * shape.attention_heads * shape.head_dim * shape.attention_layers
    return _phase(shape, gpu, tp, tokens=batch, attention_flops=flops, kv_read_bytes=kv_read_bytes,
                  phase="decode", weight_quant=weight_quant, ep=ep)


def prefill(shape: ModelShape, gpu: GPU, tp: int, *, tokens: int, weight_quant: str = "none",
            ep: int = 1) -> PhaseTime:
    """The prompt's forward (time to first token, one request): causal attention is half the square."""
    flops = 2.0 * tokens * tokens * shape.attention_heads * shape.head_dim * shape.attention_layers
    return _phase(shape, gpu, tp, tokens=tokens, attention_flops=flops, kv_read_bytes=0, phase="prefill",
                  weight_quant=weight_quant, ep=ep)


def compute_bound_batch(shape: ModelShape, gpu: GPU) -> int | None:
    """Decode batch above which the matmuls are compute-bound (weights read once per step)."""
    key = "bf16" if shape.dtype == "bfloat16" else "fp16"
    peak = gpu.peak_flops_per_s(key)
    if not peak:
        return None
    eff = efficiency_for(gpu.arch)
    per_token_s = 2 * shape.params_count / (peak * eff.tensor_core_matmul)
    weights_s = shape.weight_bytes_16bit / (gpu.memory_bandwidth_bytes_per_s * eff.bandwidth)
    return max(1, int(weights_s / per_token_s))
