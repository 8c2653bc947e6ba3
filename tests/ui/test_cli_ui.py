"""``gpuplan ui``'s own flags: loopback by default, a reachable host only with --allow-remote, and a
loopback server answers only Host headers that name it (no DNS rebinding)."""

from __future__ import annotations

import contextlib
import io

import httpx
import pytest

from gpuplan.cli.main import main
from tests.ui.conftest import LiveServer


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["ui", *argv])
        except SystemExit as exc:  # argparse's usage errors exit from inside the parser
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("argv", "words"), [
    (["--host", "0.0.0.0"], "add --allow-remote"),
    (["--host", "192.168.1.20"], "reachable from other machines"),
    (["--port", "70000"], "--port 70000 is out of range"),
    (["--workers", "3"], "--workers 3 is out of range: allowed 1..2"),
    (["--memory-gib", "0.5"], "--memory-gib 0.5 is too small"),
    (["--time-limit-s", "0"], "expected a positive, finite number (a time in seconds), got '0'"),
    (["--memory-gib", "nan"], "expected an amount of GiB, got 'nan'"),
])
def test_refusals_are_one_line_exit_2(argv: list[str], words: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert words in err and err.count("\n") == 1


def test_loopback_server_refuses_other_host_headers(live_server: LiveServer) -> None:
    assert live_server.url.startswith("http://127.0.0.1:")
    # httpx's default 5 s timeout is short for a server process sharing 2 busy cores with a test run
    assert httpx.get(live_server.url + "/healthz", timeout=60).json()["ok"] is True
    rebound = httpx.get(live_server.url + "/healthz", headers={"host": "attacker.example"}, timeout=60)
    assert rebound.status_code == 400


def test_the_url_is_printed_once_the_socket_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--json` promises the URL once listening: a script connects as soon as it reads the line. The socket
    used to be bound but not listening until uvicorn started, and a quick client was refused (seen in CI)."""
    import json
    import socket

    import uvicorn

    seen: dict[str, object] = {}

    def serve(self: uvicorn.Server, sockets: list[socket.socket]) -> None:
        (sock,) = sockets
        seen["listening"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        # a client connecting now is queued in the backlog, not refused
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            seen["connected"] = True
        sock.close()

    monkeypatch.setattr(uvicorn.Server, "run", serve)
    code, out, err = run_cli("--port", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["port"] > 0
    assert seen == {"listening": 1, "connected": True}
