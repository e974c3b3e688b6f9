"""Context items of the ``novel`` profile, per session: ``item.put`` creates or replaces an
item (its ``position`` becomes that put's, which is the put order) and ``item.removed``
deletes it."""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import stream_kind

FLAGS = ("active", "in_scene", "pov", "evolving", "critical")
"""Optional booleans of an item, stored as given (None when absent)."""

context_items = sa.Table(
    "context_items",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("item_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("chapter", sa.Integer),
    *(sa.Column(flag, sa.Boolean) for flag in FLAGS),
    sa.Column("position", PositionType, nullable=False),
    sa.Index("ix_context_items_stream_position", "stream_id", "position"),
)
"""The current items of each session; ``position`` is the item's last put."""


class ContextItemsProjection(Projection):
    """Current context items per session, written blind."""

    name: ClassVar[str] = "context_items"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (context_items,)
    handles: ClassVar[frozenset[str]] = frozenset({"item.put", "item.removed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Replace the whole item on a put; delete it on a removal."""
        if stream_kind(event.stream_id) != "session":
            return
        data = event.data
        if event.type == "item.removed":
            rows.delete(context_items, (event.stream_id, data["item_id"]))
            return
        row = {"stream_id": event.stream_id, "item_id": data["item_id"], "kind": data["kind"],
               "content": data["content"], "chapter": data.get("chapter"),
               "position": event.position}
        for flag in FLAGS:
            row[flag] = data.get(flag)
        rows.put(context_items, row)
