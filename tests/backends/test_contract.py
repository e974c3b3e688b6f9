"""Every ``Backend`` promise (``store/backends/base.py``), held on every database.

A new backend adds its fresh-database fixture to ``UNDER_CONTRACT`` (and its module to
``store.backends._MODULES``) and runs this same suite. Concurrency promises are checked
by order of events between two threads, never by timing alone: a waiter must get its
lock only after the holder has committed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ctxledger._migrate import upgrade
from ctxledger.store import backends
from ctxledger.store.backends import Backend, backend_for, backend_for_url, backend_named, locks
from ctxledger.store.backends.base import READ_ONLY_OPTION
from ctxledger.store.errors import LedgerError, SchemaMissing
from ctxledger.store.log import EventLog
from ctxledger.store.schema import UTCDateTime, events
from ctxledger.store.sql_engine import DriverStatement, create_engine

UNDER_CONTRACT = [
    pytest.param("sqlite_url", id="sqlite"),
    pytest.param("pg_url", id="postgresql", marks=pytest.mark.postgres),
]
"""Each backend's fixture (``tests/conftest.py``) giving the URL of a fresh, empty database."""

WAIT = 0.5
"""How long a lock holder keeps its lock while another thread tries to take it (s)."""

E1, E2 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
"""Client-supplied event ids."""


def _message(content: str = "hi", event_id: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "message.appended",
                             "data": {"role": "user", "content": content}}
    if event_id is not None:
        event["event_id"] = event_id
    return event


@pytest.fixture(params=UNDER_CONTRACT)
def fresh_url(request: pytest.FixtureRequest) -> str:
    """The URL of a fresh database with no tables, once per backend under contract."""
    url: str = request.getfixturevalue(request.param)
    return url


@pytest.fixture
def engine(fresh_url: str) -> Iterator[sa.Engine]:
    """An engine on a database migrated to the newest schema."""
    made = create_engine(fresh_url)
    upgrade(made)
    yield made
    made.dispose()


@pytest.fixture
def backend(engine: sa.Engine) -> Backend:
    return backend_for(engine)


@pytest.fixture
def log(engine: sa.Engine) -> EventLog:
    return EventLog(engine)


def _scratch_table(engine: sa.Engine) -> sa.Table:
    """A keyed table of its own (dropped with the database)."""
    table = sa.Table("contract_rows", sa.MetaData(),
                     sa.Column("k", sa.String(20), primary_key=True),
                     sa.Column("n", sa.Integer, nullable=False),
                     sa.Column("at", UTCDateTime))
    table.create(engine)
    return table


def _count(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one())


class _Order:
    """Records when things happen, across threads, in one sequence."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def mark(self, what: str) -> None:
        with self._lock:
            self.seen.append(what)


def _in_thread(run: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def wrapped() -> None:
        try:
            run()
        except BaseException as exc:  # re-raised by the test
            errors.append(exc)

    thread = threading.Thread(target=wrapped, daemon=True)
    thread.start()
    return thread, errors


def _joined(thread: threading.Thread, errors: list[BaseException]) -> None:
    thread.join(timeout=60)
    assert not thread.is_alive(), "the other transaction never got its turn"
    if errors:
        raise errors[0]


def _waits_for_holder(engine: sa.Engine, hold: Callable[[sa.Connection], None],
                      take: Callable[[sa.Connection], None]) -> list[str]:
    """Run ``hold`` in a write transaction that stays open for ``WAIT`` s, and ``take`` in
    another thread's write transaction meanwhile; the order of their steps."""
    order = _Order()
    held = threading.Event()

    def other() -> None:
        held.wait(10)
        with engine.begin() as conn:
            order.mark("other starts")
            take(conn)
            order.mark("other took it")

    thread, errors = _in_thread(other)
    with engine.begin() as conn:
        hold(conn)
        order.mark("holder holds")
        held.set()
        time.sleep(WAIT)
        order.mark("holder commits")
    _joined(thread, errors)
    return order.seen


# -- the factory ---------------------------------------------------------------------------


def test_the_backend_is_chosen_once_per_engine(engine: sa.Engine, backend: Backend) -> None:
    assert backend.name == engine.dialect.name
    assert backend_for_url(engine.url) is backend
    assert backend_named(backend.name) is backend
    with engine.connect() as conn:
        assert backend_for(conn) is backend
        assert backend_for(conn.dialect) is backend
    assert engine.dialect.__dict__["_ctxledger_backend"] is backend  # kept on the dialect


def test_every_registered_backend_is_under_contract() -> None:
    names = {"sqlite_url": "sqlite", "pg_url": "postgresql"}
    assert {names[p.values[0]] for p in UNDER_CONTRACT} == set(backends._MODULES)


def test_an_unknown_database_is_refused_in_one_line() -> None:
    with pytest.raises(LedgerError, match="unsupported database 'mysql'"):
        backend_named("mysql")
    with pytest.raises(LedgerError, match="unsupported database 'mysql'"):
        create_engine("mysql://u@h/db")


# -- engines -------------------------------------------------------------------------------


def test_prepare_url_gives_a_url_to_connect_with(fresh_url: str) -> None:
    url = sa.make_url(fresh_url)
    backend = backend_for_url(url)
    prepared = backend.prepare_url(url)
    assert prepared.get_backend_name() == backend.name
    assert backend.prepare_url(prepared) == prepared  # prepared once is prepared
    made = backend.create_engine(prepared)
    try:
        with made.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        made.dispose()


def test_create_engine_passes_settings_on(fresh_url: str) -> None:
    backend = backend_for_url(sa.make_url(fresh_url))
    made = backend.create_engine(backend.prepare_url(sa.make_url(fresh_url)),
                                 execution_options={"contract": "yes"})
    try:
        assert made.get_execution_options()["contract"] == "yes"
        assert backend_for(made) is backend
    finally:
        made.dispose()


def test_database_exists_only_once_migrated_and_creates_nothing(fresh_url: str,
                                                                 tmp_path: Path) -> None:
    made = create_engine(fresh_url)
    backend = backend_for(made)
    try:
        assert not backend.database_exists(made)
        assert not backend.database_exists(made)  # asking twice: still nothing made
        if made.url.get_backend_name() == "sqlite":
            assert not Path(made.url.database or "").exists()
        upgrade(made)
        assert backend.database_exists(made)
    finally:
        made.dispose()


def test_check_schema_passes_where_tables_can_be_made(engine: sa.Engine,
                                                      backend: Backend) -> None:
    backend.check_schema(engine)  # raises on failure


def test_database_file_names_the_file_that_holds_the_database(
        engine: sa.Engine, backend: Backend, fresh_url: str) -> None:
    found = backend.database_file(engine)
    if fresh_url.startswith("sqlite"):
        assert found is not None and found.is_absolute() and found.is_file()
        assert found == Path(fresh_url.removeprefix("sqlite:///")).absolute()
        assert backend.database_dir(engine) == found.parent
        memory = create_engine("sqlite://")
        assert backend_for(memory).database_file(memory) is None
        memory.dispose()
    else:  # a server's database has no file this process can name
        assert found is None and backend.database_dir(engine) is None


@pytest.mark.postgres
def test_check_schema_names_a_missing_schema(pg_url: str) -> None:
    url = sa.make_url(pg_url).update_query_dict({"options": "-csearch_path=no_such_schema"})
    made = create_engine(url)
    try:
        with pytest.raises(SchemaMissing, match="schema no_such_schema"):
            backend_for(made).check_schema(made)
    finally:
        made.dispose()


def test_connections_commit_and_roll_back(engine: sa.Engine, backend: Backend) -> None:
    table = _scratch_table(engine)
    connections = backend.connections(engine)
    for name, begin in (("transaction", connections.transaction),
                        ("append", connections.append_transaction),
                        ("begin", connections.begin)):
        with begin() as conn:
            conn.execute(table.insert().values(k=name, n=1))
        with pytest.raises(RuntimeError), begin() as conn:
            conn.execute(table.insert().values(k=f"{name}-lost", n=1))
            raise RuntimeError("roll back")
    with connections.connection() as conn:
        assert conn.get_execution_options()[READ_ONLY_OPTION] is True
        assert sorted(conn.execute(sa.select(table.c.k)).scalars()) == [
            "append", "begin", "transaction"]


def test_a_reader_runs_beside_an_open_write_transaction(engine: sa.Engine,
                                                        backend: Backend) -> None:
    table = _scratch_table(engine)
    connections = backend.connections(engine)
    with connections.transaction() as writer:
        writer.execute(table.insert().values(k="uncommitted", n=1))
        result: list[int] = []

        def read() -> None:
            with connections.connection() as conn:
                result.append(int(conn.execute(
                    sa.select(sa.func.count()).select_from(table)).scalar_one()))

        thread, errors = _in_thread(read)
        thread.join(timeout=10)  # a reader that waited for the writer would still be here
        assert not thread.is_alive()
        _joined(thread, errors)
        assert result == [0]


# -- values and SQL ------------------------------------------------------------------------

INSTANTS = [datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC),
            datetime(1999, 1, 1, tzinfo=UTC), datetime(2030, 6, 1, 12, 0, 0, 1, tzinfo=UTC)]


def test_utc_datetimes_round_trip(engine: sa.Engine, backend: Backend) -> None:
    table = _scratch_table(engine)
    for when in INSTANTS:
        stored = backend.stored_utc(when)
        assert stored.replace(tzinfo=stored.tzinfo or UTC) == when
    insert = DriverStatement(table.insert(), engine.dialect, column_keys=["k", "n", "at"])
    select = DriverStatement(sa.select(table.c.at).where(table.c.k == sa.bindparam("k")),
                             engine.dialect)
    with engine.begin() as conn:
        for i, when in enumerate(INSTANTS):
            conn.execute(table.insert().values(k=f"core-{i}", n=i, at=when))
            insert.execute(conn, {"k": f"driver-{i}", "n": i, "at": when})
    with engine.connect() as conn:
        for i, when in enumerate(INSTANTS):
            for key in (f"core-{i}", f"driver-{i}"):
                core = conn.execute(sa.select(table.c.at).where(table.c.k == key)).scalar_one()
                (fast,) = select.fetch(conn, {"k": key})[0]
                assert core == fast == when
                assert core.tzinfo is UTC and fast.tzinfo is UTC


def test_processors_give_sqlalchemys_values(engine: sa.Engine, backend: Backend) -> None:
    dialect = engine.dialect
    for type_ in (UTCDateTime(), sa.DateTime(timezone=True), sa.Integer()):
        bind = type_.dialect_impl(dialect).bind_processor(dialect)
        if bind is not None:
            fast = backend.bind_processor(type_, bind)
            values = INSTANTS if isinstance(type_, sa.DateTime | UTCDateTime) else [1, 2]
            assert [fast(v) for v in values] == [bind(v) for v in values]
    utc = UTCDateTime()
    result = utc.dialect_impl(dialect).result_processor(dialect, None)
    bind = utc.dialect_impl(dialect).bind_processor(dialect)
    if result is not None:
        fast = backend.result_processor(utc, result)
        stored = [bind(v) if bind is not None else v for v in INSTANTS]
        assert [fast(v) for v in stored] == [result(v) for v in stored] == INSTANTS


def test_upsert_updates_or_keeps(engine: sa.Engine, backend: Backend) -> None:
    table = _scratch_table(engine)
    with engine.begin() as conn:
        conn.execute(table.insert().values(k="a", n=1))
        ins = backend.upsert(table)
        conn.execute(ins.on_conflict_do_update(
            index_elements=["k"], set_={"n": table.c.n + ins.excluded.n}), [
            {"k": "a", "n": 10}, {"k": "b", "n": 5}])
        keep = backend.upsert(table).on_conflict_do_nothing(index_elements=["k"])
        conn.execute(keep, [{"k": "a", "n": 99}, {"k": "c", "n": 7}])
    with engine.connect() as conn:
        assert dict(conn.execute(sa.select(table.c.k, table.c.n)).all()) == {
            "a": 11, "b": 5, "c": 7}


def test_json_text_sql_reads_a_top_level_string(engine: sa.Engine, backend: Backend) -> None:
    expr = backend.json_text_sql("doc", "message_id")
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            f"SELECT {expr} FROM (SELECT :a AS doc UNION ALL SELECT :b AS doc"
            " UNION ALL SELECT :c AS doc) AS t ORDER BY 1"),
            {"a": '{"message_id": "m-1", "x": 1}', "b": '{"x": {"message_id": "deep"}}',
             "c": '{"message_id": "é ünïcode"}'}).scalars().all()
    assert sorted(rows, key=lambda v: (v is None, v or "")) == ["m-1", "é ünïcode", None]


def test_the_immutability_triggers_are_there_and_hold(engine: sa.Engine, backend: Backend,
                                                      log: EventLog) -> None:
    log.append("s1", [_message()])
    with engine.connect() as conn:
        found = backend.enabled_triggers(conn, ("events", "seals"))
        assert set(backend.immutability_triggers) <= found
        assert backend.enabled_triggers(conn, ("projection_checkpoints",)) == set()
    with pytest.raises(sa.exc.DatabaseError), engine.begin() as conn:
        conn.execute(events.update().values(type="x"))
    with pytest.raises(sa.exc.DatabaseError), engine.begin() as conn:
        conn.execute(events.delete())


# -- writing the log -----------------------------------------------------------------------


def _rows(stream: str, first_version: int, count: int, prev: str) -> list[dict[str, Any]]:
    """Event rows as an append makes them (hashes need only be chained, not true here)."""
    when = datetime(2025, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        version = first_version + i
        digest = f"{stream}-{version}".ljust(64, "0")
        rows.append({"stream_id": stream, "stream_version": version,
                     "event_id": f"{stream}-{version}-id", "type": "message.appended",
                     "schema_version": 1, "data": "{}", "metadata": "{}",
                     "recorded_at": when, "prev_hash": prev, "hash": digest})
        prev = digest
    return rows


def test_insert_events_takes_consecutive_positions(engine: sa.Engine, backend: Backend) -> None:
    with engine.begin() as conn:
        backend.lock_append(conn, "a", [], ())
        first = backend.insert_events(conn, _rows("a", 1, 3, "0" * 64), guarded=False)
    assert first is not None and len(first) == 3
    assert first == list(range(first[0], first[0] + 3))
    with engine.begin() as conn:
        backend.lock_append(conn, "b", [], ())
        second = backend.insert_events(conn, _rows("b", 1, 1, "0" * 64), guarded=False)
    assert second is not None and len(second) == 1
    one = second[0]
    assert one > first[-1]
    with engine.connect() as conn:
        found = conn.execute(sa.select(events.c.position, events.c.stream_id,
                                       events.c.stream_version).order_by(events.c.position))
        assert [tuple(r) for r in found] == [(first[0], "a", 1), (first[1], "a", 2),
                                             (first[2], "a", 3), (one, "b", 1)]


def test_a_guarded_insert_writes_only_after_the_head(engine: sa.Engine,
                                                     backend: Backend) -> None:
    with engine.begin() as conn:
        backend.lock_append(conn, "a", [], ())
        written = backend.insert_events(conn, _rows("a", 1, 2, "0" * 64), guarded=False)
    assert written is not None
    head_hash = _rows("a", 1, 2, "0" * 64)[-1]["hash"]
    for stale in (_rows("a", 3, 1, "f" * 64),  # wrong hash of the row before
                  _rows("a", 2, 1, _rows("a", 1, 1, "0" * 64)[0]["hash"]),  # not the head
                  _rows("a", 4, 1, head_hash)):  # a gap
        with engine.begin() as conn:
            backend.lock_append(conn, "a", [], ())
            assert backend.insert_events(conn, stale, guarded=True) is None
    with engine.begin() as conn:
        backend.lock_append(conn, "a", [], ())
        extended = backend.insert_events(conn, _rows("a", 3, 2, head_hash), guarded=True)
    assert extended == [written[-1] + 1, written[-1] + 2]
    with engine.connect() as conn:
        assert _count(conn) == 4


def test_appends_to_one_stream_wait_for_each_other(engine: sa.Engine, log: EventLog,
                                                   backend: Backend) -> None:
    prepared = log.prepare("s1", [_message()])
    seen = _waits_for_holder(
        engine, lambda conn: backend.lock_append(conn, "s1", prepared, ()),
        lambda conn: backend.lock_append(conn, "s1", prepared, ()))
    assert seen.index("other took it") > seen.index("holder commits")


@pytest.mark.parametrize("same", ["event id", "shared key"])
def test_appends_sharing_a_key_wait_for_each_other(engine: sa.Engine, log: EventLog,
                                                   backend: Backend, same: str) -> None:
    ids = (E1, E1) if same == "event id" else (E1, E2)
    shared = ("row\x1fscope:x",) if same == "shared key" else ()
    first = log.prepare("s1", [_message(event_id=ids[0])])
    second = log.prepare("s2", [_message(event_id=ids[1])])
    seen = _waits_for_holder(
        engine, lambda conn: backend.lock_append(conn, "s1", first, shared),
        lambda conn: backend.lock_append(conn, "s2", second, shared))
    assert seen.index("other took it") > seen.index("holder commits")


def test_appends_to_other_streams_run_side_by_side_where_promised(
        engine: sa.Engine, log: EventLog, backend: Backend) -> None:
    first = log.prepare("s1", [_message(event_id=E1)])
    second = log.prepare("s2", [_message(event_id=E2)])
    seen = _waits_for_holder(
        engine, lambda conn: backend.lock_append(conn, "s1", first, ("row\x1fa",)),
        lambda conn: backend.lock_append(conn, "s2", second, ("row\x1fb",)))
    waited = seen.index("other took it") > seen.index("holder commits")
    assert waited is not backend.concurrent_appends


def test_lock_log_waits_for_an_append_in_flight(engine: sa.Engine, log: EventLog,
                                                backend: Backend) -> None:
    seen = _waits_for_holder(engine, lambda conn: log.append_in(conn, "s1", [_message()]),
                             backend.lock_log)
    assert seen.index("other took it") > seen.index("holder commits")


def test_lock_log_holds_appends_off(engine: sa.Engine, log: EventLog,
                                    backend: Backend) -> None:
    seen = _waits_for_holder(engine, backend.lock_log,
                             lambda conn: log.append_in(conn, "s1", [_message()]))
    assert seen.index("other took it") > seen.index("holder commits")


def test_lock_serializes_holders_of_one_key(engine: sa.Engine, backend: Backend) -> None:
    seen = _waits_for_holder(engine, lambda conn: backend.lock(conn, locks.ROLLUP),
                             lambda conn: backend.lock(conn, locks.ROLLUP))
    assert seen.index("other took it") > seen.index("holder commits")


def test_try_lock_never_shares_a_key(engine: sa.Engine, backend: Backend) -> None:
    got: list[bool] = []
    seen = _waits_for_holder(engine, lambda conn: backend.lock(conn, locks.SEAL),
                             lambda conn: got.append(backend.try_lock(conn, locks.SEAL)))
    assert got[0] is False or seen.index("other took it") > seen.index("holder commits")
    with engine.begin() as conn:
        assert backend.try_lock(conn, locks.SEAL) is True  # free now
        assert backend.try_lock(conn, locks.SEAL) is True  # and held by this transaction


def test_settled_position_stops_before_an_append_in_flight(engine: sa.Engine, log: EventLog,
                                                           backend: Backend) -> None:
    connections = backend.connections(engine)
    with connections.connection() as reader:
        assert backend.settled_position(reader) == 0
    done = log.append("s1", [_message("one"), _message("two")])
    with connections.transaction() as writer:
        in_flight = log.append_in(writer, "s2", [_message()]).positions[0]
        with connections.connection() as reader:
            assert backend.settled_position(reader) == done.positions[-1] < in_flight
            limit = backend.tail_limit(reader, None)
            assert limit is None or done.positions[-1] <= limit < in_flight
            assert backend.tail_limit(reader, 1) == 1
    with connections.connection() as reader:
        assert backend.settled_position(reader) == in_flight
        limit = backend.tail_limit(reader, None)
        assert limit is None or limit == in_flight


# -- rebuilding and reading ----------------------------------------------------------------


def test_bulk_writes_write_and_leave_the_connection_usable(engine: sa.Engine,
                                                           backend: Backend) -> None:
    table = _scratch_table(engine)
    with engine.begin() as conn:
        with backend.bulk_writes(conn):
            conn.execute(table.insert(), [{"k": f"k{i}", "n": i} for i in range(500)])
        conn.execute(table.insert().values(k="after", n=0))
    with engine.begin() as conn:
        with pytest.raises(RuntimeError), backend.bulk_writes(conn):
            raise RuntimeError("a failed rebuild")
        assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == 501


def test_a_read_snapshot_does_not_see_later_commits(engine: sa.Engine, log: EventLog,
                                                    backend: Backend) -> None:
    log.append("s1", [_message()])
    with log.connection() as reader, reader.begin():
        backend.begin_read_snapshot(reader)
        before = _count(reader)
        log.append("s2", [_message()])  # commits while the snapshot is open
        assert _count(reader) == before == 1
    with log.connection() as reader:
        assert _count(reader) == 2


def test_a_snapshot_is_a_prefix_unless_an_earlier_append_is_in_flight(
        engine: sa.Engine, log: EventLog, backend: Backend) -> None:
    connections = backend.connections(engine)
    log.append("s1", [_message()])
    with log.connection() as reader, reader.begin():
        backend.begin_read_snapshot(reader)
        assert backend.snapshot_is_prefix(reader) is True
    if not backend.concurrent_appends:
        return  # one writer at a time: no later append can commit before an earlier one
    with connections.transaction() as writer:
        log.append_in(writer, "s2", [_message()])
        with log.connection() as reader, reader.begin():
            backend.begin_read_snapshot(reader)
            assert backend.snapshot_is_prefix(reader) is True  # nothing later committed
        log.append("s3", [_message()])  # a later position commits first
        with log.connection() as reader, reader.begin():
            backend.begin_read_snapshot(reader)
            assert backend.snapshot_is_prefix(reader) is False
    with log.connection() as reader, reader.begin():
        backend.begin_read_snapshot(reader)
        assert backend.snapshot_is_prefix(reader) is True


def test_appends_drained_waits_for_an_append_in_flight(engine: sa.Engine, log: EventLog,
                                                       backend: Backend) -> None:
    order = _Order()
    held = threading.Event()

    def drain() -> None:
        held.wait(10)
        with backend.appends_drained(engine) as release:
            order.mark("drained")
            release()

    thread, errors = _in_thread(drain)
    with backend.connections(engine).transaction() as writer:
        log.append_in(writer, "s1", [_message()])
        held.set()
        time.sleep(WAIT)
        order.mark("holder commits")
    _joined(thread, errors)
    waited = order.seen.index("drained") > order.seen.index("holder commits")
    assert waited is backend.concurrent_appends


def test_appends_drained_holds_new_appends_until_released(engine: sa.Engine, log: EventLog,
                                                          backend: Backend) -> None:
    order = _Order()

    def append() -> None:
        log.append("s1", [_message()])
        order.mark("appended")

    with backend.appends_drained(engine) as release:
        thread, errors = _in_thread(append)
        time.sleep(WAIT)
        order.mark("released")
        release()
        _joined(thread, errors)
    waited = order.seen.index("appended") > order.seen.index("released")
    assert waited is backend.concurrent_appends
