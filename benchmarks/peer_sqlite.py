"""The raw ``sqlite3`` peer: the floor any event store on SQLite can reach.

It writes into a table with the same columns, keys and indexes as ctxledger's ``events``
table, with the same settings (WAL, ``synchronous=NORMAL``). Rows are fully prepared
before the clock starts (JSON text, ids, hashes), so only the database work is timed:
that makes it the strictest baseline, with no validation, no hashing, no projections.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from workload import MixEvent

_DDL = (
    """CREATE TABLE events (
        position INTEGER PRIMARY KEY,
        stream_id VARCHAR(200) NOT NULL,
        stream_version INTEGER NOT NULL,
        event_id VARCHAR(36) NOT NULL,
        type VARCHAR(100) NOT NULL,
        schema_version INTEGER NOT NULL,
        data TEXT NOT NULL,
        metadata TEXT NOT NULL,
        recorded_at DATETIME NOT NULL,
        prev_hash VARCHAR(64) NOT NULL,
        hash VARCHAR(64) NOT NULL,
        CONSTRAINT uq_events_stream_version UNIQUE (stream_id, stream_version),
        CONSTRAINT uq_events_event_id UNIQUE (event_id)
    )""",
    "CREATE INDEX ix_events_recorded_at ON events (recorded_at)",
)
_INSERT = ("INSERT INTO events (stream_id, stream_version, event_id, type, schema_version,"
           " data, metadata, recorded_at, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?,?)")

Row = tuple[str, int, str, str, int, str, str, str, str, str]


def prepare_rows(events: Sequence[MixEvent], streams: Sequence[str] | None = None) -> list[Row]:
    """Rows for ``events`` with versions and a hash chain per stream (done untimed).

    ``streams`` overrides each event's stream (the batch legs put a batch in one stream).
    """
    heads: dict[str, tuple[int, str]] = {}
    rows: list[Row] = []
    # Time-ordered (v7) ids and rising timestamps, like ctxledger's own, so the
    # indexes see the same kind of keys.
    rng = random.Random(len(events))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for index, event in enumerate(events):
        stream = streams[index] if streams is not None else event.stream_id
        version, prev = heads.get(stream, (0, "0" * 64))
        version += 1
        data = json.dumps(event.data, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{prev}{stream}{version}{data}".encode()).hexdigest()
        moment = start + timedelta(microseconds=index * 50)
        stamp = int(moment.timestamp() * 1_000_000) * 4096 // 1000  # ms << 12 | fraction
        event_id = str(uuid.UUID(int=((stamp >> 12) << 80) | ((0x7000 | (stamp & 0xFFF)) << 64)
                                 | (0b10 << 62) | rng.getrandbits(62)))
        when = moment.strftime("%Y-%m-%d %H:%M:%S.%f")
        rows.append((stream, version, event_id, event.type, 1, data, "{}", when, prev, digest))
        heads[stream] = (version, digest)
    return rows


def open_database(path: Path) -> sqlite3.Connection:
    """A new database at ``path`` with the events table and ctxledger's durability settings."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for statement in _DDL:
        conn.execute(statement)
    conn.commit()
    return conn


def insert_one_commit_each(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """One INSERT and one COMMIT per row (the single-append peer)."""
    execute, commit = conn.execute, conn.commit
    for row in rows:
        execute(_INSERT, row)
        commit()


def insert_batches(conn: sqlite3.Connection, batches: Sequence[Sequence[Row]]) -> None:
    """One ``executemany`` and one COMMIT per batch (the batch peer)."""
    for batch in batches:
        conn.executemany(_INSERT, batch)
        conn.commit()
