"""Tool usage's tables, and the uses an event reports: what the live projection
(``tool_usage``), the recount after an erasure (``tool_usage_recount``) and the nightly
job's day reads (``rollup_day``) share. The rules of counting live in ``tool_usage``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from ctxledger.projections.base import metadata
from ctxledger.projections.session_scopes import session_scope_table
from ctxledger.store.schema import UTCDateTime

NO_SERVER = ""
"""``server_name`` of a use that names no server."""

tool_usage_scopes = session_scope_table("tool_usage_session_scopes")
"""The scope each session's uses are attributed to."""

tool_usage = sa.Table(
    "tool_usage",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("tool_name", sa.Text, primary_key=True),
    sa.Column("server_name", sa.Text, primary_key=True),
    sa.Column("lifetime_count", sa.Integer, nullable=False),
    sa.Column("last_used", UTCDateTime, nullable=False),
    sa.Column("in_order", sa.Integer, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Lifetime figures per (scope, tool, server); ``last_used`` is the newest use's time,
``in_order`` the number of uses that came in time order (the last ``tool_uses.seq``)."""


def _uses_table(name: str) -> sa.Table:
    return sa.Table(
        name,
        metadata,
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("server_name", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("used_at", UTCDateTime, nullable=False),
        # The window seeks (``view_loader``) read this key in order; the nightly job's day
        # reads and pruning seek it per known tool (``known_uses``).
        sa.PrimaryKeyConstraint("scope", "tool_name", "server_name", "used_at", "seq",
                                name=f"{name}_pkey"),
        sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
    )


tool_uses = _uses_table("tool_uses")
"""One row per use that came in time order; ``seq`` numbers them 1, 2, 3... per tool, in
the order of ``used_at``."""

tool_uses_late = _uses_table("tool_uses_late")
"""One row per use older than its tool's newest use when it came; ``seq`` is the tool's
lifetime count after it (unique per tool)."""

USE_TABLES = (tool_uses, tool_uses_late)
"""Every use is in exactly one of these."""

tool_usage_calls = sa.Table(
    "tool_usage_calls",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("call_id", sa.String(200), primary_key=True),
    sqlite_with_rowid=False,
)
"""The tool-call ids each session has reported (by a message's ``tool_calls`` or by
``tool.used``'s ``call_id``): a second report of a call is not a second use."""


def known_uses(table: sa.Table) -> sa.ColumnElement[bool]:
    """Uses in ``table`` (one of ``USE_TABLES``) of a tool ``tool_usage`` has, which is
    every use: added to a ``used_at`` range, it makes the range one key seek per tool
    (both backends plan the row-value ``IN`` that way) instead of a scan of every use."""
    pairs = sa.select(tool_usage.c.scope, tool_usage.c.tool_name, tool_usage.c.server_name)
    return sa.tuple_(table.c.scope, table.c.tool_name, table.c.server_name).in_(pairs)


Reported = tuple[str, str, str | None]
"""A use as an event reports it: tool name, server (``NO_SERVER`` for none), call id."""


def reported_uses(kind: str, data: Mapping[str, Any]) -> list[Reported]:
    """The tool uses an event reports: a ``tool.used``, or each tool call of a
    ``message.appended`` (none for any other event)."""
    if kind == "tool.used":
        return [(data["tool_name"], data.get("server_name") or NO_SERVER,
                 data.get("call_id"))]
    if kind == "message.appended":
        calls = data.get("tool_calls")
        if calls:
            return [(call["function"]["name"], NO_SERVER, call["id"]) for call in calls]
    return []
