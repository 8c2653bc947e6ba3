"""``recommend``: every catalog GPU, the fewest of it that run the workload, ranked by speed and cost.

One trace per workload (per attention-kernel class: flash needs sm_80+, so pre-Ampere GPUs get their
own trace): memory does not depend on the GPU except the CUDA context and cuBLAS workspaces, which
are added per GPU exactly as ``estimate`` does. Time comes from the cost model on each GPU.

Layouts, the simplest that fits (the full planner is gpuplan.parallel's job):

* 1 GPU: the workload as given;
* N > 1 GPUs: data parallel with ZeRO-3 / FSDP-style sharding: parameters, gradients and optimizer
  state divided by N, activations and cache as on one GPU (each GPU runs the given batch), plus
  one block's parameters gathered unsharded. Per step each GPU all-gathers the parameters twice
  (forward, backward) and reduce-scatters the gradients, overlapped with compute (FSDP prefetch):
  step time = max(compute, communication). Inside a node (8 GPUs) the GPU's own link; beyond, a
  400 Gb/s network per GPU (50 GB/s, DGX-style) is assumed.

Counts tried: 1, 2, 4, 8, 16, ... up to ``max_gpus`` (and ``max_gpus`` itself).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.perf.roofline import NoRateError
from gpuplan.units import format_bytes

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.perf.summary import Throughput
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

GPUS_PER_NODE = 8
INTER_NODE_BYTES_PER_S = 50e9
COLLECTIVE_EFFICIENCY = 0.78
"""NCCL bus bandwidth reached on the link (prior: ~230 of 300 GB/s on DGX A100, nccl-tests)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: GPU
    count: int
    fits: bool
    reason: str
    layout: str = ""
    per_gpu_bytes: int = 0
    step_time_s: float | None = None
    throughput: Throughput | None = None
    """Whole job (all GPUs)."""
    cost_per_hour_usd: float | None = None
    cost_per_million_usd: float | None = None
    """$ per million tokens (or samples) at ``throughput``."""
    purchase_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu.id,
            "count": self.count,
            "tier": self.gpu.tier,
            "fits": self.fits,
            "reason": self.reason,
            "layout": self.layout,
            "per_gpu_bytes": self.per_gpu_bytes,
            "gpu_usable_memory_bytes": self.gpu.usable_memory_bytes,
            "step_time_s": self.step_time_s,
            "throughput": self.throughput,
            "cost_per_hour_usd": self.cost_per_hour_usd,
            "cost_per_million_usd": self.cost_per_million_usd,
            "purchase_usd": self.purchase_usd,
        }


@dataclass(frozen=True, slots=True)
class Recommendation:
    model: str
    workload: Workload
    max_gpus: int
    candidates_in: tuple[Candidate, ...]
    """Fitting candidates, fastest step first."""
    candidates_out: tuple[Candidate, ...]
    per_gpu_fixed_bytes: int
    """Model state on one GPU (parameters, gradients, optimizer state at the peak)."""
    per_gpu_batch_bytes: int
    trace_s: float
    traces: int
    assumptions: tuple[str, ...] = ()
    by_cost: tuple[Candidate, ...] = ()
    """Fitting candidates with a known price, cheapest per million tokens/samples first."""
    largest_gpu: str | None = None
    needed_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.candidates_in)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "workload": self.workload.to_dict(),
            "max_gpus": self.max_gpus,
            "recommendations": [c.to_dict() for c in self.candidates_in],
            "by_cost": [c.to_dict() for c in self.by_cost],
            "excluded": [c.to_dict() for c in self.candidates_out],
            "per_gpu_fixed_bytes": self.per_gpu_fixed_bytes,
            "per_gpu_batch_bytes": self.per_gpu_batch_bytes,
            "trace_s": self.trace_s,
            "traces": self.traces,
            "largest_gpu": self.largest_gpu,
            "needed_bytes": self.needed_bytes,
            "assumptions": list(self.assumptions),
        }

    def __str__(self) -> str:
        from gpuplan.report.advise import render_recommendation

        return render_recommendation(self)


def kernel_class(gpu: GPU, workload: Workload | None = None) -> tuple[int, int]:
    """The compute capability whose trace stands for ``gpu``: only the attention kernel choice
    depends on it (trace/cuda_semantics.py: flash from sm_80 in fp16/bf16, memory-efficient from
    sm_50). fp32 attention is memory-efficient on every class and eager/math attention is the same
    everywhere, so those workloads need one trace. GPUs without a compute capability (AMD, Intel,
    Apple) follow estimate's default, sm_90."""
    cc = gpu.compute_capability
    if cc is None or cc >= (8, 0):
        return (9, 0)
    if (
        workload is not None
        and (workload.attention in ("eager", "sdpa-math") or workload.precision in ("fp32", "tf32"))
        and cc >= (5, 0)
    ):
        return (9, 0)
    return (7, 0) if cc >= (5, 0) else (3, 0)


def counts_up_to(max_gpus: int) -> list[int]:
    out, n = [], 1
    while n < max_gpus:
        out.append(n)
        n *= 2
    out.append(max_gpus)
    return out


def _required_bytes(step: TracedStep, gpu: GPU, workload: Workload) -> tuple[int, int]:
    """(total required on one GPU, context + workspaces) — the arithmetic of estimate()."""
    from gpuplan.memory.overheads import overheads_for

    over = overheads_for(
        arch=gpu.arch,
        vendor=gpu.vendor,
        compute_capability=gpu.compute_capability or (9, 0),  # as estimate(): the real architecture
        trains=workload.trains,
        module_loading="lazy",
    )
    fixed = over.workspace_bytes + over.cuda_context_bytes
    return _tensor_need(step) + fixed, fixed


def _tensor_need(step: TracedStep) -> int:
    """What estimate() decides the fit on: the least the caching allocator needs for the step (it
    releases cached blocks under pressure), else the reserved peak (older traces)."""
    return int(getattr(step, "min_reserved_bytes", 0) or step.reserved_peak_bytes)


def _sharded_bytes(step: TracedStep) -> int:
    c = step.tensor_components
    return c.get("parameters", 0) + c.get("gradients", 0) + c.get("optimizer_state", 0)


def _gathered_block_bytes(step: TracedStep) -> int:
    layers = sum(step.block_counts.values()) or sum(step.traced_blocks.values()) or 1
    return 2 * step.param_bytes // max(layers, 1)  # current block + the prefetched next one


class _Sharding:
    """Per-GPU tensor bytes under ZeRO-3 / FSDP sharding over n GPUs, from the single-GPU trace.

    When the single-GPU peak is the optimizer step (foreach temporaries the size of the parameters
    on top of all model state), every tensor live there is model-state sized and sharded: that
    peak divides by n. The forward/backward peak is then unknown from that trace, so the same
    workload without the optimizer is traced once (lazily, only when n > 1 is needed) and its
    parameters and gradients, plus the optimizer state of the first trace, are divided by n."""

    def __init__(self, step: TracedStep, trace_without_optimizer: Any) -> None:
        self.step = step
        self._trace_fb = trace_without_optimizer
        self._fb: TracedStep | None = None
        self.traces = 0

    @property
    def optimizer_peak(self) -> bool:
        return self.step.peak_phase in ("optimizer", "zero_grad")

    def per_gpu_tensor_bytes(self, n: int) -> int:
        step = self.step
        if n == 1:
            return _tensor_need(step)
        if not self.optimizer_peak:
            sharded = _sharded_bytes(step)
            return _tensor_need(step) - sharded + -(-sharded // n)
        if self._fb is None:
            self._fb = self._trace_fb()
            self.traces += 1
        fb = self._fb
        c = fb.tensor_components
        states = c.get("parameters", 0) + c.get("gradients", 0)
        opt_state = step.tensor_components.get("optimizer_state", 0)
        at_fb = _tensor_need(fb) - states + -(-(states + opt_state) // n)
        at_opt = -(-_tensor_need(step) // n)
        return max(at_fb, at_opt)


def _link_bytes_per_s(gpu: GPU, count: int) -> float:
    """Collective bandwidth per GPU: the node's own link, and beyond one node the slower of that
    and the network (a ring crosses both; a PCIe-only node is not sped up by its NIC)."""
    intra = (gpu.intra_node_gb_per_s_per_direction or 0.0) * 1e9
    if count > GPUS_PER_NODE:
        intra = min(intra, INTER_NODE_BYTES_PER_S)
    return intra * COLLECTIVE_EFFICIENCY


def recommend(
    model: str | ModelSource,
    workload: Workload | None = None,
    *,
    max_gpus: int = 8,
    budget_usd: float | None = None,
    prices: dict[str, float] | None = None,
    gpus: list[GPU] | None = None,
) -> Recommendation:
    """Rank every catalog GPU (or ``gpus``) for ``workload``: see the module docstring."""
    from gpuplan.errors import ConfigError
    from gpuplan.hardware import all_gpus
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model
    from gpuplan.perf.summary import seq_len_of
    from gpuplan.trace.step import trace_step
    from gpuplan.workload import Workload as WorkloadType

    if max_gpus < 1 or max_gpus > 100_000:
        raise ConfigError(f"--max-gpus {max_gpus} is out of range: allowed 1..100000")
    if budget_usd is not None and budget_usd <= 0:
        raise ConfigError(f"--budget-usd {budget_usd} must be positive")
    source = model if isinstance(model, SourceType) else resolve_model(model)
    w = workload or WorkloadType()
    catalog = [g for g in (gpus if gpus is not None else all_gpus()) if not g.is_mig]
    prices = prices or {}
    t0 = time.perf_counter()
    seq = seq_len_of(source, w)
    traced_w, gen = _traced_workload(w, seq)
    steps: dict[tuple[int, int], TracedStep] = {}
    for cls in sorted({kernel_class(g, w) for g in catalog if _dtype_ok(g, w) is None}, reverse=True):
        steps[cls] = trace_step(source, traced_w, compute_capability=cls)
    trace_s = time.perf_counter() - t0
    shardings: dict[tuple[int, int], _Sharding] = {}
    task = str(getattr(source, "task", "custom"))
    ins: list[Candidate] = []
    outs: list[Candidate] = []
    for gpu in catalog:
        bad = _dtype_ok(gpu, w)
        if bad is not None:
            outs.append(Candidate(gpu, 0, False, bad))
            continue
        cls = kernel_class(gpu, w)
        step = steps[cls]
        if cls not in shardings:
            shardings[cls] = _Sharding(
                step, functools.partial(trace_step, source, traced_w.with_(optimizer="none"), compute_capability=cls)
            )
        timer = _Timer(w, traced_w, gen, task, seq)
        cand = _best_count(step, gpu, w, max_gpus, prices.get(gpu.id), timer, shardings[cls])
        if cand.fits and budget_usd is not None:
            cost = cand.cost_per_hour_usd if prices else cand.purchase_usd
            if cost is not None and cost > budget_usd:
                what = "$/hour" if prices else "purchase $"
                cand = Candidate(
                    gpu,
                    cand.count,
                    False,
                    f"over budget: {cost:,.2f} {what} > {budget_usd:,.2f}",
                    cand.layout,
                    cand.per_gpu_bytes,
                    cand.step_time_s,
                    cand.throughput,
                    cand.cost_per_hour_usd,
                    cand.cost_per_million_usd,
                    cand.purchase_usd,
                )
        (ins if cand.fits else outs).append(cand)
    ins.sort(key=lambda c: (c.step_time_s or float("inf"), c.count, c.gpu.id))
    outs.sort(key=lambda c: -c.gpu.usable_memory_bytes)
    by_cost = tuple(
        sorted(
            (c for c in ins if c.cost_per_million_usd is not None),
            key=lambda c: (c.cost_per_million_usd or 0.0, c.step_time_s or 0.0),
        )
    )
    any_step = next(iter(steps.values()), None)
    fixed = _sharded_bytes(any_step) if any_step else 0
    batch_bytes = (_tensor_need(any_step) - fixed) if any_step else 0
    largest = needed = None
    # the largest GPU that could have run it: right dtype, and a peer link when sharding was allowed
    usable_out = [c for c in outs if c.per_gpu_bytes > 0]
    shardable = [c for c in usable_out if max_gpus == 1 or c.gpu.intra_node_gb_per_s_per_direction]
    if not ins and (shardable or usable_out):
        big_out = max(shardable or usable_out, key=lambda c: c.gpu.usable_memory_bytes)
        largest = big_out.gpu.id
        needed = big_out.per_gpu_bytes
    notes = [
        "one trace per attention-kernel class (sm_80+ / older); memory per GPU = traced peak + that GPU's "
        "CUDA context and cuBLAS workspaces",
        "N > 1: data parallel, ZeRO-3/FSDP sharding of parameters, gradients and optimizer state; "
        "each GPU runs the given batch; communication overlapped with compute; "
        ">8 GPUs: 50 GB/s network per GPU",
        *(
            [
                f"generate: traced with {DECODE_STEPS_TRACED} decode steps; the KV cache of the other new "
                "tokens is added to the memory and the decode time scaled to all new tokens"
            ]
            if gen
            else []
        ),
        "ranked by step time (fewest GPUs that fit, per GPU model)"
        + ("; cost from --prices ($/hour)" if prices else "; no --prices: cost columns empty"),
    ]
    if any_step is not None:
        from gpuplan.perf.efficiency import DEFAULT_EFFICIENCY

        notes.extend(DEFAULT_EFFICIENCY.describe())
    return Recommendation(
        model=source.name,
        workload=w,
        max_gpus=max_gpus,
        candidates_in=tuple(ins),
        candidates_out=tuple(outs),
        per_gpu_fixed_bytes=fixed,
        per_gpu_batch_bytes=batch_bytes,
        trace_s=trace_s,
        traces=len(steps) + sum(sh.traces for sh in shardings.values()),
        assumptions=tuple(notes),
        by_cost=by_cost,
        largest_gpu=largest,
        needed_bytes=needed,
    )


def _dtype_ok(gpu: GPU, w: Workload) -> str | None:
    if w.precision in ("amp-bf16", "bf16") and not gpu.has_bf16:
        return "no bfloat16 support (use --precision amp-fp16)"
    return None


DECODE_STEPS_TRACED = 8


def _traced_workload(w: Workload, seq: int | None) -> tuple[Workload, tuple[float, float] | None]:
    """Generation is traced with DECODE_STEPS_TRACED decode steps (the prompt unchanged); the time
    scales that restore the requested number of new tokens are returned alongside, and the KV cache
    of the untraced tokens is added to the memory (``_Timer.extra_bytes``)."""
    if w.mode != "generate" or w.new_tokens <= DECODE_STEPS_TRACED or not seq:
        return w, None
    traced = w.with_(new_tokens=DECODE_STEPS_TRACED)
    return traced, (1.0, (w.new_tokens - 1) / (DECODE_STEPS_TRACED - 1))


@dataclass(frozen=True, slots=True)
class _Timer:
    workload: Workload
    traced: Workload
    gen_scale: tuple[float, float] | None
    task: str
    seq: int | None

    def extra_bytes(self, step: TracedStep) -> int:
        """KV cache of the new tokens the trace did not run (an upper bound on the peak's growth:
        exact when the peak is the last decode step, as it is once the cache dominates)."""
        if self.gen_scale is None or not self.seq:
            return 0
        per_token = step.tensor_components.get("kv_cache", 0) / self.seq
        return int(per_token * (self.workload.new_tokens - self.traced.new_tokens))

    def __call__(self, step: TracedStep, gpu: GPU) -> tuple[float, Throughput]:
        """(step time on one GPU, its throughput) for the requested workload."""
        from gpuplan.perf.step_time import step_time
        from gpuplan.perf.summary import throughput_of

        st = step_time(step, gpu, self.traced)
        if self.gen_scale is None:
            return st.total_s, throughput_of(st, self.workload, task=self.task, seq_len=self.seq)
        prefill = st.by_phase_s.get("prefill", 0.0) * self.gen_scale[0]
        decode = st.by_phase_s.get("decode", 0.0) * self.gen_scale[1]
        total = prefill + decode
        w = self.workload
        return total, {"value": w.batch_size * w.new_tokens / total if total else 0.0, "unit": "tokens/s"}


def _best_count(
    step: TracedStep,
    gpu: GPU,
    w: Workload,
    max_gpus: int,
    price_per_hour: float | None,
    timer: _Timer,
    sharding: _Sharding,
) -> Candidate:
    single, fixed = _required_bytes(step, gpu, w)
    extra = timer.extra_bytes(step)
    single += extra
    usable = gpu.usable_memory_bytes
    need = single
    for n in counts_up_to(max_gpus):
        if n == 1:
            need = single
        else:
            if gpu.intra_node_gb_per_s_per_direction is None:
                break  # no peer-to-peer link (Apple SoCs): single device only
            need = sharding.per_gpu_tensor_bytes(n) + fixed + extra + _gathered_block_bytes(step)
        if need <= usable:
            try:
                one_s, one = timer(step, gpu)
            except NoRateError as exc:
                return Candidate(gpu, n, False, str(exc).replace(f"{gpu.id} has", "has"), per_gpu_bytes=need)
            comm = 0.0
            if n > 1:
                param_bytes = step.param_bytes
                volume = 3 * (n - 1) / n * param_bytes
                link = _link_bytes_per_s(gpu, n)
                comm = volume / link if link else float("inf")
            t = max(one_s, comm)
            tp: Throughput = {"value": one["value"] * n * one_s / t, "unit": one["unit"]}
            cost_h = price_per_hour * n if price_per_hour is not None else None
            per_m = cost_h / (tp["value"] * 3600) * 1e6 if cost_h is not None and tp["value"] > 0 else None
            layout = "single GPU" if n == 1 else f"ZeRO-3 × {n}"
            purchase = gpu.launch_price_usd * n if gpu.launch_price_usd else None
            reason = f"needs {format_bytes(need)} per GPU, has {format_bytes(usable)}"
            return Candidate(gpu, n, True, reason, layout, need, t, tp, cost_h, per_m, purchase)
    where = f" even sharded over {max_gpus}" if max_gpus > 1 and gpu.intra_node_gb_per_s_per_direction else ""
    return Candidate(
        gpu,
        max_gpus if where else 1,
        False,
        f"needs {format_bytes(need)}{where}, has {format_bytes(usable)}",
        per_gpu_bytes=need,
    )
