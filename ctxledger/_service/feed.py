"""The live change feed: the log's events as server-sent events, replayed then followed.

Why polling: the alternative is PostgreSQL ``LISTEN/NOTIFY``, which holds one database
connection per follower for as long as it follows and still needs a read of the log after
each notification (a notification carries no commit order). SQLite has no notification at
all. Polling ``Ledger.events(after=...)`` is the one read that is correct on both backends:
on PostgreSQL it stops at the settled position, below every append still in progress, so a
follower never steps past an event that commits late.

What it costs: each idle follower runs one short read every ``poll`` seconds (on
PostgreSQL plus the settled-position query over ``pg_locks``), in a worker thread, on a
pooled connection it returns at once; an event reaches a follower at most ``poll`` seconds
(plus the slowest append in progress) after it commits. A feed the service opens also
reads its key's row (one primary-key read) before sending what it read, and at most once a
second while idle, so a revoked key's feed ends instead of following on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from ctxledger import Ledger, render
from ctxledger._open import explain
from ctxledger._service.problems import PROBLEM_JSON, problem_response
from ctxledger._times import parse_position
from ctxledger.store.errors import InvalidArgument
from ctxledger.store.records import RecordedEvent

HEARTBEAT_COMMENT = "heartbeat"
GAVE_UP_COMMENT = "no event of this stream yet; reconnect to wait again"
"""The comment a feed ends with when its stream brought nothing for ``wait`` seconds."""

_log = logging.getLogger("ctxledger.service")

StreamFilter = Callable[[str], bool | None]
"""Whether a caller may see a stream's events: True yes; False no (following it is a 404);
None not now: the stream does not exist for the caller, so following it waits (a stream of
a scope the caller lacks answers None too, and never anything else)."""

# Strings, parsed by ``_position``: a bad cursor is a 400 problem, not FastAPI's 422.
After = Annotated[str | None, Query(
    description="Start after this log position (default 0: the whole log).")]
LastEventId = Annotated[str | None, Header(
    alias="Last-Event-ID",
    description="The last id a reconnecting client received; wins over ``after``.")]
_PROBLEM: dict[str, object] = {"content": {PROBLEM_JSON: {}}}
_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {"text/event-stream": {}},
          "description": "The feed; it ends only when the caller's key is revoked."},
    400: {**_PROBLEM, "description": "``after`` or ``Last-Event-ID`` is no position."},
    404: {**_PROBLEM, "description": "The caller may not see the stream."},
}


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One server-sent event of the feed: an event of the log, or a heartbeat comment.

    ``id`` is the event's position (a client reconnecting sends it back as
    ``Last-Event-ID``), ``event`` its type, ``data`` the event as one line of JSON, the
    record ``ctxledger events`` prints. A heartbeat has only ``comment``.
    """

    id: str | None = None
    event: str | None = None
    data: str | None = None
    comment: str | None = None

    @classmethod
    def of(cls, event: RecordedEvent) -> FeedItem:
        """The item that carries ``event``."""
        return cls(id=str(event.position), event=event.type,
                   data=render.dumps(render.event_record(event)))

    @classmethod
    def heartbeat(cls) -> FeedItem:
        """A comment line: keeps proxies from closing an idle stream, dispatches nothing."""
        return cls(comment=HEARTBEAT_COMMENT)

    @classmethod
    def gave_up(cls) -> FeedItem:
        """The comment that ends a feed whose stream never showed an event."""
        return cls(comment=GAVE_UP_COMMENT)

    def sse(self) -> ServerSentEvent:
        """The item as sse-starlette sends it."""
        return ServerSentEvent(data=self.data, event=self.event, id=self.id,
                               comment=self.comment)


def _log_page(ledger: Ledger, after: int, page: int) -> tuple[list[RecordedEvent], int]:
    """Up to ``page`` events of the whole log after ``after``, and the new cursor.

    ``Ledger.events`` without a stream stops at the settled position (PostgreSQL), so the
    cursor never passes an append still in progress."""
    events = ledger.events(after=after, limit=page)
    return events, events[-1].position if events else after


def _stream_page(ledger: Ledger, stream: str, after: int, version: int, page: int
                 ) -> tuple[list[RecordedEvent], int, int]:
    """Up to ``page`` events of ``stream`` after position ``after``, read from version
    ``version + 1`` on; the events, the new cursor and the new version.

    ``Ledger.events(stream, ...)`` reads the whole stream and does not stop at the settled
    position, so a follower reads by version range (an indexed look-up) up to the settled
    position, taken before the read: every event at or below it has committed by then
    (or never will), so it is seen now or never exists. A stream's appends commit one
    after another (its lock is held to commit), so its positions rise with its versions
    and the first event past the settled position ends the read.
    """
    settled = ledger.log.settled_position()
    batch = ledger.log.read_stream(stream, version + 1, version + page)
    kept: list[RecordedEvent] = []
    for event in batch:
        if event.position > settled:
            break
        version = event.stream_version
        if event.position > after:
            kept.append(event)
            after = event.position
    return kept, after, version


async def follow(ledger: Ledger, *, after: int, stream: str | None = None,
                 streams: StreamFilter | None = None, poll: float = 0.25,
                 heartbeat: float = 15.0, page: int = 500,
                 alive: Callable[[], bool] | None = None,
                 recheck: float = 1.0, wait: float | None = None) -> AsyncIterator[FeedItem]:
    """The events after position ``after`` (of the whole log, or of ``stream``), in
    position order, then every event committed later, as it settles; ends only when
    ``alive`` says no.

    ``alive`` (the caller's key still holds) is asked before any read events are sent and,
    while nothing comes, at most every ``recheck`` seconds: an event committed after the
    key was revoked is never sent, and an idle feed ends within ``recheck`` seconds (plus
    one ``poll``).

    ``streams`` rejects the streams a caller may not see (any answer but True): their
    events are skipped, the cursor still moves past them. A heartbeat comes at once when
    the reads up to the head sent nothing, so a client knows the feed is open (a stream that does
    not exist yet is waited for). The log is read ``page`` events at a time in a worker
    thread (the event loop never waits on the database); once a read comes back short it
    is read again every ``poll`` seconds. After ``heartbeat`` seconds with nothing to send
    a heartbeat item comes. A feed of ``stream`` that has sent none of its events after
    ``wait`` seconds (the stream does not exist, or not for this caller: the two look the
    same) ends with a ``gave_up`` item, so a request never waits without bound for a
    stream that may never come. Cancelling the iteration (the client went away) stops it
    between reads; a read in progress finishes first (a thread cannot be interrupted).
    Positions have holes (rolled-back appends), so the ids are increasing, not dense.
    """
    if page < 1:
        raise ValueError(f"page must be >= 1, got {page}")
    cursor = after
    version = 0  # of ``stream``: the last one read at or below the settled position
    quiet_since = checked_at = began = time.monotonic()
    opened = sent = False
    while True:
        if stream is None:
            events, cursor = await anyio.to_thread.run_sync(
                _log_page, ledger, cursor, page)
            full = len(events) == page
        else:
            before = version
            events, cursor, version = await anyio.to_thread.run_sync(
                _stream_page, ledger, stream, cursor, version, page)
            full = version - before == page
        if alive is not None and (events or time.monotonic() - checked_at >= recheck):
            if not await anyio.to_thread.run_sync(alive):
                return
            checked_at = time.monotonic()
        for event in events:
            if streams is None or streams(event.stream_id) is True:
                yield FeedItem.of(event)
                opened = sent = True
                quiet_since = time.monotonic()
        if full:
            continue  # more is there already: read on without waiting
        if not opened:
            yield FeedItem.heartbeat()
            opened = True
            quiet_since = time.monotonic()
        if (stream is not None and wait is not None and not sent
                and time.monotonic() - began >= wait):
            yield FeedItem.gave_up()
            return
        if time.monotonic() - quiet_since >= heartbeat:
            yield FeedItem.heartbeat()
            quiet_since = time.monotonic()
        await anyio.sleep(poll)


# -- HTTP ---------------------------------------------------------------------------------


def _position(raw: str | None, name: str) -> int | None:
    """``raw`` as a position (``_times.parse_position``), None when absent."""
    return None if raw is None else parse_position(raw, name)


def _start(after: str | None, last_event_id: str | None) -> int:
    """Where the feed starts: ``Last-Event-ID`` (a reconnecting client) wins over
    ``after``; neither means the beginning of the log."""
    resumed = _position(last_event_id, "Last-Event-ID")
    if resumed is not None:
        return resumed
    return _position(after, "after") or 0


def feed_router(ledger_of: Callable[[Request], Ledger],
                filter_of: Callable[[Request], StreamFilter | None] | None = None, *,
                poll: float = 0.25, heartbeat: float = 15.0,
                alive_of: Callable[[Request], Callable[[], bool]] | None = None,
                recheck: float = 1.0, wait: float | None = None) -> APIRouter:
    """The feed's routes: ``GET /events/stream`` (the whole log) and
    ``GET /streams/{stream_id}/events/stream`` (one stream), both ``text/event-stream``.

    ``ledger_of`` gives the ledger a request reads; ``filter_of`` the streams its caller may
    see (other streams' events are skipped; following a stream it rejects is a 404, one it
    answers None for is waited for: its events come once it exists for the caller);
    ``alive_of`` whether its caller may still follow (asked as
    ``follow`` says, every ``recheck`` seconds at most while idle; a no ends the stream).
    A stream's feed that sent none of its events in ``wait`` seconds ends (``follow``).
    Authentication is the mounting app's (router dependencies).
    """
    bounds = (poll, heartbeat, recheck, 1.0 if wait is None else wait)
    if not all(math.isfinite(s) and s > 0 for s in bounds):
        raise ValueError("poll, heartbeat, recheck and wait must be positive numbers of "
                         "seconds")
    router = APIRouter(tags=["feed"])

    def respond(request: Request, after: str | None, last_event_id: str | None,
                stream: str | None) -> Response:
        try:
            start = _start(after, last_event_id)
        except InvalidArgument as exc:
            return problem_response(400, str(exc))
        allowed = filter_of(request) if filter_of is not None else None
        if stream is not None and allowed is not None and allowed(stream) is False:
            return problem_response(404, f"no stream {stream!r}")
        items = follow(ledger_of(request), after=start, stream=stream, streams=allowed,
                       poll=poll, heartbeat=heartbeat, recheck=recheck, wait=wait,
                       alive=alive_of(request) if alive_of is not None else None)
        return EventSourceResponse(
            _encoded(items), ping=0,  # the feed sends its own heartbeats
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @router.get("/events/stream", response_class=EventSourceResponse,
                summary="Follow the whole log", responses=_RESPONSES)
    def log_feed(request: Request, after: After = None,
                 last_event_id: LastEventId = None) -> Response:
        """Every event after position ``after`` (or ``Last-Event-ID``), then each new one as
        it commits, as server-sent events: ``id`` the position, ``event`` the type,
        ``data`` the event's JSON. A comment line is a heartbeat."""
        return respond(request, after, last_event_id, None)

    @router.get("/streams/{stream_id}/events/stream", response_class=EventSourceResponse,
                summary="Follow one stream", responses=_RESPONSES)
    def stream_feed(request: Request, stream_id: str, after: After = None,
                    last_event_id: LastEventId = None) -> Response:
        """The events of ``stream_id`` after position ``after`` (or ``Last-Event-ID``), then
        each new one as it commits; the same server-sent events as ``/events/stream``. A
        stream with no event yet is waited for; after the server's bound (10 minutes by
        default) with none, the feed ends with a comment, and a client reconnects."""
        return respond(request, after, last_event_id, stream_id)

    return router


async def _encoded(items: AsyncIterator[FeedItem]) -> AsyncIterator[ServerSentEvent]:
    """``items`` as sse-starlette events. A database failure once the stream has begun
    ends it with an ``error`` event carrying the problem (the status line is sent); the
    client reconnects with ``Last-Event-ID``."""
    try:
        async for item in items:
            yield item.sse()
    except Exception as exc:
        message = explain(exc)
        if message is None:
            raise  # a bug: the server log gets the traceback
        _log.warning("change feed ended: %s", message)
        yield ServerSentEvent(event="error", data=render.dumps(
            {"type": "about:blank", "title": "Service Unavailable", "status": 503,
             "detail": message}))
