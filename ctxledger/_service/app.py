"""The HTTP service's application: ``create_app(url)``.

FastAPI, served by uvicorn. FastAPI because it is pydantic-native like the rest of
ctxledger (the request and response bodies are pydantic models, the ``Assembly`` among
them), it generates OpenAPI 3.1 from those same models (``clients/openapi.json``), and it
is the best-documented ASGI stack. Every route is a few lines calling ``Ledger``; routes
are plain functions, which FastAPI runs in its thread pool (``Ledger`` is thread-safe).

One ``Ledger`` per process, opened (creating or migrating the database) at startup and
closed at shutdown. Several worker processes each open their own (``ctxledger serve
--workers N`` uses the ``app_from_env`` factory).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

import ctxledger
from ctxledger._ledger import Ledger
from ctxledger._service import (
    problems,
    routes_admin,
    routes_cards,
    routes_scopes,
    routes_sessions,
    routes_streams,
)
from ctxledger._service.auth import feed_access, feed_alive, feed_filter
from ctxledger._service.feed import feed_router
from ctxledger._service.limits import BodyLimit, Disconnect, Slots, TimeLimit
from ctxledger._service.models import ProblemOut
from ctxledger._service.problems import PROBLEM_JSON
from ctxledger._service.replica import REPLICA_URL_ENV, ServedBy, feed_ledger
from ctxledger._service.text_input import RefuseNul
from ctxledger._service.ui import install as install_ui
from ctxledger.assembler.profiles import get_profile, profile_names
from ctxledger.store.clock import Clock, system_clock
from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES

DEFAULT_MAX_BODY_BYTES = DEFAULT_MAX_EVENT_BYTES
"""A request body may be as large as one event may be (1 MiB)."""
DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds a request may take before it is answered with a 503 (a long read stops)."""
DEFAULT_FEED_RECHECK = 1.0
DEFAULT_FEED_WAIT = 600.0
"""Seconds a feed of a stream waits for the stream's first event before it ends."""
"""Seconds an idle change feed waits at most before asking again whether its key is live."""
DEFAULT_MAX_EXPENSIVE = 2
"""Expensive requests (timeline, why, audit, replay, their pages) one key may run at once."""
DEFAULT_PAGE_BYTES = 4 << 20
"""Bytes of events a page of ``GET /events`` (or of one stream) holds at most: 4 MiB."""
SHUTDOWN_GRACE = 5
"""Seconds a stopping server (SIGTERM) lets requests in flight finish; then they are
cancelled, which trips their ``CancelToken``, so a long read stops instead of holding the
process up to its own time limit."""

URL_ENV = "CTXLEDGER_DB"
MAX_BODY_ENV = "CTXLEDGER_SERVE_MAX_BODY_BYTES"
TIMEOUT_ENV = "CTXLEDGER_SERVE_REQUEST_TIMEOUT"
MAX_EXPENSIVE_ENV = "CTXLEDGER_SERVE_MAX_EXPENSIVE"
PAGE_BYTES_ENV = "CTXLEDGER_SERVE_PAGE_BYTES"
CORS_ORIGIN_ENV = "CTXLEDGER_SERVE_CORS_ORIGIN"
"""Origins a browser page may call the API from, separated by spaces."""
CORS_HEADERS = ("Authorization", "Content-Type", "Accept", "Last-Event-ID")
"""Request headers a cross-origin page may send (the key, a JSON body, the feed's resume)."""
CORS_EXPOSED = ("Retry-After",)
"""Response headers a cross-origin page may read (a 429's or 503's wait)."""


def create_app(url: str | None, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
               feed_recheck: float = DEFAULT_FEED_RECHECK,
               feed_wait: float = DEFAULT_FEED_WAIT,
               max_expensive: int = DEFAULT_MAX_EXPENSIVE,
               page_bytes: int = DEFAULT_PAGE_BYTES,
               replica_url: str | None = None,
               cors_origins: Sequence[str] = (),
               clock: Clock = system_clock) -> FastAPI:
    """The application serving the ledger at ``url`` (None: ``$CTXLEDGER_DB`` or the
    default SQLite file). Bodies over ``max_body_bytes`` get a 413, requests slower than
    ``request_timeout`` seconds a 503 (a long read stops there, or when its client goes
    away), a key's expensive request beyond ``max_expensive`` at once a 429, all as
    problem+json; a page of events holds at most ``page_bytes`` of them. An open change
    feed ends at most ``feed_recheck`` seconds (plus one poll) after its key is revoked,
    and a feed of a stream that brought no event in ``feed_wait`` seconds ends (a client
    reconnects to wait again).
    With ``replica_url`` (a read replica, opened read-only), reads that depend only on
    the log go there (``_service.replica``).
    A page served from one of ``cors_origins`` may call the API (CORS); none by default."""
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be at least 1")
    if request_timeout <= 0:
        raise ValueError("request_timeout must be positive")
    if max_expensive < 1:
        raise ValueError("max_expensive must be at least 1")
    if page_bytes < 1:
        raise ValueError("page_bytes must be at least 1")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledger = Ledger.open(url, clock=clock)
        app.state.ledger = ledger
        try:
            app.state.replica = (None if replica_url is None else
                                 Ledger.open(replica_url, clock=clock, read_only=True))
            try:
                yield
            finally:
                if app.state.replica is not None:
                    app.state.replica.close()
        finally:
            ledger.close()

    problem = {"model": ProblemOut, "description": "application/problem+json"}
    app = FastAPI(title="ctxledger", version=ctxledger.__version__,
                  summary="Event-sourced session store for LLM applications.",
                  lifespan=lifespan, docs_url=None, redoc_url=None,
                  # Stated once for every route; it replaces FastAPI's own 422 shape.
                  responses={"4XX": problem, "5XX": problem})
    app.state.slots = Slots(max_expensive)
    app.state.page_bytes = page_bytes
    problems.install(app)
    for module in (routes_admin, routes_streams, routes_sessions, routes_scopes,
                   routes_cards):
        app.include_router(module.router)
    app.include_router(feed_router(feed_ledger, feed_filter, alive_of=feed_alive,
                                   recheck=feed_recheck, wait=feed_wait),
                       dependencies=[Depends(feed_access)])
    install_ui(app)  # the browser view, /ui (left out of the OpenAPI document)
    app.add_middleware(RefuseNul)
    if replica_url is not None:
        app.add_middleware(ServedBy)
    # The last added runs first: the time limit covers reading the body too, and the
    # disconnect watch starts once the body limit has read the body.
    app.add_middleware(Disconnect)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(TimeLimit, seconds=request_timeout)
    if cors_origins:
        # Outermost: a preflight is answered before any limit, and every answer (a 413 or
        # 503 of the limits too) carries the headers that let the page read it. Keys are
        # bearer tokens, never cookies, so no credentials are allowed.
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                           allow_methods=["GET", "POST", "PUT", "DELETE"],
                           allow_headers=list(CORS_HEADERS),
                           expose_headers=list(CORS_EXPOSED), max_age=600)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI 3.1 document, with errors under the media type they are sent as
    (FastAPI puts every response model under ``application/json``)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                             routes=app.routes)
        for operation in (op for path in schema["paths"].values() for op in path.values()):
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if status in ("4XX", "5XX") and "application/json" in content:
                    content[PROBLEM_JSON] = content.pop("application/json")
        _profile_reports(schema["components"]["schemas"])
        app.openapi_schema = schema
    return app.openapi_schema


def _profile_reports(schemas: dict[str, Any]) -> None:
    """An assembly's ``report`` is its profile's report (``CardReport``...), which the
    ``Assembly`` model types as their base class: the document names each, by
    ``profile``."""
    reports = {name: get_profile(name).report_type for name in profile_names()}
    _, found = models_json_schema([(report, "serialization") for report in reports.values()],
                                  ref_template="#/components/schemas/{model}")
    for name, definition in sorted(found.get("$defs", {}).items()):
        schemas.setdefault(name, definition)
    refs = {profile: f"#/components/schemas/{report.__name__}"
            for profile, report in reports.items()}
    schemas["ProfileReport"] = {
        "title": "ProfileReport", "description": "The report of the assembly's profile.",
        "oneOf": [{"$ref": ref} for ref in refs.values()],
        "discriminator": {"propertyName": "profile", "mapping": refs}}


def app_from_env() -> FastAPI:
    """``create_app`` with its settings from the environment: uvicorn's import-string
    factory for several workers (``ctxledger serve`` sets them)."""
    return create_app(os.environ.get(URL_ENV),
                      max_body_bytes=int(os.environ.get(MAX_BODY_ENV,
                                                        DEFAULT_MAX_BODY_BYTES)),
                      request_timeout=float(os.environ.get(TIMEOUT_ENV,
                                                           DEFAULT_REQUEST_TIMEOUT)),
                      max_expensive=int(os.environ.get(MAX_EXPENSIVE_ENV,
                                                       DEFAULT_MAX_EXPENSIVE)),
                      page_bytes=int(os.environ.get(PAGE_BYTES_ENV, DEFAULT_PAGE_BYTES)),
                      replica_url=os.environ.get(REPLICA_URL_ENV) or None,
                      cors_origins=os.environ.get(CORS_ORIGIN_ENV, "").split())
