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


def test_one_registry_holds_every_verbs_result_types() -> None:
    """report/verbs.py REGISTRY (issue 19 item 1): per verb, each result type's JSON, text, picture, tables and
    caption; presentation's renderers are filled from it, and the web page's legends are its entries."""
    from gpuplan.report.verb_options import VERBS
    from gpuplan.report.verbs import REGISTRY, view_of, views

    names = [v.type_name for v in views()]
    assert len(names) == len(set(names)) == sum(len(v.results) for v in REGISTRY.values())  # each type once
    assert {name for name, _ in registered()} == set(names)
    for verb in VERBS:
        assert REGISTRY[verb].legend, verb
    for view in views():  # a picture always comes with its tables and its caption
        assert (view.figure is None) == (view.sections is None) == (not view.caption), view.type_name
    with pytest.raises(LookupError, match=r"report/verbs\.py"):
        view_of(object())


def test_cli_and_ui_draw_through_the_registry_only() -> None:
    """No front end picks a picture or tables for a result itself (they did: cli/estimate, fit, plan, recommend
    and serve each had a _figure beside report/verbs.py's)."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "gpuplan"
    found = []
    for path in [*(src / "cli").glob("*.py"), *(src / "ui").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("gpuplan.report.plot", "gpuplan.report.verbs"):
                found += [(path.name, a.name) for a in node.names
                          if a.name.endswith(("_figure", "_sections")) and a.name != "save_figure"]
            if isinstance(node, ast.FunctionDef) and node.name == "_figure":
                found.append((path.name, node.name))
    assert found == []
