"""``step_time``: the time of a traced step on a GPU, from the per-op roofline (perf/roofline.py).

The step is the sum of its kernels: one device, one stream, no overlap between kernels (what eager
PyTorch does). Each op costs ``max(flops / achievable rate, bytes / achievable bandwidth)`` plus the
GPU gap between kernels; the CPU dispatches the kernels ahead of the GPU, so a phase takes the
longer of its GPU time and its CPU dispatch time (small batches and small models are CPU-bound).
The efficiency factors are per GPU architecture (perf/efficiency.py, perf/data/arch_factors.json)
and listed in ``assumptions``. Generation (``mode="generate"``) is split into prefill (time to first token) and
decode (per new token), the decode loop costed as a CUDA-graph replay the way serving engines run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from gpuplan.errors import ConfigError
from gpuplan.memory.weight_quant import quantize_weights
from gpuplan.perf.efficiency import Efficiency, efficiency_for
from gpuplan.perf.float8_cast import CAST_KERNELS, FP8_DTYPES, cast_op_time, float8_modules, is_folded
from gpuplan.perf.roofline import (
    WEIGHT_QUANT_BITS,
    NoRateError,
    OpTime,
    compute_dtype_key,
    launches_kernel,
    op_time,
    weight_bytes_factor,
)
from gpuplan.scaled_formats import SCALED_FORMATS, high_precision_blocks

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

WEIGHT_QUANTS: tuple[str, ...] = tuple(WEIGHT_QUANT_BITS)

BREAKDOWN_KEYS: Final = ("gemm", "conv", "attention", "memory_bound", "launch", "communication_exposed")
"""Keys of ``StepTime.breakdown_s`` (the JSON ``time.breakdown_s``): kernel time by op class, the
launch time not hidden behind kernels (GPU gaps + CPU dispatch the GPU waits for), and the
communication a multi-GPU layout cannot overlap (0 on one GPU; the planner fills it)."""
_BREAKDOWN_OF_CLASS: Final = {"matmul": "gemm", "conv": "conv", "attention": "attention"}


@dataclass(slots=True)
class KernelSum:
    """Running sum of op times over a step, phase by phase (see the module docstring)."""

    compute_s: float = 0.0
    memory_s: float = 0.0
    kernels: int = 0
    gpu_by_phase_s: dict[str, float] = field(default_factory=dict)
    cpu_by_phase_s: dict[str, float] = field(default_factory=dict)
    kernel_by_class_s: dict[str, float] = field(default_factory=dict)
    """Kernel time (no gaps) by the trace's op class."""

    def add(self, t: OpTime, n: float, op_class: str, phase: str) -> None:
        if t.compute_bound:
            self.compute_s += t.compute_s * n
        else:
            self.memory_s += t.memory_s * n
        self.gpu_by_phase_s[phase] = self.gpu_by_phase_s.get(phase, 0.0) + t.total_s * n
        self.cpu_by_phase_s[phase] = self.cpu_by_phase_s.get(phase, 0.0) + t.dispatch_s * n
        self.kernel_by_class_s[op_class] = self.kernel_by_class_s.get(op_class, 0.0) + t.kernel_s * n

    def add_dispatch(self, kernels: float, eff: Efficiency, phase: str) -> None:
        """Eager CPU dispatch of ``kernels`` launches whose GPU time is added on its own (serve's decode step:
        its kernels are timed as a per-layer summary, the dispatch counted from the traced forward's launches)."""
        self.cpu_by_phase_s[phase] = self.cpu_by_phase_s.get(phase, 0.0) + kernels * eff.launch_overhead_s

    @property
    def by_phase_s(self) -> dict[str, float]:
        """Each phase: the longer of its GPU time and the CPU time dispatching it."""
        return {p: max(g, self.cpu_by_phase_s.get(p, 0.0)) for p, g in self.gpu_by_phase_s.items()}

    @property
    def total_s(self) -> float:
        return sum(self.by_phase_s.values())

    @property
    def overhead_s(self) -> float:
        return max(self.total_s - self.compute_s - self.memory_s, 0.0)

    @property
    def cpu_bound_s(self) -> float:
        """Time the GPU waits for the CPU's dispatch."""
        return sum(max(self.cpu_by_phase_s.get(p, 0.0) - g, 0.0) for p, g in self.gpu_by_phase_s.items())

    def breakdown_s(self) -> dict[str, float]:
        out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        for op_class, t in self.kernel_by_class_s.items():
            key = _BREAKDOWN_OF_CLASS.get(op_class, "memory_bound")
            out[key] += t
        out["launch"] = self.overhead_s
        return out


@dataclass(frozen=True, slots=True)
class InferenceTime:
    """Generation split into prefill and decode, for the whole batch."""

    prefill_s: float
    """Time to first token (the prompt's forward)."""
    decode_s: float
    """All decode steps after the first token."""
    decode_steps: int
    decode_per_token_s: float
    """One decode step (one new token for each sequence of the batch)."""
    new_tokens_per_s: float
    """batch × new tokens / (prefill + decode)."""
    decode_tokens_per_s: float
    """batch / decode step time: the steady decode rate."""
    bytes_per_decode_step: int
    """Weights (after weight-only quantization) + KV cache read at the mean context length."""
    bandwidth_bound_tokens_per_s: float
    """batch × DRAM bandwidth / bytes_per_decode_step: no decode can beat this."""

    @property
    def ttft_s(self) -> float:
        return self.prefill_s

    @property
    def fraction_of_bound(self) -> float:
        bound = self.bandwidth_bound_tokens_per_s
        return self.decode_tokens_per_s / bound if bound else 0.0


@dataclass(frozen=True, slots=True)
class StepTime:
    """Time of one step (training: grad_accum micro-batches and one optimizer step)."""

    total_s: float
    compute_s: float
    """Time of the ops bounded by arithmetic."""
    memory_s: float
    """Time of the ops bounded by DRAM traffic."""
    overhead_s: float
    """Kernel launch overheads."""
    by_phase_s: dict[str, float]
    flops: int
    """Hardware FLOPs of the step (recompute included)."""
    tflops_achieved: float
    mfu: float
    """Model FLOPs (forward + backward, no recompute) / (time × dense peak of the compute dtype)."""
    assumptions: tuple[str, ...]
    model_flops: int = 0
    peak_tflops: float = 0.0
    compute_dtype: str = "fp32"
    kernels: int = 0
    inference: InferenceTime | None = None
    by_op_class_s: dict[str, float] = field(default_factory=dict)
    """GPU time (kernels + gaps) by the trace's op class, plus ``cpu_dispatch``: the time the GPU
    waits for eager dispatch (when any); sums to ``total_s``."""
    breakdown_s: dict[str, float] = field(default_factory=dict)
    """Time by cost class (``BREAKDOWN_KEYS``); sums to ``total_s``."""
    arch: str = ""
    """Architecture key whose efficiency factors timed the step."""



def _high_precision_share(step: TracedStep, workload: Workload) -> float:
    """Share of the repeated blocks whose linear layers stay in bf16 under a scaled recipe
    (``--high-precision-blocks``; gpuplan.scaled_formats). Blocks are alike, so the kept blocks' GEMMs are
    that share of every traced block GEMM, run at the bf16 rate. With two stacks (encoder-decoder) the
    count applies to their blocks together."""
    blocks = sum((step.block_counts or step.traced_blocks).values())  # block_counts: only when scaled up
    if not workload.scaled_training or blocks <= 0:
        return 0.0
    return high_precision_blocks(workload.precision, workload.high_precision_blocks, blocks) / blocks

def model_flops(step: TracedStep, workload: Workload) -> int:
    """Forward + loss + backward FLOPs without the recompute of activation checkpointing.

    Full checkpointing re-runs each checkpointed block's forward inside backward, so the forward
    FLOPs of the repeated blocks are subtracted once from the backward; selective checkpointing keeps
    matmul/attention outputs and recomputes only FLOP-free elementwise ops."""
    by_phase = step.flops_by_phase()
    total = sum(v for k, v in by_phase.items()
                if k in ("forward", "loss", "backward", "prefill", "decode", "denoise", "vae_encode", "vae_decode")
                or k.startswith("encode:"))
    if workload.trains and workload.checkpointing == "full":
        total -= sum(op.flops * op.count for op in step.ops if op.phase == "forward" and op.block is not None)
    return max(total, 0)


def step_time(
    step: TracedStep,
    gpu: GPU,
    workload: Workload,
    *,
    efficiency: Efficiency | None = None,
    weight_quant: str = "none",
    time_factor: float = 1.0,
) -> StepTime:
    """Time of ``step`` (a trace of ``workload``) on ``gpu``.

    ``weight_quant`` (none | int8 | fp8 | int4) applies weight-only quantization to the weight reads
    of the matmuls of an inference step (infer, prefill and decode): their bytes shrink to the layout
    the memory total counts, their compute stays in the activation dtype. ``time_factor`` is a
    calibration (measured / estimated step time on this GPU and software): it scales every kernel's
    time, so the split by phase, the throughput and the MFU all follow from the calibrated time.
    """
    if not (time_factor > 0 and time_factor != float("inf")):
        raise ConfigError(f"step-time factor must be a positive finite number, got {time_factor!r}")
    if weight_quant not in WEIGHT_QUANT_BITS:
        raise ConfigError(
            f"unknown weight quantization {weight_quant!r} (allowed: {', '.join(WEIGHT_QUANTS)})"
        )
    if not step.ops:  # a checkpoint without config.json: weights from headers, no operation to time
        raise NoRateError("the step runs no operation (weights only, no config.json beside the checkpoint), "
                          "so it has no step time; put the model's config.json next to it")
    eff = efficiency or efficiency_for(gpu)
    generate = workload.mode == "generate"
    acc = KernelSum()
    by_class: dict[str, float] = {}
    quant = "none" if workload.trains else weight_quant
    # fp8 / mxfp8 / nvfp4 training: the scaling casts as torch.compile fuses them (perf/float8_cast.py)
    fp8_modules = float8_modules(step.ops) if workload.scaled_training else frozenset()
    scaled = SCALED_FORMATS.get(workload.precision)
    kept = _high_precision_share(step, workload)
    for op in step.ops:
        decode = generate and op.phase == "decode"
        cast = (cast_op_time(op, fp8_modules, gpu, eff, scaled.cast_bytes_per_element)
                if fp8_modules and scaled is not None else None)
        t = cast if cast is not None else op_time(op, gpu, workload.precision, eff, graph=decode, weight_quant=quant)
        n = op.count * time_factor
        share = kept if op.block and (op.module, op.block) in fp8_modules else 0.0
        if share and (cast is not None or op.dtype in FP8_DTYPES):
            # the blocks kept in bf16 run this linear layer's GEMM at the bf16 rate and cast nothing
            if cast is None:
                bf16 = op_time(replace(op, dtype="bfloat16"), gpu, workload.precision, eff)
                acc.add(bf16, n * share, op.op_class, op.phase)
                by_class[op.op_class] = by_class.get(op.op_class, 0.0) + bf16.total_s * n * share
            n *= 1.0 - share
        acc.add(t, n, op.op_class, op.phase)
        by_class[op.op_class] = by_class.get(op.op_class, 0.0) + t.total_s * n
        if cast is None:
            acc.kernels += op.count if launches_kernel(op) else 0
        elif not is_folded(cast):
            acc.kernels += op.count * CAST_KERNELS
    kernels = acc.kernels
    if acc.cpu_bound_s > 0:  # the GPU waiting for eager dispatch: its own entry, so the classes sum to the step
        by_class["cpu_dispatch"] = acc.cpu_bound_s
    by_phase = acc.by_phase_s
    total = acc.total_s
    compute, memory, overhead = acc.compute_s, acc.memory_s, acc.overhead_s
    hw_flops = step.flops
    m_flops = model_flops(step, workload)
    key = compute_dtype_key(workload.precision)
    peak = (
        gpu.peak_tflops(key)
        or gpu.peak_tflops("fp32")
        or gpu.peak_tflops("bf16")
        or gpu.peak_tflops("fp16")
        or 0.0
    )
    mfu = m_flops / (total * peak * 1e12) if total > 0 and peak > 0 else 0.0
    assumptions = list(eff.describe())
    assumptions.append(
        f"step = sum of kernel times on one stream (no overlap between kernels); {kernels:,} kernel launches"
        + (f", CPU-bound for {acc.cpu_bound_s / total:.0%} of the step (eager dispatch slower than the kernels)"
           if total > 0 and acc.cpu_bound_s > 0.005 * total else "")
    )
    if time_factor != 1.0:
        assumptions.append(f"every kernel time ×{time_factor:.3f}: calibrated (measured / estimated step time "
                           "on this GPU and software)")
    if workload.precision == "fp32":
        assumptions.append(
            "fp32 matmuls on CUDA cores: TF32 off, PyTorch's default (--precision tf32 allows it); "
            "fp32 convolutions in TF32 where the GPU has it (torch.backends.cudnn.allow_tf32 is True by default)"
        )
    inference = None
    if generate:
        inference = _inference(step, gpu, workload, by_phase, eff, weight_quant)
        assumptions.append(
            "decode loop costed as a CUDA-graph replay (vLLM / TensorRT-LLM / torch.compile); "
            "eager model.generate() is slower, bound by Python dispatch"
        )
    if quant != "none":
        assumptions.append(
            f"weight-only {quant}: 16-bit matmuls read {weight_bytes_factor(quant):.3g}× the weight bytes, "
            "compute unchanged"
        )
    return StepTime(
        total_s=total,
        compute_s=compute,
        memory_s=memory,
        overhead_s=overhead,
        by_phase_s=by_phase,
        flops=hw_flops,
        tflops_achieved=hw_flops / total / 1e12 if total > 0 else 0.0,
        mfu=mfu,
        assumptions=tuple(assumptions),
        model_flops=m_flops,
        peak_tflops=peak,
        compute_dtype=key,
        kernels=kernels,
        inference=inference,
        by_op_class_s=by_class,
        breakdown_s=acc.breakdown_s(),
        arch=eff.arch,
    )


def _inference(
    step: TracedStep,
    gpu: GPU,
    workload: Workload,
    by_phase: dict[str, float],
    eff: Efficiency,
    weight_quant: str,
) -> InferenceTime:
    prefill = by_phase.get("prefill", 0.0)
    decode = by_phase.get("decode", 0.0)
    steps = max(workload.new_tokens - 1, 0)
    per_token = decode / steps if steps else 0.0
    b = workload.batch_size
    kv_final = step.tensor_components.get("kv_cache", 0)
    prompt = workload.seq_len or 0
    total_len = prompt + workload.new_tokens
    # KV read by a decode step grows from the prompt to the full length: use the mean context.
    kv_mean = kv_final * (prompt + workload.new_tokens / 2) / total_len if total_len else 0
    # the weights as the memory total counts them (one layout: gpuplan.memory.weight_quant)
    weights = (step.param_bytes if weight_quant == "none"
               else quantize_weights(step.params_count, step.param_bytes, weight_quant).weight_bytes)
    per_step_bytes = int(weights + kv_mean)
    bound = b * gpu.memory_bandwidth_bytes_per_s / per_step_bytes if per_step_bytes else 0.0
    return InferenceTime(
        prefill_s=prefill,
        decode_s=decode,
        decode_steps=steps,
        decode_per_token_s=per_token,
        new_tokens_per_s=b * workload.new_tokens / (prefill + decode) if prefill + decode > 0 else 0.0,
        decode_tokens_per_s=b / per_token if per_token > 0 else 0.0,
        bytes_per_decode_step=per_step_bytes,
        bandwidth_bound_tokens_per_s=bound,
    )
