"""The progress display: drawn on stderr whenever stderr is a terminal (stdout piped or --json too: issue 18,
a 194 s `fit --axis seq-len` piped into a file was silent); one line per step with GPUPLAN_PROGRESS=lines.

The CLI runs in-process with terminal-like streams, and once in a subprocess on a real pseudo-terminal."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from gpuplan.cli import progress as progress_mod
from gpuplan.cli.main import main
from gpuplan.cli.progress import FRAMES, Progress, wanted


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_whenever_stderr_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    tty, pipe = _Terminal(), io.StringIO()
    monkeypatch.delenv("GPUPLAN_PROGRESS", raising=False)
    assert wanted(False, tty, tty)
    assert wanted(True, tty, tty)  # --json: the answer is stdout, the spinner stderr
    assert wanted(False, pipe, tty)  # stdout piped
    assert not wanted(False, tty, pipe)  # stderr captured
    monkeypatch.setenv("GPUPLAN_PROGRESS", "lines")
    assert wanted(False, tty, pipe)  # a log asked for it
    monkeypatch.setenv("GPUPLAN_PROGRESS", "off")
    assert not wanted(False, tty, tty)


def test_lines_on_a_stream_that_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    log = io.StringIO()
    with Progress("fit: tracing gpt2", enabled=True, stream=log) as p:
        deadline = time.monotonic() + 5
        while "tracing" not in log.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        p("fit: trace 2, seq-len 128")
        while "trace 2" not in log.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = log.getvalue().splitlines()
    assert [re.sub(r"\(\d+ s\)$", "(N s)", line) for line in lines[:2]] == [
        "gpuplan: fit: tracing gpt2 (N s)", "gpuplan: fit: trace 2, seq-len 128 (N s)"]
    assert "\r" not in log.getvalue()


def test_spinner_draws_the_latest_message_and_erases_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    term = _Terminal()
    with Progress("tracing", enabled=True, stream=term) as p:
        p("fit: trace 3, batch 8")
        deadline = time.monotonic() + 5
        while "batch 8" not in term.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    shown = term.getvalue()
    assert "fit: trace 3, batch 8" in shown and shown[shown.index("fit") - 2] in FRAMES
    assert shown.endswith("\r") and shown.rsplit("\r", 2)[-2].strip() == ""  # the last write blanks the line


def test_disabled_progress_writes_nothing() -> None:
    term = _Terminal()
    with Progress("tracing", enabled=False, stream=term) as p:
        p("anything")
        time.sleep(0.3)
    assert term.getvalue() == ""


def _run_on_pty(argv: list[str]) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal: (exit code, what the terminal got)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gpuplan.cli.main", *argv], stdin=subprocess.DEVNULL,
                            stdout=secondary, stderr=secondary, env={**os.environ, "COLUMNS": "120"})
    os.close(secondary)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([primary], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError("no output for 120 s")
        try:
            data = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout=60)
    os.close(primary)
    return code, b"".join(chunks).decode(errors="replace")


def _run_in_process(argv: list[str], stdout: io.StringIO, stderr: io.StringIO) -> int:
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        return main(argv)


@pytest.mark.parametrize(("json_flag", "stdout_tty", "shown"), [
    (False, True, True),  # both terminals: shown
    (True, True, True),  # --json on a terminal: shown on stderr, stdout stays one object
    (False, False, True),  # stdout piped: shown on stderr
])
def test_cli_wiring(monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str, json_flag: bool, stdout_tty: bool,
                    shown: bool) -> None:
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    out, err = (_Terminal() if stdout_tty else io.StringIO()), _Terminal()
    argv = ["estimate", tiny_gpt2, "--batch-size", "2", "--seq-len", "16", *(["--json"] if json_flag else [])]
    assert _run_in_process(argv, out, err) == 0
    assert (f"tracing {tiny_gpt2}" in err.getvalue()) is shown
    assert "tracing" not in out.getvalue()
    if json_flag:
        assert json.loads(out.getvalue())["tensor_peak_bytes"] > 0  # stdout is the one object


@pytest.mark.slow
def test_shown_on_a_real_terminal(tiny_gpt2: str) -> None:
    """The real CLI on a pseudo-terminal: the spinner line appears there, then the answer."""
    if not hasattr(pty, "openpty"):
        pytest.skip("no pseudo-terminals on this platform")
    # slow enough to be seen: the run imports torch and traces inside the spinner
    code, terminal = _run_on_pty(["estimate", tiny_gpt2, "--batch-size", "2", "--seq-len", "16"])
    assert code == 0
    assert f"tracing {tiny_gpt2}" in terminal and "peak" in terminal


@pytest.mark.parametrize("json_flag", [False, True])
def test_measure_shows_progress_on_a_terminal(monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str,
                                                   json_flag: bool) -> None:
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    out, err = _Terminal(), _Terminal()
    argv = ["measure", tiny_gpt2, "--mode", "infer", "--batch-size", "2", "--seq-len", "16", "--steps", "2",
            "--warmup", "1", "--no-store", *(["--json"] if json_flag else [])]
    assert _run_in_process(argv, out, err) == 0
    assert "measure: running" in err.getvalue()
    if json_flag:
        json.loads(out.getvalue())
