"""Reading the log: one stream, or everything after a position, stopping at a position or time.

Rebuilds read the whole log, so the scan runs compiled statements on the driver's cursor
and decodes rows with ``EventDecoder``: payloads already at the current schema version
skip the upcaster, empty metadata skips the JSON parser, and a batch's shared
``recorded_at`` is parsed once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from ctxledger.store.clock import ensure_utc
from ctxledger.store.gc_pause import cyclic_gc_paused
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType, events
from ctxledger.store.sql_engine import driver_statement, result_processor
from ctxledger.store.upcasting import current_version, upcast

_COLUMNS = (
    events.c.position, events.c.stream_id, events.c.stream_version, events.c.event_id,
    events.c.type, events.c.schema_version, events.c.data, events.c.metadata,
    events.c.recorded_at, events.c.prev_hash, events.c.hash,
)
_RECORDED_AT = 8
_json_decode = json.JSONDecoder().decode


_HUGE = 2.0**63
_FLAT = frozenset({str, int, bool, type(None)})


def _has_huge_float(value: Any) -> bool:
    """Whether ``value`` holds a float of magnitude 2**63 or more: orjson reads integers
    past 64 bits as floats, so such a value may have been an integer in the text."""
    if type(value) is dict and _FLAT.issuperset(map(type, value.values())):
        return False  # the usual payload: flat scalars, no float at all (checked in C)
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and not -_HUGE < item < _HUGE:
            return True
    return False


def _decode(text: str) -> Any:
    """``json.loads(text)``, through orjson (several times faster on the rebuild path).

    What orjson refuses (escaped lone surrogates) or may read differently (integers past
    64 bits) goes to the json module, so every stored value reads back the same.
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _json_decode(text)
    return _json_decode(text) if _has_huge_float(value) else value


_loads = _decode
_orjson_loads = orjson.loads

# A frozen dataclass's __init__ sets each field through object.__setattr__, which costs
# about 1.5us per event: a rebuild's whole budget is under 7us. EventDecoder fills the
# slots directly instead, which makes the same frozen, equal, hashable record. Fail at
# import, not with a half-built record, if the fields ever stop matching the columns.
if tuple(f.name for f in dataclasses.fields(RecordedEvent)) != tuple(c.name for c in _COLUMNS):
    raise ImportError("ctxledger.store.read: RecordedEvent fields no longer match the events "
                      "columns")
_new_record = object.__new__
(_set_position, _set_stream_id, _set_stream_version, _set_event_id, _set_type,
 _set_schema_version, _set_data, _set_metadata, _set_recorded_at, _set_prev_hash,
 _set_hash) = (vars(RecordedEvent)[c.name].__set__ for c in _COLUMNS)


def recorded_event(position: int, stream_id: str, stream_version: int, event_id: str,
                   type: str, schema_version: int, data: dict[str, Any],
                   metadata: dict[str, Any], recorded_at: datetime, prev_hash: str,
                   hash: str) -> RecordedEvent:
    """``RecordedEvent(...)`` with the same fields, built without the frozen ``__init__``."""
    event: RecordedEvent = _new_record(RecordedEvent)
    _set_position(event, position)
    _set_stream_id(event, stream_id)
    _set_stream_version(event, stream_version)
    _set_event_id(event, event_id)
    _set_type(event, type)
    _set_schema_version(event, schema_version)
    _set_data(event, data)
    _set_metadata(event, metadata)
    _set_recorded_at(event, recorded_at)
    _set_prev_hash(event, prev_hash)
    _set_hash(event, hash)
    return event

RawRow = tuple[Any, ...]
"""An ``events`` row as the driver returns it, columns in ``_COLUMNS`` order."""


class EventDecoder:
    """Turns raw ``events`` rows of one dialect into ``RecordedEvent``s, upcasting old payloads.

    Not thread-safe (it memoizes the last timestamp); make one per reader.
    """

    __slots__ = ("_current", "_last_raw", "_last_time", "_time")

    def __init__(self, dialect: Dialect) -> None:
        self._time = result_processor(dialect, events.c.recorded_at.type)
        self._current: dict[str, int] = {}
        self._last_raw: Any = None
        self._last_time: datetime | None = None

    def recorded_at(self, raw: Any) -> datetime:
        """The aware UTC ``recorded_at`` of a raw column value."""
        if raw == self._last_raw and self._last_time is not None:
            return self._last_time
        value = raw if self._time is None else self._time(raw)
        assert isinstance(value, datetime)
        self._last_raw, self._last_time = raw, value
        return value

    def payload(self, row: RawRow) -> tuple[int, dict[str, Any]]:
        """The (schema version, data) of a raw row, upcast to the current version."""
        kind = row[4]
        version = row[5]
        # ``_decode`` inlined (a rebuild decodes every event): a flat payload, the usual
        # one, needs no huge-float walk.
        text = row[6]
        try:
            data = _orjson_loads(text)
        except orjson.JSONDecodeError:
            data = _json_decode(text)
        else:
            if not (type(data) is dict and _FLAT.issuperset(map(type, data.values()))) \
                    and _has_huge_float(data):
                data = _json_decode(text)
        current = self._current.get(kind)
        if current is None:
            current = self._current[kind] = current_version(kind)
        if version != current:
            version, data = upcast(kind, version, data)
        return version, data

    def event(self, row: RawRow, version: int, data: dict[str, Any]) -> RecordedEvent:
        """The record of a raw row whose ``payload`` is already known."""
        meta = row[7]
        raw_time = row[_RECORDED_AT]
        if raw_time == self._last_raw and self._last_time is not None:
            when = self._last_time
        else:
            when = self.recorded_at(raw_time)
        return recorded_event(row[0], row[1], row[2], row[3], row[4], version, data,
                              {} if meta == "{}" else _decode(meta), when, row[9], row[10])

    def __call__(self, row: RawRow) -> RecordedEvent:
        """Decode one raw row."""
        version, data = self.payload(row)
        return self.event(row, version, data)


def row_to_event(row: Any) -> RecordedEvent:
    """Build a ``RecordedEvent`` from a processed row, upcasting old payloads."""
    version, data = upcast(row[4], row[5], _loads(row[6]))
    return RecordedEvent(
        position=row[0], stream_id=row[1], stream_version=row[2], event_id=row[3], type=row[4],
        schema_version=version, data=data, metadata=_loads(row[7]), recorded_at=row[8],
        prev_hash=row[9], hash=row[10],
    )


def _stream_statement(bounded: bool) -> sa.Select[Any]:
    query = sa.select(*_COLUMNS).where(
        events.c.stream_id == sa.bindparam("stream_id"),
        events.c.stream_version >= sa.bindparam("from_version", type_=sa.Integer))
    if bounded:
        query = query.where(
            events.c.stream_version <= sa.bindparam("to_version", type_=sa.Integer))
    return query.order_by(events.c.stream_version)


def read_stream(conn: sa.Connection, stream_id: str, from_version: int = 1,
                to_version: int | None = None) -> list[RecordedEvent]:
    """Events of one stream with ``from_version <= stream_version <= to_version``.

    Compiled once per dialect and decoded by ``EventDecoder``: a chat's history is read
    whole on every turn, so this is the read view's hot path."""
    bounded = to_version is not None
    stmt = driver_statement(conn.dialect, ("ctxledger.store.read.stream", bounded),
                            lambda: _stream_statement(bounded))
    values: dict[str, Any] = {"stream_id": stream_id, "from_version": from_version}
    if bounded:
        values["to_version"] = to_version
    rows = stmt.execute(conn, values).fetchall()
    decode = EventDecoder(conn.dialect)
    if len(rows) < _PAUSE_GC_ROWS:
        return [decode(row) for row in rows]
    with cyclic_gc_paused():
        return [decode(row) for row in rows]


_PAUSE_GC_ROWS = 256
"""Rows from which a stream read pauses the cyclic collector while it decodes them."""


def _page_statement(bounded: bool, hashes: bool) -> sa.Select[Any]:
    # Without the hash columns a rebuild reads a sixth less per row: it needs them only
    # for the few events it builds a record of (``read_hashes``, ``with_hashes``).
    columns = _COLUMNS if hashes else _COLUMNS[:_PREV_HASH]
    # Positions are 64-bit: typed as the column, a cursor past 2**31 is no overflow.
    after, until, size = (sa.bindparam(name, type_=PositionType, required=False)
                          for name in ("after", "until", "size"))
    query = sa.select(*columns).where(events.c.position > after)
    if bounded:
        query = query.where(events.c.position <= until)
    return query.order_by(events.c.position).limit(size)


_PREV_HASH = 9
"""Index of ``prev_hash`` in a raw row: a row read without hashes ends before it."""


def read_raw_pages(conn: sa.Connection, after: int = 0, *, until_position: int | None = None,
                   chunk: int = 20_000, hashes: bool = True) -> Iterator[list[RawRow]]:
    """Raw rows with ``after < position <= until_position`` in position order, a page at a time.

    Each page is its own indexed query, so no cursor stays open while the caller writes.
    Decode rows with ``EventDecoder``. Without ``hashes``, rows end before ``prev_hash``
    and ``hash`` (``read_hashes`` and ``with_hashes`` read them).
    """
    bounded = until_position is not None
    stmt = driver_statement(conn.dialect, ("ctxledger.store.read.page", bounded, hashes),
                            lambda: _page_statement(bounded, hashes))
    cursor_pos = after
    while True:
        values: dict[str, int] = {"after": cursor_pos, "size": chunk}
        if until_position is not None:
            values["until"] = until_position
        rows = stmt.execute(conn, values).fetchall()
        if rows:
            yield rows
        if len(rows) < chunk:
            return
        cursor_pos = rows[-1][0]


Hashes = dict[int, tuple[str, str]]
"""Position -> (prev_hash, hash)."""


def read_hashes(conn: sa.Connection, first: int, last: int, types: Iterable[str]) -> Hashes:
    """The hashes of the events of ``types`` with ``first <= position <= last``: one
    query for a page's rows of the types a rebuild builds records of."""
    kinds = tuple(sorted(set(types)))
    if not kinds:
        return {}
    stmt = driver_statement(conn.dialect, ("ctxledger.store.read.hashes_of", kinds), lambda: (
        sa.select(events.c.position, events.c.prev_hash, events.c.hash).where(
            events.c.position >= sa.bindparam("first", type_=PositionType, required=False),
            events.c.position <= sa.bindparam("last", type_=PositionType, required=False),
            events.c.type.in_(sa.bindparam("kinds", value=list(kinds), literal_execute=True)))))
    found = stmt.fetch(conn, {"first": first, "last": last})
    return {int(position): (prev, hash_) for position, prev, hash_ in found}


def with_hashes(conn: sa.Connection, row: RawRow, known: Hashes | None = None) -> RawRow:
    """``row`` with its ``prev_hash`` and ``hash``, when ``read_raw_pages`` left them out:
    from ``known`` (``read_hashes``) when it has them, else read."""
    if len(row) > _PREV_HASH:
        return row
    found = None if known is None else known.get(row[0])
    if found is not None:
        return (*row, *found)
    stmt = driver_statement(conn.dialect, ("ctxledger.store.read.hashes",), lambda: sa.select(
        events.c.prev_hash, events.c.hash).where(events.c.position == sa.bindparam(
            "position", type_=sa.Integer)))
    got = stmt.fetch(conn, {"position": row[0]})
    return (*row, *got[0])


def read_all(conn: sa.Connection, after: int = 0, limit: int | None = None, *,
             until_position: int | None = None, until_time: datetime | None = None,
             stream_ids: tuple[str, ...] | None = None,
             chunk: int = 5000) -> Iterator[RecordedEvent]:
    """Every event with ``position > after`` in position order.

    Stops at ``until_position`` (inclusive) or before the first event recorded after
    ``until_time``, so the result is always a prefix of the log, even if the clock
    went backwards. Reads in chunks to keep memory flat on large logs.
    """
    until = ensure_utc(until_time, "until") if until_time is not None else None
    if limit is not None and limit <= 0:
        return
    if stream_ids is None:
        decode = EventDecoder(conn.dialect)
        remaining = limit
        size = chunk if limit is None else min(chunk, limit)
        for page in read_raw_pages(conn, after, until_position=until_position, chunk=size):
            for row in page:
                if until is not None and decode.recorded_at(row[_RECORDED_AT]) > until:
                    return
                yield decode(row)
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
        return
    yield from _read_streams(conn, after, limit, until_position, until, stream_ids, chunk)


def _read_streams(conn: sa.Connection, after: int, limit: int | None,
                  until_position: int | None, until: datetime | None,
                  stream_ids: tuple[str, ...], chunk: int) -> Iterator[RecordedEvent]:
    """``read_all`` restricted to some streams (SQLAlchemy path; not a hot one)."""
    remaining = limit
    cursor = after
    while remaining is None or remaining > 0:
        size = chunk if remaining is None else min(chunk, remaining)
        query = sa.select(*_COLUMNS).where(events.c.position > cursor,
                                           events.c.stream_id.in_(stream_ids))
        if until_position is not None:
            query = query.where(events.c.position <= until_position)
        rows = conn.execute(query.order_by(events.c.position).limit(size)).all()
        for row in rows:
            if until is not None and row[8] > until:
                return
            yield row_to_event(row)
        if len(rows) < size:
            return
        cursor = rows[-1][0]
        if remaining is not None:
            remaining -= len(rows)


def read_where(conn: sa.Connection, clause: sa.ColumnElement[bool]) -> Iterator[RecordedEvent]:
    """The events ``clause`` selects, in position order, read as they come (not held)."""
    query = (sa.select(*_COLUMNS).where(clause).order_by(events.c.position)
             .execution_options(yield_per=FOLD_ROWS))
    for row in conn.execute(query):
        yield row_to_event(row)


FOLD_ROWS = 5_000
"""Rows ``read_where`` fetches at a time."""


def _head_select() -> sa.Select[Any]:
    return sa.select(sa.func.coalesce(sa.func.max(events.c.position), 0))


def head_position(conn: sa.Connection) -> int:
    """The highest position in the log (0 when empty). Compiled once: every assembly
    reads it."""
    return int(driver_statement(conn.dialect, ("read.head",), _head_select).fetch(conn)[0][0])


def position_at(conn: sa.Connection, when: datetime) -> int:
    """The last position of the prefix recorded at or before ``when`` (0 if none).

    The prefix ends just before the first event recorded after ``when``; both look-ups
    use an index, so this does not scan the log.
    """
    until = ensure_utc(when, "until")
    first_after = conn.execute(
        sa.select(sa.func.min(events.c.position)).where(events.c.recorded_at > until)
    ).scalar_one()
    if first_after is None:
        return head_position(conn)
    last = conn.execute(
        sa.select(sa.func.max(events.c.position)).where(events.c.position < first_after)
    ).scalar_one()
    return int(last or 0)


def read_stream_until(conn: sa.Connection, stream_id: str,
                      until_position: int | None = None) -> list[RecordedEvent]:
    """The events of one stream up to ``until_position`` (inclusive), in version order.

    A seek on ``(stream_id, stream_version)``: positions rise with versions within a
    stream, so the cut is a prefix of the stream and the cost is that stream's events.
    """
    query = sa.select(*_COLUMNS).where(events.c.stream_id == stream_id)
    if until_position is not None:
        query = query.where(events.c.position <= until_position)
    return [row_to_event(r) for r in conn.execute(query.order_by(events.c.stream_version))]


def recorded_at_until(conn: sa.Connection, position: int) -> datetime | None:
    """``recorded_at`` of the last event at or before ``position`` (None when there is none);
    one seek on the primary key."""
    value = conn.execute(sa.select(events.c.recorded_at).where(events.c.position <= position)
                         .order_by(events.c.position.desc()).limit(1)).scalar_one_or_none()
    return None if value is None else ensure_utc(value, "recorded_at")


def stored_event_ids(conn: sa.Connection, ids: Iterable[str], chunk: int = 500) -> set[str]:
    """Which of ``ids`` the log already holds (looked up ``chunk`` at a time)."""
    wanted = list(dict.fromkeys(ids))
    found: set[str] = set()
    for start in range(0, len(wanted), chunk):
        part = wanted[start:start + chunk]
        found.update(conn.execute(sa.select(events.c.event_id)
                                  .where(events.c.event_id.in_(part))).scalars())
    return found
