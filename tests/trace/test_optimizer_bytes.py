"""The optimizer step's memory traffic: what each AdamW implementation's kernels read and write per
parameter, and that the ops over all parameters at once (foreach, fused) grow with the depth.

Bytes per fp32 parameter, from the kernels' own reads and writes (torch 2.x):

- fused (``_fused_adamw_``; aten/src/ATen/native/cuda/fused_adam_utils.cuh): one kernel loads param,
  grad, exp_avg, exp_avg_sq (4 × 4 B) and stores param, exp_avg, exp_avg_sq (3 × 4 B; grad only when
  unscaling with a grad_scale): 28 B.
- foreach (torch/optim/adam.py ``_multi_tensor_adam``, decoupled weight decay) and for-loop
  (``_single_tensor_adam``) run the same element-wise ops, in lists or one tensor at a time:
  params *= 1 − lr·wd (r 4, w 4), lerp_(exp_avgs, grads) (r 8, w 4), exp_avg_sqs *= β2 (r 4, w 4),
  addcmul_(exp_avg_sqs, grads, grads) (r 12, w 4), sqrt(exp_avg_sqs) (r 4, w 4), ÷ bias correction
  (r 4, w 4), + eps (r 4, w 4), addcdiv_(params, exp_avgs, denom) (r 12, w 4): 84 B.

On top of these come the step counters (one scalar per parameter tensor), bounded below.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.records import TracedStep
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_GPT2

BYTES_PER_PARAM = {"fused": 28, "foreach": 84, "for-loop": 84}
STEP_COUNTER_BYTES = 24
"""Most bytes an implementation moves per parameter tensor for its step counter: a 4-byte scalar read
and written with a 4-byte operand (``_foreach_add_(state_steps, 1)``), then read again for the bias
correction."""


def _optimizer_bytes(step: TracedStep) -> int:
    return sum((op.bytes_read + op.bytes_written) * op.count for op in step.ops if op.phase == "optimizer")


def _gpt2(n_layer: int) -> HFConfigSource:
    return HFConfigSource(f"tiny-gpt2-{n_layer}", {**TINY_GPT2, "n_layer": n_layer})


def _workload(impl: str) -> Workload:
    return Workload(mode="train", batch_size=1, seq_len=16, optimizer="adamw", optimizer_impl=impl)


@pytest.mark.parametrize("impl", sorted(BYTES_PER_PARAM))
def test_adamw_bytes_per_parameter_are_the_kernels(impl: str) -> None:
    step = trace_step(_gpt2(2), _workload(impl), scale=False)
    params = step.params_count
    n_tensors = _parameter_tensors(2)
    expected = BYTES_PER_PARAM[impl] * params
    assert expected <= _optimizer_bytes(step) <= expected + STEP_COUNTER_BYTES * n_tensors


@pytest.mark.parametrize("impl", sorted(BYTES_PER_PARAM))
def test_optimizer_bytes_scale_with_depth(impl: str) -> None:
    """6 blocks traced as 3 and 2 and scaled: the optimizer step moves what the whole 6-block trace
    moves, and 6 blocks against 2 move the bytes per parameter of the implementation (the foreach and
    fused ops span every block's parameters and must grow with them)."""
    scaled = trace_step(_gpt2(6), _workload(impl))
    assert scaled.block_counts, "the scaled path must have been taken"
    whole = trace_step(_gpt2(6), _workload(impl), scale=False)
    assert _optimizer_bytes(scaled) == _optimizer_bytes(whole)
    shallow = trace_step(_gpt2(2), _workload(impl), scale=False)
    added_params = scaled.params_count - shallow.params_count
    added_bytes = _optimizer_bytes(scaled) - _optimizer_bytes(shallow)
    added_tensors = _parameter_tensors(6) - _parameter_tensors(2)
    assert BYTES_PER_PARAM[impl] * added_params <= added_bytes
    assert added_bytes <= BYTES_PER_PARAM[impl] * added_params + STEP_COUNTER_BYTES * added_tensors


def _parameter_tensors(n_layer: int) -> int:
    """Parameter tensors of the tiny GPT-2 (tied embedding counted once, as ``parameters()`` does)."""
    config = AutoConfig.for_model(**{**TINY_GPT2, "n_layer": n_layer})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(1 for _ in model.parameters())
