"""``RowStore``: the unit of work reducers write through.

It caches rows touched in a batch and flushes them with ``executemany``. Blind
increments (``bump`` on a row not read yet) become one ``INSERT ... ON CONFLICT DO
UPDATE`` each, so the common inline path never reads before it writes. In rebuild
mode the tables are known to be empty and nothing is read at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

Row = dict[str, Any]
Key = tuple[Any, ...]


class _Blind:
    """Increments and assignments queued for a row that was not read."""

    __slots__ = ("add", "defaults", "set")

    def __init__(self, defaults: Row) -> None:
        self.add: dict[str, int | float] = {}
        self.set: Row = {}
        self.defaults = defaults


class _TableState:
    __slots__ = ("absent", "blind", "cache", "dirty", "key_cols", "table")

    def __init__(self, table: sa.Table) -> None:
        self.table = table
        self.key_cols = tuple(c.name for c in table.primary_key.columns)
        self.cache: dict[Key, Row | None] = {}
        self.absent: set[Key] = set()  # keys known not to exist in the database
        self.dirty: set[Key] = set()
        self.blind: dict[Key, _Blind] = {}


# Statement objects are immutable and keyed by shape, so one cache serves every RowStore.
_STATEMENTS: dict[tuple[Any, ...], Any] = {}


class RowStore:
    """Buffered row access for reducers on top of one connection.

    ``conn=None`` gives a purely in-memory store (nothing is read or written).
    ``empty`` lists tables known to be empty, so gets on them never query.
    """

    def __init__(self, conn: sa.Connection | None, *, empty: Iterable[sa.Table] = ()) -> None:
        self.conn = conn
        self._states: dict[str, _TableState] = {}
        self._empty = {t.name for t in empty}

    def _state(self, table: sa.Table) -> _TableState:
        state = self._states.get(table.name)
        if state is None:
            state = self._states[table.name] = _TableState(table)
        return state

    def key_of(self, table: sa.Table, row: Mapping[str, Any]) -> Key:
        """The primary-key tuple of ``row``."""
        return tuple(row[c] for c in self._state(table).key_cols)

    def get(self, table: sa.Table, key: Key) -> Row | None:
        """The current row for ``key`` (including writes not flushed yet), or None.

        The returned dict is shared: treat it as read-only and ``put`` a new one.
        """
        state = self._state(table)
        if key in state.cache:
            return state.cache[key]
        row = self._load(state, key)
        blind = state.blind.pop(key, None)
        if blind is not None:
            row = self._apply_blind(state, key, row, blind)
            state.dirty.add(key)
        state.cache[key] = row
        return row

    def _load(self, state: _TableState, key: Key) -> Row | None:
        if self.conn is None or state.table.name in self._empty:
            state.absent.add(key)
            return None
        table = state.table
        cond = sa.and_(*(table.c[name] == value for name, value in zip(state.key_cols, key,
                                                                        strict=True)))
        found = self.conn.execute(sa.select(table).where(cond)).mappings().first()
        if found is None:
            state.absent.add(key)
            return None
        return dict(found)

    def _apply_blind(self, state: _TableState, key: Key, row: Row | None, blind: _Blind) -> Row:
        new = dict(row) if row is not None else {
            **blind.defaults, **dict(zip(state.key_cols, key, strict=True))}
        for col, delta in blind.add.items():
            new[col] = (new.get(col) or 0) + delta
        new.update(blind.set)
        return new

    def put(self, table: sa.Table, row: Row) -> None:
        """Create or replace a whole row."""
        state = self._state(table)
        key = tuple(row[c] for c in state.key_cols)
        if key not in state.cache and self.conn is not None and table.name not in self._empty:
            # Unknown prior state: flush as an upsert.
            state.blind.pop(key, None)
        state.cache[key] = row
        state.dirty.add(key)

    def delete(self, table: sa.Table, key: Key) -> None:
        """Remove a row if it exists."""
        state = self._state(table)
        state.blind.pop(key, None)
        state.cache[key] = None
        state.dirty.add(key)

    def bump(self, table: sa.Table, key: Mapping[str, Any], *,
             add: Mapping[str, int | float] | None = None, set: Mapping[str, Any] | None = None,
             defaults: Mapping[str, Any] | None = None) -> None:
        """Add to counters and assign columns of a row, creating it from ``defaults``.

        Counters in ``add`` start from the default (or 0) when the row is new.
        """
        state = self._state(table)
        if defaults and add and not defaults.keys().isdisjoint(add):
            raise ValueError("a counter in add= must not also have a default (it starts at 0)")
        k = tuple(key[c] for c in state.key_cols)
        if k in state.cache or self.conn is None or table.name in self._empty:
            row = self.get(table, k)
            new = dict(row) if row is not None else {**(defaults or {}), **key}
            for col, delta in (add or {}).items():
                new[col] = (new.get(col) or 0) + delta
            new.update(set or {})
            state.cache[k] = new
            state.dirty.add(k)
            return
        blind = state.blind.get(k)
        if blind is None:
            blind = state.blind[k] = _Blind({**(defaults or {}), **key})
        for col, delta in (add or {}).items():
            blind.add[col] = blind.add.get(col, 0) + delta
        blind.set.update(set or {})

    def rows(self, table: sa.Table) -> list[Row]:
        """Every cached live row of ``table`` (memory mode: the whole table)."""
        return [r for r in self._state(table).cache.values() if r is not None]

    # -- flushing -------------------------------------------------------------------------

    def _insert(self, table: sa.Table) -> Any:
        name = self.conn.dialect.name if self.conn is not None else "sqlite"
        return (postgresql.insert if name == "postgresql" else sqlite.insert)(table)

    def _upsert_stmt(self, state: _TableState, cols: tuple[str, ...],
                     add_cols: tuple[str, ...], update_cols: tuple[str, ...]) -> Any:
        """INSERT of ``cols``; on conflict add ``add_cols`` and assign ``update_cols``."""
        dialect = self.conn.dialect.name if self.conn is not None else "sqlite"
        cache_key = (dialect, state.table, cols, add_cols, update_cols)
        stmt = _STATEMENTS.get(cache_key)
        if stmt is None:
            ins = self._insert(state.table)
            table = state.table
            update = {c: (table.c[c] + ins.excluded[c]) if c in add_cols else ins.excluded[c]
                      for c in update_cols}
            if update:
                stmt = ins.on_conflict_do_update(index_elements=list(state.key_cols),
                                                 set_=update)
            else:
                stmt = ins.on_conflict_do_nothing(index_elements=list(state.key_cols))
            _STATEMENTS[cache_key] = stmt
        return stmt

    def flush(self) -> int:
        """Write every pending change; returns the number of rows written."""
        if self.conn is None:
            return 0
        written = 0
        for state in self._states.values():
            written += self._flush_table(state)
        return written

    def _flush_table(self, state: _TableState) -> int:
        assert self.conn is not None
        table = state.table
        inserts: dict[tuple[str, ...], list[Row]] = {}
        upserts: dict[tuple[str, ...], list[Row]] = {}
        deletes: list[Key] = []
        for key in sorted(state.dirty, key=repr):
            row = state.cache.get(key)
            if row is None:
                if key not in state.absent:
                    deletes.append(key)
                continue
            cols = tuple(sorted(row))
            target = inserts if key in state.absent else upserts
            target.setdefault(cols, []).append(row)
        written = 0
        if deletes:
            cond = sa.and_(*(table.c[c] == sa.bindparam(f"k_{c}") for c in state.key_cols))
            self.conn.execute(table.delete().where(cond),
                              [{f"k_{c}": v for c, v in zip(state.key_cols, k, strict=True)}
                               for k in deletes])
            written += len(deletes)
        for rows in inserts.values():
            self.conn.execute(table.insert(), rows)
            written += len(rows)
        for cols, rows in upserts.items():
            non_key = tuple(c for c in cols if c not in state.key_cols)
            self.conn.execute(self._upsert_stmt(state, cols, (), non_key), rows)
            written += len(rows)
        blind_groups: dict[tuple[tuple[str, ...], ...], list[Row]] = {}
        for key, blind in state.blind.items():
            row = {**blind.defaults, **dict(zip(state.key_cols, key, strict=True))}
            for col, delta in blind.add.items():
                row[col] = delta
            row.update(blind.set)
            add_cols = tuple(sorted(blind.add))
            group = (tuple(sorted(row)), add_cols, tuple(sorted({*add_cols, *blind.set})))
            blind_groups.setdefault(group, []).append(row)
        for (cols, add_cols, update_cols), rows in blind_groups.items():
            self.conn.execute(self._upsert_stmt(state, cols, add_cols, update_cols), rows)
            written += len(rows)
        # The database now holds exactly what the cache says.
        for key in state.dirty:
            if state.cache.get(key) is None:
                state.absent.add(key)
            else:
                state.absent.discard(key)
        state.dirty.clear()
        state.blind.clear()
        return written

    def forget(self) -> None:
        """Drop cached rows (after a flush) to bound memory; later gets read again."""
        for state in self._states.values():
            assert not state.dirty and not state.blind, "forget() before flush()"
            state.cache.clear()
            state.absent.clear()
        self._empty.clear()
