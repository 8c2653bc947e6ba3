"""The measurements store: round trip, concurrent writers, a writer killed mid-write, bad paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.measure.store import Store, StoreError, default_store_path


def _row(model: str = "m", rank: int = 0, world: int = 1, **measured: object) -> dict[str, object]:
    return {"model": model, "layout": None,
            "workload": {"mode": "train", "precision": "fp32", "batch_size": 1},
            "environment": {"device": "cuda", "gpu_id": "H200-SXM", "device_name": "NVIDIA H200",
                            "driver_version": "570.1", "torch_version": "2.14.1", "cuda_version": "13.0"},
            "measured": {"rank": rank, "world_size": world, **measured}, "estimated": {"step_time_s": 1.0}}


def test_default_path_follows_xdg_cache_home(isolated_dirs: Path) -> None:
    assert default_store_path() == isolated_dirs / "cache" / "gpuplan" / "measurements.sqlite3"


def test_round_trip_and_wal(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        ids = store.add([_row(rank=0, world=2, step_time_s=1.5), _row(rank=1, world=2, step_time_s=1.6)])
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = list(store.records())
    assert [r.id for r in rows] == ids
    assert [r.rank for r in rows] == [0, 1]
    assert rows[0].run_id == rows[1].run_id  # one run, one transaction
    assert rows[1].measured["step_time_s"] == 1.6
    assert rows[0].gpu == "H200-SXM" and rows[0].driver_version == "570.1"


_WRITER = textwrap.dedent("""
    import sys
    from gpuplan.measure.store import Store
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    row = lambda i, r: {"model": f"{tag}-{i}", "layout": None,
                        "workload": {"mode": "train", "precision": "fp32", "batch_size": 1},
                        "environment": {"device": "cpu", "device_name": "cpu", "torch_version": "x"},
                        "measured": {"rank": r, "world_size": 4, "pad": "x" * 20000}, "estimated": {}}
    with Store(path) as store:
        for i in range(n):
            store.add([row(i, r) for r in range(4)])
            print(i, flush=True)
""")


def _writer(path: Path, tag: str, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(path), tag, str(n)], stdout=subprocess.PIPE,
                            text=True)


def test_two_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    Store(path).close()
    procs = [_writer(path, tag, 40) for tag in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=60) == 0
    with Store(path) as store:
        models = [r.model for r in store.records()]
        assert store.integrity() == "ok"
    assert len(models) == 2 * 40 * 4
    for tag in ("a", "b"):
        assert sorted({m for m in models if m.startswith(tag)}) == sorted(f"{tag}-{i}" for i in range(40))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_writer_killed_mid_write_keeps_earlier_records(tmp_path: Path, sig: signal.Signals) -> None:
    path = tmp_path / "s.sqlite3"
    proc = _writer(path, "k", 100_000)
    assert proc.stdout is not None
    committed = []
    for line in proc.stdout:  # wait for some commits, then kill while it keeps writing
        committed.append(int(line.split()[0]))
        if len(committed) == 25:
            break
    time.sleep(0.05)
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    assert proc.returncode == -sig
    with Store(path) as store:
        assert store.integrity() == "ok"
        rows = list(store.records())
    runs: dict[str, int] = {}
    for r in rows:
        runs[r.run_id] = runs.get(r.run_id, 0) + 1
    assert set(runs.values()) == {4}  # every run complete: no half-written transaction survived
    names = {r.model for r in rows}
    assert {f"k-{i}" for i in committed} <= names  # every record reported as committed is there


def test_store_on_a_directory_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)


def test_unwritable_store_path_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   tiny_gpt2: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = main(["measure", tiny_gpt2, "--store", str(blocker / "sub" / "m.sqlite3")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "cannot use measurements store" in err and "--no-store" in err


def test_not_an_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot use measurements store"):
        Store(path)
