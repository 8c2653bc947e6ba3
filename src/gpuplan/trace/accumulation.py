"""Gradient accumulation: trace two micro-batches, answer for all of them.

Every micro-batch after the first runs the same ops on the same shapes (the first one creates the
gradients, each later one adds into them), and the memory it needs is the same: the accumulated
gradients stay alive through every later forward, which the second micro-batch already shows. So
``--grad-accum K`` is traced with ``min(K, ACCUM_STEPS_TRACED)`` micro-batches (the loss still
divided by K) and the ops of the last traced one are counted once more for every untraced one:
K = 8 costs what K = 2 does, one micro-batch more than K = 1. Memory needs no extrapolation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuplan.trace.records import OpRecord

ACCUM_STEPS_TRACED = 2
"""Micro-batches traced for any accumulation K ≥ 2: the steady state (gradients accumulated and
alive through the next forward) is reached at the second micro-batch and does not grow after it."""


def scale_accumulation_ops(ops: Sequence[OpRecord], last_micro_batch: tuple[int, int], traced: int,
                           full: int) -> list[OpRecord]:
    """``ops`` with the ops of the last traced micro-batch (indices ``last_micro_batch`` = [start, end))
    counted once more for each of the ``full - traced`` micro-batches that were not traced."""
    start, end = last_micro_batch
    if traced < 1 or full <= traced or not 0 <= start < end <= len(ops):
        return list(ops)
    extra = full - traced
    return [replace(op, count=op.count * (1 + extra)) if start <= k < end else op for k, op in enumerate(ops)]
