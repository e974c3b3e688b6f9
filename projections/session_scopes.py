"""Which scope a session belongs to, as seen by a projection that attributes session events
to scopes (tool usage, observations).

Each such projection keeps its own small ``stream_id -> scope`` table instead of reading
``sessions``: a projection is rebuilt alone when its version changes, and reading another
projection's table would then see that table's *final* state, not the state at each
event, so a session that moved scope would be attributed differently after the rebuild.
"""

from __future__ import annotations

import sqlalchemy as sa

from ctxledger.projections.base import metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.streams import DEFAULT_SCOPE


def session_scope_table(name: str) -> sa.Table:
    """Define a ``stream_id -> scope`` table called ``name`` on the projection metadata."""
    return sa.Table(
        name,
        metadata,
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("scope", sa.Text, nullable=False),
        sqlite_with_rowid=False,
    )


def record_session_scope(table: sa.Table, event: RecordedEvent, rows: RowStore) -> None:
    """Fold a ``session.started``: the session's later events belong to its scope."""
    rows.put(table, {"stream_id": event.stream_id,
                     "scope": event.data.get("scope") or DEFAULT_SCOPE})


def session_scope(table: sa.Table, stream_id: str, rows: RowStore) -> str:
    """The scope of ``stream_id`` so far (``default`` before any ``session.started``)."""
    row = rows.get(table, (stream_id,))
    return DEFAULT_SCOPE if row is None else str(row["scope"])
