"""Daily usage rollups.

The nightly job (not an event reducer) fills the three ``usage_daily_*`` tables from the
raw projection rows of complete UTC days, then prunes old raw rows. Those tables are
deliberately *not* in the projection's ``tables``: a rebuild wipes and refolds a
projection's tables, and rolled-up figures of pruned days cannot be folded again.

The projection itself records which days were rolled up, from the job's
``rollup.completed`` events in the ``system`` stream, so that list is rebuildable.
"""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType, UTCDateTime

usage_daily_tools = sa.Table(
    "usage_daily_tools",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("tool_name", sa.Text, primary_key=True),
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("uses", sa.Integer, nullable=False),
    sa.Column("last_used", UTCDateTime),
    sa.Index("ix_usage_daily_tools_day", "day"),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Uses of one tool in one scope on one UTC day (written by the nightly job)."""

usage_daily_servers = sa.Table(
    "usage_daily_servers",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("server_name", sa.Text, primary_key=True),
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("uses", sa.Integer, nullable=False),
    sa.Column("last_used", UTCDateTime),
    sa.Index("ix_usage_daily_servers_day", "day"),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Uses of an MCP server's tools (``mcp__<server>__<tool>``) summed per scope and UTC day."""

usage_daily_messages = sa.Table(
    "usage_daily_messages",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("appended", sa.Integer, nullable=False),
    sa.Column("sessions", sa.Integer, nullable=False),
    sa.Column("retracted", sa.Integer, nullable=False),
    sa.Index("ix_usage_daily_messages_day", "day"),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Messages appended and retracted in one scope on one UTC day, and how many sessions
had either."""

usage_daily_tokens = sa.Table(
    "usage_daily_tokens",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("profile", sa.String(100), primary_key=True),
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("assemblies", sa.Integer, nullable=False),
    sa.Column("tokens_total", sa.BigInteger, nullable=False),
    sa.Column("tokens_max", sa.Integer, nullable=False),
    sa.Index("ix_usage_daily_tokens_day", "day"),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""``context.assembled`` figures per scope, profile and UTC day."""

rollup_days = sa.Table(
    "usage_rollup_days",
    metadata,
    # The event's ISO day as written: the catalog checks only its shape, and a reducer
    # must never fail on an event the store accepted.
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("digest", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""The UTC days already rolled up, from ``rollup.completed`` (the latest event wins)."""

JOB_TABLES: tuple[sa.Table, ...] = (usage_daily_tools, usage_daily_servers, usage_daily_messages,
                                    usage_daily_tokens)
"""Tables the nightly job owns; rebuilds never touch them."""


class UsageRollupsProjection(Projection):
    """Which days the nightly job has rolled up."""

    name: ClassVar[str] = "usage_rollups"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (rollup_days,)
    handles: ClassVar[frozenset[str]] = frozenset({"rollup.completed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Mark the event's day as rolled up."""
        data = event.data
        rows.put(rollup_days, {"day": data["day"], "rows": data["rows"],
                               "digest": data["digest"], "position": event.position})
