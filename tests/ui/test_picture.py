"""The page's own picture where matplotlib (the ``plot`` extra) is absent: an estimate's components
as one SVG bar, every segment the JSON's bytes; the GPU's line drawn only where it is on the scale."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from gpuplan.ui.picture import WIDTH, component_bar_svg
from gpuplan.units import GIB

NAMES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "kv_cache", "cuda_context",
         "workspaces", "allocator_overhead")


@given(st.dictionaries(st.sampled_from(NAMES), st.integers(0, 2**45), min_size=1),
       st.one_of(st.none(), st.integers(1, 2**46)))
def test_segments_are_the_components_and_fill_the_scale(components: dict[str, int], usable: int | None) -> None:
    data = {"components": components, "gpu_usable_memory_bytes": usable}
    svg = component_bar_svg(data)
    total = sum(components.values())
    if total == 0:
        assert svg is None
        return
    assert svg is not None
    root = ET.fromstring(svg)  # well-formed XML, inline-able in HTML
    assert root.tag.endswith("svg")
    drawn = {m.group(1): int(m.group(2)) for m in re.finditer(r'data-component="(\w+)" data-bytes="(\d+)"', svg)}
    assert drawn == {k: v for k, v in components.items() if v > 0}
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="0" width="([\d.]+)"', svg)]
    on_scale = usable is not None and usable <= 2 * total
    expected = WIDTH * total / max(total, usable) if on_scale and usable is not None else WIDTH
    assert abs(sum(widths) - expected) < 0.01 * len(widths) + 1e-6
    assert ("<line" in svg) == on_scale


def test_no_components_no_picture() -> None:
    assert component_bar_svg({"params_count": 10}) is None
    assert component_bar_svg({"components": {"parameters": 0}}) is None


def test_far_gpu_is_said_in_words() -> None:
    svg = component_bar_svg({"components": {"parameters": GIB}, "gpu_usable_memory_bytes": 80 * GIB})
    assert svg is not None and "80.0× the bar" in svg and "<line" not in svg
