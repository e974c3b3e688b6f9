"""The migrated schema matches the SQLAlchemy table definitions, on both backends."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

import ctxledger.projections.registry  # defines every projection table
from ctxledger import _migrate as migrate
from ctxledger.jobs._scheduler import JOBS_TABLE
from ctxledger.projections.base import metadata as projection_metadata
from ctxledger.store.schema import metadata as store_metadata
from ctxledger.store.sql_engine import create_engine


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """These tests migrate a database themselves: one nothing has been created in."""
    return empty_db_url


def merged_metadata() -> sa.MetaData:
    """The event log's tables plus every projection, checkpoint and cache table, plus the
    scheduler's job table exactly as APScheduler's ``SQLAlchemyJobStore`` defines it."""
    merged = sa.MetaData()
    for md in (store_metadata, projection_metadata):
        for table in md.tables.values():
            table.to_metadata(merged)
    store = SQLAlchemyJobStore(url="sqlite://", tablename=JOBS_TABLE)
    store.jobs_t.to_metadata(merged)
    store.engine.dispose()
    return merged


def test_head_schema_has_no_drift(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, merged_metadata())
    finally:
        engine.dispose()
    assert diff == []


def test_every_builtin_table_is_created_by_the_migrations(db_url: str) -> None:
    """Guards the comparison itself: an empty metadata would trivially show no drift."""
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine)
        names = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    for projection in ctxledger.projections.registry.builtin_projections():
        for table in projection.tables:
            assert table.name in names, (projection.name, table.name)
    for name in ("token_counts", "history_token_memo", "usage_daily_tools",
                 "usage_daily_messages", "usage_daily_tokens", "usage_daily_servers",
                 "projection_checkpoints", JOBS_TABLE):
        assert name in names


def test_without_rowid_tables_match_the_definitions(sqlite_url: str) -> None:
    """Alembic does not compare ``WITHOUT ROWID``: the migrations must still make exactly
    the tables the definitions mark ``sqlite_with_rowid=False``."""
    engine = create_engine(sqlite_url)
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:
            created = {name for name, sql in conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'").all()
                if sql.rstrip().upper().endswith("WITHOUT ROWID")}
    finally:
        engine.dispose()
    declared = {table.name for table in merged_metadata().tables.values()
                if table.dialect_options["sqlite"]["with_rowid"] is False}
    assert "sessions" in declared and created == declared
