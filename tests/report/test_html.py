"""--html: one self-contained page (no script, no external resource), every user-derived string
escaped, with the headline numbers, the tables, the picture as inline SVG and the assumptions."""

from __future__ import annotations

import contextlib
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.report.html import mapping_table, records_table, render_html
from tests.fixtures.tiny_models import TINY_GPT2_LM

HOSTILE = '<script>alert("x")</script>&<b>'


class _Tags(HTMLParser):
    """Every start tag and its attributes, to check what the page would load."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _assert_self_contained(page: str) -> None:
    parser = _Tags()
    parser.feed(page)
    names = {t for t, _ in parser.tags}
    assert not names & {"script", "link", "iframe", "img", "object", "embed"}, names
    for tag, attrs in parser.tags:
        for key in ("src", "href"):  # nothing fetched from anywhere (SVG-internal #refs only)
            value = attrs.get(key) or attrs.get(f"xlink:{key}")
            assert value is None or value.startswith("#"), (tag, key, value)
    assert "@import" not in page and "url(http" not in page


def test_page_escapes_user_text_and_loads_nothing() -> None:
    data = {"model": HOSTILE, "peak_allocated_bytes": 3 * 2**30, "fits": True, "components": {"parameters": 5},
            "assumptions": [f"read {HOSTILE}"]}
    page = render_html(f"gpuplan estimate {HOSTILE}", data, text=f"model {HOSTILE}",
                       sections=[mapping_table("Components", data["components"], in_bytes=True),
                                 records_table("Rows", [{"name": HOSTILE, "size_bytes": 10}])])
    assert "<script" not in page and "<b>" not in page
    assert page.count("&lt;script&gt;") == 6  # title, heading, table, row, terminal text, assumption
    assert "3.00 GiB (3,221,225,472 bytes)" in page
    _assert_self_contained(page)


@pytest.mark.slow
def test_estimate_html_end_to_end(tmp_path: Path) -> None:
    """A model path with markup in its name: the page escapes it; stdout stays the one JSON object."""
    folder = tmp_path / "a<b>&model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_GPT2_LM))
    page_path = tmp_path / "report.html"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", str(folder), "--batch-size", "2", "--seq-len", "16", "--gpu", "RTX-4090",
                     "--html", str(page_path), "--json"])
    assert code == 0, err.getvalue()
    data = json.loads(out.getvalue())  # exactly one object
    page = page_path.read_text(encoding="utf-8")
    _assert_self_contained(page)
    assert "a<b>" not in page and "a&lt;b&gt;&amp;model" in page
    assert page.count("<svg") == 1 and "</svg>" in page
    for heading in ("Memory components", "Workload", "Assumptions", "As the terminal shows it"):
        assert f"<h2>{heading}</h2>" in page
    peak = data["tensor_peak_bytes"]
    assert f"({peak:,} bytes)" in page  # the table and the picture both carry the JSON's exact peak
    assert re.search(rf"peak [\d.]+ [KMG]iB \({peak:,} bytes\)", page)
    for note in data["assumptions"][:3]:
        assert note.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") \
            .replace("'", "&#x27;") in page


@pytest.mark.parametrize(("name", "message"), [("nope/r.html", "does not exist"), ("r\x00.html", "NUL character")])
def test_bad_html_path_is_a_usage_error(tmp_path: Path, tiny_gpt2: str, name: str, message: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["estimate", tiny_gpt2, "--html", str(tmp_path / name)])
    assert code == 2 and message in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
