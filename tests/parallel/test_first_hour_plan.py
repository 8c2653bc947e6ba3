"""Issue 18 item 8 for plan's text: one layout is "1 layout", not "1 layouts"."""

from __future__ import annotations

from typing import Any

from tests.fixtures.plans import single_layout_plan

from gpuplan.parallel.layout import Layout, Zero
from gpuplan.report.plan import render_plan


def test_item8_one_layout_is_singular(gpt2_ctx: Any) -> None:
    plan = single_layout_plan(gpt2_ctx, Layout(dp=8, tp=1, pp=1, micro_batch_size=4, grad_accum=1,
                                               sharding=Zero(3), checkpointing="none"))
    text = render_plan(plan)
    assert "1 layout in" in text and "1 layouts" not in text
