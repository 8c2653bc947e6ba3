"""Can this GPU run this workload at all: the one check every verb makes before any trace.

Each rule is the hardware's, not a verb's: bf16 compute (``--precision bf16|amp-bf16``, and QLoRA,
whose NF4 layers compute in bf16 as bitsandbytes' ``bnb_4bit_compute_dtype`` is set by PEFT's recipes)
needs a GPU with bf16 (compute capability 8.0+ on NVIDIA); FP8 training (torchao ``Float8Linear``:
``torch._scaled_mm``) needs FP8 tensor cores, compute capability 8.9+ (Ada, Hopper, Blackwell); MXFP8 and
NVFP4 training need Blackwell's block-scaled tensor cores, 10.0+ (``gpuplan.scaled_formats``). A GPU
without a CUDA compute capability (AMD, Apple) is judged by the dtypes its catalog row lists.

``refusal`` gives both a short reason (recommend's "left out" table) and the one-line error every other
verb raises, so ``estimate``, ``fit`` and ``plan`` refuse the same inputs with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError
from gpuplan.scaled_formats import SCALED_FORMATS

if TYPE_CHECKING:
    from gpuplan.hardware.gpu import GPU
    from gpuplan.workload import Workload

FP8_MIN_COMPUTE_CAPABILITY = SCALED_FORMATS["fp8"].min_compute_capability
"""``torch._scaled_mm`` (torchao float8 training) needs sm_89 or newer."""


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    """Short, after the GPU's name: 'no bfloat16 support (use --precision amp-fp16)'."""
    message: str
    """The one-line error: what is wrong, with what, and what to do."""


def refusal(workload: Workload, gpu: GPU) -> Refusal | None:
    """Why ``gpu`` cannot run ``workload`` (None: it can)."""
    cc, label = gpu.compute_capability, gpu.compute_capability_label
    instead = _sixteen_bit_instead(gpu)
    scaled = SCALED_FORMATS.get(workload.precision)
    block_scaled = scaled is not None and scaled.precision != "fp8"
    if scaled is not None and block_scaled and cc is not None and tuple(cc) < scaled.min_compute_capability:
        need = ".".join(map(str, scaled.min_compute_capability))
        # per-tensor FP8 where this GPU has FP8 tensor cores (Ada, Hopper), else its own 16-bit type
        runs_here = f"fp8 or {instead}" if tuple(cc) >= FP8_MIN_COMPUTE_CAPABILITY else instead
        return Refusal(
            f"no block-scaled {scaled.precision.upper()} tensor cores (compute capability below {need})",
            f"{gpu.id} has no {scaled.precision.upper()} tensor cores (compute capability {label}; "
            f"--precision {scaled.precision} needs {need}+: Blackwell); use --precision {runs_here}, or pick a "
            "Blackwell GPU",
        )
    if workload.precision == "fp8" and cc is not None and tuple(cc) < FP8_MIN_COMPUTE_CAPABILITY:
        return Refusal(
            f"no FP8 tensor cores (compute capability below 8.9; use --precision {instead})",
            f"{gpu.id} has no FP8 tensor cores (compute capability {label}; FP8 needs 8.9+: Ada, "
            f"Hopper, Blackwell); use --precision {instead}, or pick an FP8 GPU",
        )
    if workload.peft == "qlora" and not gpu.has_bf16:
        return Refusal(
            "no bfloat16 support (QLoRA computes in bf16)",
            f"--peft qlora computes in bfloat16, which {gpu.id} lacks (compute capability {label}); use "
            "--peft lora with --precision amp-fp16, or a GPU with bf16 (compute capability 8.0+)",
        )
    if workload.precision in ("amp-bf16", "bf16") and not gpu.has_bf16:
        return Refusal(
            "no bfloat16 support (use --precision amp-fp16)",
            f"{gpu.id} has no bfloat16 support (compute capability {label}); use --precision amp-fp16",
        )
    return None


def _sixteen_bit_instead(gpu: GPU) -> str:
    """What to train in on a GPU refused a scaled format: its own 16-bit type under autocast (a T4 or V100 has
    no bf16, so suggesting bf16 there would only trade one refusal for another), fp32 where no 16-bit type runs
    fast (GTX 1080 Ti)."""
    half = gpu.half_precision
    return f"amp-{half}" if half is not None else "fp32"


def check_workload_on_gpu(workload: Workload, gpu: GPU | None) -> None:
    """Raise the one-line refusal when ``gpu`` cannot run ``workload``; no GPU, nothing to check."""
    if gpu is None:
        return
    found = refusal(workload, gpu)
    if found is not None:
        raise ConfigError(found.message)


def default_precision_on(mode: str, gpu_name: str | None) -> str:
    """The precision people run on the named GPU (workload.default_precision of its fast 16-bit type); without
    a GPU, on the default class (sm_90, as the trace assumes). The one rule behind the command line's and the
    web page's default when no precision is given."""
    from gpuplan.hardware.catalog import resolve_gpu

    if not gpu_name:
        return default_precision_for(mode, None)
    gpu = resolve_gpu(gpu_name)  # an unknown name is its own one-line error, as it would be a moment later
    return default_precision_for(mode, gpu)


def default_precision_for(mode: str, gpu: GPU | None) -> str:
    """:func:`default_precision_on` for a resolved GPU (None: the default class, sm_90): ``recommend`` asks it
    for every catalog GPU when no precision is given, so a T4 is ranked in amp-fp16, not left out for bf16."""
    from gpuplan.workload import default_precision

    return default_precision(mode, gpu.half_precision if gpu is not None else "bf16")
