"""``RowStore``: the unit of work reducers write through.

It caches rows touched in a batch and flushes them with ``executemany``. Blind
increments (``bump`` on a row not read yet) become one ``INSERT ... ON CONFLICT DO
UPDATE`` each, so the common inline path never reads before it writes. In rebuild
mode the tables are known to be empty and nothing is read at all.

Statements are compiled once per dialect and shape and run on the driver's cursor
(``store.sql_engine.DriverStatement``): an inline append touches a few rows in several
tables, and SQLAlchemy's per-statement execution cost would dominate it. Writes go out
in a deterministic order: tables in the order first touched, rows in the order first
made dirty.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from ctxledger.store.backends import backend_for
from ctxledger.store.schema import events
from ctxledger.store.sql_engine import DriverStatement, driver_statement, statement_cache

Row = dict[str, Any]
Key = tuple[Any, ...]


class _Blind:
    """Increments and assignments queued for a row that was not read."""

    __slots__ = ("add", "defaults", "set")

    def __init__(self, defaults: Row) -> None:
        self.add: dict[str, int | float] = {}
        self.set: Row = {}
        self.defaults = defaults


_MISSING: Any = object()

# Insert groups at least this large are written in primary-key order.
_SORT_INSERTS_FROM = 1_000

# Tables never change shape at run time, so their key columns are looked up once.
_KEY_COLUMNS: dict[sa.Table, tuple[str, ...]] = {}


class _TableState:
    __slots__ = ("absent", "blind", "cache", "dirty", "empty", "key", "key_cols", "owned",
                 "table")

    def __init__(self, table: sa.Table, empty: bool) -> None:
        self.table = table
        key_cols = _KEY_COLUMNS.get(table)
        if key_cols is None:
            key_cols = _KEY_COLUMNS[table] = tuple(c.name for c in table.primary_key.columns)
        self.key_cols = key_cols
        # The key tuple of a row: picked in C for composite keys (every put and sort).
        self.key: Callable[[Mapping[str, Any]], Key] = (
            operator.itemgetter(*key_cols) if len(key_cols) > 1
            else lambda row: (row[key_cols[0]],))
        self.cache: dict[Key, Row | None] = {}
        self.absent: set[Key] = set()  # keys known not to exist in the database
        self.dirty: dict[Key, None] = {}  # an ordered set: flush order = first-dirtied order
        self.blind: dict[Key, _Blind] = {}
        self.empty = empty  # the table is known to be empty: gets never query
        # Keys whose cached dict ``bump`` made and nobody else has seen: a later bump may
        # change it in place instead of copying it (a session row, once per event).
        self.owned: set[Key] = set()


class RowStore:
    """Buffered row access for reducers on top of one connection.

    ``conn=None`` gives a purely in-memory store (nothing is read or written).
    ``empty`` lists tables known to be empty, so gets on them never query.
    """

    def __init__(self, conn: sa.Connection | None, *, empty: Iterable[sa.Table] = ()) -> None:
        self.conn = conn
        self._states: dict[sa.Table, _TableState] = {}
        self._empty = {t.name for t in empty}
        self._statements = statement_cache(conn.dialect) if conn is not None else {}

    def _state(self, table: sa.Table) -> _TableState:
        state = self._states.get(table)
        if state is None:
            empty = self.conn is None or table.name in self._empty
            state = self._states[table] = _TableState(table, empty)
        return state

    def key_of(self, table: sa.Table, row: Mapping[str, Any]) -> Key:
        """The primary-key tuple of ``row``."""
        return self._state(table).key(row)

    def get(self, table: sa.Table, key: Key) -> Row | None:
        """The current row for ``key`` (including writes not flushed yet), or None.

        The returned dict is shared: treat it as read-only and ``put`` a new one.
        """
        state = self._state(table)
        cache = state.cache
        if key in cache:
            if state.owned:
                state.owned.discard(key)  # the caller may keep it: no more changes in place
            return cache[key]
        row = self._load(state, key)
        blind = state.blind.pop(key, None)
        if blind is not None:
            row = self._apply_blind(state, key, row, blind)
            state.dirty[key] = None
        cache[key] = row
        return row

    def _load(self, state: _TableState, key: Key) -> Row | None:
        if state.empty:
            state.absent.add(key)
            return None
        assert self.conn is not None
        stmt = self._select_by_key(state)
        found = stmt.fetch(self.conn, dict(zip(state.key_cols, key, strict=True)))
        if not found:
            state.absent.add(key)
            return None
        return dict(zip(state.table.columns.keys(), found[0], strict=True))

    def _apply_blind(self, state: _TableState, key: Key, row: Row | None, blind: _Blind) -> Row:
        new = dict(row) if row is not None else {
            **blind.defaults, **dict(zip(state.key_cols, key, strict=True))}
        for col, delta in blind.add.items():
            new[col] = (new.get(col) or 0) + delta
        new.update(blind.set)
        return new

    def put(self, table: sa.Table, row: Row) -> None:
        """Create or replace a whole row."""
        state = self._states.get(table) or self._state(table)
        key = state.key(row)
        if state.blind:
            # The new row replaces whatever increments were queued for the old one.
            state.blind.pop(key, None)
        if state.owned:
            state.owned.discard(key)
        state.cache[key] = row
        state.dirty[key] = None

    def delete(self, table: sa.Table, key: Key) -> None:
        """Remove a row if it exists."""
        state = self._state(table)
        state.blind.pop(key, None)
        state.owned.discard(key)
        state.cache[key] = None
        state.dirty[key] = None

    def delete_where(self, table: sa.Table, clause: sa.ColumnElement[bool],
                     matches: Callable[[Row], bool]) -> int:
        """Remove every row for which ``clause`` (SQL) and ``matches`` (the same test on a
        row dict) hold; returns how many cached rows it removed.

        The table's pending writes are flushed first so one ``DELETE`` covers the rows
        in the database, then matching cached rows are dropped. A range delete costs
        what it removes plus one statement, so reducers use it only for pruning.
        """
        state = self._state(table)
        if self.conn is not None:
            if state.dirty or state.blind:
                self._flush_table(self.conn, state)
            self.conn.execute(table.delete().where(clause))
        elif state.blind:
            raise ValueError("delete_where cannot test rows that were only bumped blind")
        removed = 0
        cache = state.cache
        for key, row in cache.items():
            if row is not None and matches(row):
                cache[key] = None
                state.absent.add(key)
                state.dirty.pop(key, None)
                removed += 1
        return removed

    def bump(self, table: sa.Table, key: Mapping[str, Any], *,
             add: Mapping[str, int | float] | None = None, set: Mapping[str, Any] | None = None,
             defaults: Mapping[str, Any] | None = None) -> None:
        """Add to counters and assign columns of a row, creating it from ``defaults``.

        Counters in ``add`` start from the default (or 0) when the row is new.
        """
        state = self._states.get(table) or self._state(table)
        if defaults and add and not defaults.keys().isdisjoint(add):
            raise ValueError("a counter in add= must not also have a default (it starts at 0)")
        k = state.key(key)
        cache = state.cache
        row = cache.get(k, _MISSING)
        if row is _MISSING and state.empty:
            row = None  # what get() would find, without the call (the rebuild's hot path)
            state.absent.add(k)
        if row is not _MISSING:
            owned = state.owned
            if row is None:
                new = {**defaults, **key} if defaults else dict(key)
                owned.add(k)
            elif k in owned:
                new = row  # made here and never handed out: no copy needed
            else:
                new = row.copy()
                owned.add(k)
            if add:
                for col, delta in add.items():
                    new[col] = (new.get(col) or 0) + delta
            if set:
                new.update(set)
            cache[k] = new
            state.dirty[k] = None
            return
        blind = state.blind.get(k)
        if blind is None:
            blind = state.blind[k] = _Blind({**defaults, **key} if defaults else dict(key))
        if add:
            pending = blind.add
            for col, delta in add.items():
                pending[col] = pending.get(col, 0) + delta
        if set:
            blind.set.update(set)

    def editable(self, table: sa.Table, key: Mapping[str, Any],
                 defaults: Mapping[str, Any]) -> Row:
        """The row at ``key`` (made from ``defaults`` when there is none) as a dict the
        caller may change in place: it is marked dirty now, and stays this row until a
        flush or a ``get``, ``rows``, ``put`` or ``delete`` of it hands it out or replaces
        it (a rebuild's fast path counts into a session row this way, once per event)."""
        state = self._states.get(table) or self._state(table)
        k = state.key(key)
        row = state.cache.get(k, _MISSING)
        if row is _MISSING:
            row = self.get(table, k)
        if row is None:
            new = {**defaults, **key}
        elif k in state.owned:
            new = row
        else:
            new = row.copy()
        state.owned.add(k)
        state.cache[k] = new
        state.dirty[k] = None
        return new

    ASIDE_ROWS = 200_000
    """How many rows a rebuild fold holds aside (as tuples) before it hands them to
    ``insert_new``: a bound on its memory, not a batch size the speed depends on."""

    def insert_new(self, table: sa.Table, columns: tuple[str, ...],
                   values: list[tuple[Any, ...]], *, replace: bool = False) -> None:
        """Write rows with new keys (no live row in the table or in this store: a rebuild
        fold's rows held aside) as plain INSERTs, now, in the given order, each a tuple
        of ``columns``; with ``replace``, rows whose keys may be in the table already
        (but not pending in this store) as upserts that replace them. They are not
        cached, and the table is no longer taken as empty: a later ``get`` reads them
        back. In memory mode they are put."""
        if self.conn is None:
            for value in values:
                self.put(table, dict(zip(columns, value, strict=True)))
            return
        state = self._state(table)
        if state.cache or state.absent:
            # Keys looked up before (and found absent) are known now: forget them.
            picks = [columns.index(c) for c in state.key_cols]
            for value in values:
                key = tuple(value[i] for i in picks)
                if (state.cache.pop(key, None) is not None and not replace) \
                        or key in state.dirty:
                    raise ValueError(f"insert_new: {table.name} already has a row {key!r}")
                state.absent.discard(key)
        state.empty = False
        if replace:
            non_key = tuple(c for c in columns if c not in state.key_cols)
            statement = self._upsert(state, columns, (), non_key)
        else:
            statement = self._insert(state, columns)
        statement.executemany_values(self.conn, columns, values)

    def event_version(self, event_id: str) -> tuple[str, int] | None:
        """The (stream, version) of the logged event ``event_id``, through the log's own
        ``event_id`` index; None if it is not logged (always None in memory mode).

        Lets a reducer find a row by an event id without keeping an index of its own."""
        if self.conn is None:
            return None
        key = ("rowstore.event_version",)
        stmt = self._statements.get(key) or driver_statement(
            self._dialect(), key, lambda: sa.select(events.c.stream_id, events.c.stream_version)
            .where(events.c.event_id == sa.bindparam("event_id", type_=events.c.event_id.type)))
        found = stmt.fetch(self.conn, {"event_id": event_id})
        return (str(found[0][0]), int(found[0][1])) if found else None

    def rows(self, table: sa.Table) -> list[Row]:
        """Every cached live row of ``table`` (memory mode: the whole table)."""
        state = self._state(table)
        state.owned.clear()  # handed out
        return [r for r in state.cache.values() if r is not None]

    def cached_rows(self) -> int:
        """How many rows are cached across all tables (to bound memory in long folds)."""
        return sum(len(s.cache) for s in self._states.values())

    # -- flushing -------------------------------------------------------------------------

    def flush(self, *tables: sa.Table) -> int:
        """Write every pending change, or only those of ``tables``; returns the number of
        rows written.

        A reducer that needs rows in the database for its own SQL flushes only their
        tables: a rebuild's fold may be changing other rows in place (``editable``) until
        the runner flushes them, and a flush in between would write them half done."""
        if self.conn is None:
            return 0
        written = 0
        chosen = [self._state(table) for table in tables] if tables else self._states.values()
        for state in chosen:
            if state.dirty or state.blind:
                written += self._flush_table(self.conn, state)
        return written

    def _flush_table(self, conn: sa.Connection, state: _TableState) -> int:
        if len(state.dirty) + len(state.blind) == 1:
            return self._flush_one(conn, state)
        inserts: dict[tuple[str, ...], list[Row]] = {}
        upserts: dict[tuple[str, ...], list[Row]] = {}
        deletes: list[Row] = []
        cache, absent = state.cache, state.absent
        for key in state.dirty:
            row = cache.get(key)
            if row is None:
                if key not in absent:
                    deletes.append(dict(zip(state.key_cols, key, strict=True)))
                continue
            target = inserts if key in absent else upserts
            cols = tuple(row)
            group = target.get(cols)
            if group is None:
                target[cols] = [row]
            else:
                group.append(row)
        written = 0
        if deletes:
            self._delete_by_key(state).executemany(conn, deletes)
            written += len(deletes)
        for cols, rows in inserts.items():
            if len(rows) >= _SORT_INSERTS_FROM:
                # Key order turns index inserts into appends (rebuilds write whole tables);
                # keys that do not compare keep the first-dirtied order.
                with contextlib.suppress(TypeError):
                    rows.sort(key=state.key)
            self._insert(state, cols).executemany(conn, rows)
            written += len(rows)
        for cols, rows in upserts.items():
            non_key = tuple(c for c in cols if c not in state.key_cols)
            self._upsert(state, cols, (), non_key).executemany(conn, rows)
            written += len(rows)
        blind_groups: dict[tuple[tuple[str, ...], ...], list[Row]] = {}
        for key, blind in state.blind.items():
            row = {**blind.defaults, **dict(zip(state.key_cols, key, strict=True))}
            row.update(blind.add)
            row.update(blind.set)
            add_cols = tuple(blind.add)
            group_key = (tuple(row), add_cols, tuple(dict.fromkeys((*add_cols, *blind.set))))
            blind_groups.setdefault(group_key, []).append(row)
        for (cols, add_cols, update_cols), rows in blind_groups.items():
            self._upsert(state, cols, add_cols, update_cols).executemany(conn, rows)
            written += len(rows)
        # The database now holds exactly what the cache says.
        for key in state.dirty:
            if cache.get(key) is None:
                absent.add(key)
            else:
                absent.discard(key)
        state.dirty.clear()
        state.blind.clear()
        return written

    def _flush_one(self, conn: sa.Connection, state: _TableState) -> int:
        """``_flush_table`` for one pending row, the shape of an inline append (one write per row):
        one statement, without the grouping of the general case."""
        cache, absent = state.cache, state.absent
        if state.blind:
            key, blind = state.blind.popitem()
            new = {**blind.defaults, **dict(zip(state.key_cols, key, strict=True))}
            new.update(blind.add)
            new.update(blind.set)
            add_cols = tuple(blind.add)
            self._upsert(state, tuple(new), add_cols,
                         tuple(dict.fromkeys((*add_cols, *blind.set)))).execute(conn, new)
            return 1
        key = next(iter(state.dirty))
        state.dirty.clear()
        row = cache.get(key)
        if row is None:
            if key not in absent:
                self._delete_by_key(state).execute(
                    conn, dict(zip(state.key_cols, key, strict=True)))
                absent.add(key)
                return 1
            return 0
        cols = tuple(row)
        if key in absent:
            self._insert(state, cols).execute(conn, row)
            absent.discard(key)
        else:
            non_key = tuple(c for c in cols if c not in state.key_cols)
            self._upsert(state, cols, (), non_key).execute(conn, row)
        return 1

    def forget(self) -> None:
        """Drop cached rows (after a flush) to bound memory; later gets read again."""
        for state in self._states.values():
            assert not state.dirty and not state.blind, "forget() before flush()"
            state.cache.clear()
            state.absent.clear()
            state.owned.clear()
            state.empty = self.conn is None
        self._empty.clear()

    # -- statements (compiled once per dialect and shape) ---------------------------------
    # Keys are tuples led by a distinct tag; looked up in the dialect's statement cache
    # directly, since an inline append flushes a few statements per table.

    def _dialect(self) -> Any:
        assert self.conn is not None
        return self.conn.dialect

    def _select_by_key(self, state: _TableState) -> DriverStatement:
        table = state.table

        def build() -> Any:
            cond = [table.c[c] == sa.bindparam(c, type_=table.c[c].type) for c in state.key_cols]
            return sa.select(*table.columns).where(*cond)

        found = self._statements.get(("rowstore.get", table))
        return found or driver_statement(self._dialect(), ("rowstore.get", table), build)

    def _delete_by_key(self, state: _TableState) -> DriverStatement:
        table = state.table

        def build() -> Any:
            cond = [table.c[c] == sa.bindparam(c, type_=table.c[c].type) for c in state.key_cols]
            return table.delete().where(*cond)

        found = self._statements.get(("rowstore.delete", table))
        return found or driver_statement(self._dialect(), ("rowstore.delete", table), build)

    def _insert(self, state: _TableState, cols: tuple[str, ...]) -> DriverStatement:
        key = ("rowstore.insert", state.table, cols)
        found = self._statements.get(key)
        return found or driver_statement(self._dialect(), key, state.table.insert,
                                         column_keys=cols)

    def _upsert(self, state: _TableState, cols: tuple[str, ...], add_cols: tuple[str, ...],
                update_cols: tuple[str, ...]) -> DriverStatement:
        """INSERT of ``cols``; on conflict add ``add_cols`` and assign ``update_cols``."""
        key = ("rowstore.upsert", state.table, cols, add_cols, update_cols)
        found = self._statements.get(key)
        if found is not None:
            return found
        dialect = self._dialect()
        table = state.table

        def build() -> Any:
            ins = backend_for(dialect).upsert(table)
            update = {c: (table.c[c] + ins.excluded[c]) if c in add_cols else ins.excluded[c]
                      for c in update_cols}
            if update:
                return ins.on_conflict_do_update(index_elements=list(state.key_cols),
                                                 set_=update)
            return ins.on_conflict_do_nothing(index_elements=list(state.key_cols))

        return driver_statement(dialect, key, build, column_keys=cols)
