"""Results are plain data (issue 19 item 1): their to_dict()/str() ask gpuplan.presentation, which
report/registry.py fills by type name. Every name there is a real result type that asks for it."""

from __future__ import annotations

import importlib

import pytest

from gpuplan.presentation import JSON, registered, to_json, to_text, type_name


def test_every_registered_name_is_a_result_type_that_asks_for_it() -> None:
    entries = registered()
    assert len(entries) >= 12
    for name, kind in entries:
        module, _, cls_name = name.rpartition(".")
        cls = getattr(importlib.import_module(module), cls_name)
        assert type_name(cls) == name
        assert ("to_dict" if kind == JSON else "__str__") in vars(cls), (name, kind)


def test_an_unregistered_type_is_a_clear_bug_not_a_silent_repr() -> None:
    with pytest.raises(LookupError, match=r"report/registry\.py"):
        to_json(object())
    with pytest.raises(LookupError, match="no text renderer"):
        to_text(3)
