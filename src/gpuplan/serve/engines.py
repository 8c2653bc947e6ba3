"""The serving engines modelled: their version, defaults, refusal messages and launch command lines.

Each default names the file of the engine version it was read from. vLLM 0.10.0 (V1 engine):
``vllm/engine/arg_utils.py`` (``_set_default_args_v1``: token and sequence budgets by usage context
and device memory), ``vllm/config.py`` (block size 16, CUDA-graph capture sizes
``[1, 2, 4] + range(8, 513, 8)``), ``vllm/v1/worker/gpu_worker.py`` (``determine_available_memory``),
``vllm/v1/core/kv_cache_utils.py`` (``check_enough_kv_cache_memory``). SGLang 0.4.6:
``python/sglang/srt/server_args.py`` (``mem_fraction_static`` by TP size, ``chunked_prefill_size``),
``python/sglang/srt/model_executor/model_runner.py`` (``profile_max_num_token``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpuplan.errors import ConfigError
from gpuplan.units import GIB

ENGINES: tuple[str, ...] = ("vllm", "sglang", "hf")
ENGINE_VERSIONS: dict[str, str] = {"vllm": "0.10.0", "sglang": "0.4.6", "hf": "transformers 5"}
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


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ConfigError(f"unknown --engine {engine!r} (allowed: {', '.join(ENGINES)})")
    return engine


def check_utilization(value: float) -> float:
    if not (0.0 < value <= 1.0):
        raise ConfigError(f"--gpu-memory-utilization {value:g} is outside (0, 1]: it is the fraction of the GPU's "
                          "memory the engine may use; pass e.g. 0.9")
    return value


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

    @property
    def version(self) -> str:
        return ENGINE_VERSIONS[self.engine]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.engine, "version": self.version, "tensor_parallel_size": self.tp,
                "pipeline_parallel_size": self.pp, "max_model_len": self.max_model_len,
                "gpu_memory_utilization": self.gpu_memory_utilization, "kv_cache_dtype": self.kv_cache_dtype,
                "max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs,
                "block_size": self.block_size, "quantization": self.quantization, "cuda_graphs": self.cuda_graphs}


def default_batched_tokens(engine: str, device_bytes: int, large_not_a100: bool, *, llm_class: bool = False) -> int:
    if engine == "sglang":
        return SGLANG_CHUNKED_PREFILL
    if engine == "hf":
        return 0
    large = device_bytes >= VLLM_LARGE_DEVICE_BYTES and large_not_a100
    return (VLLM_LLM_CLASS_BATCHED_TOKENS if llm_class else VLLM_SERVER_BATCHED_TOKENS)[large]


def default_max_num_seqs(engine: str, device_bytes: int, large_not_a100: bool) -> int:
    return VLLM_MAX_NUM_SEQS[device_bytes >= VLLM_LARGE_DEVICE_BYTES and large_not_a100] if engine == "vllm" else 256


def command(s: EngineSettings) -> str:
    """The launch command line for the settings (flags each engine's own parser accepts)."""
    if s.engine == "vllm":
        args = ["vllm", "serve", s.model_id, "--tensor-parallel-size", str(s.tp),
                "--pipeline-parallel-size", str(s.pp), "--max-model-len", str(s.max_model_len),
                "--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}",
                "--max-num-batched-tokens", str(s.max_num_batched_tokens), "--max-num-seqs", str(s.max_num_seqs),
                "--kv-cache-dtype", s.kv_cache_dtype]
        if s.quantization != "none" and not s.quantization_from_checkpoint:
            args += ["--quantization", _VLLM_QUANT[s.quantization]]
        return shlex.join(args)
    if s.engine == "sglang":
        args = ["python", "-m", "sglang.launch_server", "--model-path", s.model_id, "--tp-size", str(s.tp),
                "--context-length", str(s.max_model_len), "--mem-fraction-static", f"{s.gpu_memory_utilization:g}",
                "--chunked-prefill-size", str(s.max_num_batched_tokens), "--max-running-requests", str(s.max_num_seqs)]
        if s.pp > 1:
            args += ["--pp-size", str(s.pp)]
        if s.kv_cache_dtype == "fp8":
            args += ["--kv-cache-dtype", "fp8_e4m3"]
        if s.quantization != "none" and not s.quantization_from_checkpoint:
            args += ["--quantization", _VLLM_QUANT[s.quantization]]
        return shlex.join(args)
    load = {"none": "", "int8": ", load_in_8bit=True", "int4": ", load_in_4bit=True", "fp8": ""}[s.quantization]
    return (f"python -c \"from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained("
            f"'{s.model_id}', dtype='auto', device_map='auto'{load})\"")


# gpuplan's weight-only schemes → the engines' --quantization values for such checkpoints
_VLLM_QUANT = {"int8": "bitsandbytes", "fp8": "fp8", "int4": "awq"}
