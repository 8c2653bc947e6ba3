"""Bounded reads of user input: every file or stream a user hands gpuplan goes through here.

A user file can be anything: ``/dev/zero``, a FIFO fed by ``yes``, a binary, a 10,000-deep JSON
array, a YAML alias bomb. Each reader stops at a byte limit and turns every way a read or parse can
fail (OSError, not UTF-8, syntax, RecursionError, nesting) into one :class:`GpuplanError` line naming
the file, what is allowed and what to do. Nothing here imports torch or the catalog.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.units import MIB, format_bytes

# Generous for every text file gpuplan reads (config.json, prices, recorded facts, a pasted log) and
# small enough that reading it all into memory is harmless. Callers with smaller files pass less.
MAX_USER_TEXT_BYTES = 16 * MIB
# Real config / facts / price files nest a handful of levels; a few thousand levels is an attack or a
# broken generator, and would overflow the recursion of whatever walks the data next.
MAX_NESTING_DEPTH = 64


def _too_large(what: str, limit_bytes: int, hint: str) -> str:
    return f"{what} is larger than {format_bytes(limit_bytes)}, the most gpuplan reads{hint}"


def _read_bounded(stream: IO[bytes], limit_bytes: int) -> bytes | None:
    """At most ``limit_bytes`` from ``stream``; None when there is more (read one byte past the limit)."""
    data = stream.read(limit_bytes + 1)
    return None if len(data) > limit_bytes else data


def _decode(data: bytes, what: str, error: type[GpuplanError], lenient: bool = False) -> str:
    if lenient:  # a log with a stray byte is still worth reading
        return data.decode("utf-8", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                    "pass a text file") from None


def read_user_text(path: str | Path, *, what: str, limit_bytes: int = MAX_USER_TEXT_BYTES,
                   error: type[GpuplanError] = ConfigError, hint: str = "") -> str:
    """The UTF-8 text of a user's file, read no further than ``limit_bytes``.

    ``what`` names the file in messages ("prices file 'p.csv'"); ``hint`` is appended to the
    too-large message (what to do instead).
    """
    try:
        with open(path, "rb") as stream:  # a FIFO or device must be read, never stat-sized
            data = _read_bounded(stream, limit_bytes)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}") from None
    if data is None:
        raise error(_too_large(what, limit_bytes, hint))
    return _decode(data, what, error)


def read_user_stdin(*, what: str = "standard input", limit_bytes: int = MAX_USER_TEXT_BYTES,
                    error: type[GpuplanError] = ConfigError, hint: str = "", lenient: bool = False) -> str:
    """Standard input as text, read no further than ``limit_bytes``; ``lenient``: bytes that are not
    UTF-8 become U+FFFD instead of an error."""
    stream = getattr(sys.stdin, "buffer", None)
    try:
        if stream is None:  # replaced by a text-only object (tests, embedding): same bound, in characters
            text = sys.stdin.read(limit_bytes + 1)
            if len(text) > limit_bytes:
                raise error(_too_large(what, limit_bytes, hint))
            return text
        data = _read_bounded(stream, limit_bytes)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}") from None
    if data is None:
        raise error(_too_large(what, limit_bytes, hint))
    return _decode(data, what, error, lenient)


def check_nesting(value: Any, *, what: str, max_depth: int = MAX_NESTING_DEPTH,
                  error: type[GpuplanError] = ConfigError) -> None:
    """Raise when lists/dicts nest deeper than ``max_depth``.

    Iterative, and each container is visited once, so YAML aliases that share (or contain) a node
    cost their size in the file, not their expanded size.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        if depth >= max_depth:
            raise error(f"{what} nests deeper than {max_depth} levels; no valid file does: check how it was made")
        seen.add(id(node))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)


def parse_user_json(text: str, *, what: str, error: type[GpuplanError] = ConfigError) -> Any:
    """JSON from a user's file; syntax errors and absurd nesting are one line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise error(f"{what} nests deeper than Python can parse; no valid file does: check how it was made") from None
    check_nesting(value, what=what, error=error)
    return value


def parse_user_yaml(text: str, *, what: str, error: type[GpuplanError] = ConfigError) -> Any:
    """YAML (safe subset) from a user's file; syntax errors and absurd nesting are one line."""
    import yaml  # a dependency, but only the verbs that read YAML pay for importing it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is ~10x faster when present
    try:
        value = yaml.load(text, Loader=loader)  # SafeLoader variants only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise error(f"{what} is not valid YAML{where}" + (f": {problem}" if problem else "")) from None
    except RecursionError:
        raise error(f"{what} nests deeper than Python can parse; no valid file does: check how it was made") from None
    check_nesting(value, what=what, error=error)
    return value
