"""One self-contained HTML report of a result (``--html FILE``): the headline numbers and the
tables, the pictures as inline SVG and the assumptions — no script, no external stylesheet, font
or image, so it opens offline and can be mailed as one file. Everything that came from the user
(model names, paths, notes quoting them) is escaped.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.report.labels import field_label, value_text
from gpuplan.units import format_bytes
from gpuplan.version import VERSION

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
"""


def _cell(key: str, value: Any) -> str:
    """One value in the unit its key names (report/labels.py, as on the web page); a byte count also
    gives the exact bytes, and a nested value stays JSON (its own table shows it)."""
    if isinstance(value, int) and not isinstance(value, bool) and key.endswith("_bytes"):
        return f'<td class="num">{html.escape(format_bytes(value))} ({value:,} bytes)</td>'
    if isinstance(value, dict) and set(value) != {"value", "unit"}:
        return f"<td><code>{html.escape(json.dumps(value, default=str))}</code></td>"
    text, is_number = value_text(key, value)
    return f'<td class="num">{html.escape(text)}</td>' if is_number else f"<td>{html.escape(text)}</td>"


def scalar_table(data: Mapping[str, Any]) -> str:
    """The top-level numbers and words of a result's JSON, one row each."""
    rows = [f"<tr><th>{html.escape(field_label(k))}</th>{_cell(k, v)}</tr>" for k, v in data.items()
            if not isinstance(v, (dict, list))]
    return "<table>\n" + "\n".join(rows) + "\n</table>" if rows else ""


def mapping_table(title: str, values: Mapping[str, Any], *, in_bytes: bool = False) -> str:
    """A nested mapping of the JSON (components, workload, time parts) as a two-column table;
    ``in_bytes``: every value is a byte count."""
    if not values:
        return ""
    rows = [f"<tr><th>{html.escape(field_label(str(k)))}</th>{_cell('_bytes' if in_bytes else str(k), v)}</tr>"
            for k, v in values.items()]
    return f"<h2>{html.escape(title)}</h2>\n<table>\n" + "\n".join(rows) + "\n</table>"


def records_table(title: str, records: Sequence[Mapping[str, Any]]) -> str:
    """A list of JSON objects (ranks, techniques, GPU options) as one table, a column per key."""
    if not records:
        return ""
    keys: list[str] = []
    for r in records:
        keys.extend(k for k in r if k not in keys and not isinstance(r[k], (dict, list)))
    head = "".join(f"<th>{html.escape(field_label(k))}</th>" for k in keys)
    body = "\n".join("<tr>" + "".join(_cell(k, r.get(k)) for k in keys) + "</tr>" for r in records)
    return f"<h2>{html.escape(title)}</h2>\n<table>\n<tr>{head}</tr>\n{body}\n</table>"


def render_html(title: str, data: Mapping[str, Any], *, text: str = "", svgs: Sequence[str] = (),
                sections: Sequence[str] = ()) -> str:
    """The page: headline table, pictures (``svgs``: inline SVG markup that gpuplan drew),
    extra ``sections`` (HTML made by the table helpers here), the terminal text, the assumptions.

    ``svgs`` and ``sections`` are trusted markup made by gpuplan's own renderers from escaped text;
    every other string is escaped here."""
    assumptions = data.get("assumptions") or []
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        # no network: the page may not load anything (images, fonts, scripts) from anywhere
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
        'img-src data:">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{html.escape(title)}</h1>",
        scalar_table(data),
    ]
    parts.extend(f"<figure>{svg}</figure>" for svg in svgs)
    parts.extend(s for s in sections if s)
    if text:
        parts.append(f"<h2>As the terminal shows it</h2>\n<pre>{html.escape(text)}</pre>")
    if assumptions:
        parts.append("<h2>Assumptions</h2>\n<ul>\n"
                     + "\n".join(f"<li>{html.escape(str(a))}</li>" for a in assumptions) + "\n</ul>")
    parts.append(f"<p><small>gpuplan {html.escape(VERSION)}</small></p>")
    parts.extend(["</body>", "</html>", ""])
    return "\n".join(parts)
