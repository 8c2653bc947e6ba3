"""The generated sections of a doc (``docs/accuracy.md``): each between its script's BEGIN and END markers,
replaced in place or appended. Shared by the accuracy scripts (a developer helper, not installed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def replace_section(doc: Path, begin: str, end: str, section: str) -> None:
    """Write ``section`` (its own markers included) over the text between ``begin`` and ``end`` in ``doc``, or
    append it when the doc has none yet."""
    text = doc.read_text(encoding="utf-8")
    if begin in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end + "\n")
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text, encoding="utf-8")


def reason_lines(rows: list[dict[str, str]], results: dict[str, object], not_run_heading: str,
                 describe: Callable[[dict[str, str]], str]) -> list[str]:
    """The closing lists of a public-rows section: what the run rows differ in (their ``reason``), then each row not
    run (``describe`` names it) with its ``reason``."""
    run = [r for r in rows if r["id"] in results]
    return [
        "What the run rows differ in (the CSV's `reason`):",
        "",
        *sorted({f"- {r['reason']}" for r in run}),
        "",
        not_run_heading,
        "",
        *(f"- {describe(r)}: {r['reason']}" for r in rows if r["id"] not in results),
        "",
    ]
