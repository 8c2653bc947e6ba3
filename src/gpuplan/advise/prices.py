"""``--prices FILE``: the user's own $/hour per GPU, as YAML, JSON or CSV.

Accepted shapes: a mapping ``{GPU: price}`` (YAML/JSON), or CSV rows ``GPU,price`` (a header row
such as ``gpu,usd_per_hour`` is skipped). GPU names resolve like ``--gpu`` does. Anything else is a
one-line ConfigError naming the file and the problem.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from gpuplan.errors import ConfigError, UnknownNameError


def load_prices(path: str | Path) -> dict[str, float]:
    """GPU id -> $/hour."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read prices file {str(p)!r}: {exc.strerror or exc}") from None
    suffix = p.suffix.lower()
    if suffix == ".csv":
        raw = _from_csv(text, p)
    elif suffix == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"prices file {str(p)!r} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    elif suffix in (".yaml", ".yml"):
        raw = _from_yaml(text, p)
    else:
        raise ConfigError(
            f"prices file {str(p)!r}: unknown format {suffix or '(no extension)'!r} (allowed: .yaml, .yml, .json, .csv)"
        )
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"prices file {str(p)!r} must map GPU names to $/hour, e.g. 'H100-SXM: 2.49'")
    return _validate(raw, p)


def _from_yaml(text: str, p: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"prices file {str(p)!r} is not valid YAML{where}") from None


def _from_csv(text: str, p: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, row in enumerate(csv.reader(io.StringIO(text)), 1):
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
            price = float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"prices file {str(p)!r}: price of {name} must be a number of $/hour, got {value!r}"
            ) from None
        if not math.isfinite(price) or price <= 0:
            raise ConfigError(f"prices file {str(p)!r}: price of {name} must be positive, got {value!r}")
        out[gpu.id] = price
    return out
