"""--prices FILE: YAML, JSON and CSV; every malformed file is a one-line ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.advise.prices import load_prices
from gpuplan.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("p.yaml", "H100-SXM: 2.49\nNVIDIA GeForce RTX 4090: 0.35\n"),
        ("p.json", '{"H100-SXM": 2.49, "RTX 4090": 0.35}'),
        ("p.csv", "gpu,usd_per_hour\nH100-SXM,2.49\nrtx-4090,0.35\n"),
    ],
)
def test_formats(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_prices(path) == {"H100-SXM": 2.49, "RTX-4090": 0.35}


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("p.yaml", "H100-SXM: [2.49\n", "not valid YAML"),
        ("p.json", "{H100-SXM: 2}", "not valid JSON"),
        ("p.yaml", "- H100-SXM\n- 2.49\n", "must map GPU names"),
        ("p.yaml", "H100-SMX: 2.49\n", "did you mean H100-SXM"),
        ("p.yaml", "H100-SXM: cheap\n", "must be a number"),
        ("p.yaml", "H100-SXM: -1\n", "must be positive"),
        ("p.csv", "H100-SXM,2.49,extra\n", "expected 'GPU,price'"),
        ("p.txt", "H100-SXM 2.49\n", "unknown format"),
        ("missing.yaml", None, "cannot read prices file"),
    ],
)
def test_malformed_is_one_line(tmp_path: Path, name: str, text: str | None, match: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_prices(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "data", "match"),
    [
        # each of these was an internal error (or a wrong $1.00) on old main
        ("p.yaml", b"\xff\xfe H100-SXM: 2\n", r"is not UTF-8 text \(byte 0xff at offset 0\)"),
        ("p.json", b"[" * 5000, "nests deeper than Python can parse"),
        ("p.json", b"[" * 200 + b"]" * 200, "nests deeper than 64 levels"),
        ("p.yaml", b"[" * 5000, "not valid YAML"),
        ("p.yaml", b"H100-SXM: true\n", "must be a number of \\$/hour, got True"),
        ("p.json", b'{"H100-SXM": 1e400}', "must be positive"),
        ("p.csv", b"H100-SXM," + b"9" * 200_000 + b"\n", "not a valid CSV file"),
        ("p.csv", b"x" * (300 * 1024), r"larger than 256.00 KiB"),
    ],
)
def test_hostile_files_are_one_line(tmp_path: Path, name: str, data: bytes, match: str) -> None:
    """Issue 9 item 20: binary, deeply nested, boolean, overflowing and huge price files."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=match) as info:
        load_prices(path)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300
