"""The timing fields of an Estimate: step time, throughput {value, unit}, MFU, and for generation
the prefill/decode split with the bandwidth bound, all from one ``step_time`` call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.perf.roofline import NoRateError, weight_bytes_factor
from gpuplan.perf.step_time import StepTime, step_time
from gpuplan.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

# Tasks whose throughput is counted in tokens (the rest in samples).
TOKEN_TASKS: frozenset[str] = frozenset({"causal-lm", "masked-lm", "seq2seq-lm"})


@dataclass(frozen=True, slots=True)
class TimeSummary:
    step_time_s: float | None
    """None when the catalog has no rate to time the step with (the reason is in ``assumptions``)."""
    throughput: dict[str, Any] | None
    mfu: float | None
    assumptions: tuple[str, ...]
    json: dict[str, Any] = field(default_factory=dict)
    time: StepTime | None = None


def throughput_of(st: StepTime, workload: Workload, *, task: str, seq_len: int | None) -> dict[str, Any]:
    """tokens/s for language models (generate: new tokens/s), samples/s otherwise."""
    w = workload
    if w.mode == "generate" and st.inference is not None:
        return {"value": st.inference.new_tokens_per_s, "unit": "tokens/s"}
    samples = w.batch_size * w.grad_accum
    if task in TOKEN_TASKS and seq_len:
        return {"value": samples * seq_len / st.total_s, "unit": "tokens/s"}
    return {"value": samples / st.total_s, "unit": "samples/s"}


def summarize(
    step: TracedStep,
    gpu: GPU,
    workload: Workload,
    *,
    task: str,
    seq_len: int | None,
    weight_quant: str = "none",
) -> TimeSummary:
    try:
        st = step_time(step, gpu, workload, weight_quant=weight_quant)
    except NoRateError as exc:
        return TimeSummary(step_time_s=None, throughput=None, mfu=None, assumptions=(f"no step time: {exc}",))
    tp = throughput_of(st, workload, task=task, seq_len=seq_len)
    out: dict[str, Any] = {
        "time": {
            "compute_s": st.compute_s,
            "memory_s": st.memory_s,
            "overhead_s": st.overhead_s,
            "by_phase_s": st.by_phase_s,
            "kernels": st.kernels,
            "model_flops": st.model_flops,
            "tflops_achieved": st.tflops_achieved,
            "peak_tflops": st.peak_tflops,
            "compute_dtype": st.compute_dtype,
        },
        "samples_per_s": workload.batch_size * workload.grad_accum / st.total_s if st.total_s else 0.0,
    }
    if seq_len and st.total_s:
        out["tokens_per_s"] = workload.batch_size * workload.grad_accum * seq_len / st.total_s
    notes = list(st.assumptions)
    if weight_quant != "none":
        # Weight-only quantization keeps every other tensor as traced; the weights shrink by the
        # factor (embeddings included: an upper bound on the saving, GPTQ/AWQ keep them 16-bit).
        saved = int(step.param_bytes * (1.0 - weight_bytes_factor(weight_quant)))
        out["weight_quant"] = {
            "scheme": weight_quant,
            "weight_bytes": step.param_bytes - saved,
            "memory_saved_bytes": saved,
        }
        notes.append(
            f"weight-only {weight_quant}: weights would take {format_bytes(step.param_bytes - saved)} "
            f"instead of {format_bytes(step.param_bytes)} (up to {format_bytes(saved)} less; "
            "not subtracted from the memory totals, which are traced with 16-bit weights)"
        )
    inf = st.inference
    if inf is not None:
        out["generation"] = {
            "ttft_s": inf.ttft_s,
            "prefill_s": inf.prefill_s,
            "decode_per_token_s": inf.decode_per_token_s,
            "decode_tokens_per_s": inf.decode_tokens_per_s,
            "new_tokens_per_s": inf.new_tokens_per_s,
            "bytes_per_decode_step": inf.bytes_per_decode_step,
            "bandwidth_bound_tokens_per_s": inf.bandwidth_bound_tokens_per_s,
            "fraction_of_bandwidth_bound": inf.fraction_of_bound,
            "weight_quant": weight_quant,
        }
        notes.insert(
            0,
            (
                f"generation: time to first token {format_seconds(inf.ttft_s)}, decode "
                f"{format_seconds(inf.decode_per_token_s)}/step = {inf.decode_tokens_per_s:,.1f} tokens/s; "
                f"bandwidth bound {inf.bandwidth_bound_tokens_per_s:,.1f} tokens/s "
                f"({gpu.memory_bandwidth_gb_per_s:,.0f} GB/s ÷ {inf.bytes_per_decode_step / 1e9:.2f} GB read "
                "per step "
                f"× batch {workload.batch_size}) — {inf.fraction_of_bound:.0%} of the bound"
            ),
        )
    return TimeSummary(
        step_time_s=st.total_s, throughput=tp, mfu=st.mfu, assumptions=tuple(notes), json=out, time=st
    )


def seq_len_of(source: Any, workload: Workload) -> int | None:
    """Tokens per sample the trace used: the workload's, else the model's default (HF configs)."""
    if workload.seq_len:
        return workload.seq_len
    default = getattr(source, "default_seq_len", None)
    if callable(default) and getattr(source, "task", "") in TOKEN_TASKS | {"sequence-classification"}:
        value = default()
        return int(value) if value else None
    return None


def summarize_source(
    source: Any, step: TracedStep, gpu: GPU, workload: Workload, *, weight_quant: str = "none"
) -> TimeSummary:
    """:func:`summarize` with the task and sequence length read from a ModelSource."""
    return summarize(
        step,
        gpu,
        workload,
        task=str(getattr(source, "task", "custom")),
        seq_len=seq_len_of(source, workload),
        weight_quant=weight_quant,
    )
