"""llama.cpp speed per ggml type: decode (``tg``) and prefill (``pp``) rates fitted on public llama-bench rows.

The rows (``serve/data/llama_bench.csv``: GPU / chip, backend, file type, ``pp512`` and ``tg128`` t/s,
build and source URL) come from llama.cpp's own scoreboards (discussions #4167 Apple Metal, #15013 CUDA,
#10879 Vulkan) and llama-bench tables in its pull requests. Two rules, each with one fitted number per
backend and ggml type:

* **decode** reads every weight and the context's KV once per token (serve/llamacpp.py ``place``); a tensor
  of type ``T`` streams at ``datasheet bandwidth × f[backend][T]``, the fraction its matrix-vector kernel
  reaches (dequantization costs the low-bit types more of it). ``f`` is the median over the backend's
  GPUs of ``measured tg128 × bytes read per token / datasheet bandwidth`` for files of that type; a type
  without rows takes the median of the backend's quantized types, F32/BF16 the F16 value. Host-resident
  bytes are read at ``--host-memory-bandwidth`` (already a sustained figure) with no factor.
* **prefill** is compute-bound GEMM work: ``2 × weights × tokens`` FLOPs (the experts a token uses; the
  output layer only for the last token, as llama-bench asks for one logit) plus causal attention
  ``2 × n_layer × tokens² × n_embd``, at the catalog rate of the kernel llama.cpp picks, × ``e[backend][T]``.
  CUDA: quantized types run MMQ (``ggml_cuda_should_use_mmq`` in ``ggml/src/ggml-cuda/ggml-cuda.cu``,
  ggml-org/llama.cpp: always on GPUs with int8 MMA, Turing and newer) on int8 data (the activations are
  quantized to q8_1), so the catalog's ``int8_tops``; F16/BF16/F32 go to cuBLAS with FP16 accumulation
  (``fp16_fp16acc_tflops``, else ``fp16_tflops``). Vulkan
  (cooperative-matrix f16 shaders) runs every type at ``fp16_tflops``. Metal: Apple publishes no GPU rate,
  so prefill is not modelled there. With layers on the CPU, llama.cpp copies their weights to the GPU for
  every micro-batch (op offload, ggml-org/llama.cpp PR #6083): that copy over the host link is added.

80% intervals: the 10th and 90th percentiles of ``measured / modelled`` over leave-one-GPU-out fits (each
GPU's rows predicted by factors fitted without that GPU), per backend; scripts/accuracy_local.py prints
the residual tables (docs/accuracy-serving.md).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

import numpy as np

from gpuplan.models.gguf_mix import BASE_TYPE

if TYPE_CHECKING:
    from gpuplan.hardware.gpu import GPU
    from gpuplan.models.gguf import GGUFTensor


class LocalModel(Protocol):
    """What the prefill rule reads of serve/llamacpp.py's ``LocalModel`` (this module sits below it)."""

    @property
    def tensors(self) -> tuple[GGUFTensor, ...]: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_expert(self) -> int: ...
    @property
    def n_expert_used(self) -> int: ...


class Placement(Protocol):
    """What the speed rules read of serve/llamacpp.py's ``Placement``."""

    @property
    def read_by_type(self) -> tuple[tuple[tuple[str, int], ...], ...]: ...
    @property
    def host_read_by_type(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def host_weights_bytes(self) -> int: ...


BENCH_FILE: Final = Path(__file__).resolve().parent / "data" / "llama_bench.csv"
BENCH_MODELS: Final = {"llama 7B": "llama-2-7b", "codellama 7B": "llama-2-7b", "llama 3B": "llama-3.2-3b"}
"""The catalog config of each model a row ran (LLaMA 1/2 7B and CodeLlama 7B share their layers)."""
BENCH_PROMPT_TOKENS: Final = 512
BENCH_DECODE_CONTEXT: Final = 128
_UNQUANTIZED: Final = ("F32", "F16", "BF16")
_BACKEND_OF_VENDOR: Final = {"nvidia": "cuda", "apple": "metal", "amd": "vulkan"}
"""The llama.cpp backend whose rows a vendor's GPU is predicted from. AMD: the public AMD rows are Vulkan
(discussion #10879); ROCm builds are not among the rows."""
INTERVAL_QUANTILES: Final = (10.0, 90.0)
MIN_INTERVAL_ROWS: Final = 5


def backend_for(vendor: str) -> str | None:
    return _BACKEND_OF_VENDOR.get(vendor.lower())


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One public llama-bench result (a ``llama 7B`` file of one type, all layers on the GPU)."""

    id: str
    backend: str
    model: str
    """The catalog model (``BENCH_MODELS``)."""
    gpu_label: str
    gpu: str | None
    bandwidth_bytes_per_s: float
    gguf_type: str
    pp512_t_s: float | None
    tg128_t_s: float | None
    source_url: str


def load_rows(path: Path = BENCH_FILE) -> tuple[BenchRow, ...]:
    """The rows usable for a fit: not excluded, with a bandwidth (the catalog's, else the row source's)."""
    from gpuplan.hardware import get_gpu

    out = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["exclude_reason"]:
                continue
            gpu = r["gpu"] or None
            bw = get_gpu(gpu).memory_bandwidth_bytes_per_s if gpu else float(r["bandwidth_gb_per_s"]) * 1e9
            out.append(
                BenchRow(
                    r["id"],
                    r["backend"],
                    BENCH_MODELS[r["model"]],
                    r["gpu_label"],
                    gpu,
                    bw,
                    r["gguf_type"],
                    float(r["pp512_t_s"]) if r["pp512_t_s"] else None,
                    float(r["tg128_t_s"]) if r["tg128_t_s"] else None,
                    r["source_url"],
                )
            )
    return tuple(out)


def group_of(row: BenchRow) -> str:
    """The GPU a leave-one-out fold holds out: the chip, all its core counts and backends together."""
    label = row.gpu_label.split(" (")[0]
    return row.gpu or label


# ------------------------------------------------------------------------------------------ decode ----


def _one(_t: str) -> float:
    return 1.0


def decode_seconds(
    p: Placement,
    gpu_bw: float,
    host_bw: float,
    factor: Callable[[str], float] = _one,
    host_factor: Callable[[str], float] = _one,
) -> float:
    """Seconds per token of one sequence: each GPU's bytes of type ``T`` at ``gpu_bw × factor(T)``, the
    host's at ``host_bw × host_factor(T)`` (1 for a discrete GPU's host: ``--host-memory-bandwidth`` is a
    sustained figure; the GPU's factors on unified memory, where the CPU reads the same memory)."""
    gpu_s = sum(b / (gpu_bw * factor(t)) for per_gpu in p.read_by_type for t, b in per_gpu)
    overhead_s = factor.overhead_s if isinstance(factor, TypeFactors) else 0.0
    return gpu_s + sum(b / (host_bw * host_factor(t)) for t, b in p.host_read_by_type) + overhead_s


@dataclass(frozen=True, slots=True)
class TypeFactors:
    """Fitted fractions of one backend, by ggml type."""

    backend: str
    by_type: Mapping[str, float]
    overhead_s: float = 0.0
    """Decode: a fixed time per token (kernel launches, synchronisation), whatever the placement."""

    def __call__(self, ggml_type: str) -> float:
        t = ggml_type.upper()
        if t in self.by_type:
            return self.by_type[t]
        if t in _UNQUANTIZED and "F16" in self.by_type:
            return self.by_type["F16"]
        quantized = [v for k, v in self.by_type.items() if k not in _UNQUANTIZED]
        pool = quantized or list(self.by_type.values())
        return statistics.median(pool) if pool else 1.0


Bench = Callable[[str, str], "tuple[LocalModel, Placement]"]
"""A catalog model as a file type, all layers on the GPU at the bench context: (model, placement). Passed in
by serve/llamacpp.py, which owns the placement rule (this module stays below it)."""


def _fit_decode(rows: Iterable[BenchRow], backend: str, bench: Bench) -> TypeFactors:
    """Least squares on ``measured s/token = Σ_T bytes_T / (bandwidth × f_T) + overhead`` in relative error
    (each row's file read at its base type's fraction), ``0 < f_T ≤ 1`` and the overhead ≥ 0."""
    mine = [r for r in rows if r.backend == backend and r.tg128_t_s is not None]
    types = sorted({BASE_TYPE[r.gguf_type] for r in mine})
    if not mine:
        return TypeFactors(backend, {})
    a = np.zeros((len(mine), len(types) + 1))
    for i, r in enumerate(mine):
        unit_s = decode_seconds(bench(r.model, r.gguf_type)[1], r.bandwidth_bytes_per_s, r.bandwidth_bytes_per_s)
        measured_s = 1.0 / (r.tg128_t_s or 1.0)
        a[i, types.index(BASE_TYPE[r.gguf_type])] = unit_s / measured_s
        a[i, -1] = 1.0 / measured_s
    # unknowns 1/f_T = 1 + y_T (no kernel beats the datasheet bandwidth) and the overhead, y and overhead ≥ 0
    y = _nonnegative_lstsq(a, np.ones(len(mine)) - a[:, :-1].sum(axis=1))
    x = np.concatenate([1.0 + y[:-1], y[-1:]])
    by_type = {t: float(1.0 / x[j]) for j, t in enumerate(types)}
    return TypeFactors(backend, by_type, float(x[-1]))


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every unknown ≥ 0 (active set: pin the most negative at 0 and refit)."""
    free = list(range(a.shape[1]))
    while True:
        x = np.zeros(a.shape[1])
        sol, *_ = np.linalg.lstsq(a[:, free], b, rcond=None)
        x[free] = sol
        if (sol >= 0).all():
            return x
        free.pop(int(np.argmin(sol)))


def predict_decode(row: BenchRow, factors: TypeFactors, bench: Bench) -> float:
    p = bench(row.model, row.gguf_type)[1]
    return 1.0 / decode_seconds(p, row.bandwidth_bytes_per_s, row.bandwidth_bytes_per_s, factors)


# ----------------------------------------------------------------------------------------- prefill ----


def kernel_rate_flops(card: GPU, backend: str, ggml_type: str) -> float | None:
    """Peak FLOP/s of the GEMM llama.cpp runs for a weight of ``ggml_type`` (module docstring); None when
    the catalog has no such rate (Apple; a GPU without int8 tensor rates)."""
    if backend == "cuda":
        # cuBLAS runs F16 GEMMs with FP16 accumulation (CUBLAS_COMPUTE_16F): the fp16-accumulate rate where
        # the catalog has one (GeForce cards halve FP32 accumulation)
        unq = card.fp16_fp16acc_tflops or card.fp16_tflops
        tops = unq if ggml_type.upper() in _UNQUANTIZED else card.int8_tops
    elif backend == "vulkan":
        tops = card.fp16_tflops
    else:
        tops = None
    return tops * 1e12 if tops else None


def prefill_seconds(
    m: LocalModel,
    p: Placement,
    tokens: int,
    rate: Callable[[str], float | None],
    host_link_s: Callable[[float], float],
) -> float | None:
    """Seconds for ``tokens`` prompt tokens in one micro-batch: every weight's GEMM at ``rate(type)``
    (already × the fitted efficiency), causal attention at the F16 rate, the CPU-resident matmul weights'
    copy to the GPU; None when a rate is unknown."""
    share = (m.n_expert_used / m.n_expert) if m.n_expert else 1.0
    seconds = 0.0
    for t in m.tensors:
        if len(t.shape) < 2 or t.name == "token_embd.weight":
            continue  # norms and the embedding lookup are not GEMMs
        rows = 1 if t.name == "output.weight" else tokens  # llama-bench asks for the last token's logits
        flops = 2 * t.elements * (share if "_exps" in t.name else 1.0) * rows
        r = rate(t.type_name)
        if r is None:
            return None
        seconds += flops / r
    attn_rate = rate("F16")
    if attn_rate is None:
        return None
    seconds += 2 * m.n_layer * tokens * tokens * m.n_embd / attn_rate
    host_matmul_bytes = p.host_weights_bytes - next((t.nbytes for t in m.tensors if t.name == "token_embd.weight"), 0)
    return seconds + (host_link_s(host_matmul_bytes) if host_matmul_bytes > 0 else 0.0)


def _pp_unit_seconds(row: BenchRow, card: GPU, bench: Bench) -> float | None:
    """The row's prefill seconds at the peak rates (efficiency 1)."""
    return prefill_seconds(
        *bench(row.model, row.gguf_type),
        BENCH_PROMPT_TOKENS,
        lambda t: kernel_rate_flops(card, row.backend, t),
        lambda _b: 0.0,
    )


def _pp_rows(rows: Iterable[BenchRow], backend: str, bench: Bench) -> list[tuple[BenchRow, float]]:
    from gpuplan.hardware import get_gpu

    out = []
    for r in rows:
        if r.backend != backend or r.pp512_t_s is None or r.gpu is None:
            continue
        unit = _pp_unit_seconds(r, get_gpu(r.gpu), bench)
        if unit is not None:
            out.append((r, unit))
    return out


def _fit_prefill(rows: Iterable[BenchRow], backend: str, bench: Bench) -> TypeFactors:
    by_type: dict[str, list[float]] = {}
    for r, unit in _pp_rows(rows, backend, bench):
        # measured seconds = unit / e  →  e = unit × measured t/s / tokens
        by_type.setdefault(BASE_TYPE[r.gguf_type], []).append(unit * (r.pp512_t_s or 0.0) / BENCH_PROMPT_TOKENS)
    return TypeFactors(backend, {t: statistics.median(v) for t, v in sorted(by_type.items())})


def predict_prefill(row: BenchRow, factors: TypeFactors, bench: Bench) -> float | None:
    from gpuplan.hardware import get_gpu

    if row.gpu is None:
        return None
    card = get_gpu(row.gpu)

    def rate(t: str) -> float | None:
        peak = kernel_rate_flops(card, row.backend, t)
        return None if peak is None else peak * factors(t)

    s = prefill_seconds(*bench(row.model, row.gguf_type), BENCH_PROMPT_TOKENS, rate, lambda _b: 0.0)
    return None if s is None else BENCH_PROMPT_TOKENS / s


# ------------------------------------------------------------------------------ leave one GPU out ----


@dataclass(frozen=True, slots=True)
class Residual:
    row: BenchRow
    phase: str
    """``decode`` or ``prefill``."""
    measured_t_s: float
    in_sample_t_s: float
    held_out_t_s: float
    """Predicted with factors fitted without this GPU's rows."""

    @property
    def ratio(self) -> float:
        """measured / held-out prediction."""
        return self.measured_t_s / self.held_out_t_s


_FITS: Final = {"decode": (_fit_decode, predict_decode), "prefill": (_fit_prefill, predict_prefill)}


def _measured(row: BenchRow, phase: str) -> float | None:
    return row.tg128_t_s if phase == "decode" else row.pp512_t_s


def leave_one_gpu_out(rows: Sequence[BenchRow], phase: str, backend: str, bench: Bench) -> list[Residual]:
    fit, predict = _FITS[phase]
    mine = [r for r in rows if r.backend == backend and _measured(r, phase) is not None]
    full = fit(rows, backend, bench)
    out = []
    for r in mine:
        held = fit([o for o in rows if group_of(o) != group_of(r)], backend, bench)
        if not held.by_type:
            continue
        pred_in, pred_out = predict(r, full, bench), predict(r, held, bench)
        if pred_in is None or pred_out is None:
            continue
        out.append(Residual(r, phase, _measured(r, phase) or 0.0, pred_in, pred_out))
    return out


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """The fitted factors of every backend and the 80% bands of ``measured / modelled``."""

    decode: Mapping[str, TypeFactors]
    prefill: Mapping[str, TypeFactors]
    bands: Mapping[tuple[str, str], tuple[float, float, int]]
    """(phase, backend) → (low ratio, high ratio, rows)."""

    def band(self, phase: str, backend: str) -> tuple[float, float, int, str]:
        """The band of a backend, pooled over backends when it has fewer than MIN_INTERVAL_ROWS rows."""
        low, high, n = self.bands.get((phase, backend), (math.nan, math.nan, 0))
        if n >= MIN_INTERVAL_ROWS:
            return low, high, n, f"leave-one-GPU-out residuals of {n} {backend} llama-bench rows"
        low, high, n = self.bands[(phase, "all")]
        return low, high, n, f"leave-one-GPU-out residuals of {n} llama-bench rows, all backends pooled"


def _band(ratios: Sequence[float]) -> tuple[float, float, int]:
    if not ratios:
        return math.nan, math.nan, 0
    lo, hi = np.percentile(np.asarray(ratios), INTERVAL_QUANTILES)
    return float(lo), float(hi), len(ratios)


@lru_cache(maxsize=4)
def speed_model(bench: Bench) -> SpeedModel:
    rows = load_rows()
    backends = sorted({r.backend for r in rows})
    bands: dict[tuple[str, str], tuple[float, float, int]] = {}
    for phase in ("decode", "prefill"):
        pooled: list[float] = []
        for b in backends:
            ratios = [x.ratio for x in leave_one_gpu_out(rows, phase, b, bench)]
            bands[(phase, b)] = _band(ratios)
            pooled += ratios
        bands[(phase, "all")] = _band(pooled)
    return SpeedModel(
        {b: _fit_decode(rows, b, bench) for b in backends},
        {b: _fit_prefill(rows, b, bench) for b in backends},
        bands,
    )
