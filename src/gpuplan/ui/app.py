"""The Starlette application: the page (``/``), the JSON API (``/api/VERB``) and uploads.

The server process validates and renders; the work runs in :class:`~gpuplan.ui.worker.WorkerPool`.
Identical queries share one job while it runs and its answer afterwards (a small in-memory cache),
so a shared link opened by many people traces once. Every failure is one line, inline on the page or
``{"error": ...}`` in the API, never a traceback page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from gpuplan.errors import GpuplanError, one_line
from gpuplan.ui.jobs import Outcome
from gpuplan.ui.page import render_page, render_result
from gpuplan.ui.query import VERBS, Query, parse_query
from gpuplan.ui.uploads import UPLOAD_MAX_BYTES, UploadStore
from gpuplan.ui.worker import Limits, WorkerPool

CACHE_ENTRIES: Final = 256
"""Answers kept in memory (each is a JSON object of a few KiB to a few hundred)."""

MULTIPART_OVERHEAD_BYTES: Final = 16 * 1024
"""Room for the multipart boundaries and headers around an uploaded file."""

LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost", "::1", "[::1]")

DRAIN_MAX_BYTES: Final = 64 * 1024 * 1024
"""A refused upload's body is read and dropped up to this size before the 413 goes out: a server that
answers and closes while the client still sends makes the client's TCP stack reset the connection, and
the client sees the reset instead of the 413. Past it the connection is closed (no unbounded reads)."""

LOG = logging.getLogger("gpuplan.ui")


def request_id() -> str:
    """A short id printed in the server log beside a 5xx and in the answer, so a report can be matched."""
    return secrets.token_hex(6)


def log_server_error(request: Request, status: int, message: str, exc: BaseException | None = None) -> str:
    """Log a 5xx answer with a fresh request id; the id, for the answer."""
    rid = request_id()
    LOG.error("request %s: %s %s -> %d: %s", rid, request.method, request.url.path, status, message,
              exc_info=exc)
    return rid


@dataclass
class UIState:
    """What the app holds while it runs."""

    pool: WorkerPool
    uploads: UploadStore
    catalog: tuple[str, ...]
    gpus: tuple[str, ...]
    cache: OrderedDict[tuple[tuple[str, str], ...], Outcome] = field(default_factory=OrderedDict)
    running: dict[tuple[tuple[str, str], ...], asyncio.Future[Outcome]] = field(default_factory=dict)
    jobs_run: int = 0

    async def answer(self, query: Query) -> Outcome:
        key = query.key()
        hit = self.cache.get(key)
        if hit is not None:
            self.cache.move_to_end(key)
            return hit
        job = self.running.get(key)
        if job is None:
            job = asyncio.ensure_future(self.pool.run(query))
            self.running[key] = job
            self.jobs_run += 1
            job.add_done_callback(lambda _: self.running.pop(key, None))
        outcome = await asyncio.shield(job)  # a client that leaves does not cancel the others' job
        if outcome.cacheable:
            self.cache[key] = outcome
            while len(self.cache) > CACHE_ENTRIES:
                self.cache.popitem(last=False)
        return outcome


def _state(request: Request) -> UIState:
    state: UIState = request.app.state.ui
    return state


def _params(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items()}


def _parse(request: Request) -> Query | None:
    state = _state(request)
    return parse_query(_params(request), state.catalog)


async def page(request: Request) -> Response:
    state = _state(request)
    values = _params(request)
    try:
        query = _parse(request)
    except GpuplanError as exc:
        return HTMLResponse(render_page(values, state.catalog, state.gpus, error=one_line(str(exc))), 400)
    if query is None:
        return HTMLResponse(render_page(values, state.catalog, state.gpus))
    outcome = _logged(request, await state.answer(query))
    notes = [f"left out (not used by {query.verb}): {', '.join(query.ignored)}"] if query.ignored else []
    notes += _mode_notes(query)
    return HTMLResponse(render_page(values, state.catalog, state.gpus, result_html=render_result(query, outcome),
                                    notes=notes), outcome.status)


async def api(request: Request) -> Response:
    state = _state(request)
    verb = request.path_params["verb"]
    if verb not in VERBS:
        return _json_error(f"unknown API {verb!r}; allowed: {', '.join(VERBS)}, models, gpus, upload", 404)
    try:
        query = parse_query({**_params(request), "verb": verb}, state.catalog)
    except GpuplanError as exc:
        return _json_error(str(exc), 400)
    if query is None:
        return _json_error(f"/api/{verb} needs model=NAME (see /api/models)", 400)
    if query.ignored:  # as `gpuplan VERB --flag-of-another-verb`: refused, never dropped silently
        return _json_error(f"/api/{verb} does not take {', '.join(query.ignored)} (another verb's parameters); "
                           "leave them out", 400)
    outcome = _logged(request, await state.answer(query))
    if outcome.data is None:
        return _json_error(outcome.error or "no answer", outcome.status)
    notes = _mode_notes(query)  # the command line's notes (stderr there): a header, the JSON stays the CLI's
    return JSONResponse(outcome.data, headers={"X-Gpuplan-Note": " | ".join(notes)} if notes else None)


def _mode_notes(query: Query) -> list[str]:
    """The command line's note for each workload field the mode never reads (cli/_workload.ignored_flag_notes)."""
    from gpuplan.report.options import MODE_ONLY

    mode = query.workload.mode
    return [f"{name} applies to mode {' or '.join(MODE_ONLY[name])} only; ignored with mode {mode}"
            for name in query.mode_ignored]


def _logged(request: Request, outcome: Outcome) -> Outcome:
    """A 5xx outcome (a bug, a dead worker, a time limit) logged with a request id that the answer names."""
    if outcome.status < 500:
        return outcome
    rid = log_server_error(request, outcome.status, outcome.error or "no answer")
    return replace(outcome, error=f"{outcome.error or 'no answer'} (request id {rid})")


def _json_error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": one_line(message)}, status)


async def models(request: Request) -> Response:
    return JSONResponse({"models": list(_state(request).catalog)})


async def gpus(request: Request) -> Response:
    return JSONResponse({"gpus": list(_state(request).gpus)})


async def health(request: Request) -> Response:
    state = _state(request)
    return JSONResponse({"ok": True, "workers": state.pool.pids, "restarts": state.pool.restarts,
                         "jobs_run": state.jobs_run, "cached": len(state.cache)})


def _too_large(request: Request, limit: int) -> str | None:
    """Why the body is refused before it is read: no length given, or a length over ``limit``."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        return "the upload must say its length (Content-Length); send the file as a whole"
    if int(length) > limit:
        return (f"the upload is {int(length):,} bytes; at most {UPLOAD_MAX_BYTES:,} are accepted "
                "(a config.json, or a safetensors file's header only)")
    return None


async def _drain(request: Request) -> None:
    """Read and drop what the client still sends of a refused body (at most DRAIN_MAX_BYTES), so that it
    reads the 413 instead of a reset; nothing is kept."""
    seen = 0
    with contextlib.suppress(Exception):  # a client that already went away: nothing to drain
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > DRAIN_MAX_BYTES:
                break


async def upload_form(request: Request) -> Response:
    """The page's upload: store the file, then show the page for it (303, so reload does not re-post)."""
    state = _state(request)
    refusal = _too_large(request, UPLOAD_MAX_BYTES + MULTIPART_OVERHEAD_BYTES)
    if refusal is not None:
        await _drain(request)
        return HTMLResponse(render_page({}, state.catalog, state.gpus, error=refusal), 413,
                            headers={"Connection": "close"})
    try:
        form = await request.form(max_files=1, max_fields=4)
        item = form.get("file")
        if not isinstance(item, UploadFile) or not item.filename:
            raise GpuplanError("choose a config.json or a safetensors header to upload")
        data = await item.read(UPLOAD_MAX_BYTES + 1)
        upload_id = await asyncio.to_thread(state.uploads.add, data, item.filename)
    except GpuplanError as exc:
        return HTMLResponse(render_page({}, state.catalog, state.gpus, error=one_line(str(exc))), 400)
    except HTTPException as exc:  # malformed multipart
        return HTMLResponse(render_page({}, state.catalog, state.gpus, error=f"upload refused: {exc.detail}"), 400)
    return RedirectResponse("/?" + urlencode({"model": f"upload:{upload_id}"}), 303)


async def upload_api(request: Request) -> Response:
    """``POST /api/upload`` with the file as the body (``curl --data-binary @config.json``)."""
    state = _state(request)
    refusal = _too_large(request, UPLOAD_MAX_BYTES)
    if refusal is not None:
        await _drain(request)
        return JSONResponse({"error": refusal}, 413, headers={"Connection": "close"})
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > UPLOAD_MAX_BYTES:
            await _drain(request)
            return JSONResponse({"error": f"the upload is over {UPLOAD_MAX_BYTES:,} bytes"}, 413,
                                headers={"Connection": "close"})
    name = request.query_params.get("filename", "upload")[:100]
    try:
        upload_id = await asyncio.to_thread(state.uploads.add, bytes(body), name)
    except GpuplanError as exc:
        return _json_error(str(exc), 400)
    return JSONResponse({"model": f"upload:{upload_id}"})


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    detail = getattr(exc, "detail", "not found")
    message = f"{request.url.path}: {detail} (the page is /, the API /api/VERB)"
    if request.url.path.startswith("/api/"):
        return _json_error(message, status)
    return HTMLResponse(f"<!doctype html><title>gpuplan</title><p role=\"alert\">{_escape(message)}</p>", status)


async def _internal(request: Request, exc: Exception) -> Response:
    first = str(exc).splitlines()[0] if str(exc) else ""
    rid = log_server_error(request, 500, f"{type(exc).__name__}: {first}", exc)
    message = f"internal error: {type(exc).__name__}: {first} (please report it with request id {rid})"
    if request.url.path.startswith("/api/"):
        return _json_error(message, 500)
    return HTMLResponse(f"<!doctype html><title>gpuplan</title><p role=\"alert\">{_escape(message)}</p>", 500)


def _escape(text: str) -> str:
    from html import escape

    return escape(one_line(text))


def create_app(limits: Limits | None = None, *, allowed_hosts: Sequence[str] | None = None,
               upload_dir: Path | None = None) -> Starlette:
    """The app. ``allowed_hosts`` (the Host headers answered; None: any) guards a loopback server
    against DNS rebinding; ``upload_dir`` (None: a fresh temporary folder, removed at shutdown)."""
    from gpuplan.hardware import all_gpus
    from gpuplan.models.catalog import catalog_names
    from gpuplan.models.pipeline import pipeline_names

    # names and limits are checked now, before anything starts; the shipped diffusion pipelines are models too
    catalog = tuple(sorted({*catalog_names(), *pipeline_names()}))
    gpu_ids = tuple(g.id for g in all_gpus())
    chosen = limits or Limits()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # the uploads folder and the workers exist while the server runs, and go with it
        folder = Path(tempfile.mkdtemp(prefix="gpuplan-ui-")) if upload_dir is None else upload_dir
        pool = WorkerPool(chosen, upload_dir=folder)
        app.state.ui = UIState(pool=pool, uploads=UploadStore(folder), catalog=catalog, gpus=gpu_ids)
        pool.start()
        try:
            yield
        finally:
            pool.close()
            if upload_dir is None:
                shutil.rmtree(folder, ignore_errors=True)

    middleware = [] if allowed_hosts is None else [Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))]
    handlers: dict[Any, Any] = {HTTPException: _not_found, Exception: _internal}
    app = Starlette(
        routes=[
            Route("/", page),
            Route("/upload", upload_form, methods=["POST"]),
            Route("/api/models", models),
            Route("/api/gpus", gpus),
            Route("/api/upload", upload_api, methods=["POST"]),
            Route("/api/{verb}", api),
            Route("/healthz", health),
        ],
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    return app
