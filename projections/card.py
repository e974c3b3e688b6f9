"""The current character card of each session, and of each scope.

``card.set`` merges: every field present replaces the current value, and a field set to
``""`` (or null) clears it. A whole card file (``replace``) sets every field, empty ones
included (so it exports as it came), and clears the rest. One row per field, so a merge
is a few blind writes and never reads the card first. A scope's card (``scope:<S>``
rows) is the card of the scope's sessions: a session's own fields are laid over it, and
a session's whole card hides it (``view_loader.load_card``).
"""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.canonical import canonical_json
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import stream_kind

card_fields = sa.Table(
    "card_fields",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("field", sa.String(100), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One card field of one session or scope stream; ``value`` is canonical JSON."""


def clears(value: object, *, whole: bool = False) -> bool:
    """True when setting a field to ``value`` removes it from the card (in a whole card,
    only null does: its empty strings are kept as written)."""
    return value is None or (value == "" and not whole)


class CardProjection(Projection):
    """Card fields per session and per scope, merged field by field."""

    name: ClassVar[str] = "card"
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[sa.Table, ...]] = (card_fields,)
    handles: ClassVar[frozenset[str]] = frozenset({"card.set"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Replace or clear each field the event names."""
        if stream_kind(event.stream_id) not in ("session", "scope"):
            return
        whole = event.data.get("replace") is True
        for field in sorted(event.data):
            value = event.data[field]
            if clears(value, whole=whole):
                rows.delete(card_fields, (event.stream_id, field))
            else:
                rows.put(card_fields, {"stream_id": event.stream_id, "field": field,
                                       "value": canonical_json(value),
                                       "position": event.position})
