"""Documents per session: the latest ``document.put`` of each ``doc_id``. The content (a
string or a JSON object) is kept as canonical JSON text."""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.canonical import canonical_json
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import stream_kind

documents = sa.Table(
    "documents",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("doc_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
)
"""The current version of each document; ``content`` is canonical JSON."""


class DocumentsProjection(Projection):
    """Latest document per (session, doc_id), written blind."""

    name: ClassVar[str] = "documents"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (documents,)
    handles: ClassVar[frozenset[str]] = frozenset({"document.put"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Replace the document."""
        if stream_kind(event.stream_id) != "session":
            return
        data = event.data
        rows.put(documents, {"stream_id": event.stream_id, "doc_id": data["doc_id"],
                             "kind": data["kind"], "content": canonical_json(data["content"]),
                             "position": event.position})
