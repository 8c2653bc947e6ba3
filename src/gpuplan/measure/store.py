"""The measurements store: every measurement with its environment, in a local SQLite file.

Safety under concurrency and crashes comes from SQLite itself, used the documented way:

* WAL journal (``PRAGMA journal_mode=WAL``): readers never block the writer, and a writer killed
  at any instant leaves the database as of its last commit (the WAL is replayed or discarded on
  the next open). ``synchronous=FULL`` so a committed record also survives power loss.
* One transaction per measurement (``BEGIN IMMEDIATE`` ... ``COMMIT``): all ranks of a run are
  written together or not at all; a killed run never leaves half a record.
* A busy timeout, so concurrent writers queue instead of failing with "database is locked".

Default location: ``$XDG_CACHE_HOME/gpuplan/measurements.sqlite3`` (``~/.cache`` without it).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    model TEXT NOT NULL,
    mode TEXT NOT NULL,
    precision TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    layout TEXT,
    rank INTEGER NOT NULL,
    world_size INTEGER NOT NULL,
    device TEXT NOT NULL,
    gpu TEXT,
    device_name TEXT NOT NULL,
    driver_version TEXT,
    torch_version TEXT NOT NULL,
    cuda_version TEXT,
    workload_json TEXT NOT NULL,
    environment_json TEXT NOT NULL,
    measured_json TEXT NOT NULL,
    estimated_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_key ON measurements (gpu, torch_version, cuda_version);
"""


_COLUMNS = ("run_id", "created_at", "schema_version", "model", "mode", "precision", "batch_size", "layout",
            "rank",
            "world_size", "device", "gpu", "device_name", "driver_version", "torch_version", "cuda_version",
            "workload_json", "environment_json", "measured_json", "estimated_json")
_INSERT = f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"


class StoreError(GpuplanError):
    """The store cannot be opened or written (a path problem, or not an SQLite file)."""


def default_store_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuplan" / "measurements.sqlite3"


@dataclass(frozen=True, slots=True)
class StoredMeasurement:
    """One row: one rank of one run."""

    id: int
    run_id: str
    created_at: str
    model: str
    layout: str | None
    rank: int
    world_size: int
    device: str
    gpu: str | None
    device_name: str
    driver_version: str | None
    torch_version: str
    cuda_version: str | None
    workload: dict[str, Any]
    environment: dict[str, Any]
    measured: dict[str, Any]
    estimated: dict[str, Any]


def _unwritable(path: Path, why: str) -> StoreError:
    return StoreError(f"cannot use measurements store {str(path)!r}: {why}; pass --store PATH to a writable "
                      "location or --no-store")


class Store:
    """An open measurements store. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self._check_path()
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._setup()
        except sqlite3.DatabaseError as exc:
            raise _unwritable(self.path, str(exc)) from exc

    def _check_path(self) -> None:
        p = self.path
        if p.exists() and p.is_dir():
            raise _unwritable(p, "it is a directory")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unwritable(p, exc.strerror or str(exc)) from exc
        target = p if p.exists() else p.parent
        if not os.access(target, os.W_OK):
            raise _unwritable(p, "permission denied")

    def _setup(self) -> None:
        # Setting WAL takes a brief exclusive lock; a concurrent first open can see SQLITE_BUSY
        # before the busy handler applies, so retry for the busy timeout.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                self._conn.execute("PRAGMA synchronous=FULL")
                self._conn.executescript(_SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        if str(mode).lower() != "wal":
            raise _unwritable(self.path, f"no WAL journal on this file system (got {mode})")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------
    def add(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert the rows of one run in one transaction; returns their ids."""
        run_id = uuid.uuid4().hex
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        ids: list[int] = []
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    cur = self._conn.execute(
                        _INSERT,
                        (run_id, now, SCHEMA_VERSION, row["model"], row["workload"]["mode"],
                         row["workload"]["precision"], row["workload"]["batch_size"], row.get("layout"),
                         row["measured"].get("rank", 0), row["measured"].get("world_size", 1),
                         row["environment"]["device"], row["environment"].get("gpu_id"),
                         row["environment"]["device_name"], row["environment"].get("driver_version"),
                         row["environment"]["torch_version"], row["environment"].get("cuda_version"),
                         json.dumps(row["workload"]), json.dumps(row["environment"]),
                         json.dumps(row["measured"]), json.dumps(row["estimated"])))
                    ids.append(int(cur.lastrowid or 0))
                self._conn.execute("COMMIT")
            except BaseException:
                # KeyboardInterrupt included: never leave the transaction open
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            raise _unwritable(self.path, str(exc)) from exc
        return ids

    def add_measurement(self, m: Any) -> list[int]:
        """Store a :class:`gpuplan.measure.results.Measurement` (one row per rank)."""
        base = {"model": m.model, "workload": m.workload.to_dict(), "environment": m.environment.to_dict(),
                "estimated": m.estimated, "layout": m.layout}
        return self.add([{**base, "measured": r.to_dict()} for r in m.ranks])

    # -- reading ------------------------------------------------------------------------------
    def records(self, *, device: str | None = None) -> Iterator[StoredMeasurement]:
        sql = ("SELECT id, run_id, created_at, model, layout, rank, world_size, device, gpu, device_name, "
               "driver_version, torch_version, cuda_version, workload_json, environment_json, measured_json, "
               "estimated_json FROM measurements")
        params: tuple[Any, ...] = ()
        if device is not None:
            sql += " WHERE device = ?"
            params = (device,)
        for r in self._conn.execute(sql + " ORDER BY id", params):
            yield StoredMeasurement(
                id=r[0], run_id=r[1], created_at=r[2], model=r[3], layout=r[4], rank=r[5], world_size=r[6],
                device=r[7], gpu=r[8], device_name=r[9], driver_version=r[10], torch_version=r[11],
                cuda_version=r[12], workload=json.loads(r[13]), environment=json.loads(r[14]),
                measured=json.loads(r[15]), estimated=json.loads(r[16]))

    def count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    def integrity(self) -> str:
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])
