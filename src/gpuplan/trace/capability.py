"""The compute capabilities at which a traced step changes: the kernels CUDA would pick.

Every rule of the trace that reads the target's compute capability compares it with a threshold
named here, so the trace cache (trace/cache.py) can key a trace by the class of GPUs that trace the
same (an H100 and an H200 share one, an A100 another). A new rule that reads the capability adds its
threshold here, or the cache would hand one class's trace to another.
"""

from __future__ import annotations

EFFICIENT_ATTENTION_MIN_CC = 50
"""Memory-efficient SDPA (sm_50+; in bfloat16 sm_80+): aten/src/ATen/native/transformers/cuda/sdp_utils.cpp."""
FLASH_ATTENTION_MIN_CC = 80
"""Flash SDPA and bfloat16 memory-efficient SDPA need sm_80+ (same file)."""
TRACE_CC_THRESHOLDS: tuple[int, ...] = (EFFICIENT_ATTENTION_MIN_CC, FLASH_ATTENTION_MIN_CC)


def cc_number(compute_capability: tuple[int, int]) -> int:
    """(9, 0) -> 90."""
    return compute_capability[0] * 10 + compute_capability[1]


def trace_cc_class(compute_capability: tuple[int, int]) -> int:
    """The highest threshold the capability reaches (0 below all): GPUs of one class trace alike."""
    cc = cc_number(compute_capability)
    return max((t for t in TRACE_CC_THRESHOLDS if cc >= t), default=0)
