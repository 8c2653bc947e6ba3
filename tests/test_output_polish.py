"""Text-output rules from the golden-file review (issue 9, H11): each figure prints in a unit that shows it,
rows sum to their totals, compared figures differ where the verdict differs, one style per column."""

from __future__ import annotations

import re

import pytest

from gpuplan.parallel.evaluate import Evaluation, RankMemory
from gpuplan.parallel.layout import Layout
from gpuplan.parallel.search import why_loses
from gpuplan.report.plan import rank_table
from gpuplan.units import (
    GIB,
    MIB,
    distinguishing_digits,
    format_bytes,
    format_count_significant,
    format_decimal_bytes,
    format_seconds,
)

_RANK = RankMemory(kind="every rank", params_bytes=3 * MIB, grads_bytes=3 * MIB, optimizer_bytes=6 * MIB,
                   activations_bytes=40 * MIB, buffers_bytes=MIB, overhead_bytes=272 * MIB,
                   optimizer_temp_bytes=7 * MIB, weight_cast_bytes=2 * MIB, allocator_slack_bytes=5 * MIB)


def _eval(step_s: float, parts: dict[str, float]) -> Evaluation:
    lay = Layout(dp=4, tp=1, pp=1, micro_batch_size=4, grad_accum=1)
    return Evaluation(layout=lay, ranks=(_RANK,), step_time_s=step_s, time_parts_s=parts)


def test_why_not_prints_the_time_delta_in_the_step_unit() -> None:
    best = _eval(1.8e-3, {"compute": 1.7e-3, "dp_comm_exposed": 0.1e-3})
    other = _eval(1.8454e-3, {"compute": 1.7e-3, "dp_comm_exposed": 0.1454e-3})
    why = why_loses(best, other, usable_bytes=80 * GIB)
    assert why.endswith(f"mostly gradient traffic not overlapped (+{format_seconds(0.1454e-3 - 0.1e-3)})")
    assert why.endswith("(+45 µs)") and not re.search(r"\de-\d", why)


def test_rank_row_has_a_column_for_every_term_of_its_total() -> None:
    header, _, row, note = rank_table((_RANK,)).splitlines()
    assert header.split() == ["rank", "params", "grads", "optimizer", "activations", "buffers", "CUDA+cuBLAS",
                              "alloc", "slack", "total"]
    # the peak window holds max(activations + autocast copies, optimizer temporaries) = max(40 + 2, 7) MiB
    terms = [3 * MIB, 3 * MIB, 6 * MIB, 42 * MIB, MIB, 272 * MIB, 5 * MIB]
    assert sum(terms) == _RANK.total_bytes
    assert row.split("  ")[0] == "every rank"
    assert re.split(r"\s{2,}", row.strip())[1:] == [format_bytes(t) for t in [*terms, _RANK.total_bytes]]
    assert note.startswith("(activations: the larger of activations + autocast weight copies")


def test_decimal_bytes_pick_a_unit_that_shows_the_figure() -> None:
    # a tiny model's decode step reads ~1.17 MB: at GB and two decimals it printed "0.00 GB"
    assert format_decimal_bytes(1_166_848) == "1.17 MB"
    assert format_decimal_bytes(14_000_000_000) == "14.00 GB"
    assert format_decimal_bytes(999) == "999 B"
    assert "GiB" not in format_decimal_bytes(2 * GIB)


def test_fit_boundary_figures_print_apart() -> None:
    # the golden fit case: 9.75 GiB usable, batch + 1 needs 0.8 MB more than that and does not fit
    usable = 10_468_982_784
    over, under = usable + 800_000, usable - 9 * MIB
    digits = distinguishing_digits([under, over], usable, GIB)
    assert digits == 3
    shown = {f"{b / GIB:.{digits}f}" for b in (under, usable, over)}
    assert len(shown) == 3
    assert distinguishing_digits([usable - GIB], usable, GIB) == 2  # far apart: the usual two decimals
    assert distinguishing_digits([usable], usable, GIB) == 2  # equal figures need no more


@pytest.mark.parametrize("count,resolution,text", [
    (335_174_458, 1, "335M"),
    (66_955_010, 1, "67.0M"),
    (2_614_341_888, 1, "2.61B"),
    (405_853_388_800, 1, "406B"),
    (7_000_000_000, 10**9, "7B"),  # published as "7B": no decimals it was never given
    (72_700_000_000, 10**8, "72.7B"),
    (110_000_000, 10**6, "110M"),
    (999, 1, "999"),
])
def test_published_counts_share_one_style(count: int, resolution: int, text: str) -> None:
    assert format_count_significant(count, resolution) == text


def test_models_parameters_column_is_one_style() -> None:
    from gpuplan.cli.models import render
    from gpuplan.models.catalog import catalog_models

    lines = render(catalog_models()).splitlines()
    start = lines[0].index("PARAMETERS")
    cells = [line[start:].split()[0] for line in lines[1:] if line.strip() and not line.startswith(" ")][:-1]
    assert cells and all(re.fullmatch(r"\d{1,3}(\.\d{1,2})?[KMBT]", c) for c in cells), cells
