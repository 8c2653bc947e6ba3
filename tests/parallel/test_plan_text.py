"""plan's text: every time part the evaluator produces is named in words (the JSON keeps the keys), and
each rank row's columns add up to its total on real evaluations."""

from __future__ import annotations

import re

import pytest

from gpuplan.parallel.evaluate import TIME_PART_NAMES, evaluate, time_part_name
from gpuplan.parallel.layout import FSDP2, Layout, Zero
from gpuplan.report.plan import rank_table
from gpuplan.units import format_bytes

_LAYOUTS = [
    Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1),
    Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2()),
    Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1, sharding=Zero(3)),
    Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8, schedule="interleaved", virtual_stages=3),
]


@pytest.mark.parametrize("lay", _LAYOUTS, ids=lambda lay: lay.describe())
def test_time_parts_and_rank_columns(gpt2_ctx, lay: Layout) -> None:  # type: ignore[no-untyped-def]
    ev = evaluate(gpt2_ctx, lay)
    assert set(ev.time_parts_s) <= set(TIME_PART_NAMES), set(ev.time_parts_s) - set(TIME_PART_NAMES)
    assert not any("_" in time_part_name(k) for k in ev.time_parts_s)
    rows = rank_table(ev.ranks).splitlines()[2:2 + len(ev.ranks)]
    for r, row in zip(ev.ranks, rows, strict=True):
        window = max(r.activations_bytes + r.weight_cast_bytes, r.optimizer_temp_bytes)
        terms = [r.params_bytes, r.grads_bytes, r.optimizer_bytes, window, r.buffers_bytes, r.overhead_bytes,
                 r.allocator_slack_bytes]
        assert sum(terms) == r.total_bytes  # the row adds up: nothing of the total is left without a column
        assert re.split(r"\s{2,}", row.strip())[-8:] == [format_bytes(t) for t in [*terms, r.total_bytes]]
