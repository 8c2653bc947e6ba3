"""Local inference with llama.cpp (``llama-server``) or Ollama on one machine: which layers go to the GPU(s),
the KV cache, the compute buffers, host RAM, tokens/s and the command line.

What is modelled, with the llama.cpp source each rule is read from (ggml-org/llama.cpp):

* **placement** (``src/llama-model.cpp`` ``load_tensors`` @ a5410f04): ``-ngl N`` puts the repeating layers
  ``i ≥ n_layer − N`` on the GPUs and the output layer (``output_norm``, ``output``) too when ``N > n_layer``;
  the token embedding always stays on the CPU; a tied output (no ``output.weight``) is a second copy of
  ``token_embd`` on the output's device (``TENSOR_DUPLICATED``). Several GPUs split the offloaded layers at
  the cumulative ``--tensor-split`` fractions (``upper_bound(splits, (il − i_gpu_start) / act_gpu_layers)``;
  the default split is by free memory, taken here as by total memory). ``-ot PATTERN=CPU`` keeps the
  tensors whose name the regex finds on the CPU; ``--n-cpu-moe N`` is ``blk\\.i\\.ffn_(up|down|gate)_exps``
  for the first N layers (``common/arg.cpp``). Newer llama.cpp builds (b9993+) count the output layer
  first (``i_gpu_start = n_layer + 1 − N``): the launch line is for the rule modelled here.
* **KV cache** (``src/llama-kv-cache.cpp``): not paged; every layer holds ``n_ctx`` cells of
  ``n_embd_k_gqa`` K and ``n_embd_v_gqa`` V values in ``--cache-type-k/-v`` (``ggml_row_size``: quantized
  types in whole blocks), on its layer's device; ``n_ctx`` is padded to 256 with flash attention, else 32
  (``get_padding``); ``-np`` slots share ``n_ctx`` = context × slots. A quantized V cache needs ``-fa``
  (``llama_init_from_model`` refuses: "V cache quantization requires flash_attn").
* **compute buffers** (the log's ``CUDA0 compute buffer size`` / ``CUDA_Host compute buffer size``): the
  largest live set of one micro-batch of ``-ub`` tokens, f32 activations. Without flash attention the
  attention scores of all heads over the context dominate: ``n_ctx × ub × (n_head + 1) × 4`` (KQ and its
  f32 mask) ``+ 4 × n_embd × ub × 4``; with flash attention only the f16 mask stays. The logits on the
  output's device: ``ub × (n_vocab + n_embd) × 4``; the FFN: ``ub × (2·n_ff + n_embd) × 4``. The host
  keeps the inputs: ``ub × (n_ctx + n_embd) × 4`` (the mask, the embeddings). Fitted on a public log
  (docs/accuracy-serving.md); a partial offload's op-offload copies of CPU weights are not counted.
* **tokens/s**: decode is memory-bandwidth bound; each token reads every weight once (MoE: the experts
  used of each expert tensor) and the KV of the context, each part from the memory that holds it:
  ``Σ bytes / bandwidth`` over the GPUs (datasheet × the architecture's bandwidth efficiency) and the host
  (``--host-memory-bandwidth``). Prefill is not modelled.
* **Apple**: the GPU share of unified memory is ``recommendedMaxWorkingSetSize`` (hardware/unified.py);
  CPU-resident layers read the same memory at the same bandwidth.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

from gpuplan.errors import ConfigError, ModelSourceError
from gpuplan.hardware import get_gpu
from gpuplan.hardware.unified import is_unified, metal_working_set_bytes
from gpuplan.memory.offload import host_link_time_s
from gpuplan.memory.overheads import cuda_context_bytes
from gpuplan.models.gguf import GGUFModel, GGUFTensor
from gpuplan.models.gguf_mix import BASE_TYPE, gguf_from_config, row_bytes
from gpuplan.perf.efficiency import efficiency_for
from gpuplan.presentation import to_json, to_text
from gpuplan.serve.engines import LLAMA_CPP_DEFAULT_UBATCH, LocalSettings, get_local_engine
from gpuplan.serve.local_speed import (
    BENCH_DECODE_CONTEXT,
    BENCH_PROMPT_TOKENS,
    SpeedModel,
    backend_for,
    decode_seconds,
    kernel_rate_flops,
    prefill_seconds,
    speed_model,
)
from gpuplan.units import GIB

KV_CACHE_TYPES: Final = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""``--cache-type-k/-v`` values (llama.cpp ``common/arg.cpp`` ``kv_cache_types``)."""
DEFAULT_CONTEXT: Final = 4096
"""``common/common.h`` ``n_ctx = 4096``; Ollama's default ``num_ctx`` is 4096 too (0.6+)."""
DEFAULT_UBATCH: Final = LLAMA_CPP_DEFAULT_UBATCH
DEFAULT_HOST_BANDWIDTH_GB_PER_S: Final = 60.0
"""Assumed sustained host-memory bandwidth: dual-channel DDR5-5600 is 89.6 GB/s peak, and streaming
reads reach about two thirds of it. Pass ``--host-memory-bandwidth`` for your machine."""
_F32: Final = 4
_EXPS: Final = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate)_exps")


def check_kv_types(cache_type_k: str, cache_type_v: str) -> None:
    for flag, value in (("--cache-type-k", cache_type_k), ("--cache-type-v", cache_type_v)):
        if value not in KV_CACHE_TYPES:
            raise ConfigError(f"unknown {flag} {value!r} (allowed: {', '.join(KV_CACHE_TYPES)})")


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A GGUF model as llama.cpp loads it: tensors by layer and the hyper-parameters the cache and
    buffers need."""

    name: str
    origin: str
    """``file`` (read from the header) or ``modelled --gguf-type T`` (a catalog / config.json model)."""
    tensors: tuple[GGUFTensor, ...]
    n_layer: int
    n_embd: int
    n_head: int
    n_vocab: int
    n_ff: int
    n_expert: int
    n_expert_used: int
    ctx_train: int
    kv_dims: tuple[tuple[int, int], ...]
    """(n_embd_k_gqa, n_embd_v_gqa) per layer (0, 0 for a layer without attention)."""

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def tied_output(self) -> bool:
        return not any(t.name == "output.weight" for t in self.tensors)


def _meta(meta: Mapping[str, Any], arch: str, key: str, default: int | None = None) -> int | None:
    value = meta.get(f"{arch}.{key}", default)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def local_model(gguf: GGUFModel, name: str, origin: str) -> LocalModel:
    """The hyper-parameters llama.cpp reads (``{arch}.block_count``...), KV widths from the K/V tensors."""
    arch = gguf.architecture or str(gguf.metadata.get("general.architecture", ""))
    meta = gguf.metadata
    n_layer = _meta(meta, arch, "block_count")
    n_embd = _meta(meta, arch, "embedding_length")
    n_head = _meta(meta, arch, "attention.head_count")
    if not arch or n_layer is None or n_embd is None or n_head is None:
        raise ModelSourceError(
            f"{name}: the GGUF metadata has no {arch or '<arch>'}.block_count / embedding_length / "
            "attention.head_count; pass a GGUF model file as llama.cpp's converter writes it"
        )
    by_name = {t.name: t for t in gguf.tensors}
    n_head_kv = _meta(meta, arch, "attention.head_count_kv", n_head) or n_head
    head_k = _meta(meta, arch, "attention.key_length", n_embd // n_head) or n_embd // n_head
    head_v = _meta(meta, arch, "attention.value_length", n_embd // n_head) or n_embd // n_head
    dims = []
    for i in range(n_layer):
        k, v = by_name.get(f"blk.{i}.attn_k.weight"), by_name.get(f"blk.{i}.attn_v.weight")
        has_attention = k is not None or f"blk.{i}.attn_qkv.weight" in by_name
        dims.append(
            (
                k.shape[1] if k is not None else n_head_kv * head_k if has_attention else 0,
                v.shape[1] if v is not None else n_head_kv * head_v if has_attention else 0,
            )
        )
    embd = by_name.get("token_embd.weight")
    n_vocab = _meta(meta, arch, "vocab_size", embd.shape[1] if embd is not None and len(embd.shape) > 1 else 0) or 0
    n_expert = _meta(meta, arch, "expert_count", 0) or 0
    n_ff = (_meta(meta, arch, "expert_feed_forward_length", 0) or 0) if n_expert else 0
    return LocalModel(
        name,
        origin,
        gguf.tensors,
        n_layer,
        n_embd,
        n_head,
        n_vocab,
        n_ff or _meta(meta, arch, "feed_forward_length", 4 * n_embd) or 4 * n_embd,
        n_expert,
        _meta(meta, arch, "expert_used_count", 0) or 0,
        _meta(meta, arch, "context_length", 0) or 0,
        tuple(dims),
    )


def load_local_model(model: str, gguf_type: str | None) -> LocalModel:
    """A .gguf file (its header), or a catalog name / config.json quantized as ``--gguf-type`` would."""
    from gpuplan.models.gguf import read_gguf_model
    from gpuplan.models.sources import GGUFSource, HFConfigSource, resolve_model

    source = resolve_model(model)
    if isinstance(source, GGUFSource):
        if gguf_type is not None:
            raise ConfigError(
                f"--gguf-type {gguf_type} is for catalog / config.json models: {model} is a GGUF file "
                "whose tensor types are read from its header; drop --gguf-type"
            )
        return local_model(read_gguf_model(source.path), source.name, "file")
    if not isinstance(source, HFConfigSource):
        raise ModelSourceError(
            f"{model}: llama.cpp runs GGUF decoders; pass a .gguf file, or a catalog name / "
            "config.json with --gguf-type"
        )
    if gguf_type is None:
        raise ConfigError(
            f"{model} is not a GGUF file: add --gguf-type (e.g. Q4_K_M; allowed: "
            f"{', '.join(BASE_TYPE)}) to model the file llama-quantize would write, or pass the .gguf"
        )
    gguf = gguf_from_config(source.config_dict, gguf_type, source.name)
    return local_model(gguf, source.name, f"modelled --gguf-type {gguf_type}")


def padded_ctx(n_ctx: int, flash_attn: bool) -> int:
    """``llama_kv_cache_unified::get_padding``: 256 with flash attention, else 32."""
    pad = 256 if flash_attn else 32
    return -(-n_ctx // pad) * pad


def _layer(name: str) -> int | None:
    if name.startswith("blk."):
        return int(name.split(".")[1])
    if name == "rope_freqs.weight":  # llama-model.cpp creates it in layer 0 (duplicated, not copied, for the rest)
        return 0
    return None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each part lives: index ``g`` of a tuple is GPU ``g``; ``host_*`` is the CPU."""

    layer_device: tuple[int, ...]
    """Per repeating layer, then the output layer: the GPU index, -1 for the CPU."""
    weights_bytes: tuple[int, ...]
    host_weights_bytes: int
    kv_bytes: tuple[int, ...]
    host_kv_bytes: int
    compute_bytes: tuple[int, ...]
    host_compute_bytes: int
    output_buffer_bytes: int
    read_per_token_bytes: tuple[int, ...]
    host_read_per_token_bytes: int
    read_by_type: tuple[tuple[tuple[str, int], ...], ...] = ()
    """Per GPU, the bytes read per token by ggml type (weights, then the KV cache in its cache type): what
    the per-type decode rates apply to (serve/local_speed.py); sums to ``read_per_token_bytes``."""
    host_read_by_type: tuple[tuple[str, int], ...] = ()
    """The same for the host; sums to ``host_read_per_token_bytes``."""

    @property
    def gpu_total_bytes(self) -> tuple[int, ...]:
        return tuple(w + k + c for w, k, c in zip(self.weights_bytes, self.kv_bytes, self.compute_bytes, strict=True))

    @property
    def host_total_bytes(self) -> int:
        return self.host_weights_bytes + self.host_kv_bytes + self.host_compute_bytes + self.output_buffer_bytes

    @property
    def layers_on_gpu(self) -> int:
        return sum(1 for d in self.layer_device if d >= 0)


def layer_devices(n_layer: int, n_gpu_layers: int, tensor_split: Sequence[float]) -> tuple[int, ...]:
    """GPU index (or -1) of each repeating layer and, last, of the output layer (llama-model.cpp)."""
    total = sum(tensor_split)
    splits, acc = [], 0.0
    for f in tensor_split:
        acc += f
        splits.append(acc / total)
    i_gpu_start = max(n_layer - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    out = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            out.append(-1)
            continue
        frac = (il - i_gpu_start) / act
        out.append(min(next((g for g, s in enumerate(splits) if s > frac), len(splits) - 1), len(splits) - 1))
    return tuple(out)


def _on_cpu(name: str, s: LocalSettings, patterns: Sequence[re.Pattern[str]]) -> bool:
    m = _EXPS.match(name)
    if m and int(m.group(1)) < s.n_cpu_moe:
        return True
    return any(p.search(name) for p in patterns)


def _compiled(s: LocalSettings) -> list[re.Pattern[str]]:
    out = []
    for p in s.cpu_patterns:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise ConfigError(
                f"--override-tensor {p!r}=CPU is not a regular expression ({exc}); pass e.g. 'exps=CPU'"
            ) from None
    return out


def _attention_bytes(n_ctx: int, ub: int, m: LocalModel, flash_attn: bool) -> int:
    if flash_attn:  # the f16 mask; the scores never materialize
        return n_ctx * ub * 2 + 4 * m.n_embd * ub * _F32
    return n_ctx * ub * (m.n_head + 1) * _F32 + 4 * m.n_embd * ub * _F32


def _ffn_bytes(ub: int, m: LocalModel) -> int:
    width = m.n_ff * max(1, m.n_expert_used) if m.n_expert else m.n_ff
    return ub * (2 * width + m.n_embd) * _F32


def _logits_bytes(ub: int, m: LocalModel) -> int:
    return ub * (m.n_vocab + m.n_embd) * _F32


def place(m: LocalModel, s: LocalSettings) -> Placement:
    """Weights, KV, compute buffers and bytes read per token on each GPU and on the host."""
    devices = layer_devices(m.n_layer, s.n_gpu_layers, s.tensor_split)
    patterns = _compiled(s)
    gpus = s.gpus
    weights, read = [0] * gpus, [0] * gpus
    typed: list[dict[str, int]] = [{} for _ in range(gpus)]
    host_typed: dict[str, int] = {}
    host_weights = host_read = 0
    expert_share = (m.n_expert_used / m.n_expert) if m.n_expert else 1.0
    for t in m.tensors:
        il = _layer(t.name)
        dev = devices[m.n_layer] if il is None else devices[il]
        per_token = int(t.nbytes * expert_share) if "_exps" in t.name else t.nbytes
        if t.name == "token_embd.weight":
            host_weights += t.nbytes  # the input layer stays on the CPU; get_rows reads one row per token
            host_read += t.nbytes // max(1, m.n_vocab)
            _add(host_typed, t.type_name, t.nbytes // max(1, m.n_vocab))
            if m.tied_output:  # the output is a duplicate of it on the output's device
                if devices[m.n_layer] >= 0:
                    weights[devices[m.n_layer]] += t.nbytes
                    read[devices[m.n_layer]] += t.nbytes
                    _add(typed[devices[m.n_layer]], t.type_name, t.nbytes)
                else:
                    host_read += t.nbytes
                    _add(host_typed, t.type_name, t.nbytes)
            continue
        if dev < 0 or _on_cpu(t.name, s, patterns):
            host_weights += t.nbytes
            host_read += per_token
            _add(host_typed, t.type_name, per_token)
        else:
            weights[dev] += t.nbytes
            read[dev] += per_token
            _add(typed[dev], t.type_name, per_token)
    n_ctx = padded_ctx(s.n_ctx, s.flash_attn)
    kv, host_kv = [0] * gpus, 0
    kv_read, host_kv_read = [0] * gpus, 0
    for il, (k_dim, v_dim) in enumerate(m.kv_dims):
        cell = row_bytes(s.cache_type_k.upper(), k_dim) + row_bytes(s.cache_type_v.upper(), v_dim)
        if devices[il] < 0:
            host_kv += n_ctx * cell
            host_kv_read += s.context * cell
            _add(host_typed, s.cache_type_k.upper(), s.context * row_bytes(s.cache_type_k.upper(), k_dim))
            _add(host_typed, s.cache_type_v.upper(), s.context * row_bytes(s.cache_type_v.upper(), v_dim))
        else:
            kv[devices[il]] += n_ctx * cell
            kv_read[devices[il]] += s.context * cell
            _add(typed[devices[il]], s.cache_type_k.upper(), s.context * row_bytes(s.cache_type_k.upper(), k_dim))
            _add(typed[devices[il]], s.cache_type_v.upper(), s.context * row_bytes(s.cache_type_v.upper(), v_dim))
    ub = min(s.ubatch, n_ctx)
    layer_term = max(_attention_bytes(n_ctx, ub, m, s.flash_attn), _ffn_bytes(ub, m))
    compute = []
    for g in range(gpus):
        holds_layers = any(d == g for d in devices[: m.n_layer])
        term = layer_term if holds_layers else 0
        if devices[m.n_layer] == g:
            term = max(term, _logits_bytes(ub, m))
        compute.append(term)
    mask_bytes = n_ctx * ub * (2 if s.flash_attn else _F32)
    host_compute = mask_bytes + m.n_embd * ub * _F32
    if any(d < 0 for d in devices[: m.n_layer]):
        host_compute += layer_term
    if devices[m.n_layer] < 0:
        host_compute += _logits_bytes(ub, m)
    # llama_context::output_reserve: logits of one output per slot (+ its embedding where the caller asks
    # for embeddings, as Ollama's runner does: engines.Ollama.outputs_embeddings)
    embeddings = m.n_embd if get_local_engine(s.engine).outputs_embeddings else 0
    output_buffer = (m.n_vocab + embeddings) * _F32 * s.parallel
    return Placement(
        devices,
        tuple(weights),
        host_weights,
        tuple(kv),
        host_kv,
        tuple(compute),
        host_compute,
        output_buffer,
        tuple(r + k for r, k in zip(read, kv_read, strict=True)),
        host_read + host_kv_read,
        tuple(tuple(sorted(d.items())) for d in typed),
        tuple(sorted(host_typed.items())),
    )


def _add(into: dict[str, int], ggml_type: str, nbytes: int) -> None:
    if nbytes:
        into[ggml_type] = into.get(ggml_type, 0) + nbytes


@dataclass(frozen=True, slots=True)
class LocalServeResult:
    """The answer of ``gpuplan serve MODEL --engine llama.cpp|ollama``."""

    model: LocalModel
    gpu_name: str
    settings: LocalSettings
    placement: Placement
    gpu_memory_bytes: int
    """What one GPU may hold: the device's memory (Apple: the Metal working set)."""
    context_bytes: int
    """The CUDA/ROCm context per GPU (0 on Apple)."""
    unified: bool
    fits: bool
    reason: str
    max_gpu_layers: int
    """The most layers (repeating + output) that fit at this context."""
    tokens_per_s: float
    gpu_bandwidth_bytes_per_s: float
    host_bandwidth_bytes_per_s: float
    command: str
    modelfile: str | None
    engine_version: str
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    speed: LocalSpeed | None = None
    """Decode / prefill rates from the per-type fits, with their 80% intervals (serve/local_speed.py)."""

    @property
    def host_ram_bytes(self) -> int:
        """Host RAM in use: CPU-resident weights, KV and buffers (on Apple: everything, GPU share included)."""
        gpu = sum(self.placement.gpu_total_bytes) if self.unified else 0
        return self.placement.host_total_bytes + gpu

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)

    def __str__(self) -> str:
        return to_text(self)


def _gpu_need(p: Placement, context_bytes: int) -> list[int]:
    return [t + context_bytes for t in p.gpu_total_bytes]


def _fits(p: Placement, context_bytes: int, limit: int) -> bool:
    return all(n <= limit for n in _gpu_need(p, context_bytes))


def tokens_per_s(
    p: Placement,
    gpu_bw: float,
    host_bw: float,
    factor: Callable[[str], float] | None = None,
    host_factor: Callable[[str], float] | None = None,
) -> float:
    """Decode tokens/s of one sequence: every byte read once from the memory that holds it, a GPU's bytes of
    ggml type T at ``gpu_bw × factor(T)`` (serve/local_speed.py; 1 when not given)."""
    if factor is None:
        seconds = sum(b / gpu_bw for b in p.read_per_token_bytes) + p.host_read_per_token_bytes / host_bw
    else:
        seconds = decode_seconds(p, gpu_bw, host_bw, factor, host_factor or (lambda _t: 1.0))
    return 1.0 / seconds if seconds > 0 else math.inf


@lru_cache(maxsize=16)
def bench_placement(model: str, gguf_type: str) -> tuple[LocalModel, Placement]:
    """A public row's model as ``gguf_type``, every layer on one GPU at the tg128 context: what llama-bench
    ran (serve/local_speed.py fits on it)."""
    m = load_local_model(model, gguf_type)
    s = LocalSettings("llama.cpp", "bench", m.n_layer + 1, BENCH_DECODE_CONTEXT, 1, BENCH_PROMPT_TOKENS,
                      "f16", "f16", False, (1.0,))
    return m, place(m, s)


def local_speed_model() -> SpeedModel:
    """The per-type speed fits (cached)."""
    return speed_model(bench_placement)


@dataclass(frozen=True, slots=True)
class LocalSpeed:
    """Decode and prefill rates of a local answer with their 80% intervals."""

    backend: str
    decode_interval: tuple[float, float] | None
    decode_basis: str
    prefill_tokens: int
    prefill_tokens_per_s: float | None
    prefill_interval: tuple[float, float] | None
    prefill_basis: str
    """Where the interval comes from, or why prefill has no figure."""


def _speed(
    m: LocalModel, p: Placement, card: Any, backend: str | None, decode_tps: float, ubatch: int
) -> LocalSpeed | None:
    if backend is None:
        return None
    sm = local_speed_model()
    lo, hi, _n, basis = sm.band("decode", backend)
    partial = p.host_read_per_token_bytes > sum(p.read_per_token_bytes) * 0.01  # more than the embedding rows
    if partial:
        basis += "; fitted with every layer on the GPU: the host's share of the reads is not covered"
    decode_iv = (decode_tps * lo, decode_tps * hi) if math.isfinite(decode_tps) else None
    tokens = ubatch
    factors = sm.prefill.get(backend)
    if not factors or not factors.by_type:
        return LocalSpeed(backend, decode_iv, basis, tokens, None, None,
                          f"prefill not modelled on {backend}: no llama-bench pp rows with a catalog GPU rate")

    def rate(t: str) -> float | None:
        peak = kernel_rate_flops(card, backend, t)
        return None if peak is None else peak * factors(t)

    seconds = prefill_seconds(m, p, tokens, rate, lambda b: host_link_time_s(b, card.pcie_gb_per_s_per_direction))
    if seconds is None:
        return LocalSpeed(backend, decode_iv, basis, tokens, None, None,
                          f"prefill not modelled: the catalog has no {backend} GEMM rate for {card.id}")
    tps = tokens / seconds
    plo, phi, _pn, pbasis = sm.band("prefill", backend)
    if partial:
        pbasis += "; with weights on the CPU the copy to the GPU per micro-batch (op offload) is counted, not fitted"
    return LocalSpeed(backend, decode_iv, basis, tokens, tps, (tps * plo, tps * phi), pbasis)


def _with_ngl(s: LocalSettings, ngl: int) -> LocalSettings:
    return LocalSettings(
        s.engine,
        s.model_path,
        ngl,
        s.context,
        s.parallel,
        s.ubatch,
        s.cache_type_k,
        s.cache_type_v,
        s.flash_attn,
        s.tensor_split,
        s.cpu_patterns,
        s.n_cpu_moe,
    )


def max_gpu_layers(m: LocalModel, s: LocalSettings, context_bytes: int, limit: int) -> int:
    """The largest ``-ngl`` (0 … n_layer + 1) whose share fits on every GPU (each value is tried: over
    several GPUs the split moves layers between them as ``-ngl`` grows)."""
    return max(
        (ngl for ngl in range(m.n_layer + 2) if _fits(place(m, _with_ngl(s, ngl)), context_bytes, limit)), default=0
    )


def _check(
    m: LocalModel,
    *,
    ngl: int | None,
    context: int,
    parallel: int,
    ubatch: int,
    tensor_split: Sequence[float],
    n_cpu_moe: int,
) -> None:
    if ngl is not None and not 0 <= ngl <= m.n_layer + 1:
        raise ConfigError(
            f"--n-gpu-layers {ngl} is outside 0..{m.n_layer + 1}: the model has {m.n_layer} repeating "
            f"layers plus the output layer; pass at most {m.n_layer + 1} (all of them)"
        )
    for flag, value in (("--context", context), ("--concurrency", parallel), ("--ubatch-size", ubatch)):
        if value < 1:
            raise ConfigError(f"{flag} {value} must be at least 1")
    if not tensor_split or any(f < 0 for f in tensor_split) or sum(tensor_split) <= 0:
        raise ConfigError(
            f"--tensor-split {','.join(map(str, tensor_split))} needs one non-negative share per GPU "
            "with a positive sum, e.g. 3,1"
        )
    if n_cpu_moe and not m.n_expert:
        raise ConfigError(f"--n-cpu-moe {n_cpu_moe} keeps MoE experts on the CPU but {m.name} has no experts")
    if not 0 <= n_cpu_moe <= m.n_layer:
        raise ConfigError(f"--n-cpu-moe {n_cpu_moe} is outside 0..{m.n_layer} (the model's layers)")


def serve_local(
    model: str,
    *,
    gpu: str,
    engine: str = "llama.cpp",
    gguf_type: str | None = None,
    n_gpu_layers: int | None = None,
    context: int | None = None,
    concurrency: int | None = None,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    flash_attn: bool = False,
    tensor_split: Sequence[float] | None = None,
    override_tensor: Sequence[str] = (),
    n_cpu_moe: int = 0,
    ubatch: int = DEFAULT_UBATCH,
    host_memory_bandwidth_gb_per_s: float = DEFAULT_HOST_BANDWIDTH_GB_PER_S,
) -> LocalServeResult:
    """How ``model`` runs under llama.cpp / Ollama on ``gpu`` (× ``len(tensor_split)``): the layers on
    the GPU at ``context`` tokens per slot, memory on each side, decode tokens/s and the launch line."""
    get_local_engine(engine)
    check_kv_types(cache_type_k, cache_type_v)
    patterns = tuple(_cpu_pattern(p) for p in override_tensor)
    if host_memory_bandwidth_gb_per_s <= 0:
        raise ConfigError(f"--host-memory-bandwidth {host_memory_bandwidth_gb_per_s:g} must be positive (GB/s)")
    card = get_gpu(gpu)
    m = load_local_model(model, gguf_type)
    split = tuple(tensor_split) if tensor_split else (1.0,)
    context = context or DEFAULT_CONTEXT
    parallel = concurrency or 1
    _check(
        m,
        ngl=n_gpu_layers,
        context=context,
        parallel=parallel,
        ubatch=ubatch,
        tensor_split=split,
        n_cpu_moe=n_cpu_moe,
    )
    unified = is_unified(card.vendor)
    if unified and len(split) > 1:
        raise ConfigError("--tensor-split splits layers over several GPUs; an Apple SoC has one GPU")
    limit = metal_working_set_bytes(card.memory_total_bytes) if unified else card.usable_memory_bytes
    context_bytes = 0 if unified else cuda_context_bytes(card.arch)[0]
    path = m.name if m.origin == "file" else f"{_stem(m.name)}-{gguf_type}.gguf"
    base = LocalSettings(
        engine,
        path,
        n_gpu_layers if n_gpu_layers is not None else 0,
        context,
        parallel,
        ubatch,
        cache_type_k,
        cache_type_v,
        flash_attn,
        split,
        patterns,
        n_cpu_moe,
    )
    get_local_engine(engine).check(base)
    most = max_gpu_layers(m, base, context_bytes, limit)
    settings = base if n_gpu_layers is not None else _with_ngl(base, most)
    p = place(m, settings)
    fits = _fits(p, context_bytes, limit)
    need = max(_gpu_need(p, context_bytes))
    where = "the Metal working set" if unified else "the GPU"
    gpus = f"{card.id} use" if len(split) == 1 else f"{len(split)}× {card.id}, the fullest using"
    at = f"{context:,} tokens" + (f" × {parallel} slots" if parallel > 1 else "")
    if fits:
        reason = (
            f"{p.layers_on_gpu}/{m.n_layer + 1} layers on {gpus} {need / GIB:.2f} GiB of "
            f"{limit / GIB:.2f} GiB ({where}); at most {most} fit at {at}"
        )
    else:
        reason = (
            f"-ngl {settings.n_gpu_layers} needs {need / GIB:.2f} GiB on one GPU, {where} holds "
            f"{limit / GIB:.2f} GiB: llama.cpp fails to allocate (cudaMalloc out of memory); at most "
            f"{most} layers fit at {at}"
        )
    backend = backend_for(card.vendor)
    fitted = local_speed_model().decode.get(backend) if backend else None
    if fitted is not None and fitted.by_type:
        # per-type fractions of the datasheet bandwidth, fitted on llama-bench rows (serve/local_speed.py)
        gpu_bw = card.memory_bandwidth_bytes_per_s
        factor: Callable[[str], float] | None = fitted
    else:
        gpu_bw, factor = card.memory_bandwidth_bytes_per_s * efficiency_for(card).bandwidth, None
    host_bw = gpu_bw if unified else host_memory_bandwidth_gb_per_s * 1e9
    tps = tokens_per_s(p, gpu_bw, host_bw, factor, factor if unified else None)
    eng = get_local_engine(engine)
    return LocalServeResult(
        m,
        card.id,
        settings,
        p,
        limit,
        context_bytes,
        unified,
        fits,
        reason,
        most,
        tps,
        gpu_bw,
        host_bw,
        eng.command(settings),
        eng.modelfile(settings),
        eng.version,
        _assumptions(m, settings, card.arch, unified, host_memory_bandwidth_gb_per_s, backend if factor else None),
        _speed(m, p, card, backend if factor else None, tps, min(ubatch, padded_ctx(settings.n_ctx, flash_attn))),
    )


def _speed_note(arch: str, backend: str | None) -> str:
    if backend is None:
        return (
            "tokens/s: decode of one sequence at the full context, memory-bandwidth bound (weights + KV read once "
            f"per token); GPU bandwidth × {efficiency_for(arch).bandwidth:g} ({arch} factor); no llama-bench rows for "
            "this vendor: prefill not modelled, no interval"
        )
    factors = local_speed_model().decode[backend]
    fractions = ", ".join(f"{t} {f:.2f}" for t, f in factors.by_type.items())
    amd = "; AMD GPUs take the Vulkan rows (no ROCm rows yet)" if backend == "vulkan" else ""
    return (
        "tokens/s: decode of one sequence at the full context (weights + KV read once per token); each ggml type "
        f"streams at a fraction of the datasheet bandwidth fitted on public {backend} llama-bench rows ({fractions}) "
        f"plus {factors.overhead_s * 1e3:.2f} ms per token; prefill of one -ub micro-batch as GEMM work at the "
        "catalog rate of llama.cpp's kernel × a fitted efficiency (serve/local_speed.py; docs/accuracy-serving.md)"
        + amd
    )


def _stem(name: str) -> str:
    """The file name llama-quantize's output would get: the catalog name, or a config.json's folder."""
    path = Path(name)
    return path.parent.name if path.suffix == ".json" else path.name


def _cpu_pattern(spec: str) -> str:
    pattern, sep, target = spec.rpartition("=")
    if not sep or not pattern or target.upper() != "CPU":
        raise ConfigError(
            f"--override-tensor {spec!r}: gpuplan models PATTERN=CPU (keep matching tensors in host "
            "memory), e.g. 'exps=CPU'"
        )
    return pattern


def _assumptions(
    m: LocalModel, s: LocalSettings, arch: str, unified: bool, host_gb_per_s: float, backend: str | None
) -> tuple[str, ...]:
    notes = [
        f"weights: {m.origin} ({m.weight_bytes / GIB:.2f} GiB); token_embd stays in host memory",
        "KV cache not paged: n_ctx (padded to 256 with -fa, else 32) cells × every layer, on its layer's device",
        "compute buffers: one -ub micro-batch's largest live f32 set (fitted on public logs, "
        "docs/accuracy-serving.md); partial offload's op-offload weight copies not counted",
        _speed_note(arch, backend),
    ]
    if unified:
        notes.append(
            "Apple unified memory: the GPU may wire recommendedMaxWorkingSetSize (2/3 of RAM below 64 GiB, "
            "3/4 from 64 GiB; hardware/unified.py); CPU layers read the same memory"
        )
    else:
        notes.append(f"host memory bandwidth {host_gb_per_s:g} GB/s (--host-memory-bandwidth)")
    if s.gpus > 1:
        notes.append(
            "--tensor-split fractions given (llama.cpp's default splits by free memory); layer split, "
            "pipeline-parallel buffer copies not counted"
        )
    notes.append(get_local_engine(s.engine).launch_note)
    return tuple(notes)
