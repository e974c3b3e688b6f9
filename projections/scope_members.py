"""Scope members: which sessions ever joined each scope, and the position each joined at.

Append-only: a ``session.started`` adds ``(scope, session)`` once (the first join is kept),
and a session that later moves to another scope stays listed under the old one, since
its earlier events still count there. A replay of the ``session`` profile finds the
scope's sessions here, cut at its position, instead of scanning the log.
"""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import DEFAULT_SCOPE, stream_kind

scope_members = sa.Table(
    "scope_members",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("position", PositionType, nullable=False),
    sa.Index("ix_scope_members_stream_id", "stream_id"),  # an erase deletes by session
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One row per (scope, session) ever joined; ``position`` is the first join."""


class ScopeMembersProjection(Projection):
    """Sessions by scope, with the position each joined."""

    name: ClassVar[str] = "scope_members"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (scope_members,)
    handles: ClassVar[frozenset[str]] = frozenset({"session.started"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Add the session to its scope unless it joined it before (a blind upsert)."""
        if stream_kind(event.stream_id) != "session":
            return
        scope = event.data.get("scope") or DEFAULT_SCOPE
        # No add/set: an existing row is left as it is, so the first join's position stays.
        rows.bump(scope_members, {"scope": scope, "stream_id": event.stream_id},
                  defaults={"position": event.position})


def members_until(conn: sa.Connection, scope: str, position: int) -> list[str]:
    """The sessions that joined ``scope`` at or before ``position``, by stream id."""
    rows = conn.execute(sa.select(scope_members.c.stream_id)
                        .where(scope_members.c.scope == scope,
                               scope_members.c.position <= position))
    # Sorted here: PostgreSQL orders text by collation, SQLite by bytes.
    return sorted(str(row.stream_id) for row in rows)
