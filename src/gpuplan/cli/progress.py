"""A spinner with a status line on stderr while long work runs (tracing, fit, recommend, plan,
measure, calibrate).

Drawn whenever stderr is a terminal, also when stdout is piped or the answer is ``--json`` (issue 18: a
194 s ``fit --axis seq-len`` piped into a file was silent): stdout, the answer, is never touched.
Where stderr is not a terminal (a log, a CI job), ``GPUPLAN_PROGRESS=lines`` prints each step as one line
with the seconds so far (the trace count in fit's lines gives the speed); ``GPUPLAN_PROGRESS=off`` hides
the spinner too. The library never prints; it calls a ``progress(message)`` callback where it has one,
and :class:`Progress` draws it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

FRAMES = "|/-\\"
TICK_S = 0.1
DELAY_S = 0.2
"""Nothing is drawn for work shorter than this (no flicker on quick answers)."""


def wanted(json_output: bool, stdout: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Whether a progress display may be drawn on ``stderr``: a terminal (whatever stdout is, ``--json`` or
    not: the answer's stream is never drawn on), or any stream with ``GPUPLAN_PROGRESS=lines``; never with
    ``GPUPLAN_PROGRESS=off``. ``json_output`` and ``stdout`` are kept for callers: they no longer hide it."""
    del json_output, stdout
    err = stderr if stderr is not None else sys.stderr
    setting = os.environ.get("GPUPLAN_PROGRESS", "").strip().lower()
    if setting in ("off", "0", "no", "false"):
        return False
    return setting == "lines" or _isatty(err)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


class Progress:
    """``with Progress("tracing gpt2", enabled=wanted(args.json)) as progress: ... progress("batch 8")``.

    A background thread redraws one stderr line (spinner, message, elapsed seconds) every 0.1 s and
    erases it on exit, so the answer printed afterwards starts on a clean line. On a stream that is not a
    terminal it writes one line per new message instead (``gpuplan: message (12 s)``), nothing to erase."""

    def __init__(self, message: str, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._message = message
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._drawn = 0
        self._lines = not _isatty(self._stream)

    def __call__(self, message: str) -> None:
        """The callback the library calls with what it is doing now."""
        with self._lock:
            self._message = message

    def __enter__(self) -> Progress:
        if self.enabled:
            self._start = time.monotonic()
            self._thread = threading.Thread(target=self._loop, name="gpuplan-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self._drawn:
                self._write("\r" + " " * self._drawn + "\r")

    def _loop(self) -> None:
        if self._stop.wait(DELAY_S):
            return
        if self._lines:
            self._log_lines()
            return
        frame = 0
        while not self._stop.is_set():
            with self._lock:
                message = self._message
            line = f"{FRAMES[frame % len(FRAMES)]} {message} ({time.monotonic() - self._start:.0f} s)"
            line = line[:_width() - 1]
            self._write("\r" + line + " " * max(0, self._drawn - len(line)))
            self._drawn = max(self._drawn, len(line))
            frame += 1
            self._stop.wait(TICK_S)

    def _log_lines(self) -> None:
        """One line per message, with the seconds since the start: a log shows each step and its pace."""
        last = None
        while True:
            with self._lock:
                message = self._message
            if message != last:
                self._write(f"gpuplan: {message} ({time.monotonic() - self._start:.0f} s)\n")
                last = message
            if self._stop.wait(TICK_S):
                return

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: the answer matters, not the spinner
            self._stop.set()


def _width() -> int:
    import shutil

    return max(20, shutil.get_terminal_size((80, 24)).columns)
