"""Fixtures of the web-page tests: the tiny model's config.json and one real ``gpuplan ui`` server.

The server is the CLI verb itself (``gpuplan ui --port 0 --json``) in a subprocess on loopback: the
browser and load tests talk to it over TCP exactly as a user's browser does. It is started once per
session (its worker imports torch once) and stopped by its own process id.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.fixtures.tiny_models import TINY_GPT2_LM

START_TIMEOUT_S = 60


@dataclass(frozen=True)
class LiveServer:
    url: str
    pid: int


@pytest.fixture(scope="session")
def tiny_config_bytes() -> bytes:
    return json.dumps(TINY_GPT2_LM).encode()


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuplan.cli.main", "ui", "--port", "0", "--json", "--time-limit-s", "240"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(), text=True)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout=START_TIMEOUT_S):
        proc.kill()
        pytest.fail(f"gpuplan ui did not print its URL within {START_TIMEOUT_S} s")
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"gpuplan ui exited {proc.wait()}: {err[-2000:]}")
    info = json.loads(line)
    try:
        yield LiveServer(url=info["url"].rstrip("/"), pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
