"""``gpuplan.serve.serve``: how many sequences of context L a serving engine holds on tp × pp GPUs, what
it launches with, when it refuses to start, and how fast it answers.

Pipeline: resolve MODEL (a decoder) → read its KV layout from the config (serve/kv.py) → trace the engine's
profile run at ``max_num_batched_tokens`` (serve/profile.py, ``trace_source``) → the engine's budget per
GPU (serve/budget.py) → KV tokens, concurrency, longest context → prefill / decode time (serve/timing.py)
→ replicas for a target rate, cost with prices.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.dtypes import DTYPE_BYTES
from gpuplan.errors import ConfigError, ModelSourceError
from gpuplan.hardware import resolve_gpu
from gpuplan.memory.overheads import cuda_context_bytes
from gpuplan.memory.weight_quant import (
    WeightFormat,
    format_from_config,
    served_fp8_flag_format,
    served_quantized_bytes,
)
from gpuplan.models.config_view import ConfigView
from gpuplan.perf.efficiency import efficiency_for, generation_key
from gpuplan.perf.roofline import NoRateError, launches_kernel
from gpuplan.perf.workload_family import TimeInterval, time_interval, workload_family
from gpuplan.presentation import to_json, to_text
from gpuplan.serve import budget as budgets
from gpuplan.serve import engines
from gpuplan.serve.kv import (
    KVCost,
    KVLayout,
    kv_cost,
    kv_dtype_bytes,
    kv_layout,
    model_dtype,
)
from gpuplan.serve.latency import largest_batch, replica_requests_per_s, replicas_for, slot_wait
from gpuplan.serve.lora import DEFAULT_MAX_LORA_RANK, LoRABudget, check_lora, lora_budget
from gpuplan.serve.speculative import Speculation, speculation
from gpuplan.serve.timing import ModelShape, PhaseTime, compute_bound_batch, decode_step, prefill
from gpuplan.trace.cache import hf_config_dict_of
from gpuplan.workload import WEIGHT_QUANTS, Workload

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import HFConfigSource, ModelSource
    from gpuplan.trace.step import TracedStep

MAX_PARALLEL = 1024
SERVE_FAMILY = workload_family("causal-lm", "infer")
"""The residuals' family of a served decoder (LLM inference)."""


@dataclass(frozen=True, slots=True)
class RateAnswer:
    """Replicas (of tp × pp GPUs) for a target request rate."""

    rate_per_s: float
    input_len: int
    output_len: int
    concurrency_per_replica: int
    requests_per_s_per_replica: float
    replicas: int
    gpus: int
    gpu: str
    usd_per_million_output_tokens: float | None = None
    itl_s: float = 0.0
    """Decode step at the replica's concurrency (inter-token latency)."""
    ttft_s: float = 0.0
    """One request's prefill, without queueing."""
    utilization: float = 0.0
    """Offered load over the slots at the chosen replica count (queue model: serve/latency.py)."""
    ttft_p50_s: float = 0.0
    ttft_p99_s: float = 0.0
    e2e_p50_s: float = 0.0
    e2e_p99_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ServeResult:
    model: str
    gpu: GPU
    settings: engines.EngineSettings
    budget: budgets.Budget
    kv: KVCost
    ok: bool
    reason: str
    context: int
    concurrency: int | None
    """The requested concurrency (None: not asked)."""
    kv_cache_tokens: int
    max_concurrency: int
    """Sequences of ``context`` tokens (the lengths asked) the cache holds at once: pages are allocated
    as tokens arrive, so a sequence holds only its own length, not --max-model-len."""
    max_model_len_fits: int
    prefill: PhaseTime
    prefill_tokens: int
    decode: PhaseTime
    decode_batch: int
    decode_context: int
    compute_bound_batch: int | None
    command: str
    rate: RateAnswer | None = None
    assumptions: tuple[str, ...] = field(default=())
    params_count: int = 0
    max_concurrency_at_max_model_len: int = 0
    """The worst case: sequences that each grow to the engine's --max-model-len."""
    ttft_slo_s: float | None = None
    itl_slo_s: float | None = None
    slo_concurrency: int | None = None
    """The largest concurrency meeting --ttft-slo / --itl-slo (None: no target asked; 0: none meets them)."""
    lora: LoRABudget | None = None
    drafter: Drafter | None = None
    time_unknown: str | None = None
    """Why no time could be modelled (a GPU without a documented rate for the dtype): TTFT, decode
    step and the rate answer are then left out; the memory answer stands."""
    shape: ModelShape | None = None
    """What the timing reads of the model (serve/timing.py): callers timing other batches (gpuplan.rl's
    rollout) use the same shape."""

    @property
    def layout(self) -> KVLayout:
        return self.kv.layout

    @property
    def concurrency_fits(self) -> bool:
        return self.concurrency is None or self.concurrency <= self.max_concurrency

    @property
    def slo_met(self) -> bool | None:
        """Whether the asked --concurrency (or the --rate answer) meets the latency targets; None: none asked."""
        if self.ttft_slo_s is None and self.itl_slo_s is None:
            return None
        if self.rate is not None:
            return self.rate.replicas > 0 and self.rate.concurrency_per_replica > 0
        if self.concurrency is not None:
            return self.slo_concurrency is not None and self.concurrency <= self.slo_concurrency
        return bool(self.slo_concurrency)

    @property
    def ttft_interval(self) -> TimeInterval | None:
        """80% prediction interval of the time to first token (perf/workload_family.py)."""
        gen = generation_key(self.gpu)
        return None if self.time_unknown else time_interval(self.prefill.seconds, SERVE_FAMILY, gen)

    @property
    def step_interval(self) -> TimeInterval | None:
        """80% prediction interval of the decode step."""
        gen = generation_key(self.gpu)
        return None if self.time_unknown else time_interval(self.decode.seconds, SERVE_FAMILY, gen)

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_batch / self.decode.seconds if self.decode.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.serve.serve_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.serve.render_serve


def _decoder_source(model: str | ModelSource) -> HFConfigSource:
    from gpuplan.models.sources import HFConfigSource, ModelSource, resolve_model

    source = model if isinstance(model, ModelSource) else resolve_model(model)

    from gpuplan.models.base import refuse_pipeline


    refuse_pipeline(source, "serve", "its generations are gpuplan.serve.pipeline.serve_pipeline's (the CLI's "
                    "`gpuplan serve PIPELINE --gpu GPU`)")
    if not isinstance(source, HFConfigSource):
        raise ModelSourceError(f"{source.name} is not a Hugging Face decoder config (it is a {source.kind} model): "
                               "serving engines load transformers decoders; give a catalog name or a config.json")
    config = source.config_dict
    if source.task != "causal-lm" and not isinstance(config.get("text_config"), dict):
        raise ConfigError(f"{source.name} is not a decoder (task {source.task}): vLLM and SGLang serve causal "
                          "language models (generate); use gpuplan estimate --mode infer for it")
    return source


def _positive(name: str, value: int | None, upper: int = 1 << 24) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper):
        raise ConfigError(f"{name} {value!r} is out of range: allowed 1..{upper:,}")


def serve(
    model: str | ModelSource,
    *,
    gpu: str | GPU,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    ep: int = 1,
    engine: str = "vllm",
    max_model_len: int | None = None,
    context: int | None = None,
    concurrency: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    rate: float | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: str = "auto",
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    quantization: str = "none",
    total_memory_bytes: int | None = None,
    llm_class: bool = False,
    prices: dict[str, float] | None = None,
    ttft_slo: float | None = None,
    itl_slo: float | None = None,
    max_loras: int | None = None,
    max_lora_rank: int | None = None,
    speculative_model: str | None = None,
    speculative_method: str | None = None,
    num_speculative_tokens: int | None = None,
    spec_acceptance: float | None = None,
    trace_compute_capability: tuple[int, int] | None = None,
    profiles: dict[tuple[Any, ...], TracedStep] | None = None,
    enforce_eager: bool = False,
) -> ServeResult:
    """Serving capacity of ``model`` on ``tp × pp`` GPUs of type ``gpu`` with ``engine``.

    ``total_memory_bytes`` replaces the GPU's usable memory (a device as the engine saw it);
    ``llm_class`` takes vLLM's offline ``LLM(...)`` defaults (``vllm bench``) instead of ``vllm serve``'s.
    A caller sizing many GPUs (recommend) passes ``profiles``, a cache of profile-run traces keyed by their
    shape, and ``trace_compute_capability``, the kernel class whose trace stands for the GPU. ``enforce_eager``:
    no CUDA graphs (vLLM ``--enforce-eager``, SGLang ``--disable-cuda-graph``): no graph pool in the budget, each
    decode step dispatched kernel by kernel (serve/timing.py)."""
    eng = engines.get_engine(engine)
    for flag, count in (("--tp", tp), ("--pp", pp), ("--dp", dp), ("--ep", ep)):
        _positive(flag, count, MAX_PARALLEL)
    if ep not in (1, tp * dp):
        raise ConfigError(f"--ep {ep} must be 1 (experts sharded by TP) or --tp × --dp = {tp * dp}: vLLM's "
                          "--enable-expert-parallel and SGLang's --ep-size spread the experts over every GPU of the "
                          "instance")
    if (dp > 1 or ep > 1) and not eng.paged:
        raise ConfigError("--dp and --ep need a serving engine (--engine vllm or sglang)")
    if enforce_eager and not eng.paged:
        raise ConfigError(f"--enforce-eager turns off the CUDA graphs of --engine vllm or sglang; --engine {engine} "
                          "captures none; drop --enforce-eager")
    for name, value in (("--max-model-len", max_model_len), ("--context", context), ("--concurrency", concurrency),
                        ("--input-len", input_len), ("--output-len", output_len),
                        ("--max-num-batched-tokens", max_num_batched_tokens), ("--max-num-seqs", max_num_seqs)):
        _positive(name, value)
    if quantization not in WEIGHT_QUANTS:
        raise ConfigError(f"unknown --quantization {quantization!r} (allowed: {', '.join(WEIGHT_QUANTS)})")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ConfigError(f"--rate {rate!r} must be a positive number of requests per second")
    for flag, target_s in (("--ttft-slo", ttft_slo), ("--itl-slo", itl_slo)):
        if target_s is not None and not (target_s > 0 and math.isfinite(target_s)):
            raise ConfigError(f"{flag} {target_s!r} must be a positive number of seconds (e.g. 0.05)")
    if rate is not None and (input_len is None or output_len is None):
        raise ConfigError("--rate needs --input-len and --output-len (tokens in and out per request)")
    source = _decoder_source(model)
    if ep > 1 and not source.config_dict.get("num_experts_per_tok") and not _text_get(source.config_dict,
                                                                                        "num_experts_per_tok"):
        raise ConfigError(f"--ep {ep}: {source.name} has no routed experts (num_experts_per_tok); expert "
                          "parallelism applies to MoE models only; drop --ep")
    source, quantization, from_checkpoint, quant_format = _checkpoint_quantization(source, quantization)
    spec = speculation(source.config_dict, source.name, method=speculative_method, model=speculative_model,
                       tokens=num_speculative_tokens, acceptance=spec_acceptance)
    if spec is not None:
        engines.check_feature(engine, spec.method, "--speculative-model" if spec.method == "draft" else
                              "--speculative-method mtp")
    if max_lora_rank is not None and max_loras is None:
        raise ConfigError("--max-lora-rank sizes the LoRA slots: add --max-loras N (adapters served at once)")
    if max_loras is not None:
        engines.check_feature(engine, "lora", "--max-loras")
        check_lora(max_loras, max_lora_rank or DEFAULT_MAX_LORA_RANK)
    target = resolve_gpu(gpu)
    assert target is not None
    config = hf_config_dict_of(source)
    layout = kv_layout(config, source.name)
    dtype = model_dtype(config)
    if dtype == "bfloat16" and not target.has_bf16:
        dtype = "float16"
    element = kv_dtype_bytes(kv_cache_dtype, dtype)
    if kv_cache_dtype == "fp8" and not eng.paged:
        raise ConfigError("--kv-cache-dtype fp8 needs a paged engine (--engine vllm or sglang); transformers' "
                          "cache holds the model dtype")
    layers = ConfigView(config).layers or 1
    if pp > layers:
        raise ConfigError(f"--pp {pp} is above {source.name}'s {layers} layers: each pipeline stage holds at least one "
                          f"(vLLM get_pp_indices); pass at most {layers}")
    trained = layout.max_context
    defaulted = max_model_len is None
    if max_model_len is None:
        max_model_len = trained or context or 2048
    if trained is not None and max_model_len > trained:
        raise ConfigError(f"--max-model-len {max_model_len:,} is above the {trained:,} tokens {source.name} was "
                          "trained for (max_position_embeddings); vLLM refuses it unless "
                          "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: pass at most that")
    if defaulted and context is not None and (trained is None or context <= trained):
        # the launch line is for the answer: the engine started with --max-model-len = the asked context
        max_model_len = context
    if context is not None and context > max_model_len and defaulted:
        raise ConfigError(f"--context {context:,} is above the {max_model_len:,} tokens {source.name} was trained for "
                          "(max_position_embeddings), the engine's default --max-model-len; pass at most that")
    if context is not None and context > max_model_len:
        raise ConfigError(f"--context {context:,} is above --max-model-len {max_model_len:,}: the engine truncates "
                          "nothing, it refuses such requests; raise --max-model-len or lower --context")
    if input_len is not None and output_len is not None and input_len + output_len > max_model_len:
        raise ConfigError(f"--input-len + --output-len = {input_len + output_len:,} is above --max-model-len "
                          f"{max_model_len:,}; raise --max-model-len or shorten the requests")
    total = total_memory_bytes or target.usable_memory_bytes
    large = not target.id.upper().startswith("A100")
    tokens = max_num_batched_tokens or eng.default_batched_tokens(total, large, llm_class=llm_class,
                                                                  context=context or max_model_len)
    if not eng.paged:
        tokens = context or max_model_len
    seqs = max_num_seqs or eng.default_max_num_seqs(total, large)
    utilization = gpu_memory_utilization
    if utilization is None:
        utilization = eng.default_utilization(tp)
    engines.check_utilization(utilization)
    settings = engines.EngineSettings(
        engine, _model_id(source), tp, pp, max_model_len, utilization, kv_cache_dtype, tokens, seqs,
        eng.block_size, quantization, eng.paged and not enforce_eager, from_checkpoint, dp, ep, max_loras or 0,
        (max_lora_rank or DEFAULT_MAX_LORA_RANK) if max_loras else 0, spec, str(config.get("model_type") or ""))
    cost = kv_cost(layout, element_bytes=element, state_element_bytes=DTYPE_BYTES[dtype], tp=tp, pp=pp,
                   block_size=settings.block_size, max_num_batched_tokens=tokens)
    lora = lora_budget(config, layout, max_loras=settings.max_loras, max_lora_rank=settings.max_lora_rank, tp=tp,
                       pp=pp, dtype_bytes=DTYPE_BYTES[dtype], max_num_batched_tokens=tokens,
                       max_num_seqs=seqs) if settings.max_loras else None
    num_seqs = eng.profile_num_seqs(seqs)
    cc = trace_compute_capability or target.compute_capability
    from gpuplan.serve.profile import profile_images

    # only vLLM's profile run encodes dummy images (serve/profile.py)
    images = profile_images(source.config_dict, tokens, min(tokens, num_seqs)) if eng.profiles_images else 0
    key = (tokens, num_seqs, dtype, cc, images)
    step = profiles.get(key) if profiles is not None else None
    if step is None:
        step = trace_profile_run(source, tokens=tokens, num_seqs=num_seqs, dtype=dtype, compute_capability=cc,
                                 images=images)
        if profiles is not None:
            profiles[key] = step
    rank_step = _rank_profile(source, settings, key, step, profiles, dtype=dtype, compute_capability=cc,
                              images=images, num_seqs=num_seqs)
    # routed experts (MoE): what expert parallelism and DP attention's MoE group split, and the share of
    # the weights a decode step reads only for the experts its tokens reach
    split = _weight_split(source, step, config, dtype, quantization, quant_format,
                          moe=bool(_text_get(config, "num_experts_per_tok")))
    expert_bytes = split.traced_expert_bytes
    drafter = _drafter(spec, source, config, layout, cost, step, settings, target, dtype, element, split,
                       profiles, compute_capability=cc) if spec is not None else None
    if drafter is not None:
        cost = dataclasses.replace(cost, extra_token_bytes=drafter.kv_token_bytes)
    budget = _budget(settings, config, split, rank_step, target, total, dtype, lora=lora,
                     drafter_bytes=drafter.weights_bytes if drafter is not None else 0)
    assumptions = _assumptions(settings, layout, step, tp, images, rank_step is not step)
    if lora is not None:
        assumptions.append(f"--max-loras {lora.max_loras} at rank {lora.max_lora_rank}: vLLM's LoRA slots on every "
                           f"q/k/v/o and MLP projection ({lora.slot_bytes / 2**30:.2f} GiB per GPU) and punica index "
                           "tensors counted with the weights (loaded with the model), the float32 shrink buffer in "
                           "the activation peak; embedding / lm_head / MoE-expert slots not counted; vLLM's profile "
                           "runs dummy adapters of rank 8 (serve/lora.py)")
    if drafter is not None:
        assumptions.extend(drafter.notes)
    asked = input_len + (output_len or 0) if input_len is not None else None
    context_used = context or asked or max_model_len
    kv_tokens = cost.cache_tokens(budget.kv_cache_bytes)
    max_conc = cost.max_concurrency(budget.kv_cache_bytes, context_used)
    worst = cost.max_concurrency(budget.kv_cache_bytes, max_model_len)
    fits_len = cost.max_context(max(0, budget.kv_cache_bytes), trained or max_model_len * 64)
    ok, reason = eng.verdict(settings, budget, cost, fits_len, source.name)
    refusal = engines.refusal(engine, spec.method) if spec is not None else None
    if refusal is not None and ok:
        ok, reason = False, refusal
    shape = _shape(config, layout, step, dtype, expert_bytes)
    if lora is not None:
        shape = dataclasses.replace(shape, adapter_params=lora.params_per_adapter, max_adapters=lora.max_loras)
    if enforce_eager:
        dispatch_s = efficiency_for(target).launch_overhead_s
        assumptions.append(f"{engines.eager_flag(engine)}: no CUDA graphs captured (no graph pool); each decode "
                           f"step dispatches the traced forward's {shape.kernels_per_forward:,} kernel launches from "
                           f"the CPU ({dispatch_s * 1e6:.0f} µs each, eager PyTorch's fitted cost; vLLM's fused "
                           "kernels launch fewer) and takes that or its GPU time, whichever is longer")
    if input_len is not None:
        decode_context = input_len + (output_len or 0) // 2
    else:
        decode_context = context_used
    prefill_tokens = input_len or context_used
    target_cost = dataclasses.replace(cost, extra_token_bytes=0)  # the verify step reads the target's KV only

    def step_at(b: int) -> PhaseTime:
        """One output token's share of a decode step: with speculative decoding the draft steps and the
        target's verify of K + 1 tokens per sequence, over the tokens a step yields on average."""
        verify = decode_step(shape, target, tp, batch=b * (spec.tokens + 1 if spec else 1), context=decode_context,
                             kv_read_bytes=b * target_cost.sequence_bytes(decode_context) * pp,
                             weight_quant=quantization, ep=ep, dp=dp, eager=enforce_eager, pp=pp)
        if drafter is None:
            return verify
        draft = drafter.steps(target, tp, batch=b, context=decode_context, ep=ep, dp=dp, eager=enforce_eager)
        per = drafter.spec.accepted_per_step
        return PhaseTime((verify.seconds + draft.seconds) / per, (verify.compute_s + draft.compute_s) / per,
                         (verify.memory_s + draft.memory_s) / per,
                         (verify.communication_s + draft.communication_s) / per)

    def first_at(tokens_in: int) -> PhaseTime:
        """The prompt's prefill, and the drafter's over the same prompt."""
        first_ = prefill(shape, target, tp, tokens=tokens_in, weight_quant=quantization, ep=ep, dp=dp, pp=pp)
        if drafter is None:
            return first_
        extra = drafter.prefill(target, tp, tokens=tokens_in, ep=ep, dp=dp)
        return PhaseTime(first_.seconds + extra.seconds, first_.compute_s + extra.compute_s,
                         first_.memory_s + extra.memory_s, first_.communication_s + extra.communication_s)

    rate_answer = None
    slo_conc = None
    time_unknown = None
    batch = concurrency or max(1, min(max_conc, seqs))
    try:
        if ttft_slo is not None or itl_slo is not None:
            slo_conc = _slo_concurrency(min(max_conc, seqs), step_at, first_at, prefill_tokens,
                                        ttft_slo=None if rate is not None else ttft_slo, itl_slo=itl_slo)
        if rate is not None and input_len is not None and output_len is not None:
            rate_answer = _rate(rate, input_len, output_len, cost, budget, settings, step_at, first_at, target,
                                prices, ttft_slo=ttft_slo, itl_slo=itl_slo)
        # the time line is for the batch the answer runs: the asked concurrency, the rate's per-replica
        # concurrency (the same batch as the rate line), the latency targets' concurrency, else as many as fit
        if concurrency is not None:
            batch = concurrency
        elif rate_answer is not None:
            batch = max(1, rate_answer.concurrency_per_replica)
        elif slo_conc is not None:
            batch = max(1, slo_conc)
        else:
            batch = max(1, min(max_conc, seqs))
        decode = step_at(batch)
        first = first_at(prefill_tokens)
    except NoRateError as exc:  # the memory answer stands; the times are left out and the result says why
        time_unknown = str(exc)
        decode = first = PhaseTime(0.0, 0.0, 0.0, 0.0)
        assumptions.append(f"time unknown: {exc}")
    return ServeResult(
        model=source.name, gpu=target, settings=settings, budget=budget, kv=cost, ok=ok, reason=reason,
        context=context_used, concurrency=concurrency, kv_cache_tokens=kv_tokens, max_concurrency=max_conc,
        max_model_len_fits=fits_len, prefill=first, prefill_tokens=prefill_tokens, decode=decode,
        decode_batch=batch, decode_context=decode_context, compute_bound_batch=compute_bound_batch(shape, target),
        command=engines.command(settings), rate=rate_answer, assumptions=tuple(assumptions),
        params_count=step.params_count, max_concurrency_at_max_model_len=worst, ttft_slo_s=ttft_slo,
        itl_slo_s=itl_slo, slo_concurrency=slo_conc, time_unknown=time_unknown, lora=lora, drafter=drafter,
        shape=shape)


_CHECKPOINT_SCHEMES: dict[str, str] = {"fp8": "fp8", "int8": "int8", "int4": "int4", "gptq": "int4", "awq": "int4"}
"""A checkpoint's own ``quantization_config`` scheme (models/quant_config.py) → the --quantization it is
served as: the engines read the format from the checkpoint, so it takes the flag's path."""


def _checkpoint_quantization(source: HFConfigSource,
                             quantization: str) -> tuple[HFConfigSource, str, bool, WeightFormat | None]:
    """(the source traced, the weight quantization, whether the checkpoint stated it, the FP8 layout). A
    checkpoint whose config carries an FP8 / int8 / int4 ``quantization_config`` is served as the same model
    given with ``--quantization``: its 16-bit config traced, the weights in the bytes of the checkpoint's own
    format (FP8: its block or channel scales; ``--quantization fp8``: vLLM's online per-tensor scales)."""
    from gpuplan.models.sources import HFConfigSource

    stated = source.quantization()
    scheme = _CHECKPOINT_SCHEMES.get(stated.scheme) if stated is not None else None
    if stated is None or scheme is None:
        return source, quantization, False, served_fp8_flag_format() if quantization == "fp8" else None
    if quantization not in ("none", scheme):
        raise ConfigError(f"--quantization {quantization} contradicts {source.name}'s own quantization_config "
                          f"({stated.method}, served as {scheme}); drop --quantization")
    config = source.config_dict
    config.pop("quantization_config", None)
    fmt = format_from_config(stated) if scheme == "fp8" else None
    return HFConfigSource(source.name, config, task=source.task, kind=source.kind), scheme, True, fmt


def _rank_profile(source: HFConfigSource, settings: engines.EngineSettings, key: tuple[Any, ...],
                  step: TracedStep, profiles: dict[tuple[Any, ...], TracedStep] | None, *, dtype: str,
                  compute_capability: tuple[int, int] | None, images: int, num_seqs: int) -> TracedStep:
    """The profile run of one tensor-parallel rank (``profile.tp_rank_config``): its activation peak is
    what each GPU holds. ``step`` itself where tp is 1 or the class cannot be built per rank."""
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.serve.profile import tp_rank_config

    rank_config = tp_rank_config(source.config_dict, settings.tp) if engines.get_engine(settings.engine).paged else None
    if rank_config is None:
        return step
    rank_key = (*key, "tp", settings.tp)
    rank = profiles.get(rank_key) if profiles is not None else None
    if rank is None:
        rank_source = HFConfigSource(source.name, rank_config, task=source.task, kind=source.kind)
        rank = trace_profile_run(rank_source, tokens=settings.max_num_batched_tokens,
                                 num_seqs=num_seqs, dtype=dtype,
                                 compute_capability=compute_capability, images=images)
        if profiles is not None:
            profiles[rank_key] = rank
    return rank


def _model_id(source: HFConfigSource) -> str:
    from gpuplan.models.catalog import get_catalog_model, is_catalog_name

    return get_catalog_model(source.name).hf_id if is_catalog_name(source.name) else source.name


def trace_profile_run(source: HFConfigSource, *, tokens: int, num_seqs: int, dtype: str,
                      compute_capability: tuple[int, int] | None, images: int = 0) -> TracedStep:
    """The engine's profile run traced: ``tokens`` spread over ``min(tokens, num_seqs)`` requests, after
    a vision-language model's encoder on ``images`` dummy images (``profile.profile_images``; vLLM)."""
    from gpuplan.hardware import DEFAULT_COMPUTE_CAPABILITY
    from gpuplan.serve.profile import ProfileRunSource
    from gpuplan.trace.step import trace_source

    seqs = max(1, min(tokens, num_seqs))
    work = Workload(mode="infer", batch_size=seqs, seq_len=-(-tokens // seqs),
                    precision="bf16" if dtype == "bfloat16" else "fp16")
    cc = compute_capability or DEFAULT_COMPUTE_CAPABILITY
    return trace_source(ProfileRunSource(source, images=images), work, cc, fake=True, cuda=True)


def _text_get(config: dict[str, Any], key: str) -> Any:
    return ConfigView(config).get(key)


@dataclass(frozen=True, slots=True)
class WeightSplit:
    """The model's weights as a serving engine places them, in the bytes it stores them (quantized where
    ``memory.weight_quant`` says the engine quantizes): what tp, pp and ep split."""

    dense_bytes: int
    """Linear layers outside the routed experts (attention, dense MLPs, shared experts): split by tp."""
    expert_bytes: int = 0
    """Routed experts: split by tp × dp, or whole experts over the ep ranks."""
    block_kept_bytes: int = 0
    """One block's parameters kept in 16 bits (norms, the MoE router): replicated on every TP rank."""
    outer_kept_bytes: int = 0
    """Embeddings, lm_head and the final norm, in 16 bits: split by tp over the vocabulary; with pp the first
    stage holds the embedding and the last the head (each stage half, a tied head a full copy)."""
    layers: int = 1
    tied: bool = False
    traced_expert_bytes: int = 0
    """The routed experts as traced (16-bit): what the decode model's expert share reads."""
    traced_bytes: int = 0
    """Every weight as traced (16-bit)."""

    @property
    def total_bytes(self) -> int:
        return self.dense_bytes + self.expert_bytes + self.block_kept_bytes * self.layers + self.outer_kept_bytes


def stage_weights_per_gpu(split: WeightSplit, *, experts: int, tp: int, pp: int, dp: int = 1, ep: int = 1) -> int:
    """Weights on the most loaded GPU of ``tp × pp`` (× dp for the experts): its stage holds ⌈layers / pp⌉ blocks
    (vLLM ``get_pp_indices`` gives the remainder to the stages before the last) and the larger of the
    embedding and the head; within a stage the dense part is split by tp, the experts by
    :func:`expert_weights_per_gpu`."""
    stage_layers = -(-split.layers // pp)
    dense = -(-split.dense_bytes * stage_layers // (split.layers * tp))
    routed = expert_weights_per_gpu(-(-split.expert_bytes * stage_layers // split.layers), experts=experts, tp=tp,
                                    dp=dp, ep=ep)
    outer = split.outer_kept_bytes if pp == 1 or split.tied else -(-split.outer_kept_bytes // 2)
    return dense + routed + split.block_kept_bytes * stage_layers + -(-outer // tp)


def _weight_split(source: HFConfigSource, step: TracedStep, config: dict[str, Any], dtype: str,
                  quantization: str, fmt: WeightFormat | None, *, moe: bool) -> WeightSplit:
    """The traced 16-bit model split by module (parallel/profile.py: the ``experts`` modules of a block × the
    blocks, the modules kept in 16 bits), the quantized parts in ``quantization``'s served bytes
    (``memory.weight_quant.served_quantized_bytes``: the checkpoint's own format ``fmt``, or the flag's)."""
    from gpuplan.parallel.profile import param_profile
    from gpuplan.serve.profile import ProfileRunSource

    text = ConfigView(config)
    per_param = step.param_bytes / max(1, step.params_count)
    # the parameter split only, never timed: a GPU with no rate for the dtype (Apple, some Gaudi parts) still
    # gets its memory answer (issue 17 item 7)
    prof = param_profile(step, ProfileRunSource(source))
    expert_params = prof.block_expert_params * prof.layers if moe else 0
    block_kept = prof.block_unquantized_params
    outer_kept = prof.outer_unquantized_params
    dense_params = max(0, step.params_count - expert_params - block_kept * prof.layers - outer_kept)

    def stored(params: int) -> int:
        if quantization == "none":
            return int(params * per_param)
        return served_quantized_bytes(params, quantization, fmt, in_features=text.hidden_size or 0)

    return WeightSplit(stored(dense_params), stored(expert_params), int(block_kept * per_param),
                       int(outer_kept * per_param), prof.layers, bool(config.get("tie_word_embeddings")),
                       int(expert_params * per_param), step.param_bytes)


def expert_weights_per_gpu(expert_bytes: int, *, experts: int, tp: int, dp: int, ep: int) -> int:
    """Routed-expert weight bytes on the most loaded GPU. The MoE layers span the whole instance (tp × dp
    GPUs; vLLM docs "Data Parallel Deployment": "expert layers form a tensor parallel group of size DP ×
    TP"; SGLang's --tp-size is tp × dp): each expert split over tp × dp (ep 1), or whole experts over the
    ep ranks, the first ``experts % ep`` ranks holding one more (vLLM ``fused_moe/layer.py``
    ``determine_expert_map``). Whole experts are never fewer bytes than the even split: with ep not
    dividing the experts the heaviest rank holds one expert more than its share."""
    if ep > 1 and experts > 0:
        return -(-expert_bytes * -(-experts // ep) // experts)
    return -(-expert_bytes // (tp * dp))


def _weights_per_gpu(settings: engines.EngineSettings, config: dict[str, Any], split: WeightSplit, dtype: str) -> int:
    """Weights on one GPU (:func:`stage_weights_per_gpu`) and the engine's rope cache."""
    rope = budgets.rope_cache_bytes(config, DTYPE_BYTES[dtype]) if engines.get_engine(settings.engine).paged else 0
    return stage_weights_per_gpu(split, experts=ConfigView(config).experts, tp=settings.tp, pp=settings.pp,
                                 dp=settings.dp, ep=settings.ep) + rope


def _budget(settings: engines.EngineSettings, config: dict[str, Any], split: WeightSplit, rank_step: TracedStep,
            gpu: GPU, total: int, dtype: str, *, lora: LoRABudget | None = None,
            drafter_bytes: int = 0) -> budgets.Budget:
    """``split``: the whole model's weights as placed; ``rank_step``: one TP rank's profile run (its activations).
    LoRA slots, punica buffers and a speculative drafter load with the model: vLLM counts them as weights."""
    from gpuplan.memory.nccl import nccl_buffer_bytes

    eng = engines.get_engine(settings.engine)
    weights = _weights_per_gpu(settings, config, split, dtype) + drafter_bytes
    activation = max(0, rank_step.rounded_peak_bytes - rank_step.param_bytes)
    if lora is not None:
        weights += lora.slot_bytes + lora.punica_bytes
        activation += lora.shrink_buffer_bytes
    non_torch = budgets.non_torch_bytes(gpu.compute_capability, gpu.vendor, gpu.arch)
    if eng.paged:
        # the TP group's communicator, created before the profile run: vLLM 0.10.0 sees it as non-torch
        # memory (its baseline snapshot precedes the distributed init)
        nvswitch = "NVSwitch" in (gpu.interconnect or "")
        non_torch += nccl_buffer_bytes(settings.tp, nvswitch=nvswitch, compute_capability=gpu.compute_capability)
        if settings.ep > 1:  # the EP group's own communicator (all-to-all)
            non_torch += nccl_buffer_bytes(settings.ep, nvswitch=nvswitch, compute_capability=gpu.compute_capability)
    hidden = ConfigView(config).hidden_size or 0
    graphs = eng.graph_bytes(settings, kv_layout(config).attention_layers, hidden, DTYPE_BYTES[dtype])
    context, _ = cuda_context_bytes(gpu.arch)
    return eng.budget(settings, total_bytes=total, weights_bytes=weights, activation_peak_bytes=activation,
                      non_torch=non_torch, context_bytes=context, graphs=graphs)


@dataclass(frozen=True, slots=True)
class Drafter:
    """A speculative drafter on one GPU (serve/speculative.py): its weights and KV per token there, and the
    shape its K draft forwards are timed with (a draft model, or the MTP layers as a model of their own)."""

    spec: Speculation
    weights_bytes: int
    kv_token_bytes: int
    shape: ModelShape
    cost: KVCost
    weight_quant: str
    notes: tuple[str, ...]

    def steps(self, gpu: GPU, tp: int, *, batch: int, context: int, ep: int, dp: int,
              eager: bool = False) -> PhaseTime:
        one = decode_step(self.shape, gpu, tp, batch=batch, context=context,
                          kv_read_bytes=batch * self.cost.sequence_bytes(context), weight_quant=self.weight_quant,
                          ep=ep, dp=dp, eager=eager)
        k = self.spec.tokens
        return PhaseTime(one.seconds * k, one.compute_s * k, one.memory_s * k, one.communication_s * k)

    def prefill(self, gpu: GPU, tp: int, *, tokens: int, ep: int, dp: int) -> PhaseTime:
        return prefill(self.shape, gpu, tp, tokens=tokens, weight_quant=self.weight_quant, ep=ep, dp=dp)


def _drafter(spec: Speculation, source: HFConfigSource, config: dict[str, Any], layout: KVLayout, cost: KVCost,
             step: TracedStep, settings: engines.EngineSettings, gpu: GPU, dtype: str, element: int,
             split: WeightSplit, profiles: dict[tuple[Any, ...], TracedStep] | None, *,
             compute_capability: tuple[int, int] | None) -> Drafter:
    if spec.method == "mtp":
        return _mtp_drafter(spec, config, layout, cost, step, settings, dtype, split)
    draft_source = _decoder_source(spec.model or "")
    draft_config = hf_config_dict_of(draft_source)
    draft_layout = kv_layout(draft_config, draft_source.name)
    draft_dtype = model_dtype(draft_config)
    if draft_dtype == "bfloat16" and not gpu.has_bf16:
        draft_dtype = "float16"
    key = ("draft", draft_source.name, settings.max_num_batched_tokens, settings.max_num_seqs, draft_dtype,
           compute_capability)
    draft_step = profiles.get(key) if profiles is not None else None
    if draft_step is None:
        draft_step = trace_profile_run(draft_source, tokens=settings.max_num_batched_tokens,
                                       num_seqs=settings.max_num_seqs, dtype=draft_dtype,
                                       compute_capability=compute_capability)
        if profiles is not None:
            profiles[key] = draft_step
    draft_cost = kv_cost(draft_layout, element_bytes=element, state_element_bytes=DTYPE_BYTES[draft_dtype],
                         tp=settings.tp, block_size=settings.block_size,
                         max_num_batched_tokens=settings.max_num_batched_tokens)
    weights = -(-draft_step.param_bytes // settings.tp)
    shape = _shape(draft_config, draft_layout, draft_step, draft_dtype)
    notes = (f"speculative decoding: draft model {draft_source.name} ({draft_step.params_count:,} parameters, "
             f"{weights / 2**30:.2f} GiB per GPU split by the target's --tp {settings.tp}) loaded with the model, its "
             f"{draft_cost.bytes_per_token:,} KV bytes per token per GPU in the same cache; {spec.tokens} draft "
             f"token(s) a step, acceptance {spec.acceptance:g} → {spec.accepted_per_step:.2f} tokens per step "
             "(Leviathan et al. 2023; --spec-acceptance)",)
    return Drafter(spec, weights, draft_cost.bytes_per_token, shape, draft_cost, "none", notes)


def _mtp_drafter(spec: Speculation, config: dict[str, Any], layout: KVLayout, cost: KVCost, step: TracedStep,
                 settings: engines.EngineSettings, dtype: str, split: WeightSplit) -> Drafter:
    """The model's MTP layers: each one more decoder layer (attention + the model's MLP / MoE) plus the
    projection of [embedding; hidden] back to hidden (2·H × H) and its norms; embedding and lm_head shared.
    A decoder layer's size is the model's per-layer average of its non-expert part plus one MoE layer's
    experts (serve/speculative.py)."""
    text = ConfigView(config)
    hidden, layers = text.hidden_size or 0, text.layers or 1
    expert_bytes = split.traced_expert_bytes
    n = spec.mtp_layers
    per_param = step.param_bytes / max(1, step.params_count)
    vocab = text.vocab_size or 0
    outer = vocab * hidden * per_param * (1 if config.get("tie_word_embeddings") else 2)
    top_k = int(text.get("num_experts_per_tok") or 0)
    dense_layers = int(text.get("first_k_dense_replace") or 0) + len(text.get("mlp_only_layers") or [])
    moe_layers = max(1, layers - dense_layers) if top_k else 0
    per_layer = (step.param_bytes - expert_bytes - outer) / layers
    experts_16 = int(n * expert_bytes / moe_layers) if moe_layers else 0
    total_16 = int(n * (per_layer + 2 * hidden * hidden * per_param)) + experts_16
    scale = split.total_bytes / max(1, split.traced_bytes)  # the model's served bytes over its traced ones
    dense_gpu = -(-int((total_16 - experts_16) * scale) // settings.tp)
    experts_gpu = expert_weights_per_gpu(int(experts_16 * scale), experts=text.experts, tp=settings.tp,
                                         dp=settings.dp, ep=settings.ep)
    kv_token = n * cost.full_layer_token_bytes
    head_dim = layout.head_dim or (layout.latent_dim if layout.kind == "mla" else 0)
    shape = ModelShape(int(total_16 / per_param), total_16, n, n, hidden, layout.attention_heads, head_dim, dtype,
                       DTYPE_BYTES[dtype], n if top_k else 0, top_k, experts_16, text.experts if top_k else 0)
    mtp_cost = dataclasses.replace(cost, full_layers=n, sliding_layers=0, state_bytes_per_sequence=0,
                                   extra_token_bytes=0)
    gib = (dense_gpu + experts_gpu) / 2**30
    notes = (f"speculative decoding: the model's {n} MTP layer(s) ({gib:.2f} GiB per GPU: one decoder layer each, "
             "sized as the model's average non-expert layer plus one MoE layer's experts, "
             f"and the 2·hidden × hidden projection) and their {kv_token:,} KV bytes per token per GPU; "
             f"{spec.tokens} draft token(s) a step, acceptance {spec.acceptance:g} → {spec.accepted_per_step:.2f} "
             "tokens per step (DeepSeek-V3 report: 85–90% for the second token; --spec-acceptance)",)
    return Drafter(spec, dense_gpu + experts_gpu, kv_token, shape, mtp_cost, settings.quantization, notes)


def _shape(config: dict[str, Any], layout: KVLayout, step: TracedStep, dtype: str,
           expert_bytes: int = 0) -> ModelShape:
    text = ConfigView(config)
    layers = text.layers or 1
    head_dim = layout.head_dim or (layout.latent_dim if layout.kind == "mla" else 0)
    top_k = int(text.get("num_experts_per_tok") or 0)
    dense = int(text.get("first_k_dense_replace") or 0) + len(text.get("mlp_only_layers") or [])
    return ModelShape(step.params_count, step.param_bytes, layers, layout.attention_layers,
                      text.hidden_size or 0, layout.attention_heads, head_dim, dtype, DTYPE_BYTES[dtype],
                      max(0, layers - dense) if top_k else 0, top_k, expert_bytes if top_k else 0,
                      text.experts if top_k else 0,
                      kernels_per_forward=sum(op.count for op in step.ops if launches_kernel(op)))


def _slo_concurrency(limit: int, step_at: Callable[[int], PhaseTime], first_at: Callable[[int], PhaseTime],
                     prompt_tokens: int, *, ttft_slo: float | None, itl_slo: float | None) -> int:
    """The largest concurrency whose decode step is within --itl-slo and whose prompts, arriving together
    and prefilled back to back (chunked prefill), all see their first token within --ttft-slo."""
    def meets(b: int) -> bool:
        if itl_slo is not None and step_at(b).seconds > itl_slo:
            return False
        return ttft_slo is None or first_at(b * prompt_tokens).seconds <= ttft_slo

    return largest_batch(limit, meets)


def _rate(rate: float, input_len: int, output_len: int, cost: KVCost, budget: budgets.Budget,
          settings: engines.EngineSettings, step_at: Callable[[int], PhaseTime],
          first_at: Callable[[int], PhaseTime], gpu: GPU, prices: dict[str, float] | None, *,
          ttft_slo: float | None = None, itl_slo: float | None = None) -> RateAnswer:
    """Replicas for ``rate``: each replica runs ``conc`` slots (KV, --max-num-seqs, --itl-slo); its prefills
    run one after another, so a slot turns over every ``conc × TTFT + output_len × ITL`` (the capacity of
    Little's law); the slot wait is the M/D/c queue of serve/latency.py, and with --ttft-slo the replica
    count grows until the p99 TTFT (prefill + p99 wait) meets it."""
    conc = max(0, min(cost.max_concurrency(budget.kv_cache_bytes, input_len + output_len), settings.max_num_seqs))
    if itl_slo is not None:
        conc = largest_batch(conc, lambda b: step_at(b).seconds <= itl_slo)
    ttft = first_at(input_len).seconds
    if conc == 0:
        return RateAnswer(rate, input_len, output_len, 0, 0.0, 0, 0, gpu.id, None, ttft_s=ttft)
    itl = step_at(conc).seconds
    service = conc * ttft + output_len * itl
    per_replica = replica_requests_per_s(conc, ttft, itl, output_len)
    replicas = replicas_for(rate, conc, service, ttft_s=ttft, ttft_slo_s=ttft_slo)
    # replicas are DP ranks; GPUs come in whole instances of tp × dp × pp
    gpus = -(-replicas // settings.dp) * settings.dp * settings.tp * settings.pp
    usd = None
    if prices is not None and gpu.id in prices:
        tokens_per_hour = per_replica * output_len * 3600
        usd = prices[gpu.id] * settings.tp * settings.pp / tokens_per_hour * 1e6
    wait = slot_wait(rate / replicas, conc, service) if replicas else slot_wait(rate, conc, service)
    decode = output_len * itl
    return RateAnswer(rate, input_len, output_len, conc, per_replica, replicas, gpus, gpu.id, usd, itl_s=itl,
                      ttft_s=ttft, utilization=wait.utilization, ttft_p50_s=ttft + wait.wait_p50_s,
                      ttft_p99_s=ttft + wait.wait_p99_s, e2e_p50_s=ttft + decode + wait.wait_p50_s,
                      e2e_p99_s=ttft + decode + wait.wait_p99_s)


def _assumptions(settings: engines.EngineSettings, layout: KVLayout, step: TracedStep, tp: int,
                 images: int, rank_traced: bool) -> list[str]:
    notes = [f"engine {settings.engine} {settings.version} as modelled (its defaults and budget arithmetic)",
             f"KV layout: {layout.describe()}",
             f"activation peak traced: the engine's profile run of {settings.max_num_batched_tokens:,} tokens "
             f"over {min(settings.max_num_batched_tokens, settings.max_num_seqs):,} requests, logits of each "
             "request's last token and the sampler (float32, top-k/top-p sort with its CUDA workspace)"]
    if images:
        notes.append(f"vision encoder profiled first on {images} dummy images of the largest size (vLLM's "
                     "multimodal profile: max_num_batched_tokens // tokens per image); vLLM skips it when "
                     "--limit-mm-per-prompt sets every modality to 0, a flag not modelled here")
    if tp > 1 and rank_traced:
        notes.append(f"activation peak per GPU: one rank's profile run traced (1/{tp} of the heads and of the MLP "
                     "and expert widths; hidden states, gathered logits and the sampler whole)")
    elif tp > 1:
        notes.append("activation peak per GPU taken unsharded (an upper bound: this model class cannot be built "
                     "with one rank's heads, so the MLP and attention intermediates are not split)")
    if tp > 1 and engines.get_engine(settings.engine).paged:
        notes.append("non-torch includes the TP communicator's NCCL buffers (16 channels × Simple 4 MiB + LL128 "
                     "4.69 MiB + LL 0.5 MiB, NCCL init.cc; + 288 MiB NVLS on NVSwitch ≥ sm90 with > 2 ranks, vLLM "
                     "#9699's NCCL log); vLLM's custom all-reduce buffers are not counted")
        if layout.kind != "mla" and tp > layout.kv_heads:
            notes.append(f"--tp {tp} > {layout.kv_heads} KV heads: vLLM replicates each KV head on "
                         f"{tp // layout.kv_heads} ranks (every rank caches one head)")
    notes.extend(engines.get_engine(settings.engine).notes(settings))
    if settings.pp > 1:
        notes.append(f"--pp {settings.pp}: each stage holds ⌈layers / {settings.pp}⌉ layers and the embedding or the "
                     "head (weights and KV per GPU are the heaviest stage's); decode runs the sequences as "
                     f"{settings.pp} micro-batches in flight (vLLM V1's batch queue): the step is the whole model's at "
                     "⌈batch / pp⌉ sequences plus the stage-to-stage sends; the PP group's NCCL buffers are not "
                     "counted")
    if settings.dp > 1:
        notes.append(f"--dp {settings.dp}: each data-parallel rank runs attention on {settings.tp} GPU(s) with its own "
                     "KV cache; concurrency, the time line and a --rate answer's replicas are per DP rank")
    if settings.ep > 1:
        notes.append(f"--ep {settings.ep}: whole experts split over {settings.ep} ranks (weights per GPU: the dense "
                     f"part / tp, the routed experts / ep, parallel/profile.py's split of the trace); a dispatch and a "
                     "combine all-to-all per MoE layer in the step time (perf/collectives.py); expert load assumed "
                     "balanced")
    if layout.sliding_layers:
        notes.append("sliding-window layers hold at most window − 1 + max_num_batched_tokens tokens per sequence "
                     "(vLLM SlidingWindowSpec), not the whole context")
    notes.extend(step.notes)
    return notes
