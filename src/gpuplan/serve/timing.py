"""Prefill and decode time of a served model on one replica (tp × pp GPUs), through perf's roofline.

Each phase is expressed as per-layer operations (``OpRecord``) and timed by ``perf.roofline.op_time``
with perf's efficiency factors; TP all-reduces (two per layer: after attention and after the MLP) by
``perf.collectives``. Decode reads the weights once per step for the whole batch and each sequence's
KV once; it turns compute-bound when ``2 · params · batch / peak`` exceeds ``weights / bandwidth`` (the
crossover batch is reported). Decode runs as a CUDA-graph replay (vLLM, SGLang); prefill does not. With the
graphs off (vLLM ``--enforce-eager``, SGLang ``--disable-cuda-graph``) every decode step launches its kernels
from Python: the step takes the longer of its GPU time and the eager dispatch of the traced forward's kernel
launches (``perf.step_time.KernelSum``, the rule ``step_time`` applies to an eager step).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpuplan.parallel.collectives import group
from gpuplan.parallel.topology import make_topology
from gpuplan.perf.collectives import (
    Group,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    intra_node_group,
    p2p_s,
    reduce_scatter_s,
)
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.perf.roofline import op_time
from gpuplan.perf.step_time import KernelSum
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
    expert_bytes_16bit: int = 0
    """Routed experts' weights (16-bit) of the whole model: a token's forward reads only top-k of them."""
    experts: int = 0
    """Routed experts per MoE layer."""
    adapter_params: int = 0
    """Multi-LoRA: parameters of one adapter slot (whole model); a step reads the adapters its tokens use."""
    max_adapters: int = 0
    kernels_per_forward: int = 0
    """Kernels one forward launches (the traced profile run's, ``perf.roofline.launches_kernel``): what an
    eager decode step dispatches from the CPU (0: not known, no dispatch counted)."""

    @property
    def active_params(self) -> float:
        """Parameters one token's forward multiplies: the dense part and its top-k of the routed experts."""
        share = self.expert_bytes_16bit / max(1, self.weight_bytes_16bit)
        routed = self.experts_per_token / self.experts if self.experts else 1.0
        return self.params_count * (1 - share + share * routed)

    def weight_bytes_read(self, tp: int, dp: int, tokens: int) -> float:
        """16-bit weight bytes one GPU reads in a forward of ``tokens`` per DP rank: the dense part split by
        tp, the routed experts by the MoE group (tp × dp, ``capacity.expert_weights_per_gpu``'s even share),
        of which only the experts some token reaches are read — with balanced routing an expert is missed
        by all ``tokens × dp`` tokens of the group with probability ``(1 − k/E)^(tokens·dp)``."""
        dense = (self.weight_bytes_16bit - self.expert_bytes_16bit) / tp
        if not self.experts:
            return dense + self.expert_bytes_16bit / tp
        touched = 1.0 - (1.0 - self.experts_per_token / self.experts) ** (tokens * dp)
        return dense + self.expert_bytes_16bit * touched / (tp * dp)


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
              weight_quant: str, eager_kernels: int = 0) -> tuple[float, float, float]:
    """GPU time of the phase's ops (kernels and gaps), compute- and memory-bound parts; with ``eager_kernels``
    the phase takes the longer of that and their CPU dispatch (``KernelSum``'s per-phase rule)."""
    eff = efficiency_for(gpu)  # the GPU's own architecture factors, as step_time costs an estimate
    acc = KernelSum()
    for op in ops:
        t = op_time(op, gpu, precision, eff, graph=graph, weight_quant=weight_quant)
        # the ops are a per-layer summary of the real kernels, so their count is not the launch count: the
        # dispatch is added for the traced forward's launches (eager decode) or not at all (graph replay; the
        # prefill, whose kernels outrun the CPU)
        acc.add(replace(t, dispatch_s=0.0), op.count, op.op_class, op.phase)
    if eager_kernels:
        acc.add_dispatch(eager_kernels, eff, ops[0].phase)
    return acc.total_s, acc.compute_s, acc.memory_s


def _group(gpu: GPU, size: int, instance: int) -> Group:
    """The process group of ``size`` consecutive ranks of an instance of ``instance`` GPUs, placed on nodes
    of 8 (parallel/topology.py; past one node the group crosses the network)."""
    if instance <= 8 or not gpu.intra_node_gb_per_s_per_direction:
        return intra_node_group(size, gpu.intra_node_gb_per_s_per_direction or 0.0)
    return group(make_topology(gpu, instance), size, 1)


def _all_reduces_s(shape: ModelShape, gpu: GPU, tp: int, tokens: int, instance: int = 1) -> float:
    if tp <= 1:
        return 0.0
    return 2 * shape.layers * all_reduce_s(_group(gpu, tp, max(tp, instance)),
                                           tokens * shape.hidden_size * shape.dtype_bytes)


def _moe_collectives_s(shape: ModelShape, gpu: GPU, tp: int, ep: int, dp: int, tokens: int) -> float:
    """The MoE layers' traffic across DP ranks (one collectives model, perf/collectives.py). Expert
    parallelism: per MoE layer a dispatch and a combine all-to-all of each rank's ``tokens`` × top-k hidden
    states. DP attention without EP (the experts TP-split over tp × dp): the DP ranks' tokens all-gathered
    into the MoE group and the outputs reduce-scattered back (vLLM's default ``allgather_reducescatter``)."""
    if not shape.moe_layers or (ep <= 1 and dp <= 1):
        return 0.0
    group_ = _group(gpu, tp * dp, tp * dp)
    if ep > 1:
        size = tokens * shape.experts_per_token * shape.hidden_size * shape.dtype_bytes
        return 2 * shape.moe_layers * all_to_all_s(group_, size)
    gathered = tokens * dp * shape.hidden_size * shape.dtype_bytes
    return shape.moe_layers * (all_gather_s(group_, gathered) + reduce_scatter_s(group_, gathered))


def _phase(shape: ModelShape, gpu: GPU, tp: int, *, tokens: int, attention_flops: float, kv_read_bytes: int,
           phase: str, weight_quant: str, ep: int = 1, dp: int = 1, eager: bool = False) -> PhaseTime:
    precision = "bf16" if shape.dtype == "bfloat16" else "fp16"
    layers = max(1, shape.layers)
    # LoRA: every token through its adapter's A and B (punica shrink / expand), each adapter in use read once
    # (worst case, as vLLM's profile assigns them: one adapter per request, up to --max-loras)
    adapters = min(tokens, shape.max_adapters)
    lora_bytes = adapters * shape.adapter_params * shape.dtype_bytes / tp
    per_layer_weights = int(shape.weight_bytes_read(tp, dp, tokens) + lora_bytes) // layers
    # FLOPs per GPU: the dense part split by tp, the experts' top-k work of all dp ranks' tokens over tp × dp
    per_layer_flops = int(2 * (shape.active_params + shape.adapter_params) * tokens) // (tp * layers)
    activations = 2 * tokens * shape.hidden_size * shape.dtype_bytes
    ops = [OpRecord("aten.mm.default", phase, "", "matmul", shape.dtype, per_layer_flops,
                    per_layer_weights + activations, activations, None, shape.layers)]
    if shape.attention_layers:
        ops.append(OpRecord("aten._flash_attention_forward.default", phase, "", "attention", shape.dtype,
                            int(attention_flops / tp / shape.attention_layers),
                            kv_read_bytes // shape.attention_layers + activations, activations, None,
                            shape.attention_layers))
    total, compute, memory = _ops_time(ops, gpu, precision, graph=phase == "decode", weight_quant=weight_quant,
                                       eager_kernels=shape.kernels_per_forward if eager else 0)
    comm = _all_reduces_s(shape, gpu, tp, tokens, tp * dp) + _moe_collectives_s(shape, gpu, tp, ep, dp, tokens)
    return PhaseTime(total + comm, compute, memory, comm)


def decode_step(shape: ModelShape, gpu: GPU, tp: int, *, batch: int, context: int, kv_read_bytes: int,
                weight_quant: str = "none", ep: int = 1, dp: int = 1, eager: bool = False, pp: int = 1) -> PhaseTime:
    """One decode step (one new token for each of ``batch`` sequences at ``context`` tokens);
    ``kv_read_bytes``: the KV the batch reads on one GPU of each stage, summed over the ``pp`` stages;
    ``eager``: no CUDA graphs (the engine's ``EngineSettings.cuda_graphs`` off), each kernel dispatched from
    the CPU.

    Pipeline parallelism (``pp`` > 1), as vLLM's V1 engine runs it (a batch queue of ``pp`` batches in flight,
    each sequence in one of them): the running sequences form ``pp`` micro-batches of ⌈batch / pp⌉ that follow
    one another through the stages. A sequence gets its next token when its micro-batch has passed every stage,
    so the step (the inter-token latency) is the whole model's step at ⌈batch / pp⌉ sequences plus the
    pp − 1 stage-to-stage sends of its hidden states and residual; meanwhile every other micro-batch advances
    too, so all ``batch`` sequences get a token per step. Fewer sequences than stages leave stages idle (the
    pipeline bubble): the step never runs faster than one sequence's trip through all the stages."""
    micro = -(-batch // max(1, pp))
    flops = 4.0 * micro * context * shape.attention_heads * shape.head_dim * shape.attention_layers
    step = _phase(shape, gpu, tp, tokens=micro, attention_flops=flops,
                  kv_read_bytes=kv_read_bytes * micro // max(1, batch), phase="decode", weight_quant=weight_quant,
                  ep=ep, dp=dp, eager=eager)
    hops = pipeline_sends_s(shape, gpu, tp, pp, tokens=micro)
    return PhaseTime(step.seconds + hops, step.compute_s, step.memory_s, step.communication_s + hops)


def pipeline_sends_s(shape: ModelShape, gpu: GPU, tp: int, pp: int, *, tokens: int) -> float:
    """The pp − 1 stage-to-stage sends of a micro-batch of ``tokens`` (vLLM's IntermediateTensors: hidden states
    and residual in the model dtype) over the instance's links (across the network past a node of 8)."""
    if pp <= 1:
        return 0.0
    return (pp - 1) * p2p_s(_group(gpu, tp * pp, tp * pp), 2 * tokens * shape.hidden_size * shape.dtype_bytes)


def prefill(shape: ModelShape, gpu: GPU, tp: int, *, tokens: int, weight_quant: str = "none",
            ep: int = 1, dp: int = 1, prompts: int = 1, pp: int = 1) -> PhaseTime:
    """The prompt's forward (time to first token, one request): causal attention is half the square.
    ``prompts`` > 1: that many prompts of ``tokens`` each prefilled in one batch (an offline batch, an RL
    rollout): the matmuls see every token, each prompt attends to itself only."""
    flops = prompts * 2.0 * tokens * tokens * shape.attention_heads * shape.head_dim * shape.attention_layers
    step = _phase(shape, gpu, tp, tokens=prompts * tokens, attention_flops=flops, kv_read_bytes=0, phase="prefill",
                  weight_quant=weight_quant, ep=ep, dp=dp)
    hops = pipeline_sends_s(shape, gpu, tp, pp, tokens=prompts * tokens)  # the prompt passes every stage in turn
    return PhaseTime(step.seconds + hops, step.compute_s, step.memory_s, step.communication_s + hops)


def compute_bound_batch(shape: ModelShape, gpu: GPU) -> int | None:
    """Decode batch above which the matmuls are compute-bound (weights read once per step)."""
    key = "bf16" if shape.dtype == "bfloat16" else "fp16"
    peak = gpu.peak_flops_per_s(key)
    if not peak:
        return None
    eff = efficiency_for(gpu)
    per_token_s = 2 * shape.active_params / (peak * eff.tensor_core_matmul)
    weights_s = shape.weight_bytes_16bit / (gpu.memory_bandwidth_bytes_per_s * eff.bandwidth)
    return max(1, int(weights_s / per_token_s))
