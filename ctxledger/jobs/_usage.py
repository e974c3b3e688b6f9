"""Reading usage (``ctxledger usage``, ``Ledger.usage``): daily figures of one scope.

Days the nightly job rolled up come from the ``usage_daily_*`` tables; the others (today,
and any day the job has not reached yet) are computed from raw rows the way the job
would, up to ``now``. So the figures are the same before and after a rollup. A rolled-up
day that received events since (``rollup_day.late_days``) is read the way the next run
will roll it up again, so it never misses them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import sqlalchemy as sa
from pydantic import BaseModel

from ctxledger._config import DEFAULT_USAGE_DAYS, MAX_USAGE_DAYS
from ctxledger.jobs._rollup import mcp_server_of
from ctxledger.projections import rollup_day as job
from ctxledger.projections.session_stats import sessions
from ctxledger.store.clock import ensure_utc
from ctxledger.store.errors import LedgerError
from ctxledger.store.schema import events
from ctxledger.store.streams import SCOPE_PREFIX
from ctxledger.store.time_fields import Instant

if TYPE_CHECKING:
    from ctxledger.store.clock import Clock
    from ctxledger.store.log import EventLog

class DayUsage(BaseModel):
    """One UTC day of a scope."""

    day: str
    source: Literal["rollup", "raw"]
    """``rollup``: from the nightly job's rows; ``raw``: computed now from raw rows."""
    complete: bool
    """False for today (figures up to ``now``)."""
    appended: int
    retracted: int
    sessions: int
    tool_uses: int
    assemblies: int
    tokens: int
    calls: int = 0
    """Provider calls reported (``usage.reported``)."""
    billed_input: int = 0
    """Input tokens the providers billed, cached ones included."""
    billed_output: int = 0
    billed_cached: int = 0
    cost: float | None = None
    """The reported calls' summed cost (None when none gave one)."""


class ModelUsage(BaseModel):
    """What the providers billed for one model over the report's days."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float | None


class Series(BaseModel):
    """One tool's (or MCP server's) uses per day, oldest day first."""

    name: str
    total: int
    daily: list[int]


class UsageReport(BaseModel):
    """A scope's usage over ``days`` UTC days ending with ``now``'s day."""

    scope: str
    now: Instant
    days: list[DayUsage]
    tools: list[Series]
    """Most used first, then by name."""
    servers: list[Series]
    models: list[ModelUsage] = []
    """Per billed model, most input tokens first, then by name."""


def scope_exists(conn: sa.Connection, scope: str) -> bool:
    """True when a session started in ``scope`` or its ``scope:`` stream has events."""
    if conn.execute(sa.select(sessions.c.stream_id).where(sessions.c.scope == scope)
                    .limit(1)).first() is not None:
        return True
    return conn.execute(sa.select(events.c.position)
                        .where(events.c.stream_id == SCOPE_PREFIX + scope).limit(1)
                        ).first() is not None


def usage_report(log: EventLog, clock: Clock, scope: str, *, days: int = DEFAULT_USAGE_DAYS,
                 now: datetime | None = None) -> UsageReport:
    """The figures of ``scope`` for the ``days`` UTC days up to ``now`` (default: clock).

    Raises ``LedgerError`` for an unknown scope or a span outside 1..``MAX_USAGE_DAYS``.
    """
    if isinstance(days, bool) or not 1 <= days <= MAX_USAGE_DAYS:
        raise LedgerError(f"days must be between 1 and {MAX_USAGE_DAYS} (got {days})")
    when = ensure_utc(now, "now") if now is not None else clock()
    last = when.date()
    first = last - job.DAY * (days - 1)
    servers = mcp_server_of()
    with log.connection() as conn:
        if not scope_exists(conn, scope):
            raise LedgerError(f"unknown scope {scope!r}: no session or scope stream names it")
        coverage = job.read_coverage(conn)
        late = job.late_days(conn, coverage, first=first, last=last)
        rolled = {day: f for day, f in job.read_rolled(conn, coverage, scope, first,
                                                       last).items() if day not in late}
        figures = [rolled.get(day) or (
            job.refresh_day(conn, day, coverage, server_of=servers, scope=scope)
            if day in late else
            job.compute_day(conn, day, server_of=servers, until=when, scope=scope))
                   for day in job.days_between(first, last)]
    daily = [DayUsage(
        day=f.day.isoformat(), source="rollup" if f.day in rolled else "raw",
        complete=f.day < last,
        appended=sum(r["appended"] for r in f.messages),
        retracted=sum(r["retracted"] for r in f.messages),
        sessions=sum(r["sessions"] for r in f.messages),
        tool_uses=sum(r["uses"] for r in f.tools),
        assemblies=sum(r["assemblies"] for r in f.tokens),
        tokens=sum(r["tokens_total"] for r in f.tokens),
        calls=sum(r["calls"] for r in f.billed),
        billed_input=sum(r["input_tokens"] for r in f.billed),
        billed_output=sum(r["output_tokens"] for r in f.billed),
        billed_cached=sum(r["cached_tokens"] for r in f.billed),
        cost=_cost_sum(r["cost"] for r in f.billed)) for f in figures]
    return UsageReport(scope=scope, now=when, days=daily,
                       tools=_series(figures, "tools", "tool_name"),
                       servers=_series(figures, "servers", "server_name"),
                       models=_models(figures))


def _cost_sum(costs: Iterable[float | None]) -> float | None:
    known = [cost for cost in costs if cost is not None]
    return round(sum(known), job.COST_DIGITS) if known else None


def _models(figures: list[job.DayFigures]) -> list[ModelUsage]:
    rows: dict[str, list[job.Row]] = {}
    for day in figures:
        for row in day.billed:
            rows.setdefault(row["model"], []).append(row)
    found = [ModelUsage(model=model, calls=sum(r["calls"] for r in group),
                        input_tokens=sum(r["input_tokens"] for r in group),
                        output_tokens=sum(r["output_tokens"] for r in group),
                        cached_tokens=sum(r["cached_tokens"] for r in group),
                        cost=_cost_sum(r["cost"] for r in group))
             for model, group in rows.items()]
    return sorted(found, key=lambda m: (-m.input_tokens, m.model))


def _series(figures: list[job.DayFigures], kind: str, name_key: str) -> list[Series]:
    per_name: dict[str, list[int]] = {}
    for index, day in enumerate(figures):
        for row in getattr(day, kind):
            per_name.setdefault(row[name_key], [0] * len(figures))[index] += row["uses"]
    found = [Series(name=name, total=sum(d), daily=d) for name, d in per_name.items()]
    return sorted(found, key=lambda s: (-s.total, s.name))
