"""Load test of ``gpuplan ui`` on loopback: N concurrent requests, a mix of valid, malformed and
oversized, against a real server (the CLI verb in a subprocess); prints a table.

Targets (issue 13): no valid request fails, nothing crashes (the server and its worker answer after
the storm), bounded memory (the server's RSS grows by less than 64 MiB over the run). Valid requests
include distinct traces of a tiny uploaded model (queued to the worker) and repeats of one query
(answered once, then from memory), so the run exercises the queue, the coalescing and the cache.

    python benchmarks/ui_load.py [--requests 200] [--url http://127.0.0.1:PORT --pid PID]

``tests/ui/test_load.py`` runs the same driver with fewer requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import selectors
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

TINY_CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 128,
               "vocab_size": 1000}
OVERSIZED_BYTES = 9 * 1024 * 1024
"""Over the 8 MiB upload limit."""
RSS_GROWTH_LIMIT_BYTES = 64 * 1024 * 1024
REQUEST_TIMEOUT_S = 600.0


@dataclass
class Report:
    kinds: dict[str, list[tuple[float, int | str]]] = field(default_factory=dict)
    """kind -> (latency s, HTTP status or the client error's name) per request."""
    rss_before_bytes: int = 0
    rss_after_bytes: int = 0
    worker_rss_before_bytes: int = 0
    worker_rss_after_bytes: int = 0
    alive_after: bool = False
    wall_s: float = 0.0

    def failed_valid(self) -> list[tuple[float, int | str]]:
        return [r for r in self.kinds.get("valid", []) if r[1] != 200]

    def table(self) -> str:
        lines = [f"{'kind':<10} {'n':>4} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  outcomes"]
        for kind, rows in self.kinds.items():
            lat = sorted(r[0] for r in rows)
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
            outcomes: dict[str, int] = {}
            for _, status in rows:
                outcomes[str(status)] = outcomes.get(str(status), 0) + 1
            lines.append(f"{kind:<10} {len(rows):>4} {1e3 * statistics.median(lat):>9.1f} {1e3 * p99:>9.1f} "
                         f"{1e3 * lat[-1]:>9.1f}  " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
        mib = 1024 * 1024
        lines.append(f"server RSS {self.rss_before_bytes / mib:.1f} MiB -> {self.rss_after_bytes / mib:.1f} MiB; "
                     f"worker RSS {self.worker_rss_before_bytes / mib:.1f} MiB -> "
                     f"{self.worker_rss_after_bytes / mib:.1f} MiB; wall {self.wall_s:.1f} s; "
                     f"server {'up' if self.alive_after else 'DOWN'} after; failed valid: {len(self.failed_valid())}")
        return "\n".join(lines)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def requests_mix(n: int, upload: str, distinct: int = 4) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(kind, method, path, httpx kwargs) for n requests: about half valid, a third malformed, the rest oversized."""
    valid: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/", {}), ("GET", "/api/models", {}), ("GET", "/api/gpus", {}), ("GET", "/healthz", {}),
        ("GET", f"/api/estimate?model={upload}&seq_len=16", {}),  # one query, many times: one trace
        ("GET", f"/?model={upload}&seq_len=16&gpu=A100-80GB-SXM", {}),
    ]
    distinct = [("GET", f"/api/estimate?model={upload}&seq_len=16&batch_size={b}", {}) for b in range(2, 2 + distinct)]
    malformed: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/?model=gpt2&batch_size=-3", {}), ("GET", "/api/estimate?model=../../etc/passwd", {}),
        ("GET", "/api/estimate?model=evil.py:build", {}), ("GET", "/api/fit?model=gpt2", {}),
        ("GET", "/api/estimate?model=gpt2&unknown=1", {}), ("GET", "/no/such/page", {}),
        ("GET", "/?model=" + "x" * 6000, {}), ("POST", "/", {}),
        ("POST", "/upload", {"content": b"--b\r\nbroken",
                             "headers": {"content-type": "multipart/form-data; boundary=b"}}),
        ("POST", "/api/upload", {"content": b"\x00\x01not a model"}),
        ("POST", "/api/upload", {"content": b'{"model_type": []}'}),
    ]
    big = b"{" + b" " * OVERSIZED_BYTES + b"}"
    oversized: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/upload", {"content": big}),
        ("POST", "/upload", {"files": {"file": ("config.json", big, "application/json")}}),
    ]
    out: list[tuple[str, str, str, dict[str, Any]]] = [("valid", *r) for r in distinct]
    i = 0
    while len(out) < n:
        slot = i % 10
        if slot < 5:
            out.append(("valid", *valid[i % len(valid)]))
        elif slot < 8:
            out.append(("malformed", *malformed[i % len(malformed)]))
        else:
            out.append(("oversized", *oversized[i % len(oversized)]))
        i += 1
    return out[:n]


async def _one(client: httpx.AsyncClient, method: str, path: str, kwargs: dict[str, Any]) -> tuple[float, int | str]:
    t = time.perf_counter()
    try:
        r = await client.request(method, path, **kwargs)
        outcome: int | str = r.status_code
    except httpx.HTTPError as exc:  # an oversized body cut off by the server's early 413 and close
        outcome = f"closed ({type(exc).__name__})"
    return time.perf_counter() - t, outcome


async def _run(url: str, n: int, pid: int, distinct: int) -> Report:
    report = Report()
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        r = await client.post("/api/upload", content=json.dumps(TINY_CONFIG).encode())
        upload = r.json()["model"]
        warm = await client.get(f"/api/estimate?model={upload}&seq_len=8")  # the worker has imported torch
        assert warm.status_code == 200, warm.text
        health = (await client.get("/healthz")).json()
        report.rss_before_bytes = rss_bytes(pid)
        report.worker_rss_before_bytes = sum(rss_bytes(w) for w in health["workers"])
        mix = requests_mix(n, upload, distinct)
        t = time.perf_counter()
        results = await asyncio.gather(*(_one(client, m, p, kw) for _, m, p, kw in mix))
        report.wall_s = time.perf_counter() - t
        for (kind, *_), result in zip(mix, results, strict=True):
            report.kinds.setdefault(kind, []).append(result)
        after = await client.get("/healthz")
        report.alive_after = after.status_code == 200 and (await client.get("/")).status_code == 200
        report.rss_after_bytes = rss_bytes(pid)
        report.worker_rss_after_bytes = sum(rss_bytes(w) for w in after.json()["workers"])
    return report


def run_load(url: str, n: int, pid: int, distinct: int = 4) -> Report:
    """Fire ``n`` requests at once at ``url`` (server process ``pid``); ``distinct`` of the valid ones
    are new traces for the worker's queue."""
    return asyncio.run(_run(url, n, pid, distinct))


@contextmanager
def server() -> Iterator[tuple[str, int]]:
    """``gpuplan ui --port 0 --json`` in a subprocess: (URL, pid); stopped by its pid afterwards."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuplan.cli.main", "ui", "--port", "0", "--json",
                             "--time-limit-s", "300"], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout=60):
            raise SystemExit("gpuplan ui did not start within 60 s")
        yield json.loads(proc.stdout.readline())["url"].rstrip("/"), proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--url", default=None, help="a running gpuplan ui (default: start one)")
    parser.add_argument("--pid", type=int, default=None, help="its process id, for the RSS figures")
    args = parser.parse_args()
    if args.url:
        report = run_load(args.url.rstrip("/"), args.requests, args.pid or os.getpid())
    else:
        with server() as (url, pid):
            report = run_load(url, args.requests, pid)
    print(report.table())
    growth = report.rss_after_bytes - report.rss_before_bytes
    ok = not report.failed_valid() and report.alive_after and growth < RSS_GROWTH_LIMIT_BYTES
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
