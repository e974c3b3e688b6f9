"""``RowStore.delete_where``: the range delete pruning uses, with writes still pending, on
a table known empty (rebuild) and on a plain store, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ctxledger.projections.rowstore import RowStore
from ctxledger.store.schema import UTCDateTime
from ctxledger.store.sql_engine import create_engine

meta = sa.MetaData()
uses = sa.Table(
    "rs_uses", meta,
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", UTCDateTime, nullable=False),
)
T0 = datetime(2026, 3, 1, tzinfo=UTC)
CUT = T0 + timedelta(days=3)


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    eng = create_engine(db_url)
    meta.create_all(eng)
    try:
        yield eng
    finally:
        eng.dispose()


def row(seq: int) -> dict[str, object]:
    return {"name": "grep", "seq": seq, "at": T0 + timedelta(days=seq)}


def stored(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(uses.c.seq).order_by(uses.c.seq)).scalars())


@pytest.mark.parametrize("known_empty", [True, False])
def test_rows_flushed_earlier_and_rows_pending_are_both_deleted(engine: sa.Engine,
                                                                known_empty: bool) -> None:
    with engine.begin() as conn:
        rows = RowStore(conn, empty=[uses] if known_empty else [])
        for seq in range(3):
            rows.put(uses, row(seq))
        rows.flush()  # seq 0..2 in the database
        for seq in range(3, 6):
            rows.put(uses, row(seq))  # seq 3..5 pending
        removed = rows.delete_where(uses, uses.c.at < CUT,
                                    lambda r: bool(r["at"] < CUT))
        assert removed == 3
        assert rows.get(uses, ("grep", 1)) is None and rows.get(uses, ("grep", 4)) is not None
        rows.put(uses, row(6))
        rows.flush()
    assert stored(engine) == [3, 4, 5, 6]


def test_rows_only_in_the_database_are_deleted_too(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(uses.insert(), [row(seq) for seq in range(5)])
    with engine.begin() as conn:
        rows = RowStore(conn)
        assert rows.delete_where(uses, uses.c.at < CUT, lambda r: bool(r["at"] < CUT)) == 0
        rows.flush()
    assert stored(engine) == [3, 4]


def test_a_memory_store_drops_matching_rows() -> None:
    rows = RowStore(None)
    for seq in range(5):
        rows.put(uses, row(seq))
    assert rows.delete_where(uses, uses.c.at < CUT, lambda r: bool(r["at"] < CUT)) == 3
    assert sorted(r["seq"] for r in rows.rows(uses)) == [3, 4]
