"""Atomic, optimistic, idempotent appends to one stream.

What an append locks and how it inserts are its database's (``store.backends``): on
SQLite writers are serialized per database (``BEGIN IMMEDIATE``), so insert order is
commit order and a reader tailing by position never skips an event that commits late.
On PostgreSQL writers lock only their stream and take positions in one short statement;
readers stop at the settled position instead (see ``store.backends.pg_writes``).

The hot path is one INSERT per event. Statements are compiled once per dialect and run
on the driver's cursor (``store.sql_engine.DriverStatement``). A stream's head (version and
hash) comes from a per-process ``StreamHeads`` cache when it can: the INSERT of the
first new event then carries its own guard (the cached head row exists and nothing
follows it), so a stale cache inserts nothing and the head is read again in the same
transaction. Nothing is ever written from a stale head.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from ctxledger.store.backends import backend_for
from ctxledger.store.chain_key import ChainKey
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import ConcurrencyError, EventValidationError, IdempotencyError
from ctxledger.store.hash_chain import GENESIS_HASH, event_hash
from ctxledger.store.read import recorded_event
from ctxledger.store.records import AppendResult, PreparedEvent, RecordedEvent
from ctxledger.store.schema import events
from ctxledger.store.sql_engine import DriverStatement, driver_statement
from ctxledger.store.stream_rules import RULED_TYPES, check_stream_rules
from ctxledger.store.strict import check_time

InTransactionHook = Callable[[sa.Connection, Sequence[RecordedEvent]], None]
"""Called inside the append transaction with the events just inserted."""

Head = tuple[int, str]
"""A stream's version and the hash of its last event."""


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What ``append_in_transaction`` did: the result, the new events and the new head."""

    result: AppendResult
    recorded: list[RecordedEvent]
    head: Head | None
    """The stream's head after the insert (None when nothing was inserted)."""


class StreamHeads:
    """Heads of streams this process has appended to, as of their last commit.

    Safe to share between threads and to go stale: events are immutable and
    ``(stream_id, stream_version)`` is unique, so a cached head is either still the head
    or provably behind it, and the guarded INSERT tells the two apart. Record a head only
    after its transaction committed. Holds at most ``capacity`` streams (oldest go first).
    """

    def __init__(self, capacity: int = 50_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._heads: dict[str, Head] = {}
        self._lock = threading.Lock()

    def get(self, stream_id: str) -> Head | None:
        """The last committed head seen for ``stream_id``, if any."""
        return self._heads.get(stream_id)

    def remember(self, stream_id: str, head: Head) -> None:
        """Record ``head`` (call after the commit that wrote it)."""
        with self._lock:
            heads = self._heads
            heads.pop(stream_id, None)
            if len(heads) >= self.capacity:
                del heads[next(iter(heads))]
            heads[stream_id] = head

    def forget(self, stream_id: str) -> None:
        """Drop what is known about ``stream_id``."""
        with self._lock:
            self._heads.pop(stream_id, None)

    def clear(self) -> None:
        """Drop every cached head."""
        with self._lock:
            self._heads.clear()

    def __len__(self) -> int:
        return len(self._heads)


def _head_statement() -> sa.Select[tuple[int, str]]:
    return (sa.select(events.c.stream_version, events.c.hash)
            .where(events.c.stream_id == sa.bindparam("stream_id"))
            .order_by(events.c.stream_version.desc()).limit(1))


def _head(dialect: Dialect) -> DriverStatement:
    """The compiled query of a stream's head."""
    return driver_statement(dialect, ("ctxledger.store.append", "head"), _head_statement)


_BY_EVENT_ID = sa.select(
    events.c.event_id, events.c.stream_id, events.c.type, events.c.data, events.c.metadata,
    events.c.position, events.c.stream_version,
).where(events.c.event_id.in_(sa.bindparam("ids", expanding=True)))


def stream_head(conn: sa.Connection, stream_id: str) -> Head:
    """The stream's current version and last hash: (0, genesis) for a new stream."""
    rows = _head(conn.dialect).fetch(conn, {"stream_id": stream_id})
    if not rows:
        return 0, GENESIS_HASH
    return int(rows[0][0]), str(rows[0][1])


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
        # Metadata is covered by the hash, so it is part of "the same content".
        if (row.stream_id, row.type, row.data, row.metadata) != (
                stream_id, prepared.event.type, prepared.data_json, prepared.metadata_json):
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


def _hash_stamp(when: datetime) -> str:
    """``format_utc(when)``; isoformat is several times faster than strftime for UTC."""
    if when.tzinfo is UTC and when.year >= 1000:
        return when.isoformat(timespec="microseconds")[:-6] + "Z"
    return format_utc(when)


def _chain(stream_id: str, batch: Sequence[PreparedEvent], head: Head,
           when: datetime, key: ChainKey | None) -> list[dict[str, Any]]:
    """Insert rows for ``batch`` continuing the hash chain from ``head``."""
    version, prev = head
    stamp = _hash_stamp(when)
    rows: list[dict[str, Any]] = []
    for prepared in batch:
        version += 1
        ev = prepared.event
        assert ev.event_id is not None and ev.schema_version is not None
        digest = event_hash(
            prev_hash=prev, stream_id=stream_id, stream_version=version, event_id=ev.event_id,
            type=ev.type, schema_version=ev.schema_version, data_json=prepared.data_json,
            metadata_json=prepared.metadata_json, recorded_at=stamp, key=key,
        )
        rows.append({
            "stream_id": stream_id, "stream_version": version, "event_id": ev.event_id,
            "type": ev.type, "schema_version": ev.schema_version, "data": prepared.data_json,
            "metadata": prepared.metadata_json, "recorded_at": when, "prev_hash": prev,
            "hash": digest,
        })
        prev = digest
    return rows


def append_in_transaction(
    conn: sa.Connection,
    stream_id: str,
    batch: Sequence[PreparedEvent],
    expected_version: int | None,
    recorded_at: datetime,
    heads: StreamHeads | None = None,
    key: ChainKey | None = None,
    shared_keys: Sequence[str] = (),
) -> AppendOutcome:
    """Insert ``batch`` at the end of ``stream_id`` inside the caller's transaction.

    ``heads`` (optional) supplies cached stream heads; the caller records the returned
    ``head`` into it only after the transaction commits. ``key`` makes the links HMACs.
    ``shared_keys`` (PostgreSQL) name rows other streams' appends also update inline:
    they are locked before a position is taken, so such appends commit in position order.
    """
    if not batch:
        raise EventValidationError("nothing to append: the batch is empty")
    backend = backend_for(conn)
    backend.lock_append(conn, stream_id, batch, shared_keys)
    existing = find_existing(conn, stream_id, batch)
    if existing is not None:
        return AppendOutcome(existing, [], None)
    when = check_time(recorded_at, "recorded_at")
    cached = heads.get(stream_id) if heads is not None else None
    positions: list[int] | None = None
    # Batches that the stream rules apply to take the slow path: a version conflict is
    # reported before a rule, and the rules read the stream anyway.
    ruled = any(p.event.type in RULED_TYPES for p in batch)
    if cached is not None and not ruled and (
            expected_version is None or expected_version == cached[0]):
        head = cached
        rows = _chain(stream_id, batch, head, when, key)
        positions = backend.insert_events(conn, rows, guarded=True)
    if positions is None:
        # No usable cached head (or it was stale): read it under the write (or stream) lock.
        head = stream_head(conn, stream_id)
        check_expected(stream_id, expected_version, head[0])
        if ruled:
            check_stream_rules(conn, stream_id, [p.event for p in batch])
        rows = _chain(stream_id, batch, head, when, key)
        positions = backend.insert_events(conn, rows, guarded=False)
        assert positions is not None
    recorded = [
        recorded_event(pos, stream_id, row["stream_version"], row["event_id"], row["type"],
                       row["schema_version"], prepared.event.data, prepared.event.metadata,
                       when, row["prev_hash"], row["hash"])
        for pos, row, prepared in zip(positions, rows, batch, strict=True)
    ]
    last = rows[-1]
    result = AppendResult(positions=tuple(positions), stream_version=last["stream_version"])
    return AppendOutcome(result, recorded, (last["stream_version"], last["hash"]))
