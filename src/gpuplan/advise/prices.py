"""``--prices FILE``: the user's own $/hour per GPU, as YAML, JSON or CSV.

Accepted shapes: a mapping ``{GPU: price}`` (YAML/JSON), or CSV rows ``GPU,price`` (a header row
such as ``gpu,usd_per_hour`` is skipped). GPU names resolve like ``--gpu`` does. Anything else is a
one-line ConfigError naming the file and the problem.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from gpuplan.errors import ConfigError, UnknownNameError
from gpuplan.units import KIB
from gpuplan.userio import parse_user_json, parse_user_yaml, read_user_text

# A price list names at most a few hundred GPUs (a few KiB); a larger file is the wrong file.
MAX_PRICES_FILE_BYTES = 256 * KIB


def load_prices(path: str | Path) -> dict[str, float]:
    """GPU id -> $/hour."""
    p = Path(path)
    what = f"prices file {str(p)!r}"
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".json", ".yaml", ".yml"):  # before reading: a wrong file is not read at all
        raise ConfigError(
            f"{what}: unknown format {suffix or '(no extension)'!r} (allowed: .yaml, .yml, .json, .csv)"
        )
    text = read_user_text(p, what=what, limit_bytes=MAX_PRICES_FILE_BYTES,
                          hint="; a price list maps GPU names to $/hour")
    if suffix == ".csv":
        raw = _from_csv(text, p)
    elif suffix == ".json":
        raw = parse_user_json(text, what=what)
    else:
        raw = parse_user_yaml(text, what=what)
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"prices file {str(p)!r} must map GPU names to $/hour, e.g. 'H100-SXM: 2.49'")
    return _validate(raw, p)


def _from_csv(text: str, p: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rows = csv.reader(io.StringIO(text))
    try:
        numbered = list(enumerate(rows, 1))
    except csv.Error as exc:  # a NUL byte, an over-long field
        raise ConfigError(f"prices file {str(p)!r} is not a valid CSV file: {exc} (line {rows.line_num})") from None
    for i, row in numbered:
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if len(cells) != 2:
            raise ConfigError(f"prices file {str(p)!r} line {i}: expected 'GPU,price', got {len(cells)} columns")
        if i == 1 and not _is_number(cells[1]):
            continue  # header
        out[cells[0]] = cells[1]
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _validate(raw: dict[Any, Any], p: Path) -> dict[str, float]:
    from gpuplan.hardware import get_gpu

    out: dict[str, float] = {}
    for name, value in raw.items():
        try:
            gpu = get_gpu(str(name))
        except UnknownNameError as exc:
            raise ConfigError(f"prices file {str(p)!r}: {exc}") from None
        try:
            if isinstance(value, bool):  # YAML 'yes' / JSON true would otherwise be $1.00
                raise TypeError
            price = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(
                f"prices file {str(p)!r}: price of {name} must be a number of $/hour, got {value!r}"
            ) from None
        if not math.isfinite(price) or price <= 0:
            raise ConfigError(f"prices file {str(p)!r}: price of {name} must be positive (a finite number of "
                              f"$/hour), got {value!r}")
        out[gpu.id] = price
    return out
