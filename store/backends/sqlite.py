"""SQLite: one writer at a time (``BEGIN IMMEDIATE``), readers beside it (WAL), and the
driver-level fast paths of the append (its transaction, its INSERT, its times).

Every write transaction holds the whole database, so insert order is commit order: the
head is settled, an append locks nothing more, and no advisory lock is needed.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Dialect, Engine
from sqlalchemy.pool import StaticPool

from ctxledger.store.backends.base import READ_ONLY_OPTION, Backend, Connections, Processor
from ctxledger.store.errors import LedgerError, ReadableDatabaseWarning
from ctxledger.store.read import head_position
from ctxledger.store.schema import UTCDateTime, events
from ctxledger.store.sql_engine import DriverStatement, driver_statement, safe_url

if TYPE_CHECKING:
    from ctxledger.store.records import PreparedEvent

SQLITE_BUSY_TIMEOUT_MS = 30_000
WAL_SWITCH = "PRAGMA journal_mode=WAL"
_WAL_RETRY_SECONDS = 0.005
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
REBUILD_PAGE_CACHE_KIB = -65_536
"""Page cache while a rebuild writes whole tables, in KiB (negative, as ``PRAGMA
cache_size`` takes it); the default 2 MiB sends index inserts into tables of many
megabytes back to the file system for pages just written."""


def is_memory(url: URL) -> bool:
    """True for ``sqlite://`` and ``sqlite:///:memory:``."""
    return url.database in (None, "", ":memory:")


def sqlite_pragmas(*, memory: bool) -> tuple[str, ...]:
    """The pragmas every SQLite connection of a ledger runs when it opens (WAL on a file)."""
    # The busy timeout first: every later statement waits out another connection's lock.
    return (f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
            *(() if memory else (WAL_SWITCH,)), "PRAGMA synchronous=NORMAL",
            "PRAGMA foreign_keys=ON")


def switch_to_wal(cursor: sqlite3.Cursor) -> None:
    """Run ``PRAGMA journal_mode=WAL``, retried while another connection holds the lock
    it needs, for as long as the busy timeout.

    Switching a new file to WAL can fail with "database is locked" at once, without the
    busy handler being called (SQLite returns busy rather than risk a deadlock), when
    other connections open the same new file at the same moment.
    """
    for _ in range(int(SQLITE_BUSY_TIMEOUT_MS / 1000 / _WAL_RETRY_SECONDS)):
        try:
            cursor.execute(WAL_SWITCH)
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _BUSY_CODES:
                raise
        time.sleep(_WAL_RETRY_SECONDS)  # a sleep, not a clock: a frozen clock still waits
    cursor.execute(WAL_SWITCH)


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def private_database_file(path: Path) -> None:
    """Create the database file ``path`` owner-only (0600, whatever the umask) before
    SQLite would create it under the umask; SQLite gives its ``-wal``, ``-shm`` and
    ``-journal`` files the database file's mode. An existing file other users can read
    is left as it is, with a ``ReadableDatabaseWarning`` (once per file and process)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _warn_if_readable(path)
        return
    except OSError:
        return  # a missing folder, no permission: SQLite's own error says it
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _warn_if_readable(path: Path) -> None:
    try:
        info = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISREG(info.st_mode) or not mode & 0o044:
        return
    key = os.path.realpath(path)
    with _WARNED_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(f"the database file {path} can be read by other users (mode"
                  f" {mode:04o}); 'chmod 600' it (and its -wal and -shm files)",
                  ReadableDatabaseWarning, stacklevel=2)


def _configure(engine: Engine, *, memory: bool) -> None:
    pragmas = sqlite_pragmas(memory=memory)

    if not memory:
        path = Path(engine.url.database or "")

        @event.listens_for(engine, "do_connect")
        def _on_do_connect(*_args: Any) -> None:
            private_database_file(path)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Autocommit at the driver level; SQLAlchemy's begin event issues BEGIN itself.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        for pragma in pragmas:
            if pragma == WAL_SWITCH:
                switch_to_wal(cur)
            else:
                cur.execute(pragma)
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # Straight to the driver: exec_driver_sql would cost more than the BEGIN itself.
        dbapi_conn: Any = conn.connection.dbapi_connection
        # Writers take the lock up front; readers stay deferred so WAL lets them run
        # beside a writer.
        if dbapi_conn.in_transaction:
            # Begun on the driver by ``driver_transaction`` (the append fast path): SQLAlchemy
            # joins it, and then owns its commit.
            return
        begin = ("BEGIN" if conn.get_execution_options().get(READ_ONLY_OPTION)
                 else "BEGIN IMMEDIATE")
        _driver_sql(conn, begin)


def _refuse_query(url: URL) -> None:
    """Refuse a SQLite URL's query arguments in one line.

    SQLAlchemy warns in two lines and ignores most of them, and the rest would undo what
    the ledger relies on (``uri=true`` changes which file is opened, ``mode=ro`` fails at
    the first write), while the connection is set up here anyway (WAL, busy timeout).
    """
    if url.query.get("mode") == "ro" or "immutable" in url.query:
        # The ledger writes on open (schema upgrade, projection catch-up), so a read-only
        # connection would fail midway; say so up front instead.
        raise LedgerError(f"read-only SQLite URLs are not supported ({safe_url(url)}):"
                          " ctxledger writes on open; copy the file to read it elsewhere")
    raise LedgerError(f"SQLite URLs take no query arguments ({safe_url(url)}): ctxledger"
                      " sets the connection up itself; give the file as sqlite:///PATH")


def _driver_sql(conn: sa.Connection, sql: str) -> None:
    """Run ``sql`` on ``conn``'s SQLite driver connection, errors as SQLAlchemy's."""
    try:
        conn.connection.dbapi_connection.execute(sql)  # type: ignore[union-attr]
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, None, exc, sqlite3.Error,
                                         dialect=conn.dialect) from exc


@contextmanager
def driver_transaction(conn: sa.Connection) -> Iterator[sa.Connection]:
    """A write transaction begun and committed on the driver: ``BEGIN IMMEDIATE`` ...
    ``COMMIT``, without SQLAlchemy's transaction objects and events (they cost as much as
    an append's statements). ``conn`` must not be in a transaction.

    Statements that go through ``conn.execute`` inside it still work: SQLAlchemy's
    autobegin joins the driver's transaction (``_on_begin``) and then commits or rolls
    it back itself. Errors are SQLAlchemy's wrappers, as with ``conn.begin()``.
    """
    dbapi: Any = conn.connection.dbapi_connection
    _driver_sql(conn, "BEGIN IMMEDIATE")
    try:
        yield conn
        if conn.in_transaction():
            conn.commit()
        else:
            _driver_sql(conn, "COMMIT")
    except BaseException:
        try:
            if conn.in_transaction():
                conn.rollback()
            elif dbapi.in_transaction:
                _driver_sql(conn, "ROLLBACK")
        finally:
            if dbapi.in_transaction:
                conn.invalidate()  # never hand out a connection still in a transaction
        raise


class _KeptConnection(Connections):
    """A SQLite file's connections: one kept checked out between write transactions, and
    appends begun and committed on the driver (``driver_transaction``).

    A pool checkout and check-in cost about as much as a small append's own SQL, and a
    SQLite file connection costs nothing to keep (there is no server to drop it). At most
    one is kept, so concurrent writers and every reader still use the engine's pool; it
    is closed when the engine is disposed, and never reused in a forked child.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._kept: tuple[int, sa.Connection] | None = None
        self._guard = threading.Lock()
        event.listen(engine, "engine_disposed", self._on_dispose)

    def _take(self) -> sa.Connection:
        """The kept connection if it is free and usable, else a new one from the pool."""
        with self._guard:
            kept, self._kept = self._kept, None
        if kept is None:
            return self.engine.connect()
        pid, conn = kept
        if pid != os.getpid() or conn.closed or conn.invalidated:
            return self.engine.connect()
        return conn

    def _give_back(self, conn: sa.Connection) -> None:
        """Keep ``conn`` for the next transaction, or return it to the pool."""
        if not (conn.closed or conn.invalidated or conn.in_transaction()):
            with self._guard:
                if self._kept is None:
                    self._kept = (os.getpid(), conn)
                    return
        conn.close()

    def _on_dispose(self, _engine: Engine) -> None:
        with self._guard:
            kept, self._kept = self._kept, None
        if kept is not None and kept[0] == os.getpid():
            kept[1].close()

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        conn = self._take()
        try:
            with conn.begin():
                yield conn
        finally:
            self._give_back(conn)

    @contextmanager
    def append_transaction(self) -> Iterator[sa.Connection]:
        conn = self._take()
        try:
            with driver_transaction(conn):
                yield conn
        finally:
            self._give_back(conn)


# -- UTC datetimes on the driver -------------------------------------------------------
# SQLite keeps UTCDateTime as naive UTC text in SQLAlchemy's format, "YYYY-MM-DD
# HH:MM:SS.ffffff", which is exactly datetime's isoformat(" ", "microseconds"). The C
# isoformat code is several times faster than SQLAlchemy's regex and %-formatting, and
# both run for every row a rebuild reads or writes. Anything unusual goes to SQLAlchemy.

# Instants read from SQLite, with the text they were read from: a rebuild writes most of
# them straight back (a message's recorded_at, a session's last activity), and a dict
# lookup is cheaper than formatting. Keyed by the instant, not by the object (whose
# hash is cheaper): a timeline or ``why`` reads the same instants at every step, and
# object keys would hold every datetime read, up to the bound. Bounded; cleared when full.
_UTC_TEXT: dict[datetime, str] = {}
_UTC_TEXT_LIMIT = 200_000


def _utc_bind(fallback: Processor) -> Processor:
    known = _UTC_TEXT

    def process(value: Any) -> Any:
        text = known.get(value) if isinstance(value, datetime) else None
        if text is not None:
            return text
        if type(value) is datetime and value.tzinfo is UTC:
            return value.isoformat(" ", "microseconds")[:-6]  # drop "+00:00"
        return fallback(value)

    return process


def _utc_result(fallback: Processor) -> Processor:
    known = _UTC_TEXT

    def process(value: Any) -> Any:
        # Only the canonical shape is taken: fromisoformat checks the digits, this the rest.
        if (type(value) is str and len(value) == 26 and value[10] == " "
                and value[19] == "."):
            try:
                parsed = datetime.fromisoformat(value + "+00:00")
            except ValueError:
                return fallback(value)
            if len(known) >= _UTC_TEXT_LIMIT:
                known.clear()
            known[parsed] = value
            return parsed
        return fallback(value)

    return process


# -- the append's INSERT ---------------------------------------------------------------

_COLUMNS = ("stream_id", "stream_version", "event_id", "type", "schema_version", "data",
            "metadata", "recorded_at", "prev_hash", "hash")
"""What an append writes of an event (``txid`` is PostgreSQL's)."""


def _guarded_insert() -> sa.Insert:
    """INSERT one event only if ``stream_version - 1`` with hash ``prev_hash`` is the head."""
    prior = events.alias("prior")
    values = [sa.bindparam(c, type_=events.c[c].type) for c in _COLUMNS]
    stream = sa.bindparam("stream_id", type_=events.c.stream_id.type)
    version = sa.bindparam("stream_version", type_=events.c.stream_version.type)
    guard = sa.and_(
        sa.exists().where(prior.c.stream_id == stream, prior.c.stream_version == version - 1,
                          prior.c.hash == sa.bindparam("prev_hash")),
        ~sa.exists().where(prior.c.stream_id == stream, prior.c.stream_version >= version),
    )
    return events.insert().from_select(list(_COLUMNS), sa.select(*values).where(guard))


def _insert_statement(dialect: Dialect, name: str) -> DriverStatement:
    """``insert_guarded`` (``_guarded_insert``), ``insert`` or ``insert_many`` (plain)."""
    return driver_statement(
        dialect, ("ctxledger.store.backends.sqlite", name),
        _guarded_insert if name == "insert_guarded" else events.insert, column_keys=_COLUMNS)


class SQLiteBackend(Backend):
    """SQLite through the standard library's ``sqlite3``."""

    name: ClassVar[str] = "sqlite"
    immutability_triggers: ClassVar[tuple[str, ...]] = (
        "events_no_update", "events_no_delete", "seals_no_update", "seals_no_delete")
    concurrent_appends: ClassVar[bool] = False

    # -- engines ---------------------------------------------------------------------------

    def prepare_url(self, url: URL) -> URL:
        if url.query:
            _refuse_query(url)
        return url

    def create_engine(self, url: URL, **kwargs: Any) -> Engine:
        """WAL, ``synchronous=NORMAL``, a busy timeout, and ``BEGIN IMMEDIATE`` so a
        writer takes the lock up front instead of failing on upgrade. In-memory SQLite
        uses one shared connection so every caller sees the same database."""
        memory = is_memory(url)
        if memory:
            kwargs.setdefault("poolclass", StaticPool)
            kwargs.setdefault("connect_args", {"check_same_thread": False})
        engine = sa.create_engine(url, **kwargs)
        _configure(engine, memory=memory)
        return engine

    def database_exists(self, engine: Engine) -> bool:
        # An absent file is checked before connecting, since connecting would create it;
        # in-memory SQLite always exists.
        if is_memory(engine.url):
            return True
        if not Path(engine.url.database or "").is_file():
            return False
        with engine.connect() as conn:
            return sa.inspect(conn).has_table("events")

    def database_file(self, engine: Engine) -> Path | None:
        if is_memory(engine.url):
            return None
        return Path(engine.url.database or "").absolute()

    def check_schema(self, engine: Engine) -> None:
        return None  # a SQLite database is its own schema

    def connections(self, engine: Engine) -> Connections:
        if isinstance(engine.pool, StaticPool):
            return Connections(engine)  # in memory: one shared connection, nothing to keep
        return _KeptConnection(engine)

    # -- values and SQL --------------------------------------------------------------------

    def stored_utc(self, value: datetime) -> datetime:
        return value.replace(tzinfo=None)

    def bind_processor(self, type_: sa.types.TypeEngine[Any], proc: Processor) -> Processor:
        return _utc_bind(proc) if isinstance(type_, UTCDateTime) else proc

    def result_processor(self, type_: sa.types.TypeEngine[Any], proc: Processor) -> Processor:
        return _utc_result(proc) if isinstance(type_, UTCDateTime) else proc

    def upsert(self, table: sa.Table) -> Any:
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    def json_text_sql(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def enabled_triggers(self, conn: sa.Connection, tables: Sequence[str]) -> set[str]:
        # SQLite has no disabled triggers: every one that exists is enabled.
        found = conn.execute(sa.text(
            "SELECT name FROM sqlite_master WHERE type='trigger' AND tbl_name IN :tables"
        ).bindparams(sa.bindparam("tables", expanding=True)), {"tables": list(tables)})
        return set(found.scalars())

    # -- writing the log -------------------------------------------------------------------

    def lock_append(self, conn: sa.Connection, stream_id: str,
                    batch: Sequence[PreparedEvent], shared_keys: Sequence[str]) -> None:
        return None  # BEGIN IMMEDIATE already holds the database

    def insert_events(self, conn: sa.Connection, rows: Sequence[dict[str, Any]],
                      guarded: bool) -> list[int] | None:
        dialect = conn.dialect
        first = _insert_statement(dialect, "insert_guarded" if guarded else "insert").execute(
            conn, rows[0])
        if first.rowcount != 1:
            return None
        start = int(first.lastrowid)
        if len(rows) > 1:
            _insert_statement(dialect, "insert_many").executemany(conn, rows[1:])
            # Under the write lock a rowid table with no deletes numbers new rows max+1, so
            # the batch is contiguous; checked, because positions are the log's public
            # contract.
            last = int(conn.connection.dbapi_connection.execute(  # type: ignore[union-attr]
                "SELECT last_insert_rowid()").fetchone()[0])
            if last != start + len(rows) - 1:
                raise RuntimeError(f"positions of a batch are not contiguous ({start}..{last})")
        return list(range(start, start + len(rows)))

    def lock_log(self, conn: sa.Connection) -> None:
        return None  # BEGIN IMMEDIATE already holds the database

    def lock(self, conn: sa.Connection, key: int) -> None:
        return None  # a write transaction already holds the database

    def try_lock(self, conn: sa.Connection, key: int) -> bool:
        return True  # a write transaction already holds the database

    def settled_position(self, conn: sa.Connection) -> int:
        return head_position(conn)  # one writer at a time: commit order is position order

    def tail_limit(self, conn: sa.Connection, until_position: int | None) -> int | None:
        return until_position

    # -- rebuilding and reading ------------------------------------------------------------

    @contextmanager
    def _large_page_cache(self, conn: sa.Connection) -> Iterator[None]:
        dbapi: Any = conn.connection.dbapi_connection
        previous = dbapi.execute("PRAGMA cache_size").fetchone()[0]
        dbapi.execute(f"PRAGMA cache_size={REBUILD_PAGE_CACHE_KIB}")
        try:
            yield
        finally:
            dbapi.execute(f"PRAGMA cache_size={int(previous)}")

    def bulk_writes(self, conn: sa.Connection) -> AbstractContextManager[None]:
        return self._large_page_cache(conn)

    def begin_read_snapshot(self, conn: sa.Connection) -> None:
        return None  # a transaction reads one snapshot from its first read (WAL)

    def snapshot_is_prefix(self, conn: sa.Connection) -> bool:
        return True  # one writer at a time: commit order is position order

    @contextmanager
    def appends_drained(self, engine: Engine) -> Iterator[Callable[[], None]]:
        yield lambda: None

    # -- erasure -----------------------------------------------------------------------

    @contextmanager
    def erasing(self, conn: sa.Connection) -> Iterator[None]:
        # SQLite cannot disable a trigger: drop it and create it again from its own text,
        # both inside the transaction, so a rollback restores it too.
        sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type='trigger'"
                                   " AND name='events_no_update'").scalar()
        previous = conn.exec_driver_sql("PRAGMA secure_delete").scalar()
        # Overwritten and freed content is zeroed on the page, not just unlinked.
        conn.exec_driver_sql("PRAGMA secure_delete=ON")
        if sql is not None:
            conn.exec_driver_sql("DROP TRIGGER events_no_update")
        yield
        if sql is not None:
            conn.exec_driver_sql(str(sql))
        conn.exec_driver_sql(f"PRAGMA secure_delete={int(previous or 0)}")

    def check_scrub(self, conn: sa.Connection) -> None:
        pass  # the scrub has no setting to get wrong

    def scrub(self, engine: Engine, tables: Sequence[str]) -> None:
        if is_memory(engine.url):
            return  # nothing on disk
        raw = engine.raw_connection()
        try:
            cur = raw.cursor()  # the driver runs in autocommit (``_configure``)
            cur.execute("PRAGMA secure_delete=ON")
            # The erasing transaction ran with secure_delete: the pages it wrote hold
            # zeros where the content was. The checkpoint copies them over the file's
            # old pages and truncates the WAL, which held the old pages too.
            row = cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if row is not None and row[0]:
                raise LedgerError("erase: the WAL could not be emptied because another"
                                  " connection is reading; run erase again when it"
                                  " is idle")
            cur.execute("PRAGMA secure_delete=OFF")
            cur.close()
        finally:
            raw.close()


BACKEND = SQLiteBackend()
