"""Which public-benchmark family a workload's time belongs to, and its 80% interval as results carry it.

The interval itself is :func:`gpuplan.perf.uncertainty.interval` (the cross-validated residuals of the
family × GPU generation); this module decides the family once for every verb (estimate, fit, plan,
recommend, serve) and wraps the answer in the one type the results and the text print. Torch-free.

The kind comes from what the step runs, then from the model's task:

* ``cnn``: convolutions carry most of the step's tensor-core FLOPs (ResNet, ConvNeXt, UNets);
* ``vit``: an image model whose FLOPs are matmuls and attention;
* ``encoder``: masked-LM and sequence-classification transformers (BERT and kin);
* ``llm``: causal and seq2seq language models, and any other transformer (the residuals' largest
  family, the least surprising default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.perf.uncertainty import family_key, interval
from gpuplan.units import format_seconds

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpuplan.trace.records import OpRecord

KINDS: tuple[str, ...] = ("cnn", "vit", "encoder", "llm")
CONV_SHARE_CNN = 0.5
"""Share of the step's matmul + conv + attention FLOPs above which the workload is a CNN."""
_ENCODER_TASKS = frozenset({"masked-lm", "sequence-classification"})
_IMAGE_TASKS = frozenset({"image-classification"})


def conv_share(ops: Iterable[OpRecord]) -> float:
    """Convolution FLOPs ÷ all tensor-core-class FLOPs of the step (0 when it has none)."""
    conv = tensor = 0.0
    for op in ops:
        if op.op_class in ("matmul", "conv", "attention"):
            flops = float(op.flops) * op.count
            tensor += flops
            if op.op_class == "conv":
                conv += flops
    return conv / tensor if tensor > 0 else 0.0


def workload_kind(task: str, ops: Iterable[OpRecord] | None = None) -> str:
    """``cnn`` | ``vit`` | ``encoder`` | ``llm`` (module docstring), from the traced ops when given."""
    if ops is not None and conv_share(ops) >= CONV_SHARE_CNN:
        return "cnn"
    if task in _IMAGE_TASKS:
        return "vit"
    if task in _ENCODER_TASKS:
        return "encoder"
    return "llm"


def workload_family(task: str, mode: str, gpus: int = 1, ops: Iterable[OpRecord] | None = None) -> str:
    """The residuals' family key (perf/uncertainty.FAMILIES) of a workload."""
    return family_key(workload_kind(task, ops), mode, gpus)


@dataclass(frozen=True, slots=True)
class TimeInterval:
    """The 80% prediction interval of one modelled time."""

    low_s: float
    high_s: float
    basis: str
    """Which public rows it comes from (generation, family, count; pooled where thin)."""
    family: str
    arch: str

    def to_list(self) -> list[float]:
        """``[low, high]``: the JSON ``*_interval_s`` value."""
        return [self.low_s, self.high_s]

    def span(self) -> str:
        """``181.0 ms–262.0 ms``."""
        return f"{format_seconds(self.low_s)}–{format_seconds(self.high_s)}"

    def describe(self) -> str:
        """``80%: 181.0 ms–262.0 ms, Ada, CNN training rows (n=12)``: the text's parenthesis."""
        return f"80%: {self.span()}, {self.basis}"

    def of(self, time_s: float | None) -> TimeInterval | None:
        """The interval of another time of the same workload family on the same GPU."""
        return time_interval(time_s, self.family, self.arch)


def rate_interval(rate: float, family: str, arch: str, *, cap: float | None = None) -> tuple[float, float] | None:
    """The 80% interval of a rate that is work over modelled times of ``family`` (tokens/s, requests/s): the
    times' interval inverted (the rate is low where the times run long; the interval is multiplicative, so
    one ratio holds for every time of the family). ``cap``: a ceiling the rate is held at (an asked request
    rate the capacity exceeds): the interval is capped alike."""
    iv = time_interval(1.0, family, arch)
    if iv is None or not rate > 0:
        return None
    low, high = rate / iv.high_s, rate / iv.low_s
    return (low, high) if cap is None else (min(low, cap), min(high, cap))


def time_interval(time_s: float | None, family: str, arch: str) -> TimeInterval | None:
    """The interval of ``time_s`` (None when there is no time: a GPU without a rate)."""
    if time_s is None or not time_s > 0:
        return None
    low, high, basis = interval(time_s, family, arch)
    return TimeInterval(low, high, basis, family, arch)
