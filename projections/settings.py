"""Settings: scope defaults (``setting.changed`` in ``scope:<name>``) and session overrides
(``setting.changed`` in a session stream). Values are kept as canonical JSON text.

Resolution (scope defaults overlaid by session overrides) happens when a view is loaded,
so changing a scope default reaches every session of the scope without touching them.
"""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.canonical import canonical_json
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

scope_settings = sa.Table(
    "scope_settings",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""A scope's default for one setting key (canonical JSON ``value``)."""

session_settings = sa.Table(
    "session_settings",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""A session's override of one setting key (canonical JSON ``value``)."""


class SettingsProjection(Projection):
    """The latest value of every setting key, per scope and per session (blind writes)."""

    name: ClassVar[str] = "settings"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (scope_settings, session_settings)
    handles: ClassVar[frozenset[str]] = frozenset({"setting.changed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Store the value under the scope or the session the stream names."""
        data = event.data
        value = canonical_json(data["value"])
        kind = stream_kind(event.stream_id)
        if kind == "scope":
            rows.put(scope_settings, {"scope": event.stream_id[len(SCOPE_PREFIX):],
                                      "key": data["key"], "value": value,
                                      "position": event.position})
        elif kind == "session":
            rows.put(session_settings, {"stream_id": event.stream_id, "key": data["key"],
                                        "value": value, "position": event.position})
