"""Trace a few repeated blocks, answer for the full depth.

A transformer's step is the same block code run L times. gpuplan traces the model with 3 blocks
per stack (run A) and, for each stack c, with 2 blocks in c (run B_c). Removing A's middle block
(index 1) from its timeline leaves exactly B_c's timeline, op for op; that alignment is checked,
and a model whose timelines do not align is traced whole instead.

For the full model with L_c blocks, the live bytes at an op outside c's middle block are affine in
L_c: ``v_full = v_A + Σ_c (L_c − 3)·(v_A − v_B_c)``. Inside c's middle block, the full model runs
that block L_c − 2 times, each starting where the previous left off; its live bytes are those of A
shifted by the per-block growth accumulated before it, plus ``k·d`` for replica k, where d is the
block's net allocation — largest at k = L_c − 3 when d > 0. Every op's value is computed, so the
peak is found wherever it falls (the start of backward at depth, the logits at small depth).
The same arithmetic applies to each memory category, the allocator's slack and the op counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.trace.records import CATEGORIES, MemEvent, OpRecord, RawTrace, StepPoint

TRACED_BLOCKS = 3


class ScalingMismatch(Exception):
    """The reduced-depth timelines do not align; trace the model whole instead."""


@dataclass(frozen=True, slots=True)
class PeakResult:
    peak_bytes: int
    peak_phase: str
    components: dict[str, int]
    point_index: int
    """Index of the peak op in run A's timeline."""
    replica_growth: dict[str, int] = field(default_factory=dict)


def category_vectors(trace: RawTrace, point_indices: Sequence[int]) -> dict[int, dict[str, int]]:
    """Live bytes by category after each of the given ops, by replaying the events."""
    wanted = sorted(set(point_indices))
    out: dict[int, dict[str, int]] = {}
    live = dict.fromkeys(CATEGORIES, 0)
    storages = trace.storages
    pos = 0
    events: list[MemEvent] = trace.events
    for idx in wanted:
        stop = trace.points[idx].event_count if idx >= 0 else 0
        while pos < stop:
            ev = events[pos]
            live[storages[ev.storage_id].category] += ev.size_bytes
            pos += 1
        out[idx] = dict(live)
    return out


def initial_vector(trace: RawTrace) -> dict[str, int]:
    """Category bytes live before the first op (what existed when recording began)."""
    first = trace.points[0].event_count if trace.points else len(trace.events)
    live = dict.fromkeys(CATEGORIES, 0)
    for ev in trace.events[:first]:
        live[trace.storages[ev.storage_id].category] += ev.size_bytes
    return live


def _middle(container: str) -> str:
    return f"{container}:1"


def align(a: Sequence[StepPoint], b: Sequence[StepPoint], container: str) -> list[int]:
    """For each point of A, the index of the matching point in B, or -1 inside A's middle block."""
    middle = _middle(container)
    last_a, last_b = f"{container}:{TRACED_BLOCKS - 1}", f"{container}:{TRACED_BLOCKS - 2}"
    mapping: list[int] = []
    j = 0
    for p in a:
        if p.block == middle:
            mapping.append(-1)
            continue
        block = last_b if p.block == last_a else p.block
        if j >= len(b) or b[j].block != block or b[j].phase != p.phase:
            where = f"op {len(mapping)} ({p.phase}, {p.block})"
            raise ScalingMismatch(f"timelines of {TRACED_BLOCKS} and {TRACED_BLOCKS - 1} blocks diverge at {where}")
        mapping.append(j)
        j += 1
    if j != len(b):
        raise ScalingMismatch(f"the {TRACED_BLOCKS - 1}-block timeline has {len(b) - j} extra ops")
    return mapping


@dataclass(slots=True)
class _Stack:
    key: str
    container: str
    full_blocks: int
    run_b: RawTrace
    mapping: list[int]

    @property
    def extra(self) -> int:
        return self.full_blocks - TRACED_BLOCKS


def _sections(points: Sequence[StepPoint], middle: str) -> list[tuple[int, int]]:
    """(start, end) index ranges of consecutive points in the middle block."""
    ranges = []
    start = None
    for i, p in enumerate(points):
        if p.block == middle and start is None:
            start = i
        elif p.block != middle and start is not None:
            ranges.append((start, i))
            start = None
    if start is not None:
        ranges.append((start, len(points)))
    return ranges


class Scaler:
    """Extrapolates run A to the full depth using the B_c runs."""

    def __init__(self, run_a: RawTrace, runs_b: Mapping[str, RawTrace], containers: Mapping[str, str],
                 full_blocks: Mapping[str, int]) -> None:
        self.a = run_a
        self.stacks = [
            _Stack(key, containers[key], full_blocks[key], runs_b[key],
                   align(run_a.points, runs_b[key].points, containers[key]))
            for key in containers
        ]
        # For each stack: the section each A point belongs to (its start's predecessor, and net growth).
        self._section_of: list[dict[int, tuple[int, int]]] = []
        for st in self.stacks:
            info: dict[int, tuple[int, int]] = {}
            for start, end in _sections(run_a.points, _middle(st.container)):
                prev = start - 1
                if prev < 0:
                    raise ScalingMismatch("a repeated block starts the step; nothing precedes it to anchor on")
                for i in range(start, end):
                    info[i] = (prev, end - 1)
            self._section_of.append(info)

    def _value(self, i: int, field_name: str) -> tuple[float, list[tuple[int, int]]]:
        """Full-depth value of A's point i, and for each stack the (replica count k, prev) used."""
        pts = self.a.points
        v = getattr(pts[i], field_name)
        total = float(v)
        used: list[tuple[int, int]] = []
        for st, sections in zip(self.stacks, self._section_of, strict=True):
            j = st.mapping[i]
            if j >= 0:
                total += st.extra * (v - getattr(st.run_b.points[j], field_name))
                used.append((0, -1))
                continue
            prev, last = sections[i]
            jp = st.mapping[prev]
            total += st.extra * (pts[prev].live_after_bytes - st.run_b.points[jp].live_after_bytes)
            growth = pts[last].live_after_bytes - pts[prev].live_after_bytes
            k = st.extra if growth > 0 else 0
            total += k * growth
            used.append((k, prev))
        return total, used

    def peak(self) -> PeakResult:
        best_i, best_v = 0, float("-inf")
        for i in range(len(self.a.points)):
            v, _ = self._value(i, "peak_bytes")
            if v > best_v:
                best_i, best_v = i, v
        return PeakResult(int(best_v), self.a.points[best_i].phase, self.components_at(best_i), best_i)

    def components_at(self, i: int) -> dict[str, int]:
        """Category breakdown at A's point i, extrapolated like the totals."""
        pts = self.a.points
        needed = {i}
        plan: list[tuple[_Stack, int, int, int, int]] = []  # stack, B index, k, prev, last
        for st, sections in zip(self.stacks, self._section_of, strict=True):
            j = st.mapping[i]
            if j >= 0:
                plan.append((st, j, 0, -1, -1))
                continue
            prev, last = sections[i]
            growth = pts[last].live_after_bytes - pts[prev].live_after_bytes
            needed |= {prev, last}
            plan.append((st, st.mapping[prev], st.extra if growth > 0 else 0, prev, last))
        vec_a = category_vectors(self.a, sorted(needed))
        result = {c: float(vec_a[i][c]) for c in CATEGORIES}
        for st, j, k, prev, last in plan:
            vb = category_vectors(st.run_b, [j])[j]
            for c in CATEGORIES:
                if prev < 0:
                    result[c] += st.extra * (vec_a[i][c] - vb[c])
                else:
                    result[c] += st.extra * (vec_a[prev][c] - vb[c]) + k * (vec_a[last][c] - vec_a[prev][c])
        return {c: max(0, round(v)) for c, v in result.items()}

    def scale_scalar(self, value_a: float, values_b: Mapping[str, float]) -> float:
        """Affine extrapolation of a whole-run quantity (parameter count, allocator slack)."""
        return value_a + sum(st.extra * (value_a - values_b[st.key]) for st in self.stacks)

    def scaled_ops(self) -> list[OpRecord]:
        """A's ops with each middle-block op counted once per full-depth replica."""
        middles = {_middle(st.container): st.full_blocks - (TRACED_BLOCKS - 1) for st in self.stacks}
        out = []
        for op in self.a.ops:
            n = middles.get(op.block or "", 1)
            out.append(op if n == 1 else _with_count(op, n))
        return out


def _with_count(op: OpRecord, count: int) -> OpRecord:
    return OpRecord(op.name, op.phase, op.module, op.op_class, op.dtype, op.flops, op.bytes_read, op.bytes_written,
                    op.block, count)
