"""Tool usage after an erasure: the figures of the tools erased uses counted, counted again.

A tool's figures per scope (its count, its newest use, the ``seq`` of each in-order use)
depend on the order of every use of the tool in the scope, so an erased use cannot just
be subtracted: a rebuild would number the later uses differently. Only the tools the
erased events used are counted again, from the live uses of their scope's sessions, in
log order, with the nightly job's prunes where they fell: O(the scope's use-reporting
events), and nothing when the erased events reported no use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time

import sqlalchemy as sa

from ctxledger.projections.base import forget_owned_rows
from ctxledger.projections.fork_copies import counts_in_scope
from ctxledger.projections.tool_usage_tables import (
    USE_TABLES,
    reported_uses,
    tool_usage,
    tool_usage_calls,
    tool_usage_scopes,
    tool_uses,
    tool_uses_late,
)
from ctxledger.store.read import read_where
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import events
from ctxledger.store.streams import DEFAULT_SCOPE, SYSTEM_STREAM, stream_kind

Tool = tuple[str, str, str]
"""(scope, tool name, server name): the key of a tool's figures."""

USE_TYPES = ("message.appended", "tool.used")
_ROLLUP = "rollup.completed"
_CHUNK = 500


def erased_tools(conn: sa.Connection, erased: Iterable[RecordedEvent]) -> set[Tool]:
    """The tools whose figures ``erased`` (events as they were) counted a use of."""
    scopes: dict[str, str] = {}
    found: set[Tool] = set()
    for event in erased:
        if stream_kind(event.stream_id) != "session" or not counts_in_scope(event.metadata):
            continue
        uses = reported_uses(event.type, event.data)
        if not uses:
            continue
        if event.stream_id not in scopes:
            scopes[event.stream_id] = conn.execute(
                sa.select(tool_usage_scopes.c.scope)
                .where(tool_usage_scopes.c.stream_id == event.stream_id)
            ).scalar_one_or_none() or DEFAULT_SCOPE
        found.update((scopes[event.stream_id], name, server) for name, server, _ in uses)
    return found


def forget_tool_usage(conn: sa.Connection, streams: Sequence[str],
                      erased: Sequence[RecordedEvent]) -> set[str]:
    """``ToolUsageProjection.forget_streams``: the streams' own rows go, the tools their
    uses counted are counted again without them. Returns the tables changed."""
    tools = erased_tools(conn, erased)
    changed = forget_owned_rows(conn, (tool_usage_scopes, tool_usage_calls), streams)
    if tools:
        recount(conn, tools)
        changed |= {tool_usage.name, *(t.name for t in USE_TABLES)}
    return changed


def recount(conn: sa.Connection, tools: set[Tool]) -> None:
    """Replace the figures and use rows of ``tools`` by those the live log gives, as a
    rebuild would write them."""
    for scope, name, server in sorted(tools):
        for table in (tool_usage, *USE_TABLES):
            conn.execute(table.delete().where(table.c.scope == scope,
                                              table.c.tool_name == name,
                                              table.c.server_name == server))
    figures: dict[Tool, tuple[int, datetime, int]] = {}  # count, last_used, in_order
    uses: dict[sa.Table, list[tuple[str, str, str, int, datetime]]] = {
        tool_uses: [], tool_uses_late: []}
    calls: set[tuple[str, str]] = set()
    scopes = sorted({t[0] for t in tools})
    scope_of = {str(r.stream_id): str(r.scope) for r in conn.execute(
        sa.select(tool_usage_scopes).where(tool_usage_scopes.c.scope.in_(scopes)))}
    for event in read_where(conn, _live_uses(scopes)):
        if event.type == _ROLLUP:
            before = event.data.get("prune_before")
            if before:
                cutoff = datetime.combine(date.fromisoformat(before), time(), UTC)
                for table, held in uses.items():
                    uses[table] = [u for u in held if u[4] >= cutoff]
            continue
        if stream_kind(event.stream_id) != "session":
            continue
        counts = counts_in_scope(event.metadata)
        scope = scope_of.get(event.stream_id, DEFAULT_SCOPE)
        for name, server, call_id in reported_uses(event.type, event.data):
            if call_id is not None:
                if (event.stream_id, call_id) in calls:
                    continue  # the same call, reported again
                calls.add((event.stream_id, call_id))
            key = (scope, name, server)
            if not counts or key not in tools:
                continue
            count, last, in_order = figures.get(key, (0, event.recorded_at, 0))
            count += 1
            late = event.recorded_at < last
            if not late:
                in_order += 1
                last = event.recorded_at
            figures[key] = (count, last, in_order)
            if late:
                uses[tool_uses_late].append((*key, count, event.recorded_at))
            else:
                uses[tool_uses].append((*key, in_order, event.recorded_at))
    if figures:
        conn.execute(tool_usage.insert(), [
            {"scope": k[0], "tool_name": k[1], "server_name": k[2], "lifetime_count": f[0],
             "last_used": f[1], "in_order": f[2]} for k, f in sorted(figures.items())])
    for table, held in uses.items():
        if held:
            conn.execute(table.insert(), [
                {"scope": u[0], "tool_name": u[1], "server_name": u[2], "seq": u[3],
                 "used_at": u[4]} for u in held])


def _live_uses(scopes: Sequence[str]) -> sa.ColumnElement[bool]:
    """The events a recount of tools of ``scopes`` reads: the use-reporting events of
    those scopes' sessions (a session with no ``session.started`` is in ``default``) and
    the nightly job's records, which prune."""
    scoped = sa.select(tool_usage_scopes.c.stream_id).where(
        tool_usage_scopes.c.scope.in_(scopes))
    members: sa.ColumnElement[bool] = events.c.stream_id.in_(scoped)
    if DEFAULT_SCOPE in scopes:
        members = sa.or_(members, events.c.stream_id.not_in(
            sa.select(tool_usage_scopes.c.stream_id)))
    return sa.or_(sa.and_(events.c.type.in_(USE_TYPES), members),
                  sa.and_(events.c.stream_id == SYSTEM_STREAM, events.c.type == _ROLLUP))
