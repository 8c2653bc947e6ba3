"""A spinner with a status line on stderr while long work runs (tracing, fit, recommend, plan,
measure, calibrate).

Shown only when both stdout and stderr are terminals and ``--json`` is off: piped or captured
output, and every JSON answer, stay exactly what they were. The library never prints; it calls
a ``progress(message)`` callback where it has one, and :class:`Progress` draws it.
"""

from __future__ import annotations

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
    """Whether a progress display may be drawn: terminals on both streams, no ``--json``."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    return not json_output and _isatty(out) and _isatty(err)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


class Progress:
    """``with Progress("tracing gpt2", enabled=wanted(args.json)) as progress: ... progress("batch 8")``.

    A background thread redraws one stderr line (spinner, message, elapsed seconds) every 0.1 s and
    erases it on exit, so the answer printed afterwards starts on a clean line."""

    def __init__(self, message: str, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._message = message
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._drawn = 0

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

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: the answer matters, not the spinner
            self._stop.set()


def _width() -> int:
    import shutil

    return max(20, shutil.get_terminal_size((80, 24)).columns)
