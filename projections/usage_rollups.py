"""Daily usage rollups.

The nightly job (not an event reducer) fills the ``usage_daily_*`` tables from the
raw projection rows of complete UTC days, then prunes old raw rows. Those tables are
deliberately *not* in the projection's ``tables``: a rebuild wipes and refolds a
projection's tables, and rolled-up figures of pruned days cannot be folded again.

The projection itself records which days were rolled up, from the job's
``rollup.completed`` events in the ``system`` stream, so that list is rebuildable.
"""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType, UTCDateTime


def _daily(name: str, key: sa.Column[Any] | None, *figures: sa.Column[Any]) -> sa.Table:
    """A table of figures per scope, ``key`` (if any) and UTC day, read by day."""
    return sa.Table(
        name,
        metadata,
        sa.Column("scope", sa.Text, primary_key=True),
        *([] if key is None else [key]),
        sa.Column("day", sa.Date, primary_key=True),
        *figures,
        sa.Index(f"ix_{name}_day", "day"),
        sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
    )


usage_daily_tools = _daily(
    "usage_daily_tools", sa.Column("tool_name", sa.Text, primary_key=True),
    sa.Column("uses", sa.Integer, nullable=False), sa.Column("last_used", UTCDateTime))
"""Uses of one tool in one scope on one UTC day (written by the nightly job)."""

usage_daily_servers = _daily(
    "usage_daily_servers", sa.Column("server_name", sa.Text, primary_key=True),
    sa.Column("uses", sa.Integer, nullable=False), sa.Column("last_used", UTCDateTime))
"""Uses of an MCP server's tools (``mcp__<server>__<tool>``) summed per scope and UTC day."""

usage_daily_messages = _daily(
    "usage_daily_messages", None,
    sa.Column("appended", sa.Integer, nullable=False),
    sa.Column("sessions", sa.Integer, nullable=False),
    sa.Column("retracted", sa.Integer, nullable=False))
"""Messages appended and retracted in one scope on one UTC day, and how many sessions
had either."""

usage_daily_tokens = _daily(
    "usage_daily_tokens", sa.Column("profile", sa.String(100), primary_key=True),
    sa.Column("assemblies", sa.Integer, nullable=False),
    sa.Column("tokens_total", sa.BigInteger, nullable=False),
    sa.Column("tokens_max", sa.Integer, nullable=False))
"""``context.assembled`` figures per scope, profile and UTC day."""

usage_daily_billed = _daily(
    "usage_daily_billed", sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("calls", sa.Integer, nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("cached_tokens", sa.BigInteger, nullable=False),
    sa.Column("cost", sa.Float))
"""``usage.reported`` figures per scope, model and UTC day: what the provider billed
(``cost`` NULL when no report of the day gave one)."""

rollup_days = sa.Table(
    "usage_rollup_days",
    metadata,
    # The event's ISO days as written: the catalog checks only their shape, and a reducer
    # must never fail on an event the store accepted.
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("last_day", sa.String(10), primary_key=True),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("digest", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("read_through", PositionType, nullable=False),
    sa.Column("prune_before", sa.String(10)),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""The UTC days (``day`` .. ``last_day``, one day or a stretch of empty ones) rolled up,
from ``rollup.completed`` (for one span the latest event wins). ``read_through`` is the
log position up to which the job had read every event (an older event's own position)."""

JOB_TABLES: tuple[sa.Table, ...] = (usage_daily_tools, usage_daily_servers, usage_daily_messages,
                                    usage_daily_tokens, usage_daily_billed)
"""Tables the nightly job owns; rebuilds never touch them."""


class UsageRollupsProjection(Projection):
    """Which days the nightly job has rolled up."""

    name: ClassVar[str] = "usage_rollups"
    # v2: spans of days, the position read through and the prune day.
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[sa.Table, ...]] = (rollup_days,)
    handles: ClassVar[frozenset[str]] = frozenset({"rollup.completed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Mark the event's day (or stretch of days) as rolled up."""
        data = event.data
        rows.put(rollup_days, {
            "day": data["day"], "last_day": data.get("last_day") or data["day"],
            "rows": data["rows"], "digest": data["digest"], "position": event.position,
            "read_through": data.get("read_through", event.position),
            "prune_before": data.get("prune_before")})
