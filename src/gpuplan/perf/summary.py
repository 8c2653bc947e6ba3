"""The timing of an Estimate: step time, its split, throughput {value, unit}, MFU and, for
generation, the prefill/decode split with the bandwidth bound — all from one ``step_time`` call, so
no number of a result can disagree with another."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from gpuplan.perf.efficiency import generation_key
from gpuplan.perf.step_time import InferenceTime, StepTime, step_time
from gpuplan.perf.workload_family import TimeInterval, time_interval, workload_family
from gpuplan.units import format_decimal_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

# Tasks whose throughput is counted in tokens (the rest in samples).
TOKEN_TASKS: frozenset[str] = frozenset({"causal-lm", "masked-lm", "seq2seq-lm"})

ThroughputUnit = Literal["tokens/s", "samples/s"]


class Throughput(TypedDict):
    """Throughput as the JSON contract writes it: ``{"value": ..., "unit": "tokens/s" | "samples/s"}``."""

    value: float
    unit: ThroughputUnit


@dataclass(frozen=True, slots=True)
class Timing:
    """Every time figure of one result, derived from one :class:`StepTime`."""

    time: StepTime
    throughput: Throughput
    samples_per_s: float
    tokens_per_s: float | None
    """Tokens of the step per second (training/inference with a sequence length), else None."""
    weight_quant: str = "none"
    interval: TimeInterval | None = None
    """80% prediction interval of ``step_time_s`` (perf/workload_family.py)."""
    ttft_interval: TimeInterval | None = None
    """Generation: 80% interval of the time to first token."""

    @property
    def step_time_s(self) -> float:
        return self.time.total_s

    @property
    def mfu(self) -> float:
        return self.time.mfu

    @property
    def generation(self) -> InferenceTime | None:
        return self.time.inference

    def notes(self, gpu: GPU, batch_size: int) -> tuple[str, ...]:
        """The assumptions behind these figures, the generation split first."""
        inf = self.time.inference
        if inf is None:
            return self.time.assumptions
        split = (f"generation: time to first token {format_seconds(inf.ttft_s)}, decode "
                 f"{format_seconds(inf.decode_per_token_s)}/step = {inf.decode_tokens_per_s:,.1f} tokens/s; "
                 f"bandwidth bound {inf.bandwidth_bound_tokens_per_s:,.1f} tokens/s "
                 f"({gpu.memory_bandwidth_gb_per_s:,.0f} GB/s ÷ "
                 f"{format_decimal_bytes(inf.bytes_per_decode_step)} read per step "
                 f"× batch {batch_size}) — {inf.fraction_of_bound:.0%} of the bound")
        return (split, *self.time.assumptions)


def throughput_of(st: StepTime, workload: Workload, *, task: str, seq_len: int | None) -> Throughput:
    """tokens/s for language models (generate: new tokens/s), samples/s otherwise."""
    w = workload
    if w.mode == "generate" and st.inference is not None:
        return {"value": st.inference.new_tokens_per_s, "unit": "tokens/s"}
    samples = w.batch_size * w.grad_accum
    if task in TOKEN_TASKS and seq_len:
        return {"value": samples * seq_len / st.total_s, "unit": "tokens/s"}
    return {"value": samples / st.total_s, "unit": "samples/s"}


def timing_of(st: StepTime, workload: Workload, *, task: str, seq_len: int | None,
              weight_quant: str = "none") -> Timing:
    samples = workload.batch_size * workload.grad_accum
    return Timing(
        time=st,
        throughput=throughput_of(st, workload, task=task, seq_len=seq_len),
        samples_per_s=samples / st.total_s if st.total_s else 0.0,
        tokens_per_s=samples * seq_len / st.total_s if seq_len and st.total_s else None,
        weight_quant=weight_quant,
    )


def summarize(
    step: TracedStep,
    gpu: GPU,
    workload: Workload,
    *,
    task: str,
    seq_len: int | None,
    weight_quant: str = "none",
    time_factor: float = 1.0,
) -> Timing:
    """The timing of ``step`` on ``gpu``; raises :class:`gpuplan.perf.roofline.NoRateError` when the
    catalog has no rate to time it with. ``time_factor``: a calibration (see ``step_time``)."""
    st = step_time(step, gpu, workload, weight_quant=weight_quant, time_factor=time_factor)
    timing = timing_of(st, workload, task=task, seq_len=seq_len, weight_quant=weight_quant)
    family = workload_family(task, workload.mode, 1, step.ops)
    ttft = st.inference.ttft_s if st.inference is not None else None
    return replace(timing, interval=time_interval(st.total_s, family, generation_key(gpu)),
                   ttft_interval=time_interval(ttft, family, generation_key(gpu)))


def seq_len_of(source: Any, workload: Workload) -> int | None:
    """Tokens per sample the trace used: the workload's, else the model's default (HF configs)."""
    if workload.seq_len:
        return workload.seq_len
    rule = getattr(source, "seq_len", None)  # the source's own rule: the one the trace used
    if callable(rule) and getattr(source, "task", "") in TOKEN_TASKS | {"sequence-classification"}:
        value = rule(workload)
        return int(value) if value else None
    return None


def summarize_source(source: Any, step: TracedStep, gpu: GPU, workload: Workload, *, weight_quant: str = "none",
                     time_factor: float = 1.0) -> Timing:
    """:func:`summarize` with the task and sequence length read from a ModelSource."""
    return summarize(step, gpu, workload, task=str(getattr(source, "task", "custom")),
                     seq_len=seq_len_of(source, workload), weight_quant=weight_quant, time_factor=time_factor)
