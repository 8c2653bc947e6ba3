"""Exceptions raised by gpuplan.

Every user-facing problem raises a subclass of :class:`GpuplanError` whose message is one line:
what was wrong, what is allowed, and what to do next. The command line prints that line and
exits 2 (usage) without a traceback unless ``--debug`` is given.

    GpuplanError
    ├── ConfigError (also ValueError)      a bad flag or argument value
    ├── UnknownNameError (also KeyError)   a name that is not in a catalog
    │   ├── UnknownModelError
    │   └── UnknownGPUError
    ├── ModelSourceError                   a config file, checkpoint or factory that cannot be used
    ├── TraceError                         the model's step failed while being traced
    ├── LayoutError (also ValueError)      a parallel layout that cannot exist
    ├── MissingDependencyError             an optional package (torch, transformers, ...) is absent
    └── CompatError                        environment facts that cannot be read or reconciled
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuplanError(Exception):
    """Base class of every error gpuplan raises on purpose."""

    exit_code: int = 2


class ConfigError(GpuplanError, ValueError):
    """A workload or command-line value is out of range or not one of the allowed choices."""


class UnknownNameError(GpuplanError, KeyError):
    """A name that is not in a catalog; the message lists the closest known names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownModelError(UnknownNameError):
    """The MODEL argument is neither a catalog name, a file, nor a factory reference."""


class UnknownGPUError(UnknownNameError):
    """The GPU name matches no catalog entry (or matches several)."""


class ModelSourceError(GpuplanError):
    """A config.json, safetensors file or factory exists but cannot be turned into a model."""


class TraceError(GpuplanError):
    """The model's forward/backward failed under the fake-tensor trace."""


class LayoutError(GpuplanError, ValueError):
    """A parallel layout (dp, tp, pp, ZeRO stage) that cannot exist for this model or GPU count."""


class MissingDependencyError(GpuplanError):
    """An optional dependency is needed for this request and is not installed."""


class CompatError(GpuplanError):
    """Environment facts could not be read or reconciled."""


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The ``n`` choices most similar to ``name`` (case-insensitive), best first."""
    by_lower = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)
    if not hits:
        hits = [c for c in by_lower if name.lower() in c or c in name.lower()][:n]
    return [by_lower[h] for h in hits]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """'; did you mean X or Y?' or '' when nothing is close."""
    hits = closest(name, choices)
    if not hits:
        return ""
    return "; did you mean " + " or ".join(hits) + "?"


LISTED_CHOICES = 12
"""Most allowed values an error message lists: an error stays one line a person can read."""


def list_choices(choices: Iterable[str], *, limit: int = LISTED_CHOICES, see: str = "") -> str:
    """``'a, b, c'``, or the first ``limit`` and ``'…and 300 more'`` (``'; see <see>'`` after it)."""
    values = list(choices)
    if len(values) <= limit:
        return ", ".join(values)
    more = f", …and {len(values) - limit} more"
    return ", ".join(values[:limit]) + more + (f"; see {see}" if see else "")


MESSAGE_CHARS = 400
"""Longest text quoted from another library's error (its messages can run to pages)."""


def one_line(text: object, limit: int = MESSAGE_CHARS) -> str:
    """``text`` with its whitespace (newlines included) collapsed, cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def require_choice(kind: str, value: str, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is allowed, else raise a ConfigError listing the choices."""
    allowed = list(allowed)
    if value in allowed:
        return value
    raise ConfigError(
        f"unknown {kind} {value!r}{did_you_mean(value, allowed)} (allowed: {list_choices(allowed)})"
    )
