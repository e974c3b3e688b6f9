"""SQLAlchemy Core table of the event log. Alembic migrations create it; this mirrors them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from ctxledger.store.backends import PositionType as PositionType  # the tables' type
from ctxledger.store.backends import backend_for

metadata = sa.MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (stored as ``Backend.stored_utc`` says:
    naive on SQLite)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given where UTC is required")
        value = value.astimezone(UTC)
        return backend_for(dialect).stored_utc(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


events = sa.Table(
    "events",
    metadata,
    # On SQLite INTEGER PRIMARY KEY is the rowid; deletes are forbidden so it only grows.
    sa.Column("position", PositionType, sa.Identity(), primary_key=True),
    sa.Column("stream_id", sa.String(200), nullable=False),
    sa.Column("stream_version", sa.Integer, nullable=False),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("recorded_at", UTCDateTime, nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    # PostgreSQL only (NULL on SQLite and for rows older than revision 0011): see
    # ``store.backends.pg_writes``. Not part of any hash: it says when, not what.
    sa.Column("txid", sa.BigInteger),
    sa.UniqueConstraint("stream_id", "stream_version", name="uq_events_stream_version"),
    sa.UniqueConstraint("event_id", name="uq_events_event_id"),
    sa.Index("ix_events_recorded_at", "recorded_at"),
)
"""The immutable event log. ``data`` and ``metadata`` hold canonical JSON text, the exact
bytes the hash chain covers, so verification never depends on a JSON column's rewriting."""

seals = sa.Table(
    "seals",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("events", PositionType, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("key_id", sa.String(16)),
    sa.Column("sealed_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("position", name="uq_seals_position"),
)
"""Seals of the whole log (see ``store.seal``): seal ``seq`` covers every event up to
``position`` (``events`` of them); ``hash`` is the global chain's value there, an HMAC
chain when ``key_id`` is set. Immutable like ``events``."""

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("key_id", sa.String(32), primary_key=True),
    # NULL once revoked: a revoked key's secret is forgotten, not kept.
    sa.Column("secret_hash", sa.String(64)),
    sa.Column("scopes", sa.Text, nullable=False),
    sa.Column("read_only", sa.Boolean, nullable=False),
    sa.Column("admin", sa.Boolean, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime),
)
"""API keys of the HTTP service (``ctxledger._service.keys``): operational configuration,
not session history, so they are rows rather than events. Revoking a key must be able to
forget its secret's hash, and the log never forgets. ``scopes`` is a JSON list of scope
names; ``secret_hash`` the SHA-256 hex of the secret."""
