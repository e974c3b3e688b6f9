"""Scratch stores: in-memory SQLite copies of one schema template, migrated once per process.

The template is the real schema (the Alembic migrations, then every built-in projection's
checkpoint at 0), so a scratch store is exactly what ``Ledger.open`` would create. Copying
it with SQLite's backup API costs a fraction of a millisecond, where migrating costs a
fraction of a second: replays make one per call and the pytest plugin one per test.
"""

from __future__ import annotations

import sqlite3
import threading

import sqlalchemy as sa

from ctxledger.store.sql_engine import create_engine

_lock = threading.Lock()
_template: tuple[sa.Engine, sqlite3.Connection] | None = None


def _build_template() -> tuple[sa.Engine, sqlite3.Connection]:
    # Imported here: the migrations and projections are only needed the first time.
    from ctxledger import _migrate as migrate
    from ctxledger.projections.registry import builtin_projections
    from ctxledger.projections.runner import ProjectionRunner

    engine = create_engine("sqlite://")
    migrate.upgrade(engine)
    with engine.begin() as conn:
        ProjectionRunner(builtin_projections()).bring_up_to_date(conn)
    raw = engine.raw_connection().driver_connection
    assert isinstance(raw, sqlite3.Connection)
    return engine, raw


def copy_template() -> sqlite3.Connection:
    """A new in-memory SQLite database holding the migrated, empty schema."""
    global _template
    target = sqlite3.connect(":memory:", check_same_thread=False)
    with _lock:
        if _template is None:
            _template = _build_template()
        _template[1].backup(target)
    return target


def scratch_engine() -> sa.Engine:
    """An engine on a fresh copy of the template (one shared in-memory connection)."""
    connection = copy_template()
    return create_engine("sqlite://", creator=lambda: connection)
