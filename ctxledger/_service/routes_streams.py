"""Streams: append events, read a stream or the whole log a page at a time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from ctxledger import render
from ctxledger._ledger import Ledger
from ctxledger._service.auth import (
    KeyCheckDep,
    KeyDep,
    LedgerDep,
    check_stream,
    checked_write,
    require_admin,
    require_writer,
)
from ctxledger._service.models import AppendBody, AppendOut, EventPage, EventRecord
from ctxledger._service.replica import ReadLedgerDep
from ctxledger._times import MAX_POSITION, parse_position
from ctxledger.render import event_record
from ctxledger.store.errors import InvalidArgument
from ctxledger.store.records import RecordedEvent

router = APIRouter(tags=["streams"])

DEFAULT_PAGE = 100
MAX_PAGE = 1000
After = Annotated[int, Query(ge=0, le=MAX_POSITION,
                                description="Events after this log position.")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="At most this many events.")]


def _header_version(value: str | None, name: str) -> int | None:
    """A version header: an integer, quoted or not (``If-Match: "3"``)."""
    if value is None:
        return None
    return parse_position(value.strip().removeprefix("W/").strip('"'), name)


def expected_version(body: int | None, if_match: str | None,
                     expected: str | None) -> int | None:
    """The expected version from the body, ``If-Match`` or ``Expected-Version``; all
    given must agree."""
    given = {v for v in (body, _header_version(if_match, "If-Match"),
                         _header_version(expected, "Expected-Version")) if v is not None}
    if len(given) > 1:
        raise InvalidArgument(f"expected versions disagree: {sorted(given)}")
    return given.pop() if given else None


def record_size(event: RecordedEvent) -> int:
    """The bytes ``event``'s record takes in a page (its JSON, as sent)."""
    return len(render.dumps(event_record(event)).encode())


def page(ledger: Ledger, request: Request, stream_id: str | None, after: int,
         limit: int) -> EventPage:
    """A page of events after ``after``: at most ``limit`` of them and at most the
    server's page bytes (``--page-bytes``), always at least one; ``next`` is the cursor
    of the next page (the last event's position) while more may follow."""
    max_bytes: int = request.app.state.page_bytes
    events, more = ledger.events_page(stream_id, after=after, limit=limit,
                                      max_bytes=max_bytes, size=record_size)
    records = [EventRecord(**event_record(e)) for e in events]
    return EventPage(events=records, next=events[-1].position if more and events else None)


@router.post("/streams/{stream_id}/events", response_model=AppendOut)
async def append_events(stream_id: str, body: AppendBody, ledger: LedgerDep,
                        check: KeyCheckDep,
                        if_match: Annotated[str | None, Header()] = None,
                        expected_version_header: Annotated[
                            str | None, Header(alias="Expected-Version")] = None
                        ) -> AppendOut:
    """Append events atomically. An identical retry (same event ids and content) returns
    the original positions with ``duplicate``; a version conflict is a 409."""
    # Two of every chat turn's three requests: the key check and the append run in one
    # worker thread and the result is checked on the event loop (a sync route with a
    # response model costs a second hop to a worker thread, only to validate it).
    def append() -> AppendOut:
        key = check.key()
        require_writer(key)
        version = expected_version(body.expected_version, if_match,
                                   expected_version_header)
        return AppendOut.of(checked_write(
            ledger, key, stream_id, body.events, version,
            lambda expected: ledger.append(stream_id, body.events,
                                           expected_version=expected)))

    return await run_in_threadpool(append)


@router.get("/streams/{stream_id}/events", response_model=EventPage)
def stream_events(request: Request, stream_id: str, ledger: ReadLedgerDep, key: KeyDep,
                  after: After = 0, limit: Limit = DEFAULT_PAGE) -> EventPage:
    """One stream's events after a log position, in position order; a page holds at most
    ``limit`` events and at most the server's page bytes of them."""
    check_stream(ledger, key, stream_id)
    return page(ledger, request, stream_id, after, limit)


@router.get("/events", response_model=EventPage)
def all_events(request: Request, ledger: ReadLedgerDep, key: KeyDep, after: After = 0,
               limit: Limit = DEFAULT_PAGE) -> EventPage:
    """The whole log after a position, in position order (admin keys only); a page holds
    at most ``limit`` events and at most the server's page bytes of them."""
    require_admin(key)
    return page(ledger, request, None, after, limit)
