"""What a projection is: a named, versioned reducer over events that owns some tables."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import NewEvent, RecordedEvent

metadata = sa.MetaData()
"""Every projection table lives on this metadata (migrations create them)."""


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

    def shared_keys(self, stream_id: str, event: NewEvent) -> Sequence[str]:
        """Keys of the rows ``apply`` would read and rewrite that events of *other*
        streams also rewrite (a count per scope, say). On PostgreSQL, appends on different
        streams run concurrently: an append locks these keys before it takes positions,
        so two such appends apply in position order, as a rebuild does. Rows keyed by the
        stream itself, and blind ``bump``s or ``put``s, need none."""
        return ()
