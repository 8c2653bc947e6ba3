"""A smaller run of ``benchmarks/ui_load.py`` against the real server on loopback: concurrent valid,
malformed and oversized requests; no valid request fails, every malformed one is a 4xx, every oversized
upload is refused (413, or the connection closed before the body was read), the server and its worker
answer afterwards, and the server's memory stays bounded."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.ui.conftest import LiveServer

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 80


def _driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ui_load", ROOT / "benchmarks" / "ui_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ui_load"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_concurrent_mixed_requests(live_server: LiveServer) -> None:
    load = _driver()
    report = load.run_load(live_server.url, REQUESTS, live_server.pid, distinct=2)
    print(report.table())
    assert report.failed_valid() == []
    assert len(report.kinds["valid"]) >= REQUESTS // 2
    assert all(isinstance(s, int) and 400 <= s < 500 for _, s in report.kinds["malformed"])
    assert all(s == 413 or str(s).startswith("closed") for _, s in report.kinds["oversized"])
    assert report.alive_after
    assert report.rss_after_bytes - report.rss_before_bytes < load.RSS_GROWTH_LIMIT_BYTES
