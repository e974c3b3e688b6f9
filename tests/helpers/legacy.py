"""Writing events the way an older release did: raw rows with a correct hash chain.

Used to build databases at an old migration revision, before ``Ledger.open`` upgrades them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ctxledger import Ledger
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.store.canonical import canonical_json
from ctxledger.store.clock import format_utc
from ctxledger.store.hash_chain import GENESIS_HASH, event_hash
from ctxledger.store.schema import events


@dataclass(frozen=True)
class LegacyEvent:
    """One event as an older release stored it (``data`` in that release's schema)."""

    type: str
    data: dict[str, Any]
    recorded_at: datetime
    schema_version: int = 1
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LegacyRow:
    """What was inserted for one ``LegacyEvent``."""

    position: int
    stream_id: str
    stream_version: int
    event_id: str
    hash: str


def insert_legacy(conn: sa.Connection, stream_id: str,
                  batch: Sequence[LegacyEvent]) -> list[LegacyRow]:
    """Insert ``batch`` at the end of ``stream_id`` with raw SQL, chaining the hashes."""
    head = conn.execute(
        sa.select(events.c.stream_version, events.c.hash)
        .where(events.c.stream_id == stream_id)
        .order_by(events.c.stream_version.desc()).limit(1)
    ).first()
    version, prev = (int(head[0]), str(head[1])) if head is not None else (0, GENESIS_HASH)
    written: list[LegacyRow] = []
    for event in batch:
        version += 1
        data_json = canonical_json(event.data)
        metadata_json = canonical_json(event.metadata)
        digest = event_hash(
            prev_hash=prev, stream_id=stream_id, stream_version=version,
            event_id=event.event_id, type=event.type, schema_version=event.schema_version,
            data_json=data_json, metadata_json=metadata_json,
            recorded_at=format_utc(event.recorded_at),
        )
        position = conn.execute(
            events.insert().returning(events.c.position),
            {"stream_id": stream_id, "stream_version": version, "event_id": event.event_id,
             "type": event.type, "schema_version": event.schema_version, "data": data_json,
             "metadata": metadata_json, "recorded_at": event.recorded_at, "prev_hash": prev,
             "hash": digest},
        ).scalar_one()
        written.append(LegacyRow(int(position), stream_id, version, event.event_id, digest))
        prev = digest
    return written


def as_input(event: LegacyEvent) -> dict[str, Any]:
    """The same event as ``Ledger.append`` input (same id, metadata and schema version)."""
    return {"type": event.type, "data": dict(event.data), "id": event.event_id,
            "metadata": dict(event.metadata), "schema_version": event.schema_version}


def append_through_api(url: str, items: Sequence[tuple[str, LegacyEvent]]) -> None:
    """Append ``(stream, event)`` pairs one by one with today's code, at their recorded times.

    Gives the reference state a database would have had if it had always run this
    release: positions, ids and times match what ``insert_legacy`` wrote.
    """
    current: list[datetime] = [items[0][1].recorded_at] if items else []

    def clock() -> datetime:
        return current[0]

    with Ledger.open(url, clock=clock) as ledger:
        for stream, event in items:
            current[0] = event.recorded_at
            ledger.append(stream, [as_input(event)])


def append_legacy(ledger: Ledger, stream_id: str, inputs: Sequence[dict[str, Any]]) -> None:
    """Append current-schema inputs as a release before the stream rules could have
    (a second ``session.started``, a retraction of an unknown message...): raw rows, then
    the projections catch up. Projections must still fold such logs."""
    from ctxledger.store.upcasting import current_version

    batch = [LegacyEvent(e["type"], e.get("data", {}), ledger.clock(),
                         schema_version=current_version(e["type"])) for e in inputs]
    with ledger.engine.begin() as conn:
        # A writer that runs no projection leaves them behind its events (what
        # ``checkpoints.demote_others`` does for a runner lacking some of them).
        head = conn.exec_driver_sql("SELECT coalesce(max(position), 0) FROM events").scalar()
        conn.execute(checkpoints.update().where(checkpoints.c.inline.is_(True))
                     .values(inline=False, position=head))
        insert_legacy(conn, stream_id, batch)
    ledger.refresh_projections()
