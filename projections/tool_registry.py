"""Tool registry: the tools registered in each scope (``tool.registered`` / ``tool.removed``
in ``scope:<name>`` streams). Registering a name again replaces its entry."""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

scope_tools = sa.Table(
    "scope_tools",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("tool_type", sa.String(20), nullable=False),
    sa.Column("server_name", sa.Text),
    sa.Column("description", sa.Text),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One row per tool currently registered in a scope; ``position`` is its last registration."""


class ToolRegistryProjection(Projection):
    """Registered tools per scope, written blind."""

    name: ClassVar[str] = "tool_registry"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (scope_tools,)
    handles: ClassVar[frozenset[str]] = frozenset({"tool.registered", "tool.removed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Add, replace or remove the named tool of the stream's scope."""
        if stream_kind(event.stream_id) != "scope":
            return
        scope = event.stream_id[len(SCOPE_PREFIX):]
        data = event.data
        if event.type == "tool.registered":
            rows.put(scope_tools, {
                "scope": scope, "name": data["name"], "tool_type": data["tool_type"],
                "server_name": data.get("server_name"), "description": data.get("description"),
                "position": event.position,
            })
        else:
            rows.delete(scope_tools, (scope, data["name"]))
