"""An inline SVG of an estimate's memory components (one stacked bar with a legend).

The page's picture where the report layer has none for a result: plain SVG text, no plotting library,
every number taken from the ``--json`` object (the bar's segments sum to the components' total).
"""

from __future__ import annotations

from html import escape
from typing import Any, Final

from gpuplan.units import format_bytes

COLORS: Final = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#bab0ac")
WIDTH: Final = 640
BAR_HEIGHT: Final = 36
ROW_HEIGHT: Final = 20


def component_bar_svg(data: dict[str, Any]) -> str | None:
    """The components of ``data`` (an estimate's JSON) as one bar, or None when it has none."""
    components = data.get("components")
    if not isinstance(components, dict):
        return None
    parts = [(str(k), int(v)) for k, v in components.items() if isinstance(v, int) and v > 0]
    total = sum(v for _, v in parts)
    if total <= 0:
        return None
    usable = data.get("gpu_usable_memory_bytes")
    if not (isinstance(usable, int) and usable > 0):
        usable = None
    # the GPU's line is drawn when it is within twice the bar; beyond that the bar would be a sliver
    # and the legend says how far off it is instead
    scale_bytes = max(total, usable) if usable is not None and usable <= 2 * total else total
    height = BAR_HEIGHT + 30 + ROW_HEIGHT * (len(parts) + 1)
    title = f"Memory of one step by component: {format_bytes(total)} in all"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="pic-title" '
           f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" class="picture">',
           f'<title id="pic-title">{escape(title)}</title>']
    x = 0.0
    for i, (name, value) in enumerate(parts):
        w = WIDTH * value / scale_bytes
        label = f"{name}: {format_bytes(value)}"
        out.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{BAR_HEIGHT}" fill="{COLORS[i % len(COLORS)]}" '
                   f'data-component="{escape(name)}" data-bytes="{value}"><title>{escape(label)}</title></rect>')
        x += w
    if usable is not None and usable <= scale_bytes:
        ux = WIDTH * usable / scale_bytes - 1
        out.append(f'<line x1="{ux:.2f}" y1="0" x2="{ux:.2f}" y2="{BAR_HEIGHT + 6}" stroke="#000" stroke-width="2" '
                   f'data-usable-bytes="{usable}"><title>GPU usable memory: {escape(format_bytes(usable))}'
                   "</title></line>")
    y = BAR_HEIGHT + 24
    for i, (name, value) in enumerate(parts):
        out.append(f'<rect x="0" y="{y - 11}" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text x="18" y="{y}" font-size="13" font-family="sans-serif">'
                   f'{escape(name.replace("_", " "))}: {escape(format_bytes(value))}</text>')
        y += ROW_HEIGHT
    if usable is not None:
        out.append(f'<text x="0" y="{y}" font-size="13" font-family="sans-serif" data-usable-bytes="{usable}">'
                   f'GPU usable memory: {escape(format_bytes(usable))} ({usable / total:.1f}× the bar)</text>')
    out.append("</svg>")
    return "".join(out)
