"""A read replica behind the service (``ctxledger serve --replica-url``): which requests
it answers, read-your-writes by the last position a caller saw, and its lag.

Reads that depend only on the log (replay and its timeline, why, audit, pages of events,
the change feed) go to the replica, opened read-only (``Ledger.open(read_only=True)``).
Everything else goes to the primary: appends, assemblies (they save caches, and a caller
assembling after its own append needs that append), state, keys. A caller that has seen
position P sends ``Ctxledger-Min-Position: P``; a replica whose settled position has not
reached P (or that does not answer) leaves the request to the primary, as does an
``until`` past its settled position or given as a time. Each such response says who
answered in ``Ctxledger-Served-By``; ``/healthz`` reports the replica's lag.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import sqlalchemy as sa
from fastapi import Depends, Header, Request
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxledger._ledger import Ledger
from ctxledger._times import parse_position, parse_until
from ctxledger.store.errors import InvalidArgument

MIN_POSITION_HEADER = "Ctxledger-Min-Position"
"""The last log position the caller saw: the answer must hold it (read-your-writes)."""
SERVED_BY_HEADER = "Ctxledger-Served-By"
"""``replica`` or ``primary``: which database answered (only with a replica)."""
REPLICA_URL_ENV = "CTXLEDGER_SERVE_REPLICA_URL"
"""The read replica's database URL (``ctxledger serve --replica-url``)."""
_SERVED_BY = "ctxledger_served_by"  # the request state's key

_log = logging.getLogger("ctxledger.service")


def replica_of(request: Request) -> Ledger | None:
    """The read-only ledger on the replica, or None when the service has none."""
    replica: Ledger | None = getattr(request.app.state, "replica", None)
    return replica


def _primary(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger
    return ledger


def serve_from(request: Request, ledger: Ledger, name: str) -> Ledger:
    """``ledger``, noting for the response's ``Ctxledger-Served-By`` that ``name``
    answered."""
    setattr(request.state, _SERVED_BY, name)  # kept in the ASGI scope's "state"
    return ledger


def primary_ledger(request: Request) -> Ledger:
    """The primary's ledger, for a request that writes or needs read-your-writes."""
    return serve_from(request, _primary(request), "primary")


async def primary_ledger_dep(request: Request) -> Ledger:
    """``primary_ledger`` as a dependency: on the event loop, since it reads no database
    (a sync dependency would cost each request a hop to a worker thread and back)."""
    return primary_ledger(request)


def feed_ledger(request: Request) -> Ledger:
    """The ledger a change feed follows: the replica when there is one (its settled
    position never lets the feed skip a late commit; a cursor is the same position on
    every copy)."""
    replica = replica_of(request)
    if replica is None:
        return primary_ledger(request)
    return serve_from(request, replica, "replica")


def read_ledger(request: Request, min_position: Annotated[str | None, Header(
        alias=MIN_POSITION_HEADER,
        description="The last log position the caller saw (digits): with a read replica"
                    " that has not reached it, the primary answers.")] = None) -> Ledger:
    """The ledger a read answers from: the replica when it holds every position the
    caller needs (``Ctxledger-Min-Position``, an ``until`` position), else the primary."""
    needed = 0 if min_position is None else parse_position(min_position,
                                                           MIN_POSITION_HEADER)
    replica = replica_of(request)
    if replica is None:
        return primary_ledger(request)
    try:
        cut = parse_until(request.query_params.get("until"), "until")
    except InvalidArgument:
        return primary_ledger(request)  # the route says what is wrong, if it reads one
    if not isinstance(cut, int | None):
        return primary_ledger(request)  # a time: the replica's prefix may be shorter
    needed = max(needed, cut or 0)
    if needed > 0:
        try:
            reached = replica.log.settled_position()
        except sa.exc.SQLAlchemyError as exc:
            _log.warning("read replica unreachable, the primary answers: %s",
                         str(exc).splitlines()[0])
            return primary_ledger(request)
        if reached < needed:
            return primary_ledger(request)
    return serve_from(request, replica, "replica")


ReadLedgerDep = Annotated[Ledger, Depends(read_ledger)]
"""A read the replica may answer."""


class ReplicaHealth(BaseModel):
    """The read replica as ``/healthz`` reports it."""

    status: Literal["ok", "unreachable"]
    lag_seconds: float | None = Field(default=None, description=(
        "Seconds behind its primary: 0 when it has replayed all the WAL it received,"
        " else the time since the last transaction it replayed committed; absent when"
        " unreachable or not a standby."))
    lag_positions: int | None = Field(default=None, description=(
        "The primary's head position minus the replica's; absent when unreachable."))


class HealthOut(BaseModel):
    """``/healthz``: the process is up; with a read replica, how far behind it is."""

    status: Literal["ok"] = "ok"
    replica: ReplicaHealth | None = Field(
        default=None, description="Only when the service has a read replica.")


def replica_health(request: Request) -> ReplicaHealth | None:
    """The replica's part of ``/healthz``; None without a replica."""
    replica = replica_of(request)
    if replica is None:
        return None
    try:
        lag = replica.replay_lag()
        behind = max(0, _primary(request).head() - replica.head())
    except sa.exc.SQLAlchemyError:
        return ReplicaHealth(status="unreachable")
    return ReplicaHealth(status="ok", lag_seconds=lag, lag_positions=behind)


class ServedBy:
    """Adds ``Ctxledger-Served-By`` to a response whose request chose a ledger (pure
    ASGI, so streamed responses and disconnects pass through untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                served = scope.get("state", {}).get(_SERVED_BY)
                if served is not None:
                    message["headers"] = [*message.get("headers", []),
                                          (SERVED_BY_HEADER.lower().encode(), served.encode())]
            await send(message)

        await self.app(scope, receive, sending)
