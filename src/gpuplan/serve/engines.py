"""The serving engines modelled: their version, defaults, refusal messages and launch command lines.

Each default names the file of the engine version it was read from. vLLM 0.10.0 (V1 engine):
``vllm/engine/arg_utils.py`` (``_set_default_args_v1``: token and sequence budgets by usage context
and device memory), ``vllm/config.py`` (block size 16, CUDA-graph capture sizes
``[1, 2, 4] + range(8, 513, 8)``), ``vllm/v1/worker/gpu_worker.py`` (``determine_available_memory``),
``vllm/v1/core/kv_cache_utils.py`` (``check_enough_kv_cache_memory``). SGLang 0.4.6:
``python/sglang/srt/server_args.py`` (``mem_fraction_static`` by TP size, ``chunked_prefill_size``),
``python/sglang/srt/model_executor/model_runner.py`` (``profile_max_num_token``). llama.cpp and Ollama
(local inference on GGUF files, serve/llamacpp.py): ``LocalEngine``s, their settings and launch lines.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gpuplan.errors import ConfigError
from gpuplan.serve import budget as budgets
from gpuplan.units import GIB

if TYPE_CHECKING:
    from gpuplan.serve.kv import KVCost
    from gpuplan.serve.speculative import Speculation

VLLM_BLOCK_SIZE = 16
VLLM_GRAPH_CAPTURE_SIZES: tuple[int, ...] = (1, 2, 4, *range(8, 513, 8))
"""vllm/config.py: cudagraph_capture_sizes when none are given (max_capture_size 512)."""
# arg_utils._set_default_args_v1: devices of >= 70 GiB other than A100 get the larger budgets
VLLM_LARGE_DEVICE_BYTES = 70 * GIB
VLLM_SERVER_BATCHED_TOKENS = {True: 8192, False: 2048}
VLLM_LLM_CLASS_BATCHED_TOKENS = {True: 16384, False: 8192}
VLLM_MAX_NUM_SEQS = {True: 1024, False: 256}
SGLANG_PAGE_SIZE = 1
SGLANG_CHUNKED_PREFILL = 8192
# server_args.py __post_init__: mem_fraction_static by tensor-parallel size
_SGLANG_MEM_FRACTION = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))

VLLM_NO_CACHE_MESSAGE = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                         "when initializing the engine.")
SGLANG_NO_CACHE_MESSAGE = "Not enough memory. Please try to increase --mem-fraction-static."
VLLM_DRAFT_REFUSAL = ("NotImplementedError: Speculative decoding with draft model is not supported yet. Please "
                      "consider using other speculative decoding methods such as ngram, medusa, eagle, or "
                      "deepseek_mtp.")
"""vLLM 0.10.0 ``vllm/engine/arg_utils.py`` ``_is_v1_supported_oracle``: the V1 engine refuses a draft model
(re-added to V1 later, vLLM PR #24322); gpuplan still shows the budget that allocation holds."""


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ConfigError(f"unknown --engine {engine!r} (allowed: {', '.join(ENGINES)})")
    return engine


def is_local(engine: str) -> bool:
    """A local-inference engine (llama.cpp, Ollama): GGUF weights split between GPU and CPU by layer."""
    return check_engine(engine) in _LOCAL_ENGINES


def check_utilization(value: float, flag: str = "--gpu-memory-utilization") -> float:
    if not (0.0 < value <= 1.0):
        raise ConfigError(f"{flag} {value:g} is outside (0, 1]: it is the fraction of the GPU's "
                          "memory the engine may use; pass e.g. 0.9")
    return value


def eager_flag(engine: str) -> str:
    """The serving engine's own switch that turns its CUDA graphs off (``Engine.eager_flag``)."""
    return get_engine(engine).eager_flag


def sglang_mem_fraction_static(tp: int) -> float:
    return next(fraction for size, fraction in _SGLANG_MEM_FRACTION if tp >= size)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What the engine runs with (defaults resolved): everything the budget and the command need."""

    engine: str
    model_id: str
    tp: int
    pp: int
    max_model_len: int
    gpu_memory_utilization: float
    """vLLM: fraction of the GPU for weights + activations + graphs + KV; SGLang: mem_fraction_static."""
    kv_cache_dtype: str
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    quantization: str
    cuda_graphs: bool
    quantization_from_checkpoint: bool = False
    """The checkpoint's config states its quantization: the engine reads it, no --quantization flag."""
    dp: int = 1
    """Data-parallel attention ranks, each with its own KV cache and --tp GPUs."""
    ep: int = 1
    """Expert-parallel ranks (1: every expert sharded by TP; else tp × dp, the experts split over all GPUs)."""
    max_loras: int = 0
    """Multi-LoRA slots (0: LoRA off) at ``max_lora_rank`` (serve/lora.py)."""
    max_lora_rank: int = 0
    speculative: Speculation | None = None
    """Speculative decoding (serve/speculative.py); None: off."""
    model_type: str = ""
    kv_role: str = ""
    """Prefill/decode disaggregation: ``prefill`` or ``decode`` (serve/disaggregate.py); "" aggregated."""

    @property
    def version(self) -> str:
        return get_engine(self.engine).version

    def to_dict(self) -> dict[str, object]:
        return {"name": self.engine, "version": self.version, "tensor_parallel_size": self.tp,
                "pipeline_parallel_size": self.pp, "data_parallel_size": self.dp,
                "expert_parallel_size": self.ep, "max_model_len": self.max_model_len,
                "gpu_memory_utilization": self.gpu_memory_utilization, "kv_cache_dtype": self.kv_cache_dtype,
                "max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs,
                "block_size": self.block_size, "quantization": self.quantization, "cuda_graphs": self.cuda_graphs,
                "max_loras": self.max_loras, "max_lora_rank": self.max_lora_rank,
                "speculative_method": self.speculative.method if self.speculative else None}


def _ok(name: str, kv: int, cost: KVCost) -> tuple[bool, str]:
    return True, f"{name} serves with {kv / GIB:.2f} GiB of KV cache per GPU ({cost.cache_tokens(kv):,} tokens)"


class Engine(Protocol):
    """A serving engine as gpuplan models it: its defaults, how it splits a GPU's memory, when it refuses to
    start and the command line that launches it. One implementation per engine; ``serve.capacity`` asks
    the engine instead of branching on its name."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def block_size(self) -> int:
        """Tokens per KV page."""
        ...

    @property
    def paged(self) -> bool:
        """A paged KV cache with its own budget flag (fp8 KV allowed, CUDA graphs, rotary caches, TP ranks)."""
        ...

    @property
    def profiles_images(self) -> bool:
        """The profile run encodes dummy images first for a vision-language model (serve/profile.py)."""
        ...

    @property
    def eager_flag(self) -> str:
        """Its own switch that turns its CUDA graphs off ("" for an engine that captures none)."""
        ...

    @property
    def features(self) -> frozenset[str]:
        """Multi-LoRA (``lora``) and the speculative-decoding methods (``draft``, ``mtp``) modelled for it."""
        ...

    def refusal(self, feature: str) -> str | None:
        """What the modelled version says when it refuses ``feature`` at start, if it does."""
        ...

    def default_utilization(self, tp: int) -> float: ...

    def default_batched_tokens(self, device_bytes: int, large_not_a100: bool, *, llm_class: bool,
                               context: int) -> int: ...

    def default_max_num_seqs(self, device_bytes: int, large_not_a100: bool) -> int: ...

    def profile_num_seqs(self, max_num_seqs: int) -> int: ...

    def graph_bytes(self, s: EngineSettings, attention_layers: int, hidden_size: int, dtype_bytes: int) -> int: ...

    def budget(self, s: EngineSettings, *, total_bytes: int, weights_bytes: int, activation_peak_bytes: int,
               non_torch: int, context_bytes: int, graphs: int) -> budgets.Budget: ...

    def verdict(self, s: EngineSettings, budget: budgets.Budget, cost: KVCost, fits_len: int,
                name: str) -> tuple[bool, str]: ...

    def command(self, s: EngineSettings) -> str: ...

    def notes(self, s: EngineSettings) -> tuple[str, ...]:
        """What the answer assumes of this engine beyond its defaults."""
        ...


@dataclass(frozen=True, slots=True)
class VLLM:
    """vLLM 0.10.0, V1 engine (module docstring for the files each default is read from)."""

    name: str = "vllm"
    version: str = "0.10.0"
    block_size: int = VLLM_BLOCK_SIZE
    paged: bool = True
    profiles_images: bool = True
    eager_flag: str = "--enforce-eager"  # EngineArgs.enforce_eager
    # vLLM 0.10.0's LoRA slots and --speculative-config
    features: frozenset[str] = frozenset({"lora", "draft", "mtp"})

    def refusal(self, feature: str) -> str | None:
        return VLLM_DRAFT_REFUSAL if feature == "draft" else None

    def default_utilization(self, tp: int) -> float:
        return 0.9

    def default_batched_tokens(self, device_bytes: int, large_not_a100: bool, *, llm_class: bool,
                               context: int) -> int:
        large = device_bytes >= VLLM_LARGE_DEVICE_BYTES and large_not_a100
        return (VLLM_LLM_CLASS_BATCHED_TOKENS if llm_class else VLLM_SERVER_BATCHED_TOKENS)[large]

    def default_max_num_seqs(self, device_bytes: int, large_not_a100: bool) -> int:
        return VLLM_MAX_NUM_SEQS[device_bytes >= VLLM_LARGE_DEVICE_BYTES and large_not_a100]

    def profile_num_seqs(self, max_num_seqs: int) -> int:
        return max_num_seqs

    def graph_bytes(self, s: EngineSettings, attention_layers: int, hidden_size: int, dtype_bytes: int) -> int:
        if not s.cuda_graphs:
            return 0
        largest = min(512, 2 * s.max_num_seqs)
        sizes = sum(1 for size in VLLM_GRAPH_CAPTURE_SIZES if size <= largest)
        return budgets.cuda_graph_bytes(sizes, attention_layers, hidden_size, dtype_bytes, largest)

    def budget(self, s: EngineSettings, *, total_bytes: int, weights_bytes: int, activation_peak_bytes: int,
               non_torch: int, context_bytes: int, graphs: int) -> budgets.Budget:
        return budgets.vllm_budget(total_bytes, s.gpu_memory_utilization, weights_bytes=weights_bytes,
                                   activation_peak_bytes=activation_peak_bytes, non_torch=non_torch, graphs=graphs,
                                   context_bytes=context_bytes)

    def verdict(self, s: EngineSettings, budget: budgets.Budget, cost: KVCost, fits_len: int,
                name: str) -> tuple[bool, str]:
        kv = budget.kv_cache_bytes
        if kv <= 0:
            return False, f"ValueError: {VLLM_NO_CACHE_MESSAGE}"
        needed = cost.sequence_bytes(s.max_model_len)
        if needed > kv:  # kv_cache_utils.check_enough_kv_cache_memory
            return False, (f"ValueError: To serve at least one request with the models's max seq len "
                           f"({s.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which is larger "
                           f"than the available KV cache memory ({kv / GIB:.2f} GiB). Based on the available memory, "
                           f"the estimated maximum model length is {fits_len}. Try increasing "
                           "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
        if budget.cuda_graph_bytes > budget.outside_pool_bytes:
            return False, (f"torch.OutOfMemoryError: CUDA out of memory at CUDA-graph capture: the graphs need "
                           f"{budget.cuda_graph_bytes / GIB:.2f} GiB, the KV cache leaves "
                           f"{budget.outside_pool_bytes / GIB:.2f} GiB (vLLM 0.10.0 sizes the KV cache before "
                           "capturing them); lower --gpu-memory-utilization or --max-num-seqs, or add --enforce-eager")
        return _ok(name, kv, cost)

    def command(self, s: EngineSettings) -> str:
        args = ["vllm", "serve", s.model_id, "--tensor-parallel-size", str(s.tp),
                "--pipeline-parallel-size", str(s.pp), "--max-model-len", str(s.max_model_len),
                "--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}",
                "--max-num-batched-tokens", str(s.max_num_batched_tokens), "--max-num-seqs", str(s.max_num_seqs),
                "--kv-cache-dtype", s.kv_cache_dtype]
        if s.quantization != "none" and not s.quantization_from_checkpoint:
            args += ["--quantization", _VLLM_QUANT[s.quantization]]
        if s.dp > 1:
            args += ["--data-parallel-size", str(s.dp)]
        if s.ep > 1:  # vLLM's EP group is every GPU of the instance: tp × dp
            args += ["--enable-expert-parallel"]
        if s.max_loras:
            args += ["--enable-lora", "--max-loras", str(s.max_loras), "--max-lora-rank", str(s.max_lora_rank)]
        if s.speculative is not None:
            args += ["--speculative-config", s.speculative.vllm_config(s.model_type)]
        if s.kv_role:  # vLLM 0.10.0 P/D: NIXL moves the prompt's KV; both sides run the same connector role
            args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
        if not s.cuda_graphs:
            args += [self.eager_flag]
        return shlex.join(args)

    def notes(self, s: EngineSettings) -> tuple[str, ...]:
        if not s.cuda_graphs:
            return ()
        return (f"CUDA graphs: piecewise, {budgets.GRAPH_BYTES_PER_CAPTURE // 1024} KiB per captured graph "
                "(fitted on vLLM PR #21489's gemma-3-4b-it figure) plus the pieces' static outputs; captured "
                "after the KV cache is sized, so not subtracted from it (vLLM 0.10.0; ≥ 0.21 subtracts them)",)


@dataclass(frozen=True, slots=True)
class SGLang:
    """SGLang 0.4.6 (``server_args.py``, ``model_runner.py``)."""

    name: str = "sglang"
    version: str = "0.4.6"
    block_size: int = SGLANG_PAGE_SIZE
    paged: bool = True
    profiles_images: bool = False
    eager_flag: str = "--disable-cuda-graph"  # ServerArgs.disable_cuda_graph
    # SGLang 0.4.6's NEXTN (MTP); its LoRA pool (--lora-paths, --max-loras-per-batch) and a standalone draft
    # model (STANDALONE, a later release) are not modelled
    features: frozenset[str] = frozenset({"mtp"})

    def refusal(self, feature: str) -> str | None:
        return None

    def default_utilization(self, tp: int) -> float:
        return sglang_mem_fraction_static(tp)

    def default_batched_tokens(self, device_bytes: int, large_not_a100: bool, *, llm_class: bool,
                               context: int) -> int:
        return SGLANG_CHUNKED_PREFILL

    def default_max_num_seqs(self, device_bytes: int, large_not_a100: bool) -> int:
        return 256

    def profile_num_seqs(self, max_num_seqs: int) -> int:
        return max_num_seqs

    def graph_bytes(self, s: EngineSettings, attention_layers: int, hidden_size: int, dtype_bytes: int) -> int:
        if not s.cuda_graphs:
            return 0
        largest = min(160, s.max_num_seqs)  # full graphs (no pieces), batch sizes up to 160
        sizes = sum(1 for size in VLLM_GRAPH_CAPTURE_SIZES if size <= largest)
        return budgets.cuda_graph_bytes(sizes, 0, hidden_size, dtype_bytes, largest)

    def budget(self, s: EngineSettings, *, total_bytes: int, weights_bytes: int, activation_peak_bytes: int,
               non_torch: int, context_bytes: int, graphs: int) -> budgets.Budget:
        return budgets.sglang_budget(total_bytes, s.gpu_memory_utilization, weights_bytes=weights_bytes,
                                     context_bytes=context_bytes, activation_peak_bytes=activation_peak_bytes,
                                     non_torch=non_torch, graphs=graphs)

    def verdict(self, s: EngineSettings, budget: budgets.Budget, cost: KVCost, fits_len: int,
                name: str) -> tuple[bool, str]:
        kv = budget.kv_cache_bytes
        if kv <= 0:
            return False, f"RuntimeError: {SGLANG_NO_CACHE_MESSAGE}"
        outside = budget.activation_peak_bytes + budget.cuda_graph_bytes + budget.non_torch_bytes
        if outside > budget.outside_pool_bytes:
            return False, (f"activations + CUDA graphs need {outside / GIB:.2f} GiB outside the static pool, which "
                           f"leaves {budget.outside_pool_bytes / GIB:.2f} GiB (1 − --mem-fraction-static): CUDA out "
                           "of memory at graph capture; lower --mem-fraction-static")
        if cost.sequence_bytes(s.max_model_len) > kv:
            # SGLang starts anyway and caps each request (scheduler: max_req_input_len = min(context_len − 1,
            # max_total_num_tokens − 1))
            return True, (f"{name} starts with {kv / GIB:.2f} GiB of KV cache per GPU ({cost.cache_tokens(kv):,} "
                          f"tokens); SGLang caps each request at {min(fits_len, s.max_model_len) - 1:,} tokens, "
                          f"below --context-length {s.max_model_len:,}")
        return _ok(name, kv, cost)

    def command(self, s: EngineSettings) -> str:
        # SGLang's --tp-size counts every GPU of the instance; --dp-size splits attention over them
        args = ["python", "-m", "sglang.launch_server", "--model-path", s.model_id, "--tp-size", str(s.tp * s.dp),
                "--context-length", str(s.max_model_len), "--mem-fraction-static", f"{s.gpu_memory_utilization:g}",
                "--chunked-prefill-size", str(s.max_num_batched_tokens), "--max-running-requests", str(s.max_num_seqs)]
        if s.pp > 1:
            args += ["--pp-size", str(s.pp)]
        if s.dp > 1:
            args += ["--dp-size", str(s.dp), "--enable-dp-attention"]
        if s.ep > 1:
            args += ["--ep-size", str(s.ep)]
        if s.kv_cache_dtype == "fp8":
            args += ["--kv-cache-dtype", "fp8_e4m3"]
        if s.quantization != "none" and not s.quantization_from_checkpoint:
            args += ["--quantization", _VLLM_QUANT[s.quantization]]
        if s.speculative is not None:
            args += s.speculative.sglang_args()
        if s.kv_role:
            args += ["--disaggregation-mode", s.kv_role]
        if not s.cuda_graphs:
            args += [self.eager_flag]
        return shlex.join(args)

    def notes(self, s: EngineSettings) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class HFGenerate:
    """transformers' ``model.generate()`` with ``device_map='auto'``: no budget flag, one sequence's cache."""

    name: str = "hf"
    version: str = "transformers 5"
    block_size: int = 1
    paged: bool = False
    profiles_images: bool = False
    eager_flag: str = ""  # generate() captures no CUDA graphs
    features: frozenset[str] = frozenset()

    def refusal(self, feature: str) -> str | None:
        return None

    def default_utilization(self, tp: int) -> float:
        return 1.0

    def default_batched_tokens(self, device_bytes: int, large_not_a100: bool, *, llm_class: bool,
                               context: int) -> int:
        return context  # the whole prompt in one forward

    def default_max_num_seqs(self, device_bytes: int, large_not_a100: bool) -> int:
        return 256

    def profile_num_seqs(self, max_num_seqs: int) -> int:
        return 1

    def graph_bytes(self, s: EngineSettings, attention_layers: int, hidden_size: int, dtype_bytes: int) -> int:
        return 0

    def budget(self, s: EngineSettings, *, total_bytes: int, weights_bytes: int, activation_peak_bytes: int,
               non_torch: int, context_bytes: int, graphs: int) -> budgets.Budget:
        return budgets.hf_budget(total_bytes, weights_bytes=weights_bytes, activation_peak_bytes=activation_peak_bytes,
                                 non_torch=non_torch, context_bytes=context_bytes)

    def verdict(self, s: EngineSettings, budget: budgets.Budget, cost: KVCost, fits_len: int,
                name: str) -> tuple[bool, str]:
        kv = budget.kv_cache_bytes
        if kv <= 0:
            return False, "the weights and activations leave no memory for the KV cache"
        needed = cost.sequence_bytes(s.max_model_len)
        if needed > kv:
            return False, (f"one sequence of --max-model-len {s.max_model_len:,} needs {needed / GIB:.2f} GiB "
                           f"of KV, {kv / GIB:.2f} GiB are left; the longest that fits is {fits_len:,}")
        return _ok(name, kv, cost)

    def command(self, s: EngineSettings) -> str:
        load = {"none": "", "int8": ", load_in_8bit=True", "int4": ", load_in_4bit=True", "fp8": ""}[s.quantization]
        return (f"python -c \"from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained("
                f"'{s.model_id}', dtype='auto', device_map='auto'{load})\"")

    def notes(self, s: EngineSettings) -> tuple[str, ...]:
        return ()


LLAMA_CPP_DEFAULT_UBATCH = 512
"""llama.cpp ``common/common.h``: ``n_ubatch = 512``."""


@dataclass(frozen=True, slots=True)
class LocalSettings:
    """What llama-server / Ollama runs with (defaults resolved)."""

    engine: str
    model_path: str
    n_gpu_layers: int
    context: int
    """Tokens per sequence slot."""
    parallel: int
    """Sequence slots (``-np``); ``-c`` = context × parallel."""
    ubatch: int
    cache_type_k: str
    cache_type_v: str
    flash_attn: bool
    tensor_split: tuple[float, ...]
    cpu_patterns: tuple[str, ...] = ()
    """``-ot PATTERN=CPU`` regexes."""
    n_cpu_moe: int = 0

    @property
    def n_ctx(self) -> int:
        return self.context * self.parallel

    @property
    def gpus(self) -> int:
        return len(self.tensor_split)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.engine, "version": get_local_engine(self.engine).version,
                "n_gpu_layers": self.n_gpu_layers, "n_ctx": self.n_ctx, "context_per_slot": self.context,
                "parallel": self.parallel, "ubatch_size": self.ubatch, "cache_type_k": self.cache_type_k,
                "cache_type_v": self.cache_type_v, "flash_attn": self.flash_attn,
                "tensor_split": list(self.tensor_split), "override_tensor_cpu": list(self.cpu_patterns),
                "n_cpu_moe": self.n_cpu_moe}


class LocalEngine(Protocol):
    """A local-inference engine: its launch line for the settings and, for Ollama, the Modelfile."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def outputs_embeddings(self) -> bool:
        """The runner asks its context for embeddings too: an output buffer of ``n_embd`` floats per slot
        beside the logits (llama_context::output_reserve)."""
        ...

    @property
    def launch_note(self) -> str:
        """What the answer assumes of this engine's launch (one note of the answer's)."""
        ...

    def command(self, s: LocalSettings) -> str: ...

    def modelfile(self, s: LocalSettings) -> str | None: ...

    def check(self, s: LocalSettings) -> None:
        """Refuse, in one line, settings this engine would refuse or cannot express."""
        ...


_UNQUANTIZED_KV = ("f32", "f16", "bf16")


@dataclass(frozen=True, slots=True)
class LlamaCpp:
    """llama.cpp's ``llama-server`` (flags of ``common/arg.cpp``; placement of ``src/llama-model.cpp`` @ a5410f04)."""

    name: str = "llama.cpp"
    version: str = "llama.cpp b5xxx (ggml-org/llama.cpp @ a5410f04)"
    outputs_embeddings: bool = False
    launch_note: str = ("launch line in the flag spelling of the modelled build (-fa a switch); newer llama.cpp builds "
                        "spell it '-fa on' and place the output layer first (-ngl counts it before the last repeating "
                        "layers)")

    def command(self, s: LocalSettings) -> str:
        args = ["llama-server", "-m", s.model_path, "-ngl", str(s.n_gpu_layers), "-c", str(s.n_ctx)]
        if s.parallel > 1:
            args += ["-np", str(s.parallel)]
        if s.flash_attn:
            args += ["-fa"]
        if s.cache_type_k != "f16":
            args += ["--cache-type-k", s.cache_type_k]
        if s.cache_type_v != "f16":
            args += ["--cache-type-v", s.cache_type_v]
        if s.ubatch != LLAMA_CPP_DEFAULT_UBATCH:
            args += ["-ub", str(s.ubatch)]
        if s.gpus > 1:
            args += ["--tensor-split", ",".join(f"{f:g}" for f in s.tensor_split)]
        for p in s.cpu_patterns:
            args += ["--override-tensor", f"{p}=CPU"]
        if s.n_cpu_moe:
            args += ["--n-cpu-moe", str(s.n_cpu_moe)]
        return shlex.join(args)

    def modelfile(self, s: LocalSettings) -> str | None:
        return None

    def check(self, s: LocalSettings) -> None:
        # llama-context.cpp (llama_init_from_model) refuses a quantized V cache without flash attention
        if s.cache_type_v not in _UNQUANTIZED_KV and not s.flash_attn:
            raise ConfigError(f"--cache-type-v {s.cache_type_v} needs flash attention: llama.cpp refuses a quantized "
                              "V cache without it ('V cache quantization requires flash_attn'); add --flash-attn on")


@dataclass(frozen=True, slots=True)
class Ollama:
    """Ollama: a Modelfile pins ``num_gpu`` (layers on the GPU) and ``num_ctx``; flash attention, the KV type and
    the slots are the server's environment (``OLLAMA_FLASH_ATTENTION``, ``OLLAMA_KV_CACHE_TYPE``,
    ``OLLAMA_NUM_PARALLEL``: envconfig/config.go)."""

    name: str = "ollama"
    version: str = "Ollama (its llama.cpp runner)"
    # Ollama's runner asks for embeddings: 0.50 MiB, not 0.49, for a 128,256-token vocabulary in ollama #8310
    outputs_embeddings: bool = True
    launch_note: str = ("Ollama: modelled as its llama.cpp runner with the Modelfile's num_gpu / num_ctx; Ollama's own "
                        "estimate may choose fewer layers")

    def command(self, s: LocalSettings) -> str:
        env = []
        if s.flash_attn:
            env.append("OLLAMA_FLASH_ATTENTION=1")
        if s.cache_type_k != "f16" or s.cache_type_v != "f16":  # one type for K and V
            env.append(f"OLLAMA_KV_CACHE_TYPE={s.cache_type_v if s.cache_type_v != 'f16' else s.cache_type_k}")
        if s.parallel > 1:
            env.append(f"OLLAMA_NUM_PARALLEL={s.parallel}")
        serve = " ".join([*env, "ollama", "serve"])
        return f"{serve} & ollama create local-model -f Modelfile && ollama run local-model"

    def check(self, s: LocalSettings) -> None:
        # ollama docs/faq.md (K/V cache quantization): one OLLAMA_KV_CACHE_TYPE for K and V, f16 / q8_0 / q4_0,
        # and only with flash attention enabled
        if s.cache_type_k != s.cache_type_v or s.cache_type_k not in ("f16", "q8_0", "q4_0"):
            raise ConfigError(f"--cache-type-k {s.cache_type_k} --cache-type-v {s.cache_type_v}: Ollama takes one "
                              "OLLAMA_KV_CACHE_TYPE for K and V, f16, q8_0 or q4_0; pass the same one for both")
        if s.cache_type_k != "f16" and not s.flash_attn:
            raise ConfigError(f"--cache-type-k/-v {s.cache_type_k}: Ollama quantizes the KV cache only with flash "
                              "attention (OLLAMA_FLASH_ATTENTION=1); add --flash-attn on")
        if s.gpus > 1:
            raise ConfigError("--tensor-split is llama.cpp's: Ollama splits layers over its GPUs itself; use "
                              "--engine llama.cpp")

    def modelfile(self, s: LocalSettings) -> str | None:
        return f"FROM {s.model_path}\nPARAMETER num_gpu {s.n_gpu_layers}\nPARAMETER num_ctx {s.context}\n"


_ENGINES: dict[str, Engine] = {e.name: e for e in (VLLM(), SGLang(), HFGenerate())}
_LOCAL_ENGINES: dict[str, LocalEngine] = {e.name: e for e in (LlamaCpp(), Ollama())}
PAGED_ENGINES: tuple[str, ...] = tuple(_ENGINES)
LOCAL_ENGINES: tuple[str, ...] = tuple(_LOCAL_ENGINES)
ENGINES: tuple[str, ...] = (*PAGED_ENGINES, *LOCAL_ENGINES)


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (a one-line error naming the allowed ones otherwise)."""
    if check_engine(name) in _LOCAL_ENGINES:
        raise ConfigError(f"--engine {name} runs GGUF models on one machine (serve/llamacpp.py): it has no paged "
                          "KV budget; this answer needs --engine vllm, sglang or hf")
    return _ENGINES[name]


def get_local_engine(name: str) -> LocalEngine:
    """The local-inference engine called ``name``."""
    if check_engine(name) not in _LOCAL_ENGINES:
        raise ConfigError(f"--engine {name} is a serving engine; local inference takes --engine "
                          f"{' or '.join(_LOCAL_ENGINES)}")
    return _LOCAL_ENGINES[name]


def default_batched_tokens(engine: str, device_bytes: int, large_not_a100: bool, *, llm_class: bool = False) -> int:
    return get_engine(engine).default_batched_tokens(device_bytes, large_not_a100, llm_class=llm_class, context=0)


def default_max_num_seqs(engine: str, device_bytes: int, large_not_a100: bool) -> int:
    return get_engine(engine).default_max_num_seqs(device_bytes, large_not_a100)


def refusal(engine: str, feature: str) -> str | None:
    """What the modelled engine version says when it refuses ``feature`` at start, if it does."""
    return get_engine(engine).refusal(feature)


def check_feature(engine: str, feature: str, flag: str) -> None:
    """Multi-LoRA and speculative decoding are modelled for the engines whose ``features`` name them."""
    if feature not in get_engine(engine).features:
        which = ", ".join(name for name, e in _ENGINES.items() if feature in e.features)
        raise ConfigError(f"{flag} is modelled for --engine {which} only, not {engine}; pass --engine "
                          f"{which.split(',')[0]}")


def command(s: EngineSettings) -> str:
    """The launch command line for the settings (flags each engine's own parser accepts)."""
    return get_engine(s.engine).command(s)


# gpuplan's weight-only schemes → the engines' --quantization values for such checkpoints
_VLLM_QUANT = {"int8": "bitsandbytes", "fp8": "fp8", "int4": "awq"}
