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
from dataclasses import dataclass

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


def category_vectors(trace: RawTrace, point_indices: Sequence[int], *, before: bool = False
                     ) -> dict[int, dict[str, int]]:
    """Live bytes by category after (or, with ``before``, at the start of) each given op."""
    wanted = sorted(set(point_indices))
    out: dict[int, dict[str, int]] = {}
    live = dict.fromkeys(CATEGORIES, 0)
    storages = trace.storages
    pos = 0
    events: list[MemEvent] = trace.events
    for idx in wanted:
        point = trace.points[idx]
        stop = point.event_start if before else point.event_count
        while pos < stop:
            ev = events[pos]
            live[storages[ev.storage_id].category] += ev.size_bytes
            pos += 1
        out[idx] = dict(live)
    return out


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
        raise ScalingMismatch("a repeated block ends the step; nothing follows it to anchor on")
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
        # For each stack: the (start, end) of the middle-block section each A point lies in. ``end``
        # is the first op after the block: at its start the block's own temporaries are freed
        # and B, which lacks the block, is at the same moment of the program.
        self._section_of: list[dict[int, tuple[int, int]]] = []
        for st in self.stacks:
            info: dict[int, tuple[int, int]] = {}
            for start, end in _sections(run_a.points, _middle(st.container)):
                for i in range(start, end):
                    info[i] = (start, end)
            self._section_of.append(info)
        self._op_partners = [self._partners_of_ops(st) for st in self.stacks]

    def value(self, i: int, field_name: str = "peak_bytes") -> float:
        """Full-depth value of A's point i (``peak_bytes`` or ``live_after_bytes``)."""
        pts = self.a.points
        v = getattr(pts[i], field_name)
        total = float(v)
        for st, sections in zip(self.stacks, self._section_of, strict=True):
            j = st.mapping[i]
            if j >= 0:
                total += st.extra * (v - getattr(st.run_b.points[j], field_name))
                continue
            start, end = sections[i]
            jn = st.mapping[end]
            total += st.extra * (pts[start].live_before_bytes - st.run_b.points[jn].live_before_bytes)
            growth = pts[end].live_before_bytes - pts[start].live_before_bytes
            total += (st.extra if growth > 0 else 0) * growth
        return total

    def peak(self) -> PeakResult:
        best_i, best_v = 0, float("-inf")
        for i in range(len(self.a.points)):
            v = self.value(i)
            if v > best_v:
                best_i, best_v = i, v
        return PeakResult(int(best_v), self.a.points[best_i].phase, self.components_at(best_i), best_i)

    def components_at(self, i: int) -> dict[str, int]:
        """Category breakdown at A's point i, extrapolated like the totals."""
        pts = self.a.points
        plan: list[tuple[_Stack, int, int, int, int]] = []  # stack, B index, k, start, end
        anchors: set[int] = set()
        for st, sections in zip(self.stacks, self._section_of, strict=True):
            j = st.mapping[i]
            if j >= 0:
                plan.append((st, j, 0, -1, -1))
                continue
            start, end = sections[i]
            growth = pts[end].live_before_bytes - pts[start].live_before_bytes
            anchors |= {start, end}
            plan.append((st, st.mapping[end], st.extra if growth > 0 else 0, start, end))
        at_i = category_vectors(self.a, [i])[i]
        before = category_vectors(self.a, sorted(anchors), before=True) if anchors else {}
        result = {c: float(at_i[c]) for c in CATEGORIES}
        for st, j, k, start, end in plan:
            vb = category_vectors(st.run_b, [j], before=start >= 0)[j]
            for c in CATEGORIES:
                if start < 0:
                    result[c] += st.extra * (at_i[c] - vb[c])
                else:
                    result[c] += st.extra * (before[start][c] - vb[c]) + k * (before[end][c] - before[start][c])
        return {c: max(0, round(v)) for c, v in result.items()}

    def scale_scalar(self, value_a: float, values_b: Mapping[str, float]) -> float:
        """Affine extrapolation of a whole-run quantity (parameter count, allocator slack)."""
        return value_a + sum(st.extra * (value_a - values_b[st.key]) for st in self.stacks)

    def scaled_ops(self) -> list[OpRecord]:
        """A's ops with each middle-block op counted once per full-depth replica, and each op outside
        every block extrapolated like the timeline: ``x_full = x_A + Σ_c (L_c − 3)·(x_A − x_B_c)`` for
        its flops and bytes, B_c's op being the one at the same place of the program. That is what
        grows an op over the parameters of all blocks at once (a foreach or fused optimizer op,
        ``_foreach_zero_``) to the full depth; an op outside the blocks that does not span them
        (the embedding's, the loss) is the same in A and B_c and stays as traced."""
        middles = {_middle(st.container): st.full_blocks - (TRACED_BLOCKS - 1) for st in self.stacks}
        out = []
        for i, op in enumerate(self.a.ops):
            if op.block is None:
                out.append(self._extrapolated(op, [(st, st.run_b.ops[p[i]]) for st, p in
                                                   zip(self.stacks, self._op_partners, strict=True)]))
                continue
            n = middles.get(op.block, 1)
            out.append(op if n == 1 else _with_count(op, n))
        return out

    def _partners_of_ops(self, st: _Stack) -> list[int]:
        """For each op of A, the index of the same op in B_c (-1 inside c's middle block)."""
        middle = _middle(st.container)
        ops_b = st.run_b.ops
        mapping: list[int] = []
        j = 0
        for op in self.a.ops:
            if op.block == middle:
                mapping.append(-1)
                continue
            if j >= len(ops_b) or ops_b[j].name != op.name or ops_b[j].phase != op.phase:
                raise ScalingMismatch(f"ops of {TRACED_BLOCKS} and {TRACED_BLOCKS - 1} blocks diverge at op "
                                      f"{len(mapping)} ({op.phase}, {op.name})")
            mapping.append(j)
            j += 1
        return mapping

    @staticmethod
    def _extrapolated(op: OpRecord, pairs: Sequence[tuple[_Stack, OpRecord]]) -> OpRecord:
        flops, read, written = op.flops, op.bytes_read, op.bytes_written
        for st, b in pairs:
            flops += st.extra * (op.flops - b.flops)
            read += st.extra * (op.bytes_read - b.bytes_read)
            written += st.extra * (op.bytes_written - b.bytes_written)
        if (flops, read, written) == (op.flops, op.bytes_read, op.bytes_written):
            return op
        return OpRecord(op.name, op.phase, op.module, op.op_class, op.dtype, max(0, flops), max(0, read),
                        max(0, written), op.block, op.count)


def _with_count(op: OpRecord, count: int) -> OpRecord:
    return OpRecord(op.name, op.phase, op.module, op.op_class, op.dtype, op.flops, op.bytes_read, op.bytes_written,
                    op.block, count)
