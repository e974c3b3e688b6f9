"""What a projection is: a named, versioned reducer over events that owns some tables."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa

from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import NewEvent, RecordedEvent
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

metadata = sa.MetaData()
"""Every projection table lives on this metadata (migrations create them)."""

RawEvent = tuple[Any, ...]
"""An ``events`` row as a rebuild reads it (``store.read.RawRow``): position, stream_id,
stream_version, event_id, type, schema_version, data (text), metadata (text),
recorded_at (as the driver returns it), prev_hash, hash."""

TimeOf = Callable[[Any], datetime]
"""Turns a raw ``recorded_at`` into the aware UTC datetime ``RecordedEvent`` would hold."""


class RebuildFold(Protocol):
    """A projection's fast path through a rebuild (``Projection.rebuild_fold``).

    Called for every event of a type the projection handles with the raw row and its
    payload (decoded and upcast to the current version), it folds the event into the
    same ``RowStore`` the reducer writes through and returns True, or returns False
    to have the runner build the ``RecordedEvent`` and call ``apply`` instead. Whatever
    it folds must leave the rows exactly as ``apply`` would (property-tested).
    """

    def __call__(self, raw: RawEvent, data: dict[str, Any]) -> bool:
        """Fold one event; False when ``apply`` must fold it."""

    def finish(self) -> None:
        """Write back anything held aside; the runner calls it before every flush."""


class Projection(ABC):
    """A reducer from events to rows. ``apply`` must cost O(1) per event.

    Bump ``version`` whenever ``apply`` or the tables change meaning: a projection whose
    stored version differs is rebuilt from the log on open or by ``ctxledger rebuild``.
    Reducers only touch rows through ``RowStore`` so the same code runs inline (SQL),
    in a rebuild (memory first) and in a replay's scratch database.
    """

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[sa.Table, ...]]
    handles: ClassVar[frozenset[str]]
    """Event types this projection reacts to; others are never passed to ``apply``."""

    @abstractmethod
    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Fold one event into the projection's rows."""

    def rebuild_fold(self, rows: RowStore, time_of: TimeOf) -> RebuildFold | None:
        """A fast path for rebuilds that skips building a ``RecordedEvent`` per event, or
        None (the default: every event goes through ``apply``)."""
        return None

    erased_content: ClassVar[frozenset[str]] = frozenset()
    """Event types whose content ``forget_streams`` needs: an erasure reads them (O(the
    erased events)) before it blanks them."""

    def forget_streams(self, conn: sa.Connection, streams: Sequence[str],
                       erased: Sequence[RecordedEvent]) -> set[str]:
        """Remove what ``streams`` left in this projection's rows, now that every one of
        their events is erased: the tables then equal a rebuild of the log, at a cost
        proportional to those rows. ``erased`` holds the events of ``erased_content``
        types, as they were before the erasure. Returns the names of the tables changed
        (their files are scrubbed).

        The default fits a projection each of whose rows is written by one stream's
        events alone: a table with a ``stream_id`` column loses those streams' rows; one
        keyed by ``scope`` (written by the scope's own stream) loses the rows of the
        scopes whose streams are erased. A projection whose rows gather several streams'
        events (a count per scope) overrides it.
        """
        return forget_owned_rows(conn, self.tables, streams)

    def shared_keys(self, stream_id: str, event: NewEvent) -> Sequence[str]:
        """Keys of the rows ``apply`` would read and rewrite that events of *other*
        streams also rewrite (a count per scope, say). On PostgreSQL, appends on different
        streams run concurrently: an append locks these keys before it takes positions,
        so two such appends apply in position order, as a rebuild does. Rows keyed by the
        stream itself, and blind ``bump``s or ``put``s, need none."""
        return ()


_CHUNK = 500
"""Names per ``IN (...)``: under SQLite's and psycopg's bound-parameter limits."""


def forget_owned_rows(conn: sa.Connection, tables: Sequence[sa.Table],
                      streams: Sequence[str]) -> set[str]:
    """Delete the rows of ``tables`` that ``streams`` own: by ``stream_id``, or by
    ``scope`` for the scopes' own streams (``scope:<name>``) among them. Returns the
    names of the tables that had any."""
    changed: set[str] = set()
    scopes = [s[len(SCOPE_PREFIX):] for s in streams if stream_kind(s) == "scope"]
    for table in tables:
        if "stream_id" in table.c:
            column, names = table.c.stream_id, list(streams)
        elif "scope" in table.c:
            column, names = table.c.scope, scopes
        else:
            continue
        for start in range(0, len(names), _CHUNK):
            done = conn.execute(table.delete().where(column.in_(names[start:start + _CHUNK])))
            if done.rowcount:
                changed.add(table.name)
    return changed
