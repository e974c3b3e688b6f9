"""Reading the log: one stream, or everything after a position, stopping at a position or time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from store.clock import ensure_utc
from store.records import RecordedEvent
from store.schema import events
from store.upcasting import upcast

_COLUMNS = (
    events.c.position, events.c.stream_id, events.c.stream_version, events.c.event_id,
    events.c.type, events.c.schema_version, events.c.data, events.c.metadata,
    events.c.recorded_at, events.c.prev_hash, events.c.hash,
)
_loads = json.loads


def row_to_event(row: Any) -> RecordedEvent:
    """Build a ``RecordedEvent`` from a row, upcasting old payloads."""
    version, data = upcast(row[4], row[5], _loads(row[6]))
    return RecordedEvent(
        position=row[0], stream_id=row[1], stream_version=row[2], event_id=row[3], type=row[4],
        schema_version=version, data=data, metadata=_loads(row[7]), recorded_at=row[8],
        prev_hash=row[9], hash=row[10],
    )


def read_stream(conn: sa.Connection, stream_id: str, from_version: int = 1,
                to_version: int | None = None) -> list[RecordedEvent]:
    """Events of one stream with ``from_version <= stream_version <= to_version``."""
    query = sa.select(*_COLUMNS).where(events.c.stream_id == stream_id,
                                       events.c.stream_version >= from_version)
    if to_version is not None:
        query = query.where(events.c.stream_version <= to_version)
    query = query.order_by(events.c.stream_version)
    return [row_to_event(r) for r in conn.execute(query)]


def read_all(conn: sa.Connection, after: int = 0, limit: int | None = None, *,
             until_position: int | None = None, until_time: datetime | None = None,
             stream_ids: tuple[str, ...] | None = None,
             chunk: int = 5000) -> Iterator[RecordedEvent]:
    """Every event with ``position > after`` in position order.

    Stops at ``until_position`` (inclusive) or before the first event recorded after
    ``until_time``, so the result is always a prefix of the log, even if the clock
    went backwards. Reads in chunks to keep memory flat on large logs.
    """
    until = ensure_utc(until_time, "until") if until_time is not None else None
    remaining = limit
    cursor = after
    while remaining is None or remaining > 0:
        size = chunk if remaining is None else min(chunk, remaining)
        query = sa.select(*_COLUMNS).where(events.c.position > cursor)
        if until_position is not None:
            query = query.where(events.c.position <= until_position)
        if stream_ids is not None:
            query = query.where(events.c.stream_id.in_(stream_ids))
        rows = conn.execute(query.order_by(events.c.position).limit(size)).all()
        for row in rows:
            if until is not None and row[8] > until:
                return
            yield row_to_event(row)
        if len(rows) < size:
            return
        cursor = rows[-1][0]
        if remaining is not None:
            remaining -= len(rows)


def head_position(conn: sa.Connection) -> int:
    """The highest position in the log (0 when empty)."""
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.position), 0)))
               .scalar_one())


def position_at(conn: sa.Connection, when: datetime) -> int:
    """The last position of the prefix recorded at or before ``when`` (0 if none).

    The prefix ends just before the first event recorded after ``when``; both look-ups
    use an index, so this does not scan the log.
    """
    until = ensure_utc(when, "until")
    first_after = conn.execute(
        sa.select(sa.func.min(events.c.position)).where(events.c.recorded_at > until)
    ).scalar_one()
    if first_after is None:
        return head_position(conn)
    last = conn.execute(
        sa.select(sa.func.max(events.c.position)).where(events.c.position < first_after)
    ).scalar_one()
    return int(last or 0)
