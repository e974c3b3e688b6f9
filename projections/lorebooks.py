"""Scope lorebooks (world info): ``lorebook.set`` / ``lorebook.removed`` in
``scope:<name>`` streams. Setting a book id again replaces the book."""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.canonical import canonical_json
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

scope_lorebooks = sa.Table(
    "scope_lorebooks",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("book_id", sa.String(200), primary_key=True),
    sa.Column("book", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One row per book of a scope; ``book`` is its canonical JSON as written."""


class LorebooksProjection(Projection):
    """The lorebooks of each scope, written blind."""

    name: ClassVar[str] = "lorebooks"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (scope_lorebooks,)
    handles: ClassVar[frozenset[str]] = frozenset({"lorebook.set", "lorebook.removed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Add, replace or remove the named book of the stream's scope."""
        if stream_kind(event.stream_id) != "scope":
            return
        scope = event.stream_id[len(SCOPE_PREFIX):]
        book_id = event.data["book_id"]
        if event.type == "lorebook.set":
            rows.put(scope_lorebooks, {"scope": scope, "book_id": book_id,
                                       "book": canonical_json(event.data["book"]),
                                       "position": event.position})
        else:
            rows.delete(scope_lorebooks, (scope, book_id))
