"""What a projection is: a named, versioned reducer over events that owns some tables."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent

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
