"""The write hot path under the projections: ``RowStore``, the runner, driver statements
and the stream-head cache, on SQLite and PostgreSQL.

``RowStore`` and ``DriverStatement`` run statements on the driver's cursor instead of
``conn.execute``; these tests pin that what they write and read is exactly what
SQLAlchemy itself would, and that the cached stream heads never let a stale append in.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa

from ctxledger import ConcurrencyError, Ledger
from ctxledger.projections.base import Projection
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.projections.rowstore import RowStore
from ctxledger.projections.runner import ProjectionRunner
from ctxledger.store.append import StreamHeads
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import UTCDateTime
from ctxledger.store.sql_engine import DriverStatement, create_engine

meta = sa.MetaData()
counters = sa.Table(
    "rs_counters", meta,
    sa.Column("owner", sa.String(50), primary_key=True),
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("label", sa.Text),
    sa.Column("hits", sa.Integer, nullable=False, server_default="0"),
    sa.Column("total", sa.Float, nullable=False, server_default="0"),
    sa.Column("flag", sa.Boolean),
    sa.Column("seen_at", UTCDateTime),
)
missing = sa.Table("rs_never_created", meta, sa.Column("id", sa.Integer, primary_key=True))

T0 = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    """An engine with the test table (never ``rs_never_created``)."""
    eng = create_engine(db_url)
    counters.create(eng)
    try:
        yield eng
    finally:
        eng.dispose()


def table_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    """The test table through plain SQLAlchemy, sorted by key."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(counters).order_by(counters.c.owner, counters.c.name))
        return [dict(r._mapping) for r in rows]


# -- DriverStatement -----------------------------------------------------------------------

def test_driver_statement_writes_and_reads_like_sqlalchemy(engine: sa.Engine) -> None:
    row = {"owner": "a", "name": "x", "label": "ü ' quote", "hits": 3, "total": 1.5,
           "flag": True, "seen_at": T0}
    with engine.begin() as conn:
        insert = DriverStatement(counters.insert(), conn.dialect, column_keys=tuple(row))
        insert.execute(conn, row)
        conn.execute(counters.insert(), {**row, "owner": "b", "seen_at": T0 + timedelta(hours=1)})
    stored = table_rows(engine)
    assert stored[0] == row
    assert stored[1]["seen_at"] == T0 + timedelta(hours=1)
    with engine.connect() as conn:
        select = DriverStatement(sa.select(counters).where(counters.c.owner == sa.bindparam("o")),
                                 conn.dialect)
        for expected in stored:
            (got,) = select.fetch(conn, {"o": expected["owner"]})
            assert dict(zip(counters.columns.keys(), got, strict=True)) == expected
            assert got[-1].tzinfo is not None and got[-1].utcoffset() == timedelta(0)


def test_driver_statement_keeps_values_bound_at_build_time(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(counters.insert(), [{"owner": o, "name": "n", "hits": i}
                                         for i, o in enumerate("abcd")])
        stmt = DriverStatement(
            counters.update().where(counters.c.owner.in_(["b", "d"]))
            .values(hits=sa.bindparam("hits", type_=sa.Integer, required=False)), conn.dialect)
        stmt.execute(conn, {"hits": 40})
    assert [r["hits"] for r in table_rows(engine)] == [0, 40, 2, 40]


def test_driver_errors_are_sqlalchemy_errors_and_roll_back_cleanly(
        engine: sa.Engine) -> None:
    row = {"owner": "a", "name": "x", "hits": 1}
    with engine.begin() as conn:
        conn.execute(counters.insert(), row)
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        DriverStatement(counters.insert(), conn.dialect, column_keys=tuple(row)).execute(conn, row)
    assert [r["hits"] for r in table_rows(engine)] == [1]


# -- RowStore ------------------------------------------------------------------------------

def test_blind_bumps_create_then_add_without_reading(engine: sa.Engine) -> None:
    for _ in range(2):
        with engine.begin() as conn:
            rows = RowStore(conn)
            rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 2, "total": 0.5},
                      set={"seen_at": T0}, defaults={"label": "first"})
            rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 1},
                      set={"flag": False})
            assert rows.flush() == 1
    (row,) = table_rows(engine)
    assert (row["hits"], row["total"], row["flag"], row["seen_at"]) == (6, 1.0, False, T0)
    # Defaults only fill a row being created; the second round's defaults did not reset it.
    assert row["label"] == "first"


def test_get_merges_queued_bumps_with_the_stored_row(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(counters.insert(), {"owner": "a", "name": "x", "hits": 10, "total": 1.0,
                                         "label": "kept", "seen_at": T0})
    with engine.begin() as conn:
        rows = RowStore(conn)
        rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 5})
        row = rows.get(counters, ("a", "x"))
        assert row is not None and (row["hits"], row["label"], row["seen_at"]) == (15, "kept", T0)
        rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 1})
        assert rows.get(counters, ("a", "x"))["hits"] == 16  # type: ignore[index]
        assert rows.get(counters, ("zz", "x")) is None
        rows.flush()
    assert [(r["hits"], r["label"]) for r in table_rows(engine)] == [(16, "kept")]


def test_put_replaces_the_row_and_discards_queued_increments(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(counters.insert(), {"owner": "a", "name": "x", "hits": 10})
    with engine.begin() as conn:
        rows = RowStore(conn)
        rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 5})
        rows.put(counters, {"owner": "a", "name": "x", "hits": 1, "total": 2.0, "label": None,
                            "flag": None, "seen_at": None})
        rows.flush()
    (row,) = table_rows(engine)
    assert (row["hits"], row["total"]) == (1, 2.0)


def test_delete_removes_stored_rows_and_ignores_unknown_ones(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(counters.insert(), [{"owner": o, "name": "x"} for o in "abc"])
    with engine.begin() as conn:
        rows = RowStore(conn)
        rows.delete(counters, ("b", "x"))
        rows.delete(counters, ("nope", "x"))
        assert rows.get(counters, ("b", "x")) is None
        rows.put(counters, {"owner": "d", "name": "x", "hits": 4})
        rows.delete(counters, ("d", "x"))  # created and removed in one batch: nothing
        rows.flush()
    assert [r["owner"] for r in table_rows(engine)] == ["a", "c"]


def test_rows_written_in_separate_flushes_and_forgotten_read_back(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        rows = RowStore(conn, empty=[counters])
        for i in range(5):
            rows.bump(counters, {"owner": "a", "name": f"n{i}"}, add={"hits": i},
                      set={"seen_at": T0 + timedelta(seconds=i)})
        assert rows.flush() == 5
        rows.forget()
        rows.bump(counters, {"owner": "a", "name": "n4"}, add={"hits": 100})
        got = rows.get(counters, ("a", "n4"))
        assert got is not None and got["hits"] == 104
        assert got["seen_at"] == T0 + timedelta(seconds=4)
        rows.flush()
    assert [r["hits"] for r in table_rows(engine)] == [0, 1, 2, 3, 104]


def test_tables_known_to_be_empty_are_never_queried(engine: sa.Engine) -> None:
    # rs_never_created does not exist: any SELECT on it would fail.
    with engine.begin() as conn:
        rows = RowStore(conn, empty=[missing])
        assert rows.get(missing, (1,)) is None
        rows.bump(missing, {"id": 1}, add={"n": 1})
        assert rows.rows(missing) == [{"id": 1, "n": 1}]


def test_memory_mode_keeps_everything_and_writes_nothing() -> None:
    rows = RowStore(None)
    rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 1}, defaults={"label": "l"})
    rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 1})
    rows.put(counters, {"owner": "b", "name": "y", "hits": 7})
    rows.delete(counters, ("b", "y"))
    assert rows.rows(counters) == [{"label": "l", "owner": "a", "name": "x", "hits": 2}]
    assert rows.key_of(counters, {"name": "x", "owner": "a", "hits": 0}) == ("a", "x")
    assert rows.flush() == 0


def test_misuse_is_refused(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        rows = RowStore(conn)
        with pytest.raises(ValueError, match="must not also have a default"):
            rows.bump(counters, {"owner": "a", "name": "x"}, add={"hits": 1},
                      defaults={"hits": 5})
        rows.put(counters, {"owner": "a", "name": "x"})
        with pytest.raises(AssertionError, match="before flush"):
            rows.forget()


# -- runner ----------------------------------------------------------------------------------

class HitCounter(Projection):
    """Counts message events per stream in ``rs_counters`` (only ``message.appended``)."""

    name: ClassVar[str] = "rs_hits"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (counters,)
    handles: ClassVar[frozenset[str]] = frozenset({"message.appended"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """One hit per message; remembers when the last one was recorded."""
        rows.bump(counters, {"owner": event.stream_id, "name": event.data["role"]},
                  add={"hits": 1, "total": len(event.data["content"])},
                  set={"seen_at": event.recorded_at, "label": event.event_id})


def messages(n: int, role: str = "user") -> list[dict[str, Any]]:
    """``n`` message inputs."""
    return [{"type": "message.appended", "data": {"role": role, "content": "x" * (i + 1)}}
            for i in range(n)]


@pytest.fixture
def ledger_with_counter(db_url: str) -> Iterator[Ledger]:
    """A ledger whose only projection is ``HitCounter``."""
    with Ledger.open(db_url) as opened:
        counters.create(opened.engine)
        custom = Ledger(opened.engine, projections=[HitCounter()])
        custom.refresh_projections()
        yield custom


def test_inline_state_equals_rebuild_and_checkpoints_follow_the_head(
        ledger_with_counter: Ledger) -> None:
    ledger = ledger_with_counter
    ledger.append("s1", {"type": "session.started", "data": {}})
    ledger.append("s1", messages(3))
    ledger.append("s2", messages(2, role="assistant"))
    ledger.append("s1", {"type": "setting.changed", "data": {"key": "k", "value": 1}})
    inline = table_rows(ledger.engine)
    (status,) = ledger.projection_status()
    assert status.position == ledger.head() == 7 and not status.behind
    progress: list[tuple[int, int]] = []
    assert ledger.rebuild(progress=lambda done, total: progress.append((done, total))) == [
        "rs_hits"]
    assert table_rows(ledger.engine) == inline
    assert progress[-1] == (7, 7)
    assert [(r["owner"], r["name"], r["hits"], r["total"]) for r in inline] == [
        ("s1", "user", 3, 6.0), ("s2", "assistant", 2, 3.0)]
    # Appends write no checkpoint (inline is at the head by construction), except the
    # mark for verify on a runner's first append, stamped with that append's recorded_at.
    fresh = Ledger(ledger.engine, projections=[HitCounter()])
    fresh.append("s2", messages(1))
    ledger.append("s2", messages(1))
    with ledger.engine.connect() as conn:
        mark = conn.execute(sa.select(checkpoints.c.position, checkpoints.c.updated_at,
                                      checkpoints.c.inline)
                            .where(checkpoints.c.name == "rs_hits")).one()
    assert tuple(mark) == (8, ledger.events("s2")[-2].recorded_at, True)
    (status,) = ledger.projection_status()
    assert status.position == ledger.head() == 9 and status.inline and not status.behind


def test_dispatch_only_calls_projections_handling_the_type() -> None:
    seen: list[str] = []

    class Spy(HitCounter):
        name: ClassVar[str] = "spy"
        handles: ClassVar[frozenset[str]] = frozenset({"tool.used"})

        def apply(self, event: RecordedEvent, rows: RowStore) -> None:
            seen.append(event.type)

    runner = ProjectionRunner([HitCounter(), Spy()])
    when = T0
    typed: list[tuple[str, dict[str, Any]]] = [
        ("tool.used", {"tool_name": "a"}),
        ("message.appended", {"role": "user", "content": "hi"}),
        ("setting.changed", {"key": "k", "value": 1})]
    batch = [RecordedEvent(position=i + 1, stream_id="s", stream_version=i + 1,
                           event_id=f"e{i}", type=t, schema_version=1, data=d, metadata={},
                           recorded_at=when, prev_hash="0", hash="1")
             for i, (t, d) in enumerate(typed)]
    rows = RowStore(None)
    assert runner.dispatch(batch, rows) == 3
    assert seen == ["tool.used"]
    assert rows.rows(counters)[0]["hits"] == 1
    assert runner.dispatch(batch, RowStore(None), only=frozenset({"rs_hits"})) == 3
    assert seen == ["tool.used"]


# -- the stream-head cache -------------------------------------------------------------------

def two_ledgers(db_url: str) -> tuple[Ledger, Ledger]:
    """Two ledgers on one database: each has its own head cache, like two processes."""
    first = Ledger.open(db_url)
    return first, Ledger.open(db_url)


def versions(ledger: Ledger, stream: str) -> list[int]:
    """The stream's versions as stored."""
    return [e.stream_version for e in ledger.events(stream)]


def test_a_stale_head_is_detected_and_the_append_continues_the_chain(db_url: str) -> None:
    a, b = two_ledgers(db_url)
    try:
        a.append("chat", messages(2))
        b.append("chat", messages(3))  # a's cached head (version 2) is now stale
        result = a.append("chat", messages(1))
        assert result.stream_version == 6
        assert versions(a, "chat") == [1, 2, 3, 4, 5, 6]
        assert a.verify().ok
    finally:
        a.close()
        b.close()


def test_expected_version_is_checked_against_the_database_not_the_cache(db_url: str) -> None:
    a, b = two_ledgers(db_url)
    try:
        a.append("chat", messages(2))
        b.append("chat", messages(1))
        before = a.head()
        with pytest.raises(ConcurrencyError, match="actual version 3") as caught:
            a.append("chat", messages(1), expected_version=2)  # what a's cache believes
        assert (caught.value.expected, caught.value.actual) == (2, 3)
        assert a.head() == before
        assert a.append("chat", messages(1), expected_version=3).stream_version == 4
        assert a.verify().ok
    finally:
        a.close()
        b.close()


def test_a_rolled_back_append_does_not_move_the_cached_head(db_url: str) -> None:
    class Boom(HitCounter):
        name: ClassVar[str] = "boom"

        def apply(self, event: RecordedEvent, rows: RowStore) -> None:
            if event.data["content"] == "boom":
                raise RuntimeError("reducer failed")

    with Ledger.open(db_url) as opened:
        counters.create(opened.engine)
        ledger = Ledger(opened.engine, projections=[Boom()])
        ledger.refresh_projections()
        ledger.append("chat", messages(2))
        with pytest.raises(RuntimeError, match="reducer failed"):
            ledger.append("chat", [{"type": "message.appended",
                                    "data": {"role": "user", "content": "boom"}}])
        assert ledger.log.heads.get("chat") == (2, ledger.events("chat")[-1].hash)
        assert ledger.append("chat", messages(1)).stream_version == 3
        assert versions(ledger, "chat") == [1, 2, 3]
        assert ledger.verify().ok


def test_batches_get_contiguous_positions_after_a_cached_head(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("a", messages(1))
        ledger.append("b", messages(1))
        first = ledger.append("a", messages(4))
        second = ledger.append("a", messages(3))
        assert first.positions == (3, 4, 5, 6) and second.positions == (7, 8, 9)
        assert versions(ledger, "a") == list(range(1, 9))
        assert ledger.verify().ok


def test_stream_heads_cache_is_bounded() -> None:
    heads = StreamHeads(capacity=2)
    heads.remember("a", (1, "h1"))
    heads.remember("b", (1, "h2"))
    heads.remember("a", (2, "h3"))  # refreshes a, so b is now the oldest
    heads.remember("c", (1, "h4"))
    assert (heads.get("a"), heads.get("b"), heads.get("c")) == ((2, "h3"), None, (1, "h4"))
    assert len(heads) == 2
    heads.forget("a")
    heads.clear()
    assert len(heads) == 0
    with pytest.raises(ValueError):
        StreamHeads(capacity=0)


def test_decoded_events_equal_the_dataclass_built_ones(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        ledger.append("s", [{"type": "message.appended", "data": {"role": "user", "content": "é"},
                             "metadata": {"actor": "me"}}, *messages(2)])
        for event in ledger.events():
            rebuilt = RecordedEvent(**{f: getattr(event, f) for f in RecordedEvent.__slots__})
            assert event == rebuilt and repr(event) == repr(rebuilt)
        assert ledger.events()[0].metadata == {"actor": "me"}
        assert ledger.events()[1].metadata == {}
