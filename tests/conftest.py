"""Every test runs in a sandbox: never the user's configuration, cache or Hugging Face directories.

gpuplan reads ``$GPUPLAN_CALIBRATION`` or ``$XDG_CONFIG_HOME/gpuplan/calibration.json`` (``~/.config``
without it) and keeps measurements under ``$XDG_CACHE_HOME/gpuplan`` (``~/.cache``); transformers and
torch keep caches under ``$HF_HOME`` / ``$TORCH_HOME`` / ``~``. The environment is redirected in
``pytest_configure``, before test modules are collected, because some libraries read these variables
when they are imported; the autouse fixture puts them back for every test, whatever an earlier test
did. ``tests/test_sandbox.py`` proves a calibration planted in the home directory is not read.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.trace.cache import Lookup, TraceCache, decode_step, encode_step, use_trace_cache
from gpuplan.trace.records import TracedStep
from tests.fixtures.tiny_models import TINY_GPT2_LM

# GPUPLAN_* variables of the test harness itself (scripts/test, the fuzz driver's knobs): kept; every
# other GPUPLAN_* is dropped, so a developer's own settings cannot change a test's answer
HARNESS_VARIABLES = frozenset({"GPUPLAN_CPU_PYTHON", "GPUPLAN_FUZZ_SEED", "GPUPLAN_FUZZ_CALLS", "GPUPLAN_UI_FUZZ_SEED",
                               "GPUPLAN_UI_FUZZ_CALLS", "GPUPLAN_NEWCOMER"})

_SANDBOX: dict[str, str] = {}
_SAVED: dict[str, str | None] = {}
_ROOT: list[Path] = []


def sandbox_environment(root: Path) -> dict[str, str]:
    """The variables that point every user directory gpuplan or its libraries read into ``root``."""
    home = root / "home"
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "HF_HOME": str(root / "hf"),
        "HF_HUB_CACHE": str(root / "hf" / "hub"),
        "HF_HUB_OFFLINE": "1",  # a Hub id never reaches the network in a test (tests/models/test_hub.py)
        "TORCH_HOME": str(root / "torch"),
        "GPUPLAN_CALIBRATION": "off",
        # no on-disk trace cache: tests/trace/test_cache.py turns it on where it is tested; traced steps
        # are shared between tests in memory instead (SESSION_TRACES below)
        "GPUPLAN_CACHE": "off",
    }


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/*.txt from the current text output (review the diff)")


def pytest_configure(config: pytest.Config) -> None:
    root = Path(tempfile.mkdtemp(prefix="gpuplan-tests-"))
    _ROOT.append(root)
    _SANDBOX.update(sandbox_environment(root))
    (root / "home").mkdir()
    for name in [*_SANDBOX, *(n for n in os.environ if n.startswith("GPUPLAN_") and n not in HARNESS_VARIABLES)]:
        _SAVED.setdefault(name, os.environ.get(name))
        if name in _SANDBOX:
            os.environ[name] = _SANDBOX[name]
        else:
            del os.environ[name]


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, value in _SAVED.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for root in _ROOT:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _user_directories_sandboxed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in _SANDBOX.items():
        monkeypatch.setenv(name, value)
    for name in [n for n in os.environ if n.startswith("GPUPLAN_") and n not in HARNESS_VARIABLES]:
        if name not in _SANDBOX:
            monkeypatch.delenv(name)
    yield


class SessionTraces(TraceCache):
    """The test session's traced steps, in memory, under trace/cache.py's own keys (the model's
    config, the whole workload, the kernel class, library versions, gpuplan's source hash): a test
    that traces what an earlier test traced reads that step back instead of tracing it again. Stored
    encoded (trace/cache.py's codec), so each test decodes its own copy: no test sees another's
    mutations. Never on disk, never the user's cache."""

    def __init__(self) -> None:
        super().__init__(Path(os.devnull))
        self.payloads: dict[str, bytes] = {}
        self.hits = 0

    def load(self, key: str) -> Lookup:
        payload = self.payloads.get(key)
        if payload is None:
            return Lookup(None)
        self.hits += 1
        return Lookup(decode_step(payload))

    def store(self, key: str, step: TracedStep) -> None:
        with contextlib.suppress(TypeError):  # a field the codec does not store: not shared
            self.payloads[key] = encode_step(step)


SESSION_TRACES = SessionTraces()


def _traces_afresh(item: pytest.Item) -> bool:
    """Tests of tracing itself (tests/trace/, or marked ``fresh_trace``) trace every step they ask for."""
    return item.get_closest_marker("fresh_trace") is not None or Path(str(item.path)).parent.name == "trace"


@pytest.fixture(autouse=True)
def _traced_steps_shared(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Library calls and in-process ``gpuplan`` commands (whose ``GPUPLAN_CACHE=off`` would turn any
    cache off) trace through SESSION_TRACES; ``--no-cache`` still bypasses it."""
    if _traces_afresh(request.node):
        yield
        return
    monkeypatch.setattr(TraceCache, "default", classmethod(lambda cls: SESSION_TRACES))
    with use_trace_cache(SESSION_TRACES):
        yield


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of a config.json of the 2-block tiny GPT-2 language model (TINY_GPT2_LM)."""
    path = tmp_path_factory.mktemp("models") / "tiny-gpt2.json"
    path.write_text(json.dumps(TINY_GPT2_LM))
    return str(path)
