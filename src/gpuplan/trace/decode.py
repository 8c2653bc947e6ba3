"""Generation: trace a few decode steps, answer for all of them.

Each decode step runs the same ops; only the KV cache (and the attention reading it) grows by one
token. Live bytes at a given op of step d are therefore affine in d, so the step with the most
memory is the first or the last one, and the last one follows from the last two traced steps:
``v_last(p) = v_{D-1}(p) + (N − D)·(v_{D-1}(p) − v_{D-2}(p))`` for N decode steps of which D
were traced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpuplan.trace.records import CATEGORIES, OpRecord, StepPoint


@dataclass(frozen=True, slots=True)
class DecodePeak:
    peak_bytes: int
    components: dict[str, int]
    point_index: int = -1
    """The op of the last traced decode step the peak is extrapolated from."""


def extend_decode(points: Sequence[StepPoint], traced: int, full: int, value: Callable[[int], float],
                  components: Callable[[int], dict[str, int]]) -> DecodePeak | None:
    """The peak of the last decode step when only ``traced`` of ``full`` steps ran, or None."""
    if traced < 2 or full <= traced:
        return None
    last = [i for i, p in enumerate(points) if p.repeat == traced - 1]
    prev = [i for i, p in enumerate(points) if p.repeat == traced - 2]
    if not last or len(last) != len(prev):
        return None
    extra = full - traced
    best_j = max(range(len(last)), key=lambda j: value(last[j]) + extra * (value(last[j]) - value(prev[j])))
    i, h = last[best_j], prev[best_j]
    peak = value(i) + extra * (value(i) - value(h))
    ci, ch = components(i), components(h)
    comps = {c: max(0, round(ci[c] + extra * (ci[c] - ch[c]))) for c in CATEGORIES}
    return DecodePeak(round(peak), comps, i)


def scale_decode_ops(ops: Sequence[OpRecord], traced: int, full: int) -> list[OpRecord]:
    """Count the last traced decode step's ops once for every untraced step too."""
    if traced < 1 or full <= traced:
        return list(ops)
    decode = [k for k, op in enumerate(ops) if op.phase == "decode"]
    per_step = len(decode) // traced
    if per_step == 0 or per_step * traced != len(decode):
        return list(ops)
    last_step = set(decode[-per_step:])
    extra = full - traced
    return [replace(op, count=op.count * (1 + extra)) if k in last_step else op for k, op in enumerate(ops)]
