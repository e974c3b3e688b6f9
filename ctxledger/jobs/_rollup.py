"""The nightly usage rollup job (SPEC §5): ``Ledger.rollup`` and ``ctxledger rollup``.

Every complete UTC day not rolled up yet is rolled up, oldest first, so a backlog of any
length is caught up. A day is complete when it is over by the ledger's clock: ``now``
may be earlier than the clock, never later (nor before the log's first event).

The work follows the days that hold events, not the calendar: the job seeks the next
day with an event, so a stretch of days with nothing to roll up is one
``rollup.completed`` with ``last_day``, whatever its length. Each step is one
transaction holding the rollup lock: the usage rows of a day with data in the
``usage_daily_*`` tables, and its ``rollup.completed {day, rows, digest, prune_before,
read_through}`` on the stream ``system``. Event ids derive from the day (or span), so a
second run, or a second process that raced past the lock, writes nothing.

A rolled-up day can still receive events: an import with their own timestamps, a commit
that comes late, a clock that steps back. ``read_through`` says up to which position the
job had read every event; each step first looks at the events after it, and rolls the
covered days they fall in up again when their figures changed (another
``rollup.completed`` for the day, the newest wins). ``usage`` reads such a day from raw
rows meanwhile, so no reader ever misses a late event.

Pruning rides on the event: the tool-usage projection drops per-use rows from before
``prune_before`` when it folds the event, inline now and the same way in a rebuild. The
cut never moves back, so the uses of a pruned day left in the raw rows are exactly those
that came after it was pruned, and a late day adds them to its rolled-up figures.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from ctxledger._config import DEFAULT_RETENTION_DAYS
from ctxledger.assembler.policy import PolicyError
from ctxledger.assembler.profiles.session import SessionPolicy
from ctxledger.assembler.profiles.session.tool_ranking import server_of
from ctxledger.projections import rollup_day as job
from ctxledger.projections.session_stats import sessions
from ctxledger.projections.settings import scope_settings, session_settings
from ctxledger.projections.tool_window import TOOL_WINDOW_DAYS
from ctxledger.store.clock import ensure_utc
from ctxledger.store.errors import LedgerError
from ctxledger.store.streams import SYSTEM_STREAM
from ctxledger.store.time_fields import Instant

if TYPE_CHECKING:
    from ctxledger.store.clock import Clock
    from ctxledger.store.log import EventLog

ROLLUP_ID_NAMESPACE = uuid.UUID("0c8f5d52-3f0e-4f38-9a43-6b1f4e7d2a90")
"""``rollup.completed`` ids are uuid5(namespace, "rollup.completed/<day>")."""


class RollupPolicy(BaseModel):
    """How the rollup job prunes. ``retention_days`` is raised to the largest usage
    window of any scope or session plus one day, so pruning never changes a window."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1)


class RolledDay(BaseModel):
    """One day (or a stretch of empty days, ``day`` .. ``last_day``) the job rolled up."""

    day: str
    last_day: str
    rows: int
    digest: str
    position: int
    prune_before: str


class RollupReport(BaseModel):
    """What one run did: the days rolled up, the days rolled up again for events that came
    after them, and those another process did meanwhile."""

    now: Instant
    retention_days: int
    rolled: list[RolledDay]
    rerolled: list[RolledDay] = Field(default_factory=list)
    """Rolled-up days whose figures changed with events recorded in them later."""
    skipped: list[str]
    """First days of the spans found rolled up by someone else once the lock was held."""
    stopped: bool = False
    """True when asked to stop before every pending day was done."""


def rollup_event_id(day: date, last_day: date | None = None) -> str:
    """The idempotency key of the ``rollup.completed`` of ``day`` (or of the stretch of
    empty days ``day`` .. ``last_day``)."""
    name = day.isoformat() if last_day is None or last_day == day else \
        f"{day.isoformat()}..{last_day.isoformat()}"
    return str(uuid.uuid5(ROLLUP_ID_NAMESPACE, f"rollup.completed/{name}"))


def reroll_event_id(day: date, read_through: int) -> str:
    """The idempotency key of ``day`` rolled up again with every event up to
    ``read_through``."""
    return str(uuid.uuid5(ROLLUP_ID_NAMESPACE,
                          f"rollup.completed/{day.isoformat()}@{read_through}"))


def mcp_server_of() -> job.ServerOf:
    """The session profile's MCP server rule (``mcp__<server>__<tool>``)."""
    pattern = re.compile(SessionPolicy.defaults().mcp_server_pattern)
    return lambda name: server_of(name, pattern)


def largest_usage_window(conn: sa.Connection) -> int:
    """The largest tool-usage window in days that any scope or session uses.

    Settings are resolved as for an assembly (session overrides over scope defaults);
    a setting that does not validate is skipped: it fails its assemblies, not the job.
    """
    keys = sorted({k for k, f in SessionPolicy.SETTINGS.items() if f == "usage_window_days"}
                  | {"policy.session"})
    by_scope: dict[str, dict[str, Any]] = {}
    for row in conn.execute(sa.select(scope_settings.c.scope, scope_settings.c.key,
                                      scope_settings.c.value)
                            .where(scope_settings.c.key.in_(keys))):
        by_scope.setdefault(row.scope, {})[row.key] = json.loads(row.value)
    by_session: dict[str, dict[str, Any]] = {}
    query = (sa.select(session_settings.c.stream_id, sessions.c.scope, session_settings.c.key,
                       session_settings.c.value)
             .select_from(session_settings.outerjoin(
                 sessions, sessions.c.stream_id == session_settings.c.stream_id))
             .where(session_settings.c.key.in_(keys)))
    for found in conn.execute(query):
        merged = by_session.setdefault(found.stream_id,
                                       dict(by_scope.get(found.scope or "", {})))
        merged[found.key] = json.loads(found.value)
    windows = [TOOL_WINDOW_DAYS]  # the default: the state's and the session profile's
    for settings in [*by_scope.values(), *by_session.values()]:
        try:
            windows.append(SessionPolicy.from_settings(settings).usage_window_days)
        except PolicyError:
            continue
    return max(windows)


def effective_retention(conn: sa.Connection, policy: RollupPolicy) -> int:
    """``policy.retention_days``, never below the largest usage window plus one day."""
    return max(policy.retention_days, largest_usage_window(conn) + 1)


def run_rollup(log: EventLog, clock: Clock, *, now: datetime | None = None,
               policy: RollupPolicy | None = None,
               should_stop: Callable[[], bool] | None = None,
               future_now_for_tests: bool = False) -> RollupReport:
    """Roll up every complete UTC day before ``now`` (default: the ledger's clock) that is
    not rolled up yet, oldest first, and again those that received events since; see the
    module docstring.

    Raises ``LedgerError`` when ``now`` is later than the ledger's clock (a day that is
    not over cannot be closed) or earlier than the log's first event.
    ``future_now_for_tests`` lifts the first check, for tests and benchmarks only.
    """
    clock_now = clock()
    when = ensure_utc(now, "now") if now is not None else clock_now
    if when > clock_now and not future_now_for_tests:
        raise LedgerError(f"now {_iso(when)} is later than the ledger's clock"
                          f" ({_iso(clock_now)}):"
                          " only days that are over can be rolled up")
    chosen = policy or RollupPolicy()
    with log.connection() as conn:
        first = job.first_event_time(conn)
        if first is not None and when < first:
            raise LedgerError(f"now {_iso(when)} is before the log's first event"
                              f" ({_iso(first)}): there is no day to roll up")
        retention = effective_retention(conn, chosen)
        last = when.date() - job.DAY
        planned = [] if first is None else job.read_coverage(conn).gaps(first.date(), last)
    report = RollupReport(now=when, retention_days=retention, rolled=[], skipped=[])
    if first is None:
        return report
    step = _Step(log, last, retention, mcp_server_of(), report)
    while True:
        if should_stop is not None and should_stop():
            report.stopped = True
            break
        with log.transaction() as conn:
            job.lock_rollups(conn)
            more = step.run(conn)
        if not more:
            break
    with log.connection() as conn:
        report.skipped = _done_elsewhere(job.read_coverage(conn), planned, report)
    return report


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class _Write:
    """One ``rollup.completed`` to write: a day's figures, or a stretch of empty days."""

    first: date
    last: date
    figures: job.DayFigures | None
    again: bool = False


class _Step:
    """One transaction of a run: the late days, any gap behind the rolled-up days, and the
    next span forward (empty days up to a day with data, and that day)."""

    def __init__(self, log: EventLog, last: date, retention: int, servers: job.ServerOf,
                 report: RollupReport) -> None:
        self.log = log
        self.last = last
        self.retention = retention
        self.servers = servers
        self.report = report

    def run(self, conn: sa.Connection) -> bool:
        """Compute every write first, then write; True when a span forward was rolled."""
        coverage = job.read_coverage(conn)
        read_through = job.settled_position(conn)
        first = job.first_event_time(conn)
        writes = self._late(conn, coverage)
        forward = False
        newest = coverage.last_day
        for start, end in ([] if first is None else coverage.gaps(first.date(), self.last)):
            if newest is not None and start < newest:
                writes += self._walk(conn, start, end, stop_at_data=False)
                continue
            writes += self._walk(conn, start, end, stop_at_data=True)
            forward = True
            break
        floor = coverage.prune_floor
        for write in writes:
            cut = write.last - job.DAY * (self.retention - 1)
            floor = cut if floor is None or cut > floor else floor
            self._write(conn, write, floor, read_through)
        return forward

    def _late(self, conn: sa.Connection, coverage: job.Coverage) -> list[_Write]:
        out = []
        for day in sorted(job.late_days(conn, coverage)):
            figures = job.refresh_day(conn, day, coverage, server_of=self.servers)
            held = coverage.latest(day)
            before = held.digest if held is not None and held.first == held.last \
                else job.empty_span_digest(day, day)
            if figures.digest() != before:
                out.append(_Write(day, day, figures, again=True))
        return out

    def _walk(self, conn: sa.Connection, start: date, end: date, *,
              stop_at_data: bool) -> list[_Write]:
        """Spans of ``[start, end]``: stretches of empty days and each day with rows, up
        to the first day with rows (``stop_at_data``) or the end."""
        out: list[_Write] = []
        empty_from = cursor = start
        while cursor <= end:
            found = job.next_event_day(conn, cursor, end)
            if found is None:
                break
            figures = job.compute_day(conn, found, server_of=self.servers)
            cursor = found + job.DAY
            if figures.rows == 0:
                continue
            if empty_from < found:
                out.append(_Write(empty_from, found - job.DAY, None))
            out.append(_Write(found, found, figures))
            empty_from = cursor
            if stop_at_data:
                return out
        if empty_from <= end:
            out.append(_Write(empty_from, end, None))
        return out

    def _write(self, conn: sa.Connection, write: _Write, prune_before: date,
               read_through: int) -> None:
        if write.figures is not None:
            rows, digest = job.write_day(conn, write.figures), write.figures.digest()
        else:
            rows, digest = 0, job.empty_span_digest(write.first, write.last)
        data: dict[str, Any] = {"day": write.first.isoformat(), "rows": rows, "digest": digest,
                                "prune_before": prune_before.isoformat(),
                                "read_through": read_through}
        if write.last > write.first:
            data["last_day"] = write.last.isoformat()
        event_id = reroll_event_id(write.first, read_through) if write.again \
            else rollup_event_id(write.first, write.last)
        result = self.log.append_in(conn, SYSTEM_STREAM, [{
            "type": "rollup.completed", "id": event_id, "data": data}])
        done = RolledDay(day=data["day"], last_day=write.last.isoformat(), rows=rows,
                         digest=digest, position=result.positions[0],
                         prune_before=data["prune_before"])
        (self.report.rerolled if write.again else self.report.rolled).append(done)


def _done_elsewhere(coverage: job.Coverage, planned: list[tuple[date, date]],
                    report: RollupReport) -> list[str]:
    """First days of the spans in the planned gaps that another process wrote."""
    mine = {d.position for d in report.rolled}
    return [span.first.isoformat() for span in coverage.spans
            if span.position not in mine
            and any(span.first <= end and span.last >= start for start, end in planned)]
