"""What a projection is: a named, versioned reducer over events that owns some tables."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa

from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import NewEvent, RecordedEvent

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

    def shared_keys(self, stream_id: str, event: NewEvent) -> Sequence[str]:
        """Keys of the rows ``apply`` would read and rewrite that events of *other*
        streams also rewrite (a count per scope, say). On PostgreSQL, appends on different
        streams run concurrently: an append locks these keys before it takes positions,
        so two such appends apply in position order, as a rebuild does. Rows keyed by the
        stream itself, and blind ``bump``s or ``put``s, need none."""
        return ()
