"""Tool usage per scope: lifetime count and last use per tool, plus every use's exact time.

A tool is a ``(tool_name, server_name)`` pair: the same bare name reported by two MCP
servers (``create_issue`` of ``github`` and of ``linear``) is two tools, each credited to
its own server. ``server_name`` is ``''`` for a use that names no server.

Uses arriving in time order (each at or after the tool's newest use so far) get ``seq`` =
the tool's count of such uses, so the number of them in a window ``[lo, hi]`` is
``seq(last use <= hi) - seq(first use >= lo) + 1``: two index seeks on ``tool_uses``,
whatever the history length. A use older than the tool's newest (a clock stepping back,
an import with trusted timestamps of a log grouped by session) is kept at its own time in
``tool_uses_late`` and counted there by a range read of the window, which holds only such
uses. The formulas only need the rows inside the window, so the nightly job may prune
older raw rows.

A use is reported by ``tool.used``, or by a tool call of an assistant message (each call
of its ``tool_calls`` is one use of the tool its ``function.name`` names, of no server).
A call reported both ways in one session (the message's call id, and ``tool.used`` with
that ``call_id``), in either order, counts once: the first report counts, at its time and
under its tool and server; the later one is a repeat (``tool_usage_calls`` remembers the
call ids a session reported). A retracted or replaced message's calls were still made:
they stay counted.

A fork's copies that do not count toward the scope (``fork_copies``) are not uses; their
call ids are remembered all the same, so a report of the same call appended to the fork
later is a repeat of a use its original session counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, date, datetime, time
from typing import Any, ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, RawEvent, TimeOf
from ctxledger.projections.fork_copies import counts_in_scope, raw_counts_in_scope
from ctxledger.projections.rowstore import RowStore
from ctxledger.projections.session_scopes import (
    record_session_scope,
    session_scope,
)
from ctxledger.projections.session_view import ToolUsage
from ctxledger.projections.tool_usage_recount import forget_tool_usage
from ctxledger.projections.tool_usage_tables import (
    USE_TABLES,
    Reported,
    known_uses,
    reported_uses,
    tool_usage,
    tool_usage_calls,
    tool_usage_scopes,
    tool_uses,
    tool_uses_late,
)
from ctxledger.projections.tool_window import Window
from ctxledger.store.records import NewEvent, RecordedEvent
from ctxledger.store.sql_engine import driver_statement
from ctxledger.store.streams import stream_kind


class ToolUsageProjection(Projection):
    """Lifetime and exact-time usage of tools, attributed to the session's scope."""

    name: ClassVar[str] = "tool_usage"
    # v2: ``rollup.completed`` with ``prune_before`` drops older per-use rows.
    # v3: a tool is (name, server); late uses kept at their own time; a fork's copies
    # that do not count are not uses. v4: an assistant message's tool calls are uses; a
    # call reported twice (message and tool.used) counts once.
    version: ClassVar[int] = 4
    tables: ClassVar[tuple[sa.Table, ...]] = (tool_usage_scopes, tool_usage, tool_uses,
                                              tool_uses_late, tool_usage_calls)
    handles: ClassVar[frozenset[str]] = frozenset(
        {"session.started", "tool.used", "message.appended", "rollup.completed"})

    erased_content: ClassVar[frozenset[str]] = frozenset({"tool.used", "message.appended"})

    def forget_streams(self, conn: sa.Connection, streams: Sequence[str],
                       erased: Sequence[RecordedEvent]) -> set[str]:
        """The streams' own rows go; the tools their uses counted are counted again
        (``tool_usage_recount``)."""
        return forget_tool_usage(conn, streams, erased)

    def shared_keys(self, stream_id: str, event: NewEvent) -> Sequence[str]:
        """A use reads and rewrites its tool's count, shared by every session of the
        scope: locked per tool name (the scope is only known from the table)."""
        if stream_kind(stream_id) != "session":
            return ()
        return sorted({use[0] for use in reported_uses(event.type, event.data)})

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
        reported = reported_uses(event.type, event.data)
        if not reported:
            return
        counts = counts_in_scope(event.metadata)
        for name, server in _new_uses(rows, event.stream_id, reported):
            if counts:
                table, use = _count_use(rows, event.stream_id, name, server,
                                        event.recorded_at)
                rows.put(table, dict(zip(_USE_COLUMNS, use, strict=True)))

    def rebuild_fold(self, rows: RowStore, time_of: TimeOf) -> _UsageRebuildFold:
        """Uses counted from the raw event, without a record; the rest through ``apply``."""
        return _UsageRebuildFold(rows, time_of)


_USE_COLUMNS = ("scope", "tool_name", "server_name", "seq", "used_at")
_Use = tuple[str, str, str, int, datetime]


def _new_uses(rows: RowStore, stream_id: str, reported: Iterable[Reported]
              ) -> Iterator[tuple[str, str]]:
    """(tool, server) of each use an event of a session reports, each call id once per
    session: a call id is remembered the first time (whether or not the event counts
    toward the scope), and a use whose call was reported before is left out."""
    for name, server, call_id in reported:
        if call_id is not None:
            key = (stream_id, call_id)
            if rows.get(tool_usage_calls, key) is not None:
                continue  # the same call, reported again
            rows.put(tool_usage_calls, {"stream_id": stream_id, "call_id": call_id})
        yield name, server


def _count_use(rows: RowStore, stream_id: str, name: str, server: str,
               recorded_at: datetime) -> tuple[sa.Table, _Use]:
    """Count one use of a session's tool (two primary-key reads, the tool's row put);
    returns the table and the row (in ``_USE_COLUMNS`` order) for the caller to write."""
    scope = session_scope(tool_usage_scopes, stream_id, rows)
    prior = rows.get(tool_usage, (scope, name, server))
    count = 1 if prior is None else int(prior["lifetime_count"]) + 1
    in_order = 0 if prior is None else int(prior["in_order"])
    late = prior is not None and recorded_at < prior["last_used"]
    if not late:
        in_order += 1
    rows.put(tool_usage, {
        "scope": scope, "tool_name": name, "server_name": server, "lifetime_count": count,
        "last_used": prior["last_used"] if late and prior is not None else recorded_at,
        "in_order": in_order})
    if late:
        return tool_uses_late, (scope, name, server, count, recorded_at)
    return tool_uses, (scope, name, server, in_order, recorded_at)


class _UsageRebuildFold:
    """``tool_usage`` through a rebuild: uses counted from the raw event, without a record.

    Each use's row (a new key: its seq is a new count of its tool) is held aside as a
    tuple, not put in the ``RowStore``: nothing reads those rows back during a rebuild
    but a prune, so they are written as plain inserts before a ``rollup.completed`` goes
    through ``apply``, and when the fold finishes (or holds too many). Each tool's figures
    and each session's scope are kept here between two ``finish`` calls (read from the
    ``RowStore`` on first use, the tools put back by ``finish``): only this fold writes
    them during a rebuild but a ``session.started``, whose session it forgets first.
    """

    __slots__ = ("_aside", "_held", "_rows", "_scopes", "_time_of", "_tools")

    def __init__(self, rows: RowStore, time_of: TimeOf) -> None:
        self._rows = rows
        self._time_of = time_of
        self._aside: dict[sa.Table, list[_Use]] = {table: [] for table in USE_TABLES}
        self._held = 0
        self._scopes: dict[str, str] = {}
        # (scope, tool, server) -> [lifetime_count, in_order, last_used]
        self._tools: dict[tuple[str, str, str], list[Any]] = {}

    def __call__(self, raw: RawEvent, data: dict[str, Any]) -> bool:
        kind = raw[4]
        if kind == "message.appended":
            if not data.get("tool_calls"):
                return True  # the usual message: it reports no use
        elif kind != "tool.used":
            if kind == "session.started":
                self._scopes.pop(raw[1], None)  # apply records its scope
            elif kind == "rollup.completed":
                self.finish()  # the prune deletes uses through SQL
            return False
        stream: str = raw[1]
        if stream_kind(stream) != "session":
            return True
        counts = raw_counts_in_scope(raw[7])
        when = self._time_of(raw[8])
        for name, server in _new_uses(self._rows, stream, reported_uses(kind, data)):
            if counts:
                self._count(stream, name, server, when)
        if self._held >= RowStore.ASIDE_ROWS:
            self.finish()
        return True

    def _count(self, stream: str, name: str, server: str, when: datetime) -> None:
        """``_count_use`` on the figures kept here."""
        scope = self._scopes.get(stream)
        if scope is None:
            scope = self._scopes[stream] = session_scope(tool_usage_scopes, stream, self._rows)
        key = (scope, name, server)
        tool = self._tools.get(key)
        if tool is None:
            prior = self._rows.get(tool_usage, key)
            tool = self._tools[key] = [0, 0, None] if prior is None else [
                int(prior["lifetime_count"]), int(prior["in_order"]), prior["last_used"]]
        tool[0] += 1
        if tool[2] is not None and when < tool[2]:
            self._aside[tool_uses_late].append((scope, name, server, tool[0], when))
        else:
            tool[1] += 1
            tool[2] = when
            self._aside[tool_uses].append((scope, name, server, tool[1], when))
        self._held += 1

    def finish(self) -> None:
        """Write the uses held aside and put back the tools' figures."""
        for table, held in self._aside.items():
            if held:
                self._rows.insert_new(table, _USE_COLUMNS, held)
                self._aside[table] = []
        self._held = 0
        put = self._rows.put
        for (scope, name, server), (count, in_order, last_used) in self._tools.items():
            put(tool_usage, {"scope": scope, "tool_name": name, "server_name": server,
                             "lifetime_count": count, "last_used": last_used,
                             "in_order": in_order})
        self._tools.clear()
        self._scopes.clear()


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
    for table in USE_TABLES:
        rows.delete_where(table, sa.and_(known_uses(table), table.c.used_at < cutoff),
                          lambda row: bool(row["used_at"] < cutoff))


# -- reading: counts over a window ---------------------------------------------------

def _of_tool(table: sa.Table) -> sa.ColumnElement[bool]:
    """``table``'s uses of the outer ``tool_usage`` row's tool (a correlated key prefix)."""
    return sa.and_(table.c.scope == tool_usage.c.scope,
                   table.c.tool_name == tool_usage.c.tool_name,
                   table.c.server_name == tool_usage.c.server_name)


def _use_seek(column: sa.ColumnElement[Any], bound: sa.ColumnElement[bool],
              newest: bool) -> sa.ScalarSelect[Any]:
    """``column`` of the tool's newest in-order use satisfying ``bound`` (oldest if not
    ``newest``): one seek on the ``tool_uses`` key."""
    order = ((tool_uses.c.used_at.desc(), tool_uses.c.seq.desc()) if newest
             else (tool_uses.c.used_at.asc(), tool_uses.c.seq.asc()))
    return (sa.select(column).where(_of_tool(tool_uses), bound)
            .order_by(*order).limit(1).scalar_subquery())


def _late_in(lo: sa.BindParameter[Any], hi: sa.BindParameter[Any],
             figure: sa.ColumnElement[Any]) -> sa.ScalarSelect[Any]:
    """``figure`` over the tool's late uses inside the window ``[lo, hi]``: a range of the
    ``tool_uses_late`` key, which holds only uses that came out of time order."""
    late = tool_uses_late.c
    return (sa.select(figure).where(_of_tool(tool_uses_late), late.used_at >= lo,
                                    late.used_at <= hi).scalar_subquery())


def _usage_select(windowed: bool) -> sa.Select[Any]:
    """Every tool's lifetime figures in the scope ``:scope``; ``windowed``, also the seeks
    that count its uses in ``[:lo, :hi]``. Compiled once per shape (``driver_statement``):
    an assembly of the session profile reads it every time."""
    columns: list[Any] = [tool_usage.c.tool_name, tool_usage.c.server_name,
                          tool_usage.c.lifetime_count, tool_usage.c.last_used]
    if windowed:
        lo = sa.bindparam("lo", type_=tool_uses.c.used_at.type)
        hi = sa.bindparam("hi", type_=tool_uses.c.used_at.type)
        columns += [
            _use_seek(tool_uses.c.seq, tool_uses.c.used_at >= lo, newest=False).label("first"),
            _use_seek(tool_uses.c.seq, tool_uses.c.used_at <= hi, newest=True).label("last"),
            _use_seek(tool_uses.c.used_at, tool_uses.c.used_at <= hi,
                      newest=True).label("last_at"),
            _late_in(lo, hi, sa.func.count()).label("late"),
            _late_in(lo, hi, sa.func.max(tool_uses_late.c.used_at)).label("late_at"),
        ]
    return sa.select(*columns).where(tool_usage.c.scope == sa.bindparam("scope"))


def load_tool_usage(conn: sa.Connection, scope: str,
                    window: Window | None) -> tuple[ToolUsage, ...]:
    """Usage of every tool used in the scope, by name then server; window counts when a
    window is given.

    In-order uses of a tool are numbered 1, 2, 3... in time order, so their count in
    ``[lo, hi]`` is the number of the last one at or before ``hi`` minus that of the
    first one at or after ``lo``, plus one; the late uses inside the window are added.
    """
    values: dict[str, Any] = {"scope": scope}
    if window is not None:
        values["lo"], values["hi"] = window
    rows = driver_statement(conn.dialect, ("tool_usage.load", window is not None),
                            lambda: _usage_select(window is not None)).fetch_dicts(conn, values)
    out = []
    for r in rows:
        count, last_at = 0, None
        if window is not None:
            if r["first"] is not None and r["last"] is not None:
                count = max(0, int(r["last"]) - int(r["first"]) + 1)
                last_at = r["last_at"] if count else None
            late = int(r["late"] or 0)
            if late:
                count += late
                last_at = r["late_at"] if last_at is None else max(last_at, r["late_at"])
        out.append(ToolUsage(tool_name=r["tool_name"], server_name=r["server_name"] or None,
                             window_count=count, window_last_used=last_at,
                             lifetime_count=int(r["lifetime_count"]),
                             lifetime_last_used=r["last_used"]))
    return tuple(sorted(out, key=lambda usage: (usage.tool_name, usage.server_name or "")))
