"""Tool usage per scope: lifetime count and last use per tool, plus every use's exact time.

Each use gets ``seq`` = the tool's lifetime count after that use, so the number of uses
in a window ``[lo, hi]`` is ``seq(last use <= hi) - seq(first use >= lo) + 1``: two index
seeks on ``(scope, tool_name, used_at, seq)``, whatever the history length. The formula
only needs the rows inside the window, so the nightly job may prune older raw rows.

``used_at`` is the event's ``recorded_at`` clamped to be non-decreasing per tool: if the
clock steps back, a use is stamped with the tool's previous ``last_used``. That keeps
``seq`` and ``used_at`` in the same order, which the window arithmetic relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time
from typing import Any, ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, RawEvent, TimeOf, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.projections.session_scopes import (
    record_session_scope,
    session_scope,
    session_scope_table,
)
from ctxledger.store.records import NewEvent, RecordedEvent
from ctxledger.store.schema import UTCDateTime
from ctxledger.store.streams import stream_kind

tool_usage_scopes = session_scope_table("tool_usage_session_scopes")
"""The scope each session's uses are attributed to."""

tool_usage = sa.Table(
    "tool_usage",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("tool_name", sa.Text, primary_key=True),
    sa.Column("server_name", sa.Text),
    sa.Column("lifetime_count", sa.Integer, nullable=False),
    sa.Column("last_used", UTCDateTime, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Lifetime figures per (scope, tool); ``server_name`` is the last one reported."""

tool_uses = sa.Table(
    "tool_uses",
    metadata,
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("used_at", UTCDateTime, nullable=False),
    # The window seeks (``read_view._use_seek``) read this key in order; ``seq`` rises with
    # ``used_at`` per tool, so (scope, tool_name, seq) is unique too.
    sa.PrimaryKeyConstraint("scope", "tool_name", "used_at", "seq", name="tool_uses_pkey"),
    # No index on used_at (issue 13, migration 0012): the nightly job's day reads and
    # pruning seek this key per known tool (``known_tool_uses``).
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One row per use; ``seq`` is the lifetime count after the use (1, 2, 3...)."""


def known_tool_uses() -> sa.ColumnElement[bool]:
    """Uses of a ``(scope, tool_name)`` that ``tool_usage`` has, which is every use: added
    to a ``used_at`` range, it makes the range one ``tool_uses`` key seek per tool (both
    backends plan the row-value ``IN`` that way) instead of a scan of every use."""
    pairs = sa.select(tool_usage.c.scope, tool_usage.c.tool_name)
    return sa.tuple_(tool_uses.c.scope, tool_uses.c.tool_name).in_(pairs)


class ToolUsageProjection(Projection):
    """Lifetime and exact-time usage of tools, attributed to the session's scope."""

    name: ClassVar[str] = "tool_usage"
    # v2: ``rollup.completed`` with ``prune_before`` drops older per-use rows.
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[sa.Table, ...]] = (tool_usage_scopes, tool_usage, tool_uses)
    handles: ClassVar[frozenset[str]] = frozenset(
        {"session.started", "tool.used", "rollup.completed"})

    def shared_keys(self, stream_id: str, event: NewEvent) -> Sequence[str]:
        """A use reads and rewrites its tool's count, shared by every session of the
        scope: locked per tool name (the scope is only known from the table)."""
        if event.type != "tool.used" or stream_kind(stream_id) != "session":
            return ()
        return (str(event.data.get("tool_name")),)

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Record the session's scope, or count one use (two primary-key reads), or prune
        the per-use rows the nightly job has rolled up and no longer needs."""
        if event.type == "rollup.completed":
            prune_rolled_up_uses(event, rows)
            return
        if stream_kind(event.stream_id) != "session":
            return
        if event.type == "session.started":
            record_session_scope(tool_usage_scopes, event, rows)
            return
        scope, name, count, used_at = _count_use(rows, event.stream_id, event.data,
                                                 event.recorded_at)
        rows.put(tool_uses, {"scope": scope, "tool_name": name, "seq": count,
                             "used_at": used_at})

    def rebuild_fold(self, rows: RowStore, time_of: TimeOf) -> _UsageRebuildFold:
        """Uses counted from the raw event, without a record; the rest through ``apply``."""
        return _UsageRebuildFold(rows, time_of)


_USE_COLUMNS = ("scope", "tool_name", "seq", "used_at")


def _count_use(rows: RowStore, stream_id: str, data: dict[str, Any],
               recorded_at: datetime) -> tuple[str, str, int, datetime]:
    """Count one use of a session's tool (two primary-key reads, the tool's row put);
    returns the use's ``tool_uses`` row, in ``_USE_COLUMNS`` order, for the caller to
    write."""
    scope = session_scope(tool_usage_scopes, stream_id, rows)
    name = data["tool_name"]
    # The previous count is needed for seq, the previous time for clamping.
    prior = rows.get(tool_usage, (scope, name))
    count = 1 if prior is None else int(prior["lifetime_count"]) + 1
    used_at = recorded_at
    if prior is not None and prior["last_used"] > used_at:
        used_at = prior["last_used"]
    server = data.get("server_name")
    if server is None and prior is not None:
        server = prior["server_name"]
    rows.put(tool_usage, {"scope": scope, "tool_name": name, "server_name": server,
                          "lifetime_count": count, "last_used": used_at})
    return scope, name, count, used_at


class _UsageRebuildFold:
    """``tool_usage`` through a rebuild: uses counted from the raw event, without a record.

    Each use's ``tool_uses`` row (a new key: its seq is the tool's new count) is held
    aside as a tuple, not put in the ``RowStore``: nothing reads those rows back during a
    rebuild but a prune, so they are written as plain inserts before a
    ``rollup.completed`` goes through ``apply``, and when the fold finishes (or holds
    too many).
    """

    __slots__ = ("_aside", "_rows", "_time_of")

    def __init__(self, rows: RowStore, time_of: TimeOf) -> None:
        self._rows = rows
        self._time_of = time_of
        self._aside: list[tuple[str, str, int, datetime]] = []

    def __call__(self, raw: RawEvent, data: dict[str, Any]) -> bool:
        if raw[4] != "tool.used":
            if raw[4] == "rollup.completed":
                self.finish()  # the prune deletes uses through SQL
            return False
        if stream_kind(raw[1]) == "session":
            self._aside.append(_count_use(self._rows, raw[1], data, self._time_of(raw[8])))
            if len(self._aside) >= RowStore.ASIDE_ROWS:
                self.finish()
        return True

    def finish(self) -> None:
        """Write the uses held aside."""
        if self._aside:
            self._rows.insert_new(tool_uses, _USE_COLUMNS, self._aside)
            self._aside = []


def prune_rolled_up_uses(event: RecordedEvent, rows: RowStore) -> None:
    """Drop per-use rows from before ``prune_before``: only the lifetime figures and the
    rows inside any usage window are still read, and the rollups keep the daily counts.

    Driven by the event (not by the job's clock) so a rebuild prunes the same rows at the
    same point of the log, and the live tables keep equalling a rebuild.
    """
    before = event.data.get("prune_before")
    if not before:
        return
    cutoff = datetime.combine(date.fromisoformat(before), time(), UTC)
    # Pending ``tool_usage`` rows first: the DELETE finds uses through that table.
    rows.flush(tool_usage)
    rows.delete_where(tool_uses, sa.and_(known_tool_uses(), tool_uses.c.used_at < cutoff),
                      lambda row: bool(row["used_at"] < cutoff))
