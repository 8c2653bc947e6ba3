"""A small pool of worker processes that run jobs with a time limit and a memory limit.

Tracing imports torch and can take seconds to minutes and gigabytes on a large model, so it never
runs in the server process: each worker sets ``RLIMIT_AS`` on itself (a trace that wants more gets a
MemoryError, answered in one line), and a job past the time limit has its worker killed and replaced.
The server keeps answering throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import resource
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Final

from gpuplan.errors import ConfigError
from gpuplan.ui.jobs import Outcome, failure
from gpuplan.ui.query import Query
from gpuplan.units import GIB

MAX_WORKERS: Final = 2
"""Traces are CPU-heavy: more workers than this only share the same cores."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one job may take, and how many may wait."""

    time_limit_s: float = 120.0
    memory_limit_bytes: int = 8 * GIB
    workers: int = 1
    max_waiting: int = 32
    """Jobs queued for a worker beyond which a request is answered 'busy' (503) at once."""

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ConfigError(f"--workers {self.workers} is out of range: allowed 1..{MAX_WORKERS}")
        if not 0 < self.time_limit_s < float("inf"):
            raise ConfigError(f"--time-limit-s {self.time_limit_s:g} must be a positive, finite number of seconds")
        if self.memory_limit_bytes < GIB:
            raise ConfigError(f"--memory-gib {self.memory_limit_bytes / GIB:g} is too small: at least 1 "
                              "(importing torch alone needs most of that)")


def _child(conn: multiprocessing.connection.Connection, memory_limit_bytes: int, upload_dir: Path | None) -> None:
    """A worker's loop: limit its own memory, import the tracing stack once, answer jobs until closed."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = memory_limit_bytes if hard == resource.RLIM_INFINITY else min(memory_limit_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))  # a soft limit may not exceed the hard one
    import logging
    import warnings

    logging.disable(logging.CRITICAL)  # the worker's stderr is the server's log: library chatter stays out
    warnings.simplefilter("ignore")
    from gpuplan.ui.jobs import execute

    with contextlib.suppress(ImportError, MemoryError):
        import gpuplan.estimate  # noqa: F401 - warm: the first job should not pay for importing torch
    while True:
        try:
            query = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        conn.send(execute(query, upload_dir))


class _Slot:
    def __init__(self, process: BaseProcess, conn: multiprocessing.connection.Connection) -> None:
        self.process = process
        self.conn = conn


class WorkerPool:
    """``limits.workers`` processes; :meth:`run` hands a query to an idle one and waits at most the time limit."""

    def __init__(self, limits: Limits, upload_dir: Path | None = None) -> None:
        self.limits = limits
        self.upload_dir = upload_dir
        self._context = multiprocessing.get_context("spawn")  # no fork of a threaded server
        self._idle: asyncio.Queue[_Slot] | None = None
        self._slots: list[_Slot] = []
        self._waiting = 0
        self.restarts = 0
        """Workers killed (time limit) or found dead and replaced."""

    def _spawn(self) -> _Slot:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_child, args=(child, self.limits.memory_limit_bytes, self.upload_dir),
                                        daemon=True, name="gpuplan-ui-worker")
        process.start()
        child.close()
        slot = _Slot(process, parent)
        self._slots.append(slot)
        return slot

    def _replace(self, slot: _Slot) -> _Slot:
        self._kill(slot)
        self.restarts += 1
        return self._spawn()

    def _kill(self, slot: _Slot) -> None:
        if slot in self._slots:
            self._slots.remove(slot)
        with contextlib.suppress(OSError):
            slot.conn.close()
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(timeout=5)

    def start(self) -> None:
        self._idle = asyncio.Queue()
        for _ in range(self.limits.workers):
            self._idle.put_nowait(self._spawn())

    def close(self) -> None:
        for slot in list(self._slots):
            self._kill(slot)
        self._idle = None

    @property
    def pids(self) -> list[int]:
        return [s.process.pid for s in self._slots if s.process.pid is not None]

    async def run(self, query: Query) -> Outcome:
        """The worker's Outcome, or a one-line failure: busy (503), time limit (504), worker died (500)."""
        if self._idle is None:
            self.start()
        assert self._idle is not None
        if self._waiting >= self.limits.max_waiting:
            return failure(f"the server is busy ({self._waiting} queries waiting); try again in a minute",
                           503, cacheable=False)
        self._waiting += 1
        try:
            slot = await self._idle.get()
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        try:
            slot.conn.send(query)
            ready = await loop.run_in_executor(None, slot.conn.poll, self.limits.time_limit_s)
            if not ready:
                slot = self._replace(slot)
                return failure(f"{query.verb} of {query.model} took longer than {self.limits.time_limit_s:g} s, "
                               "the UI's time limit (gpuplan ui --time-limit-s); try a smaller model, batch or "
                               "sequence, or the CLI", 504, cacheable=False)
            outcome = slot.conn.recv()
            if not isinstance(outcome, Outcome):
                raise EOFError
            return outcome
        except (EOFError, OSError, BrokenPipeError):
            code = slot.process.exitcode
            slot = self._replace(slot)
            return failure(f"the worker running {query.verb} of {query.model} died (exit code {code}); "
                           "a fresh one has started — try a smaller model or batch", 500, cacheable=False)
        except BaseException:  # cancelled mid-job: the worker may still answer later, so it is not reused
            slot = self._replace(slot)
            raise
        finally:
            if self._idle is not None:
                self._idle.put_nowait(slot)
