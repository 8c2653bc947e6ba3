"""Reading loosely typed recorded values without raising: anything unreadable becomes None."""

from __future__ import annotations

from typing import Any


def first_line(*texts: str) -> str | None:
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                return line.strip()
    return None


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def as_bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
