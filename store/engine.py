"""Engines configured for the event log: SQLite (WAL, NORMAL, busy timeout) or PostgreSQL."""

from __future__ import annotations

import contextlib
import importlib.util
import operator
import sqlite3
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Dialect, Engine, make_url
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.crud import REQUIRED

from ctxledger.store.canonical import canonical_json
from ctxledger.store.errors import LedgerError, SchemaMissing
from ctxledger.store.schema import UTCDateTime

SQLITE_BUSY_TIMEOUT_MS = 30_000
READ_ONLY_OPTION = "ctxledger_read_only"
"""Execution option marking a connection that only reads (deferred BEGIN on SQLite)."""


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
        parsed.port  # noqa: B018 -- parsed lazily: "host:abc" fails here, not later
    except (sa.exc.ArgumentError, ValueError) as exc:
        reason = "" if isinstance(exc, sa.exc.ArgumentError) else f" ({exc})"
        raise LedgerError(f"not a database URL: {url!r}{reason}") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise LedgerError(f"unsupported database {backend!r}: use sqlite or postgresql+psycopg")
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if backend == "postgresql":
        require_postgres_driver()
    if backend == "sqlite" and parsed.query:
        _refuse_sqlite_query(parsed)
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


def _refuse_sqlite_query(url: URL) -> None:
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


POSTGRES_EXTRA_HINT = "pip install 'ctxledger[postgres]'"


def upsert_insert(dialect_name: str, table: sa.Table) -> Any:
    """The dialect's ``INSERT`` for ``table``, the one with ``on_conflict_do_*``.

    The dialect module is imported here, on first use: a SQLite user never loads the
    PostgreSQL dialect (and asyncio with it), which start-up time would pay for."""
    if dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def require_postgres_driver() -> None:
    """Fail with one line naming the extra when psycopg is not installed."""
    if importlib.util.find_spec("psycopg") is None:
        raise LedgerError(f"PostgreSQL needs the postgres extra: {POSTGRES_EXTRA_HINT}")


def safe_url(url: str | URL) -> str:
    """The URL for messages, with any password masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return str(url)


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names (None for other databases and in-memory SQLite)."""
    if url.get_backend_name() != "sqlite" or is_memory_sqlite(url):
        return None
    return Path(url.database or "")


def database_exists(engine: Engine) -> bool:
    """True when ``engine``'s database holds a ctxledger log (its ``events`` table).

    A SQLite file that is absent is checked before connecting, since connecting would
    create it; in-memory SQLite always exists.
    """
    path = sqlite_file(engine.url)
    if path is not None and not path.is_file():
        return False
    if is_memory_sqlite(engine.url):
        return True
    with engine.connect() as conn:
        return sa.inspect(conn).has_table("events")


def require_schema(engine: Engine) -> None:
    """Raise ``SchemaMissing`` when a PostgreSQL connection has no schema to work in.

    PostgreSQL skips the schemas of ``search_path`` that do not exist; with none left,
    the first ``CREATE TABLE`` fails with a bare SQL error that does not name them."""
    if engine.dialect.name != "postgresql":
        return
    with engine.connect() as conn:
        current, path = conn.exec_driver_sql(
            "SELECT current_schema(), current_setting('search_path')").one()
    if current is not None:
        return
    names = [name.strip() for name in str(path).split(",") if name.strip()]
    named = [name for name in names if name != '"$user"'] or names
    if len(named) == 1:
        raise SchemaMissing(f"PostgreSQL schema {named[0]} (the URL's search_path) does not"
                            f" exist; create it first: CREATE SCHEMA {named[0]}")
    raise SchemaMissing(f"no schema of the URL's search_path ({path}) exists in PostgreSQL;"
                        " create one first with CREATE SCHEMA")


def sqlite_pragmas(*, memory: bool) -> tuple[str, ...]:
    """The pragmas every SQLite connection of a ledger runs when it opens (WAL on a file)."""
    return (*(() if memory else ("PRAGMA journal_mode=WAL",)), "PRAGMA synchronous=NORMAL",
            f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", "PRAGMA foreign_keys=ON")


def _configure_sqlite(engine: Engine, *, memory: bool) -> None:
    pragmas = sqlite_pragmas(memory=memory)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Autocommit at the driver level; SQLAlchemy's begin event issues BEGIN itself.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        for pragma in pragmas:
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


def _driver_sql(conn: sa.Connection, sql: str) -> None:
    """Run ``sql`` on ``conn``'s SQLite driver connection, errors as SQLAlchemy's."""
    try:
        conn.connection.dbapi_connection.execute(sql)  # type: ignore[union-attr]
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, None, exc, sqlite3.Error,
                                         dialect=conn.dialect) from exc


@contextmanager
def driver_transaction(conn: sa.Connection) -> Iterator[sa.Connection]:
    """A SQLite write transaction begun and committed on the driver: ``BEGIN IMMEDIATE``
    ... ``COMMIT``, without SQLAlchemy's transaction objects and events (issue 13: they
    cost as much as an append's statements). ``conn`` must not be in a transaction.

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


# -- compiled statements run on the driver's cursor -------------------------------------

Params = tuple[Any, ...] | dict[str, Any]
_Processor = Callable[[Any], Any]


class DriverStatement:
    """A Core statement compiled once for one dialect and run on the DBAPI cursor.

    SQLAlchemy still generates the SQL and owns the transaction; only the per-call
    execution machinery (about 50us a statement) is skipped, which is what the append
    and rebuild hot paths cannot afford. Bind and result values go through the same type
    processors SQLAlchemy would apply, so rows read and written this way are identical
    to ``conn.execute``'s. Driver errors are re-raised as SQLAlchemy's wrappers
    (``sa.exc.IntegrityError``, ``OperationalError``...). Engine-level execution events
    (``before_cursor_execute``, echo) do not fire for these statements.

    Values bound at build time (``limit(1)``, a literal ``in_([...])`` list) are kept
    as defaults; every other parameter must be given on each call.
    """

    __slots__ = ("_column_processors", "_columnwise", "_dbapi_error", "_defaults", "_fast",
                 "_getter", "_names", "_positional", "_processors", "_result_processors",
                 "_result_types", "dialect", "sql")

    def __init__(self, statement: ClauseElement, dialect: Dialect,
                 column_keys: Sequence[str] | None = None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(column_keys or ()) or None,
                                     compile_kwargs={"render_postcompile": True})
        assert isinstance(compiled, SQLCompiler)
        self.dialect = dialect
        self.sql: str = compiled.string
        defaults = compiled.construct_params(_check=False)
        positional = compiled.positiontup
        self._positional = positional is not None
        names = tuple(positional) if positional is not None else tuple(defaults)
        self._names = names
        self._defaults = {k: v for k, v in defaults.items() if v is not None}
        self._getter = operator.itemgetter(*names) if names else None
        processors: list[tuple[int, _Processor]] = []
        column_processors: list[_ColumnProcessor] = []
        for index, name in enumerate(names):
            bind = compiled.binds.get(name)
            proc = None if bind is None else bind_processor(dialect, bind.type)
            if proc is not None:
                assert bind is not None
                processors.append((index, proc))
                column_processors.append((index, *_column_processor(dialect, bind.type, proc),
                                          operator.itemgetter(index)))
        self._processors = tuple(processors)
        self._column_processors = tuple(column_processors)
        self._fast = (self._positional and len(names) > 1 and not processors
                      and not self._defaults)
        # Every value comes from the row (an INSERT's columns are only marked required).
        self._columnwise = (self._positional and len(names) > 1
                            and all(v is REQUIRED for v in self._defaults.values()))
        self._result_types: tuple[sa.types.TypeEngine[Any], ...] = (
            tuple(c.type for c in statement.selected_columns)
            if isinstance(statement, sa.Select) else ())
        self._result_processors: tuple[_Processor | None, ...] | None = None
        self._dbapi_error: type[Exception] = dialect.loaded_dbapi.Error

    def params(self, values: Mapping[str, Any]) -> Params:
        """Driver parameters for ``values`` (processed, in the driver's paramstyle)."""
        if self._fast:
            # Positional, several names, nothing to convert or fill in: the hot case.
            return self._getter(values)  # type: ignore[misc, no-any-return]
        if self._getter is None:
            return () if self._positional else {}
        if self._defaults:
            values = {**self._defaults, **values}
        got = self._getter(values)
        out = list(got) if len(self._names) > 1 else [got]
        for index, proc in self._processors:
            out[index] = proc(out[index])
        if self._positional:
            return tuple(out)
        return dict(zip(self._names, out, strict=True))

    def execute(self, conn: sa.Connection, values: Mapping[str, Any] | None = None) -> Any:
        """Run once inside ``conn``'s transaction; returns the DBAPI cursor."""
        cursor = driver_cursor(conn)
        params = self.params(values or {})
        try:
            cursor.execute(self.sql, params)
        except self._dbapi_error as exc:
            raise self._wrap(exc, params) from exc
        return cursor

    def executemany(self, conn: sa.Connection, rows: Iterable[Mapping[str, Any]]) -> None:
        """Run once per row inside ``conn``'s transaction (the driver's ``executemany``)."""
        params: list[Params] | None = None
        if self._columnwise:
            # Many rows (a rebuild writes whole tables): pick the values in C, then run
            # each processor down its column instead of rebuilding every row in Python.
            rows = rows if isinstance(rows, list) else list(rows)
            with contextlib.suppress(KeyError):  # a value missing: params() says which
                params = list(map(self._getter, rows))  # type: ignore[arg-type]
            if params:
                params = self._process_columns(params)
        if params is None:
            params = [self.params(row) for row in rows]
        self._run_many(conn, params)

    def executemany_values(self, conn: sa.Connection, names: tuple[str, ...],
                           values: list[tuple[Any, ...]]) -> None:
        """``executemany`` of rows given as tuples of the parameters ``names``: when those
        are the statement's positional parameters in order (an INSERT of ``column_keys``
        on SQLite), no mapping is built per row only to be picked."""
        if self._columnwise and names == self._names:
            self._run_many(conn, self._process_columns(values))
        else:
            self.executemany(conn, [dict(zip(names, v, strict=True)) for v in values])

    def _process_columns(self, params: list[Any]) -> list[Any]:
        """Positional rows with each bind processor run down its column."""
        if not self._column_processors or not params:
            return params
        # A column whose values the driver binds as the processor would make them
        # (Python bools: the driver's own integer or boolean) skips its processor;
        # checked in C, one pass of ``type``.
        todo = [(index, proc) for index, proc, plain, pick in self._column_processors
                if not plain or not plain.issuperset(map(type, map(pick, params)))]
        if not todo:
            return params
        columns: list[Iterable[Any]] = list(zip(*params, strict=True))
        for index, proc in todo:
            columns[index] = map(proc, columns[index])
        return list(zip(*columns, strict=True))

    def _run_many(self, conn: sa.Connection, params: list[Any]) -> None:
        if not params:
            return
        cursor = driver_cursor(conn)
        try:
            if len(params) == 1:
                cursor.execute(self.sql, params[0])
            else:
                cursor.executemany(self.sql, params)
        except self._dbapi_error as exc:
            raise self._wrap(exc, params) from exc

    def fetch(self, conn: sa.Connection, values: Mapping[str, Any] | None = None
              ) -> list[tuple[Any, ...]]:
        """Run a SELECT and return its rows with result processors applied."""
        cursor = self.execute(conn, values)
        try:
            rows = cursor.fetchall()
        except self._dbapi_error as exc:
            raise self._wrap(exc, None) from exc
        procs = self._result_processors
        if procs is None:
            # Some processors depend on the driver's type code (psycopg numerics), which
            # only the first cursor description tells.
            codes = [d[1] for d in cursor.description or ()]
            procs = self._result_processors = tuple(
                result_processor(self.dialect, t, code)
                for t, code in zip(self._result_types, codes, strict=True))
        if not any(procs):
            return [tuple(row) for row in rows]
        return [tuple(v if p is None else p(v) for p, v in zip(procs, row, strict=True))
                for row in rows]

    def _wrap(self, exc: Exception, params: Any) -> BaseException:
        return sa.exc.DBAPIError.instance(self.sql, params, exc, self._dbapi_error,
                                          dialect=self.dialect)


_BIND_PROCESSORS: weakref.WeakKeyDictionary[Dialect, dict[str, _Processor | None]] = (
    weakref.WeakKeyDictionary())


def bind_processor(dialect: Dialect, type_: sa.types.TypeEngine[Any]) -> _Processor | None:
    """SQLAlchemy's bind processor for ``type_`` on ``dialect``.

    Date/time processors are shared per dialect and type, and remember their last value:
    one append binds the same ``recorded_at`` object in several statements (the event,
    projection rows, checkpoints), and formatting it costs more than the insert.
    """
    proc: _Processor | None = type_.dialect_impl(dialect).bind_processor(dialect)
    if proc is None or not isinstance(getattr(type_, "impl_instance", type_), sa.DateTime):
        return proc
    if dialect.name == "sqlite" and isinstance(type_, UTCDateTime):
        proc = _sqlite_utc_bind(proc)
    shared = _BIND_PROCESSORS.get(dialect)
    if shared is None:
        shared = _BIND_PROCESSORS.setdefault(dialect, {})
    key = f"{type(type_).__module__}.{type_!r}"
    if key not in shared:
        shared[key] = _remember_last(proc)
    return shared[key]


_ColumnProcessor = tuple[int, _Processor, frozenset[type], Callable[[Any], Any]]
"""Index, processor, value types that skip it, and the picker of the column's values."""


def _column_processor(dialect: Dialect, type_: sa.types.TypeEngine[Any], proc: _Processor
                      ) -> tuple[_Processor, frozenset[type]]:
    """How ``executemany`` processes a whole column of ``type_``: the processor to map
    over it, and the value types it may skip it for (the driver binds them the same).

    ``Boolean``'s processor turns a bool into the same bool (native booleans) or into
    the int the driver would bind for it anyway (the sqlite3 module binds a bool as
    that int).
    """
    if type(type_) is sa.Boolean:
        return proc, frozenset({bool})
    return proc, frozenset()


def result_processor(dialect: Dialect, type_: sa.types.TypeEngine[Any],
                     coltype: Any = None) -> _Processor | None:
    """SQLAlchemy's result processor for ``type_`` on ``dialect`` (UTC datetimes sped up).

    ``coltype`` is the driver's type code from ``cursor.description``.
    """
    proc = type_.dialect_impl(dialect).result_processor(dialect, coltype)
    if proc is not None and dialect.name == "sqlite" and isinstance(type_, UTCDateTime):
        return _sqlite_utc_result(proc)
    return proc


# SQLite keeps UTCDateTime as naive UTC text in SQLAlchemy's format, "YYYY-MM-DD
# HH:MM:SS.ffffff", which is exactly datetime's isoformat(" ", "microseconds"). The C
# isoformat code is several times faster than SQLAlchemy's regex and %-formatting, and
# both run for every row a rebuild reads or writes. Anything unusual goes to SQLAlchemy.

# Instants read from SQLite, with the text they were read from: a rebuild writes most of
# them straight back (a message's recorded_at, a session's last activity), and a dict
# lookup is cheaper than formatting. Bounded; cleared when full.
_UTC_TEXT: dict[datetime, str] = {}
_UTC_TEXT_LIMIT = 200_000


def _sqlite_utc_bind(fallback: _Processor) -> _Processor:
    known = _UTC_TEXT

    def process(value: Any) -> Any:
        text = known.get(value) if isinstance(value, datetime) else None
        if text is not None:
            return text
        if type(value) is datetime and value.tzinfo is UTC:
            return value.isoformat(" ", "microseconds")[:-6]  # drop "+00:00"
        return fallback(value)

    return process


def _sqlite_utc_result(fallback: _Processor) -> _Processor:
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


def _remember_last(proc: _Processor) -> _Processor:
    """Wrap a pure processor of immutable values so a repeated object is processed once."""
    cell: list[tuple[Any, Any]] = [(object(), None)]

    def process(value: Any) -> Any:
        last = cell[0]  # one tuple, read and replaced atomically: safe across threads
        if last[0] is value:
            return last[1]
        result = proc(value)
        cell[0] = (value, result)
        return result

    return process


_CACHE_ATTRIBUTE = "_ctxledger_driver_statements"


def statement_cache(dialect: Dialect) -> dict[Hashable, DriverStatement]:
    """The compiled statements of ``dialect``, by key (see ``driver_statement``).

    Kept on the dialect object itself: it lives exactly as long as its engine, and the
    lookup is one attribute read (a weak-keyed map costs more than some statements).
    """
    cache: dict[Hashable, DriverStatement] | None = getattr(dialect, _CACHE_ATTRIBUTE, None)
    if cache is None:
        cache = {}
        setattr(dialect, _CACHE_ATTRIBUTE, cache)
    return cache


def driver_statement(dialect: Dialect, key: Hashable, build: Callable[[], ClauseElement],
                     column_keys: Sequence[str] | None = None) -> DriverStatement:
    """The ``DriverStatement`` for ``key`` on ``dialect``, built and compiled on first use.

    ``key`` must identify the statement's shape (``build`` is only called once per key).
    """
    cache = statement_cache(dialect)
    found = cache.get(key)
    if found is None:
        found = cache.setdefault(key, DriverStatement(build(), dialect, column_keys))
    return found


def driver_cursor(conn: sa.Connection) -> Any:
    """A DBAPI cursor on ``conn``'s own connection, so it shares the open transaction."""
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
