"""The test databases copied from a template (``db_url``) equal a database migrated from
scratch by ``Ledger.open`` (``empty_db_url``): the same tables, columns, indexes,
constraints, triggers and functions, and the same rows, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import BACKENDS, PG_URL, fresh_database, require_postgres
from helpers.databases import pg_schema
from helpers.templates import Templates

from ctxledger import Ledger
from ctxledger._migrate import current_revision, head_revision

SQLITE_SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
# Every object of the connection's current schema, in a form free of the schema's name.
PG_SCHEMA = [
    "SELECT table_name, column_name, data_type, is_nullable, column_default"
    " FROM information_schema.columns WHERE table_schema = current_schema()"
    " ORDER BY table_name, column_name",
    "SELECT c.relname, c.relkind, pg_get_indexdef(c.oid) FROM pg_class c"
    " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'i'"
    " ORDER BY c.relname",
    "SELECT c.relname, c.relkind FROM pg_class c"
    " WHERE c.relnamespace = current_schema()::regnamespace ORDER BY c.relname",
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2",
    "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger"
    " WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class"
    " WHERE relnamespace = current_schema()::regnamespace) ORDER BY 1, 2",
    "SELECT proname, prosrc FROM pg_proc"
    " WHERE pronamespace = current_schema()::regnamespace ORDER BY 1, 2",
]


def snapshot(url: str) -> dict[str, Any]:
    """The schema and every row of the database at ``url``, minus the schema's own name."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                shape: list[Any] = [tuple(r) for r in conn.exec_driver_sql(SQLITE_SCHEMA)]
            else:
                schema = conn.exec_driver_sql("SELECT current_schema()").scalar()
                shape = [[tuple(str(v).replace(f"{schema}.", "") for v in row)
                          for row in conn.exec_driver_sql(query)] for query in PG_SCHEMA]
            rows = {name: sorted(map(repr, conn.execute(sa.select(*_compared(table)))))
                    for name, table in _reflected(conn).items()}
    finally:
        engine.dispose()
    return {"shape": shape, "rows": rows}


def _compared(table: sa.Table) -> list[sa.ColumnElement[Any]]:
    # A checkpoint's updated_at is the clock's time when it was made: the copy's is older.
    return [c for c in table.columns
            if (table.name, c.name) != ("projection_checkpoints", "updated_at")]


def _reflected(conn: sa.Connection) -> dict[str, sa.Table]:
    metadata = sa.MetaData()
    metadata.reflect(conn)
    return dict(metadata.tables)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_copy_equals_a_database_migrated_from_scratch(backend: str, templates: Templates,
                                                        tmp_path: Path) -> None:
    with (fresh_database(backend, templates, tmp_path / "copy") as copy_url,
          _scratch_database(backend, tmp_path / "scratch") as scratch_url):
        with Ledger.open(scratch_url, load_vocabulary=False):
            pass
        copied, migrated = snapshot(copy_url), snapshot(scratch_url)
    assert copied["rows"]["alembic_version"] == migrated["rows"]["alembic_version"]
    # The comparison compares something: rows, and every kind of object in the schema.
    assert copied["rows"]["projection_checkpoints"] and all(copied["shape"])
    assert copied == migrated


@contextmanager
def _scratch_database(backend: str, directory: Path) -> Iterator[str]:
    directory.mkdir()
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'scratch.db'}"
        return
    with pg_schema(PG_URL) as url:
        yield url


def test_a_copy_is_at_the_head_and_empty(ledger: Ledger) -> None:
    assert current_revision(ledger.engine) == head_revision()
    assert ledger.head() == 0
    assert ledger.refresh_projections() == []  # every projection already up to date


def _schema_of(url: str) -> str:
    return str(sa.engine.make_url(url).query["options"]).removeprefix("-csearch_path=")


@pytest.mark.postgres
def test_a_used_schema_comes_back_as_a_fresh_one(tmp_path: Path) -> None:
    """A PostgreSQL schema a test wrote into is emptied, refilled and renamed for the next
    test: it then equals a database migrated from scratch, rows and sequences included."""
    require_postgres()
    own = Templates(tmp_path, PG_URL)  # a pool of its own, so the reuse is certain
    try:
        with own.postgres() as first, Ledger.open(first, load_vocabulary=False) as ledger:
            ledger.append("s", [{"type": "message.appended",
                                 "data": {"role": "user", "content": f"m{n}"}}
                                for n in range(5)])
            ledger.seal()
            assert ledger.head() > 0
        kept = list(own._pg_pool)
        assert len(kept) == 1 and kept != [_schema_of(first)]  # kept, under a new name
        with own.postgres() as second, _scratch_database(
                "postgres", tmp_path / "scratch") as scratch_url:
            assert [_schema_of(second)] == kept  # the one kept: no stale cache by name
            with Ledger.open(scratch_url, load_vocabulary=False):
                pass
            assert snapshot(second) == snapshot(scratch_url)
            with Ledger.open(second, load_vocabulary=False) as ledger:
                assert ledger.head() == 0
                # Positions start again where a fresh database starts them.
                assert ledger.append("s", {"type": "message.appended", "data": {
                    "role": "user", "content": "again"}}).positions == (1,)
    finally:
        own.close()


@pytest.mark.postgres
def test_a_schema_whose_shape_changed_is_dropped_not_reused(tmp_path: Path) -> None:
    require_postgres()
    own = Templates(tmp_path, PG_URL)
    try:
        with own.postgres() as url:
            engine = sa.create_engine(url)
            with engine.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE events DISABLE TRIGGER events_no_truncate")
            engine.dispose()
        assert own._pg_pool == []  # dropped, where an unchanged one is kept (above)
        with own.admin().connect() as conn:
            assert conn.exec_driver_sql(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                (_schema_of(url),)).scalar() == 0
    finally:
        own.close()
