"""Engines configured for the event log (each database's settings in its backend,
``store.backends``), and Core statements compiled once and run on the driver's cursor."""

from __future__ import annotations

import contextlib
import operator
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Dialect, Engine, make_url
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.crud import REQUIRED

from ctxledger.store.backends import backend_for, backend_for_url
from ctxledger.store.canonical import canonical_json
from ctxledger.store.errors import LedgerError


def create_engine(url: str | URL, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` with the settings the event log relies on (its
    backend's: see ``store.backends``). Canonical JSON for JSON columns."""
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 -- parsed lazily: "host:abc" fails here, not later
    except (sa.exc.ArgumentError, ValueError) as exc:
        reason = "" if isinstance(exc, sa.exc.ArgumentError) else f" ({exc})"
        raise LedgerError(f"not a database URL: {url!r}{reason}") from None
    backend = backend_for_url(parsed)
    parsed = backend.prepare_url(parsed)
    kwargs.setdefault("json_serializer", canonical_json)
    return backend.create_engine(parsed, **kwargs)


def safe_url(url: str | URL) -> str:
    """The URL for messages, with any password masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return str(url)


def database_exists(engine: Engine) -> bool:
    """True when ``engine``'s database holds a ctxledger log (its ``events`` table); never
    creates the database (a SQLite file) to find out."""
    return backend_for(engine).database_exists(engine)


def require_schema(engine: Engine) -> None:
    """Raise ``SchemaMissing`` when the database has no schema to create the tables in
    (PostgreSQL: none of the URL's ``search_path`` exists)."""
    backend_for(engine).check_schema(engine)


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
                 "_result_types", "dialect", "keys", "sql")

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
        self.keys: tuple[str, ...] = (
            tuple(str(c.key) for c in statement.selected_columns)
            if isinstance(statement, sa.Select) else ())
        """A SELECT's column keys, in order (``fetch_dicts`` names each row's values by them)."""
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
        todo = []
        for index, proc, plain, plain_proc, pick in self._column_processors:
            if plain and plain.issuperset(map(type, map(pick, params))):
                if plain_proc is not None:
                    todo.append((index, plain_proc))
            else:
                todo.append((index, proc))
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

    def fetch_dicts(self, conn: sa.Connection, values: Mapping[str, Any] | None = None
                    ) -> list[dict[str, Any]]:
        """``fetch``, each row as a dict by column key (what ``.mappings()`` gives)."""
        keys = self.keys
        return [dict(zip(keys, row, strict=True)) for row in self.fetch(conn, values)]

    def _wrap(self, exc: Exception, params: Any) -> BaseException:
        return sa.exc.DBAPIError.instance(self.sql, params, exc, self._dbapi_error,
                                          dialect=self.dialect)


_BIND_PROCESSORS: weakref.WeakKeyDictionary[Dialect, dict[str, _Processor | None]] = (
    weakref.WeakKeyDictionary())


def bind_processor(dialect: Dialect, type_: sa.types.TypeEngine[Any]) -> _Processor | None:
    """SQLAlchemy's bind processor for ``type_`` on ``dialect``, as its backend runs it
    (``Backend.bind_processor``).

    Date/time processors are shared per dialect and type, and remember their last value:
    one append binds the same ``recorded_at`` object in several statements (the event,
    projection rows, checkpoints), and formatting it costs more than the insert.
    """
    proc: _Processor | None = type_.dialect_impl(dialect).bind_processor(dialect)
    if proc is None or not isinstance(getattr(type_, "impl_instance", type_), sa.DateTime):
        return proc
    proc = backend_for(dialect).bind_processor(type_, proc)
    shared = _BIND_PROCESSORS.get(dialect)
    if shared is None:
        shared = _BIND_PROCESSORS.setdefault(dialect, {})
    key = f"{type(type_).__module__}.{type_!r}"
    if key not in shared:
        shared[key] = _remember_last(proc)
    return shared[key]


_ColumnProcessor = tuple[int, _Processor, frozenset[type], _Processor | None,
                         Callable[[Any], Any]]
"""Index, processor, the value types a cheaper processor (or none) serves, that cheaper
processor, and the picker of the column's values."""


def _column_processor(dialect: Dialect, type_: sa.types.TypeEngine[Any], proc: _Processor
                      ) -> tuple[_Processor, frozenset[type], _Processor | None]:
    """How ``executemany`` processes a whole column of ``type_``: the processor to map
    over it, the value types for which a cheaper one does, and that one (None: skip it).

    ``Boolean``'s processor turns a bool into the same bool (native booleans: the driver
    binds it as it is) or into an int. Without native booleans, ``int`` (in C) makes that
    int: the sqlite3 module would take a bool, not an exact int, through its adapter
    lookup, which costs more than the insert's other columns together.
    """
    if type(type_) is sa.Boolean:
        return proc, frozenset({bool}), None if dialect.supports_native_boolean else int
    return proc, frozenset(), None


def result_processor(dialect: Dialect, type_: sa.types.TypeEngine[Any],
                     coltype: Any = None) -> _Processor | None:
    """SQLAlchemy's result processor for ``type_`` on ``dialect``, as its backend runs it
    (``Backend.result_processor``: SQLite's UTC datetimes sped up).

    ``coltype`` is the driver's type code from ``cursor.description``.
    """
    proc = type_.dialect_impl(dialect).result_processor(dialect, coltype)
    return None if proc is None else backend_for(dialect).result_processor(type_, proc)


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
