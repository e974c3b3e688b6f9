"""The nightly rollup's figures for one UTC day, read from raw rows and written to the
``usage_daily_*`` tables (SPEC §5).

- tool uses per (scope, tool, day) from the tool-usage projection's per-use rows, and per
  MCP server (the ``server_name`` a use gave, else the server the caller finds in the
  tool's name);
- messages appended and retracted per (scope, day), from the day's events;
- ``context.assembled`` figures per (scope, profile, day), from the day's events;
- what providers billed (``usage.reported``) per (scope, model, day), from the day's events.

A day is ``[00:00, 24:00)`` UTC of ``recorded_at`` (``used_at`` for tool uses). Reads go
through ``ix_events_recorded_at`` (tool uses: one key seek per known tool in each use table),
so a day costs what it holds, never the history.
This module only computes and writes rows; ``ctxledger.jobs._rollup`` runs the job around it
(lock, one transaction per day, the ``rollup.completed`` event).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa

from ctxledger.projections.session_stats import counted_in_scope, sessions
from ctxledger.projections.tool_usage_tables import USE_TABLES, known_uses
from ctxledger.projections.usage_rollups import (
    JOB_TABLES,
    rollup_days,
    usage_daily_billed,
    usage_daily_messages,
    usage_daily_servers,
    usage_daily_tokens,
    usage_daily_tools,
)
from ctxledger.store.backends import backend_for, locks
from ctxledger.store.canonical import canonical_json, sha256_hex
from ctxledger.store.clock import format_utc
from ctxledger.store.schema import events
from ctxledger.store.streams import DEFAULT_SCOPE

DAY = timedelta(days=1)
ServerOf = Callable[[str], str | None]
"""The MCP server a tool name belongs to, or None for a tool of no server."""

Row = dict[str, Any]
_MESSAGE_TYPES = ("message.appended", "message.retracted")


def day_start(day: date) -> datetime:
    """00:00 UTC of ``day``."""
    return datetime.combine(day, time(), UTC)


def days_between(first: date, last: date) -> Iterator[date]:
    """Every day from ``first`` to ``last``, both included."""
    day = first
    while day <= last:
        yield day
        day += DAY


@dataclass(frozen=True)
class DayFigures:
    """One day's rollup rows (without the ``day`` column), each list in key order."""

    day: date
    tools: list[Row] = field(default_factory=list)
    """``scope, tool_name, uses, last_used``"""
    servers: list[Row] = field(default_factory=list)
    """``scope, server_name, uses, last_used``"""
    messages: list[Row] = field(default_factory=list)
    """``scope, appended, retracted, sessions``"""
    tokens: list[Row] = field(default_factory=list)
    """``scope, profile, assemblies, tokens_total, tokens_max``"""
    billed: list[Row] = field(default_factory=list)
    """``scope, model, calls, input_tokens, output_tokens, cached_tokens, cost``"""

    @property
    def rows(self) -> int:
        """How many rollup rows the day has across the tables."""
        return (len(self.tools) + len(self.servers) + len(self.messages) + len(self.tokens)
                + len(self.billed))

    def digest(self) -> str:
        """SHA-256 of the day's rows as canonical JSON (times as fixed-width UTC)."""
        def plain(rows: list[Row]) -> list[Row]:
            return [{k: format_utc(v) if isinstance(v, datetime) else v for k, v in r.items()}
                    for r in rows]

        figures = {"day": self.day.isoformat(), "tools": plain(self.tools),
                   "servers": plain(self.servers), "messages": plain(self.messages),
                   "tokens": plain(self.tokens)}
        if self.billed:  # a day without billing hashes as it did before billing existed
            figures["billed"] = plain(self.billed)
        return sha256_hex(canonical_json(figures))


# -- which days ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RolledSpan:
    """Days ``first`` .. ``last`` (included) that one ``rollup.completed`` covers."""

    first: date
    last: date
    rows: int
    digest: str
    position: int


@dataclass(frozen=True)
class Coverage:
    """Every rolled-up span, what the job had read, and how far raw uses are pruned."""

    spans: list[RolledSpan]
    """Ordered by first day, then position."""
    read_through: int
    """Every event up to this position is in the rollups (0: nothing rolled up)."""
    prune_floor: date | None
    """Raw tool uses before this day were pruned (None: never)."""

    @property
    def last_day(self) -> date | None:
        """The newest day covered."""
        return max((s.last for s in self.spans), default=None)

    def latest(self, day: date) -> RolledSpan | None:
        """The newest span covering ``day`` (it holds the day's current figures)."""
        found = [s for s in self.spans if s.first <= day <= s.last]
        return max(found, key=lambda s: s.position) if found else None

    def covers(self, day: date) -> bool:
        """True when a span covers ``day``."""
        return any(s.first <= day <= s.last for s in self.spans)

    def covered(self, first: date, last: date) -> set[date]:
        """The covered days within ``[first, last]``."""
        out: set[date] = set()
        for span in self.spans:
            out.update(days_between(max(span.first, first), min(span.last, last)))
        return out

    def gaps(self, first: date, last: date) -> list[tuple[date, date]]:
        """The stretches of ``[first, last]`` no span covers, oldest first."""
        out: list[tuple[date, date]] = []
        cursor = first
        for span in self.spans:
            if cursor > last:
                break
            if span.last < cursor:
                continue
            if span.first > cursor:
                out.append((cursor, min(span.first - DAY, last)))
            cursor = max(cursor, span.last + DAY)
        if cursor <= last:
            out.append((cursor, last))
        return out


def read_coverage(conn: sa.Connection) -> Coverage:
    """The rolled-up spans (one read of the rolled-span list, never of the events)."""
    r = rollup_days.c
    spans: list[RolledSpan] = []
    read_through = 0
    floor: str | None = None
    for row in conn.execute(sa.select(r.day, r.last_day, r.rows, r.digest, r.position,
                                      r.read_through, r.prune_before)):
        spans.append(RolledSpan(date.fromisoformat(row.day), date.fromisoformat(row.last_day),
                          int(row.rows), str(row.digest), int(row.position)))
        read_through = max(read_through, int(row.read_through))
        if row.prune_before is not None and (floor is None or row.prune_before > floor):
            floor = str(row.prune_before)
    spans.sort(key=lambda s: (s.first, s.position))
    return Coverage(spans, read_through, None if floor is None else date.fromisoformat(floor))


def first_event_time(conn: sa.Connection) -> datetime | None:
    """The earliest ``recorded_at`` in the log (an index lookup), None for an empty log."""
    first: datetime | None = conn.execute(sa.select(sa.func.min(events.c.recorded_at))).scalar()
    return first


def next_event_day(conn: sa.Connection, first: date, last: date) -> date | None:
    """The first day in ``[first, last]`` on which an event was recorded (one index seek):
    the days between hold nothing to roll up."""
    found: datetime | None = conn.execute(
        sa.select(sa.func.min(events.c.recorded_at))
        .where(events.c.recorded_at >= day_start(first),
               events.c.recorded_at < day_start(last) + DAY)).scalar()
    return None if found is None else found.date()


def settled_position(conn: sa.Connection) -> int:
    """The position up to which every event is committed and visible to ``conn``'s next
    statements (PostgreSQL writers commit out of position order; SQLite: the head)."""
    return backend_for(conn).settled_position(conn)


def late_days(conn: sa.Connection, coverage: Coverage, *, first: date | None = None,
              last: date | None = None) -> set[date]:
    """Covered days (within ``[first, last]``) that events appended after
    ``coverage.read_through`` fall in: imported with their own time, committed late, or
    stamped by a clock that stepped back. Reads only the events after that position.
    (A tool use is counted at its event's own time, so its event's day is its day.)
    """
    newest = coverage.last_day
    if newest is None:
        return set()
    hi = newest if last is None else min(newest, last)
    # Bounded by position alone: a time bound in SQL lets the planner scan the covering
    # recorded_at index over the whole history instead of the key range after the mark.
    query = sa.select(events.c.recorded_at).where(events.c.position > coverage.read_through)
    lo = first if first is not None else date.min
    found = {row.recorded_at.date() for row in conn.execute(query)}
    return {d for d in found if lo <= d <= hi and coverage.covers(d)}


def lock_rollups(conn: sa.Connection) -> None:
    """Serialize rollup jobs on one database until the transaction ends (a second job
    queues, then finds the day done)."""
    backend_for(conn).lock(conn, locks.ROLLUP)


def empty_span_digest(first: date, last: date) -> str:
    """The digest of a stretch of days with no rows (one day: its ``DayFigures`` digest)."""
    if first == last:
        return DayFigures(first).digest()
    return sha256_hex(canonical_json({"day": first.isoformat(), "last_day": last.isoformat(),
                                      "tools": [], "servers": [], "messages": [],
                                      "tokens": []}))


# -- computing a day -----------------------------------------------------------------------


def compute_day(conn: sa.Connection, day: date, *, server_of: ServerOf,
                until: datetime | None = None, scope: str | None = None) -> DayFigures:
    """The figures of ``day`` from raw rows, up to ``until`` included (default: the whole
    day, up to its end excluded).

    ``scope`` restricts them to one scope (the read side); the job takes every scope.
    """
    start = day_start(day)
    span = _Span(start, start + DAY, until if until is not None and until < start + DAY
                 else None)
    uses = _use_rows(conn, span, scope)
    return DayFigures(day, _tool_rows(uses), _server_rows(uses, server_of),
                      _message_rows(conn, span, scope), _token_rows(conn, span, scope),
                      _billed_rows(conn, span, scope))


def refresh_day(conn: sa.Connection, day: date, coverage: Coverage, *, server_of: ServerOf,
                scope: str | None = None) -> DayFigures:
    """A covered day's figures with the events that came after it was rolled up.

    Messages and tokens are read again from the events (never deleted). Tool uses of a
    day before the prune floor are no longer raw rows but the rollup's: the raw rows left
    (uses that arrived after the last prune) are added to them.
    """
    figures = compute_day(conn, day, server_of=server_of, scope=scope)
    if coverage.prune_floor is None or day >= coverage.prune_floor:
        return figures
    tools = _merged(_rolled_rows(conn, usage_daily_tools, "tool_name", day, scope),
                    figures.tools, "tool_name")
    servers = _merged(_rolled_rows(conn, usage_daily_servers, "server_name", day, scope),
                      figures.servers, "server_name")
    return DayFigures(day, tools, servers, figures.messages, figures.tokens, figures.billed)


def _rolled_rows(conn: sa.Connection, table: sa.Table, name: str, day: date,
                 scope: str | None) -> list[Row]:
    """``scope, NAME, uses, last_used`` of ``day`` as the job stored them in ``table``."""
    t = table.c
    query = sa.select(t.scope, t[name], t.uses, t.last_used).where(t.day == day)
    if scope is not None:
        query = query.where(t.scope == scope)
    return [dict(r._mapping) for r in conn.execute(query)]


def _merged(rolled: Iterable[Row], raw: Iterable[Row], name: str) -> list[Row]:
    """Rolled-up rows plus the raw rows left after a prune, summed per (scope, NAME)."""
    merged: dict[tuple[str, str], Row] = {}
    for row in [*rolled, *raw]:
        key = (row["scope"], row[name])
        before = merged.get(key)
        if before is None:
            merged[key] = dict(row)
            continue
        before["uses"] += row["uses"]
        last = [v for v in (before["last_used"], row["last_used"]) if v is not None]
        before["last_used"] = max(last) if last else None
    return [merged[key] for key in sorted(merged)]


@dataclass(frozen=True)
class _Span:
    """``[start, end)``, or ``[start, until]`` when a day is read up to ``now``."""

    start: datetime
    end: datetime
    until: datetime | None

    def holds(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        last = column <= self.until if self.until is not None else column < self.end
        return sa.and_(column >= self.start, last)


def _use_rows(conn: sa.Connection, span: _Span, scope: str | None) -> list[Row]:
    """``scope, tool_name, server_name, uses, last_used`` per tool (name and server) with
    uses in the span, in-order and late ones alike, in key order."""
    totals: dict[tuple[str, str, str], Row] = {}
    for table in USE_TABLES:
        t = table.c
        query = (sa.select(t.scope, t.tool_name, t.server_name, sa.func.count().label("uses"),
                           sa.func.max(t.used_at).label("last_used"))
                 .where(known_uses(table), span.holds(t.used_at))
                 .group_by(t.scope, t.tool_name, t.server_name))
        if scope is not None:
            query = query.where(t.scope == scope)
        for found in conn.execute(query):
            row = dict(found._mapping)
            key = (row["scope"], row["tool_name"], row["server_name"])
            before = totals.get(key)
            if before is not None:
                row["uses"] += before["uses"]
                row["last_used"] = max(row["last_used"], before["last_used"])
            totals[key] = row
    return [totals[key] for key in sorted(totals)]


def _tool_rows(uses: Iterable[Row]) -> list[Row]:
    """``scope, tool_name, uses, last_used`` per tool name (its servers together)."""
    totals: dict[tuple[str, str], Row] = {}
    for row in uses:
        key = (row["scope"], row["tool_name"])
        before = totals.get(key)
        if before is None:
            totals[key] = {"scope": key[0], "tool_name": key[1], "uses": row["uses"],
                           "last_used": row["last_used"]}
        else:
            before["uses"] += row["uses"]
            before["last_used"] = max(before["last_used"], row["last_used"])
    return [totals[key] for key in sorted(totals)]


def _server_rows(uses: Iterable[Row], server_of: ServerOf) -> list[Row]:
    """Per MCP server: the ``server_name`` the uses gave, else ``server_of`` their name
    (the session profile's rule)."""
    totals: dict[tuple[str, str], Row] = {}
    for row in uses:
        server = row["server_name"] or server_of(row["tool_name"])
        if server is None:
            continue
        key = (row["scope"], server)
        before = totals.get(key)
        if before is None:
            totals[key] = {"scope": key[0], "server_name": server, "uses": row["uses"],
                           "last_used": row["last_used"]}
        else:
            before["uses"] += row["uses"]
            before["last_used"] = max(before["last_used"], row["last_used"])
    return [totals[key] for key in sorted(totals)]


def _day_events(types: tuple[str, ...], span: _Span, scope: str | None,
                *columns: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """The day's events of ``types`` with their session's scope (``default`` if unknown),
    but a fork's copies that do not count toward the scope."""
    scope_col = sa.func.coalesce(sessions.c.scope, DEFAULT_SCOPE)
    query = (sa.select(scope_col.label("scope"), *columns)
             .select_from(events.outerjoin(sessions, sessions.c.stream_id == events.c.stream_id))
             .where(span.holds(events.c.recorded_at), events.c.type.in_(types),
                    counted_in_scope(events.c.stream_version)))
    return query if scope is None else query.where(scope_col == scope)


def _message_rows(conn: sa.Connection, span: _Span, scope: str | None) -> list[Row]:
    query = _day_events(_MESSAGE_TYPES, span, scope, events.c.stream_id, events.c.type,
                        sa.func.count().label("n"))
    query = query.group_by(sa.text("1"), events.c.stream_id, events.c.type)
    totals: dict[str, Row] = {}
    for found in conn.execute(query):
        row = totals.setdefault(found.scope, {"scope": found.scope, "appended": 0,
                                              "retracted": 0, "sessions": set()})
        row["appended" if found.type == "message.appended" else "retracted"] += found.n
        row["sessions"].add(found.stream_id)
    return [{**totals[s], "sessions": len(totals[s]["sessions"])} for s in sorted(totals)]


def _token_rows(conn: sa.Connection, span: _Span, scope: str | None) -> list[Row]:
    query = _day_events(("context.assembled",), span, scope, events.c.data)
    totals: dict[tuple[str, str], Row] = {}
    for found in conn.execute(query):
        data = json.loads(found.data)
        tokens = int(data.get("tokens") or 0)
        key = (found.scope, str(data["profile"]))
        row = totals.setdefault(key, {"scope": key[0], "profile": key[1], "assemblies": 0,
                                      "tokens_total": 0, "tokens_max": 0})
        row["assemblies"] += 1
        row["tokens_total"] += tokens
        row["tokens_max"] = max(row["tokens_max"], tokens)
    return [totals[key] for key in sorted(totals)]


COST_DIGITS = 9
"""Summed costs are rounded to this many decimals (the same sum in every process)."""


def _billed_rows(conn: sa.Connection, span: _Span, scope: str | None) -> list[Row]:
    query = _day_events(("usage.reported",), span, scope, events.c.data)
    totals: dict[tuple[str, str], Row] = {}
    for found in conn.execute(query.order_by(events.c.position)):
        data = json.loads(found.data)
        key = (found.scope, str(data["model"]))
        row = totals.setdefault(key, {"scope": key[0], "model": key[1], "calls": 0,
                                      "input_tokens": 0, "output_tokens": 0,
                                      "cached_tokens": 0, "cost": None})
        row["calls"] += 1
        row["input_tokens"] += int(data["input_tokens"])
        row["output_tokens"] += int(data["output_tokens"])
        row["cached_tokens"] += int(data.get("cached_tokens") or 0)
        if data.get("cost") is not None:
            row["cost"] = round((row["cost"] or 0.0) + float(data["cost"]), COST_DIGITS)
    return [totals[key] for key in sorted(totals)]


# -- writing and reading rollups -----------------------------------------------------------

_TABLE_OF = {"tools": usage_daily_tools, "servers": usage_daily_servers,
             "messages": usage_daily_messages, "tokens": usage_daily_tokens,
             "billed": usage_daily_billed}


def write_day(conn: sa.Connection, figures: DayFigures) -> int:
    """Replace ``figures.day``'s rows in the rollup tables; returns the rows written."""
    for table in JOB_TABLES:
        conn.execute(table.delete().where(table.c.day == figures.day))
    for name, table in _TABLE_OF.items():
        rows = [{**row, "day": figures.day} for row in getattr(figures, name)]
        if rows:
            conn.execute(table.insert(), rows)
    return figures.rows


def read_rolled(conn: sa.Connection, coverage: Coverage, scope: str, first: date,
                last: date) -> dict[date, DayFigures]:
    """The rolled-up figures of ``scope`` for every covered day in ``[first, last]``."""
    out = {day: DayFigures(day) for day in sorted(coverage.covered(first, last))}
    for name, table in _TABLE_OF.items():
        keys = [c for c in table.primary_key.columns if c.name != "day"]
        query = (sa.select(table).where(table.c.scope == scope, table.c.day >= first,
                                        table.c.day <= last)
                 .order_by(table.c.day, *keys))
        for found in conn.execute(query):
            row = dict(found._mapping)
            figures = out.get(row.pop("day"))
            if figures is not None:
                getattr(figures, name).append(row)
    return out
