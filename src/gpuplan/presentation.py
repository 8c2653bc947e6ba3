"""Results are plain data: their JSON object and their text are made above them, in ``report/``.

A result type's ``to_dict()`` and ``str()`` ask this registry for its renderer; ``report/registry.py``
fills it, by the result type's dotted name (``gpuplan.estimate.Estimate``), and ``gpuplan/__init__.py``
imports that module, so the registry is full before any result exists. No result module imports
``report/`` (tests/test_architecture.py counts function-level and TYPE_CHECKING imports too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

JSON: Final = "json"
TEXT: Final = "text"

_RENDERERS: dict[tuple[str, str], Callable[[Any], Any]] = {}


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(name: str, kind: str, renderer: Callable[[Any], Any]) -> None:
    """Make ``renderer`` the ``kind`` (``json`` or ``text``) of the result type named ``name``."""
    _RENDERERS[(name, kind)] = renderer


def registered() -> dict[tuple[str, str], Callable[[Any], Any]]:
    return dict(_RENDERERS)


def _renderer(obj: object, kind: str) -> Callable[[Any], Any]:
    name = type_name(type(obj))
    found = _RENDERERS.get((name, kind))
    if found is None:  # a bug: every result type is listed in report/registry.py
        raise LookupError(f"no {kind} renderer registered for {name} (see gpuplan/report/registry.py)")
    return found


def to_json(obj: object) -> dict[str, Any]:
    """The result's ``--json`` object."""
    data = _renderer(obj, JSON)(obj)
    assert isinstance(data, dict)
    return data


def to_text(obj: object) -> str:
    """The result's terminal text."""
    text = _renderer(obj, TEXT)(obj)
    assert isinstance(text, str)
    return text
