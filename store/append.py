"""Atomic, optimistic, idempotent appends to one stream.

Writers are serialized per database: ``BEGIN IMMEDIATE`` on SQLite and
``LOCK TABLE events IN EXCLUSIVE MODE`` on PostgreSQL, so insert order is commit
order and a reader tailing by position never skips an event that commits late.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from store.canonical import GENESIS_HASH, event_hash
from store.clock import ensure_utc, format_utc
from store.errors import ConcurrencyError, EventValidationError, IdempotencyError
from store.records import AppendResult, NewEvent, RecordedEvent
from store.schema import events

InTransactionHook = Callable[[sa.Connection, Sequence[RecordedEvent]], None]
"""Called inside the append transaction with the events just inserted."""


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """A validated event with its canonical JSON, ready to insert."""

    event: NewEvent
    data_json: str
    metadata_json: str
    client_id: bool


_HEAD = (
    sa.select(events.c.stream_version, events.c.hash)
    .where(events.c.stream_id == sa.bindparam("stream_id"))
    .order_by(events.c.stream_version.desc())
    .limit(1)
)
_INSERT = events.insert().returning(events.c.position, sort_by_parameter_order=True)
_BY_EVENT_ID = sa.select(
    events.c.event_id, events.c.stream_id, events.c.type, events.c.data,
    events.c.position, events.c.stream_version,
).where(events.c.event_id.in_(sa.bindparam("ids", expanding=True)))


def stream_head(conn: sa.Connection, stream_id: str) -> tuple[int, str]:
    """The stream's current version and last hash: (0, genesis) for a new stream."""
    row = conn.execute(_HEAD, {"stream_id": stream_id}).first()
    if row is None:
        return 0, GENESIS_HASH
    return int(row[0]), str(row[1])


def lock_for_append(conn: sa.Connection) -> None:
    """Serialize writers so positions are assigned in commit order (PostgreSQL)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("LOCK TABLE events IN EXCLUSIVE MODE")


def find_existing(conn: sa.Connection, stream_id: str,
                  batch: Sequence[PreparedEvent]) -> AppendResult | None:
    """Resolve client-supplied ids: a full identical retry returns the original positions."""
    ids = [p.event.event_id for p in batch if p.client_id]
    if not ids:
        return None
    found = {row.event_id: row for row in conn.execute(_BY_EVENT_ID, {"ids": ids})}
    if not found:
        return None
    for prepared in batch:
        row = found.get(prepared.event.event_id)
        if row is None:
            first = next(iter(sorted(found)))
            raise IdempotencyError(
                f"event id {first} is already stored but this batch has new events too;"
                " a retry must resend the original batch unchanged"
            )
        if (row.stream_id, row.type, row.data) != (stream_id, prepared.event.type,
                                                   prepared.data_json):
            raise IdempotencyError(
                f"event id {prepared.event.event_id} is already stored with different content"
            )
    rows = [found[p.event.event_id] for p in batch]
    return AppendResult(positions=tuple(int(r.position) for r in rows),
                        stream_version=max(int(r.stream_version) for r in rows), duplicate=True)


def check_expected(stream_id: str, expected: int | None, actual: int) -> None:
    """Enforce ``expected_version``: None any, 0 new stream, N exactly N."""
    if expected is not None and expected != actual:
        raise ConcurrencyError(stream_id, expected, actual)


def append_in_transaction(
    conn: sa.Connection,
    stream_id: str,
    batch: Sequence[PreparedEvent],
    expected_version: int | None,
    recorded_at: datetime,
) -> tuple[AppendResult, list[RecordedEvent]]:
    """Insert ``batch`` at the end of ``stream_id`` inside the caller's transaction."""
    if not batch:
        raise EventValidationError("nothing to append: the batch is empty")
    lock_for_append(conn)
    existing = find_existing(conn, stream_id, batch)
    if existing is not None:
        return existing, []
    version, prev = stream_head(conn, stream_id)
    check_expected(stream_id, expected_version, version)
    when = ensure_utc(recorded_at, "recorded_at")
    stamp = format_utc(when)
    rows: list[dict[str, object]] = []
    recorded: list[RecordedEvent] = []
    for prepared in batch:
        version += 1
        ev = prepared.event
        assert ev.event_id is not None and ev.schema_version is not None
        digest = event_hash(
            prev_hash=prev, stream_id=stream_id, stream_version=version, event_id=ev.event_id,
            type=ev.type, schema_version=ev.schema_version, data_json=prepared.data_json,
            metadata_json=prepared.metadata_json, recorded_at=stamp,
        )
        rows.append({
            "stream_id": stream_id, "stream_version": version, "event_id": ev.event_id,
            "type": ev.type, "schema_version": ev.schema_version, "data": prepared.data_json,
            "metadata": prepared.metadata_json, "recorded_at": when, "prev_hash": prev,
            "hash": digest,
        })
        recorded.append(RecordedEvent(
            position=0, stream_id=stream_id, stream_version=version, event_id=ev.event_id,
            type=ev.type, schema_version=ev.schema_version, data=ev.data, metadata=ev.metadata,
            recorded_at=when, prev_hash=prev, hash=digest,
        ))
        prev = digest
    if len(rows) == 1:
        positions = [int(conn.execute(_INSERT, rows[0]).scalar_one())]
    else:
        positions = [int(p) for p in conn.execute(_INSERT, rows).scalars()]
    recorded = [dataclasses.replace(ev, position=pos)
                for pos, ev in zip(positions, recorded, strict=True)]
    return AppendResult(positions=tuple(positions), stream_version=version), recorded
