"""``gpuplan ui [--port N] [--host 127.0.0.1] [--allow-remote]``: the local web page."""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys

from gpuplan.cli._workload import _int, positive_float
from gpuplan.errors import ConfigError, MissingDependencyError
from gpuplan.units import GIB

DEFAULT_PORT = 8765


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=_int, default=DEFAULT_PORT, metavar="N",
                        help=f"TCP port (default {DEFAULT_PORT}; 0: any free port, printed)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a --host other machines can reach (the page runs traces for anyone who can)")
    parser.add_argument("--workers", type=_int, default=1, metavar="N", help="worker processes for traces (1..2)")
    parser.add_argument("--time-limit-s", type=positive_float("a time in seconds"), default=120.0, metavar="S",
                        help="longest one query may run before its worker is stopped (default 120)")
    parser.add_argument("--memory-gib", type=positive_float("an amount of GiB"), default=8.0, metavar="G",
                        help="host memory one worker may use (default 8)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with the URL once listening (for scripts), then serve")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is out of range: allowed 0..65535")
    if not is_loopback(args.host) and not args.allow_remote:
        raise ConfigError(f"--host {args.host} is reachable from other machines; the page runs traces for anyone "
                          "who can reach it: use 127.0.0.1, or add --allow-remote if that is what you want")
    from gpuplan.extras import UI, require

    require(*UI)
    try:
        import uvicorn

        from gpuplan.ui.app import LOOPBACK_HOSTS, create_app
        from gpuplan.ui.worker import Limits
    except ImportError as exc:
        raise MissingDependencyError(f"gpuplan ui needs {exc.name}: pip install 'gpuplan[ui]'") from None
    limits = Limits(workers=args.workers, time_limit_s=args.time_limit_s,
                    memory_limit_bytes=int(args.memory_gib * GIB))
    app = create_app(limits, allowed_hosts=None if args.allow_remote else [*LOOPBACK_HOSTS, args.host])
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: without, each small response waits ~40 ms on the peer's delayed
    # ACK (measured: 46 ms per request on loopback, 2 ms with it)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((args.host.strip("[]"), args.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; pick another --port "
                          "(0: any free one)") from None
    # listen before the URL is printed: a script that connects as soon as it reads the line otherwise meets a
    # bound but not yet listening socket (ECONNREFUSED) until uvicorn has started (seen in CI); connections
    # made before then wait in the backlog. uvicorn's own listen() on this socket only resets the backlog.
    sock.listen(2048)
    port = sock.getsockname()[1]
    shown = f"[{args.host.strip('[]')}]" if family == socket.AF_INET6 else args.host
    url = f"http://{shown}:{port}/"
    if args.json:
        print(json.dumps({"url": url, "host": args.host, "port": port}), flush=True)
    else:
        print(f"gpuplan ui: serving {url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, limit_concurrency=1024,
                            timeout_keep_alive=5, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    return 0
