"""Fills gpuplan/presentation.py (which a result's to_dict()/str() asks) from the one per-verb registry,
report/verbs.py: the result modules never import ``report/``; this module, imported by ``gpuplan/__init__.py``,
ties them together by type name. Importing it imports only the renderers (no result module, no torch)."""

from __future__ import annotations

from gpuplan.presentation import JSON, TEXT, register
from gpuplan.report.verbs import views

for _view in views():
    register(_view.type_name, TEXT, _view.to_text)
    if _view.to_json is not None:
        register(_view.type_name, JSON, _view.to_json)
