"""Engines configured for the event log: SQLite (WAL, NORMAL, busy timeout) or PostgreSQL."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import StaticPool

from store.canonical import canonical_json
from store.errors import LedgerError

SQLITE_BUSY_TIMEOUT_MS = 30_000


def is_memory_sqlite(url: URL) -> bool:
    """True for ``sqlite://`` and ``sqlite:///:memory:`` URLs."""
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def create_engine(url: str | URL, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` with the settings the event log relies on.

    SQLite: WAL, ``synchronous=NORMAL``, a busy timeout, and ``BEGIN IMMEDIATE`` so a
    writer takes the lock up front instead of failing on upgrade. In-memory SQLite uses
    one shared connection so every caller sees the same database.
    """
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        raise LedgerError(f"not a database URL: {url!r}") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise LedgerError(f"unsupported database {backend!r}: use sqlite or postgresql+psycopg")
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    kwargs.setdefault("json_serializer", canonical_json)
    if backend == "sqlite":
        if is_memory_sqlite(parsed):
            kwargs.setdefault("poolclass", StaticPool)
            kwargs.setdefault("connect_args", {"check_same_thread": False})
        engine = sa.create_engine(parsed, **kwargs)
        _configure_sqlite(engine, memory=is_memory_sqlite(parsed))
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(parsed, **kwargs)


def _configure_sqlite(engine: Engine, *, memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Autocommit at the driver level; SQLAlchemy's begin event issues BEGIN itself.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
