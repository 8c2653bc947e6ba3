"""Model-state memory under ZeRO: the paper's analysis and DeepSpeed's own estimators.

``model_states_bytes`` is the accounting the planner shards the traced quantities with
(Rajbhandari et al. 2020, Sec. 5 / Table 1): 16-bit parameters and gradients (2 bytes each per
parameter) plus K bytes of optimizer-held state per parameter, each partitioned over ``nd`` data
-parallel ranks from the stage that shards it on (1: optimizer state, 2: + gradients,
3: + parameters).

The DeepSpeed estimators reproduce ``estimate_zero2_model_states_mem_needs`` /
``estimate_zero3_model_states_mem_needs`` (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py,
v0.19.8), and the older ZeRO-2 formula printed in DeepSpeed's "Memory Requirements" page
(docs/code-docs/source/memory.rst), which counted 4·P on the GPU instead of 2·P.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import LayoutError

HALF_BYTES = 2
ZERO_PAPER_K = 12
"""Mixed-precision Adam: fp32 master weights, momentum and variance (ZeRO paper, Sec. 3.1)."""


@dataclass(frozen=True, slots=True)
class ModelStates:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def model_states_bytes(
    params: float,
    stage: int,
    nd: int,
    *,
    k: float = ZERO_PAPER_K,
    param_bytes: float = HALF_BYTES,
    grad_bytes: float = HALF_BYTES,
) -> ModelStates:
    """Per-rank model states of ``params`` parameters at ZeRO ``stage`` over ``nd`` ranks."""
    if stage not in (0, 1, 2, 3):
        raise LayoutError(f"ZeRO stage {stage} does not exist (allowed: 0, 1, 2, 3)")
    if nd < 1:
        raise LayoutError(f"data-parallel degree must be at least 1, got {nd}")
    p = params * param_bytes / (nd if stage >= 3 else 1)
    g = params * grad_bytes / (nd if stage >= 2 else 1)
    o = params * k / (nd if stage >= 1 else 1)
    return ModelStates(p, g, o)


def deepspeed_zero2_gpu_bytes(total_params: int, total_gpus: int, *, cpu_offload: bool = False) -> int:
    """GPU bytes from ``estimate_zero2_model_states_mem_needs`` (DeepSpeed v0.19.8)."""
    if cpu_offload:
        return 2 * total_params
    return 2 * total_params + int(18 * total_params / total_gpus)


def deepspeed_zero2_gpu_bytes_docs(total_params: int, total_gpus: int, *, cpu_offload: bool = False) -> int:
    """The ZeRO-2 formula of DeepSpeed's memory.rst (commit cef03bc): 4·P + 16·P/N; offload 2·P."""
    if cpu_offload:
        return 2 * total_params
    return 4 * total_params + int(16 * total_params / total_gpus)


def deepspeed_zero3_gpu_bytes(
    total_params: int,
    largest_layer_params: int,
    total_gpus: int,
    *,
    offload_optimizer: bool = False,
    offload_params: bool = False,
) -> int:
    """GPU bytes from ``estimate_zero3_model_states_mem_needs`` (DeepSpeed v0.19.8): 4 bytes per
    parameter of the largest layer (its gathered 16-bit weights and gradients) plus the shard."""
    largest = 4 * largest_layer_params
    if offload_optimizer and offload_params:
        return largest
    if offload_optimizer:
        return largest + int(2 * total_params / total_gpus)
    return largest + int(18 * total_params / total_gpus)
