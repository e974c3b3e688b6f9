"""The nightly usage rollup job (SPEC §5): ``Ledger.rollup`` and ``ctxledger rollup``.

Every complete UTC day not rolled up yet is rolled up, oldest first, so a backlog of any
length is caught up. Each day is one transaction holding the rollup lock: its rows in
the ``usage_daily_*`` tables and one ``rollup.completed {day, rows, digest,
prune_before}`` on the stream ``system``. The event's id is uuid5 of the day, so a
second run, or a second process that raced past the lock, writes nothing.

Pruning rides on the event: the tool-usage projection drops per-use rows from before
``prune_before`` when it folds the event, inline now and the same way in a rebuild.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from ctxledger.assembler.policy import PolicyError
from ctxledger.assembler.profiles.session import SessionPolicy
from ctxledger.assembler.profiles.session.tool_ranking import server_of
from ctxledger.config import DEFAULT_RETENTION_DAYS
from ctxledger.projections import rollup_job as job
from ctxledger.projections.session_stats import sessions
from ctxledger.projections.settings import scope_settings, session_settings
from ctxledger.projections.state import TOP_TOOLS_WINDOW
from ctxledger.store.clock import ensure_utc
from ctxledger.store.streams import SYSTEM_STREAM
from ctxledger.store.time_fields import Instant

if TYPE_CHECKING:
    from ctxledger.ledger import Ledger

ROLLUP_ID_NAMESPACE = uuid.UUID("0c8f5d52-3f0e-4f38-9a43-6b1f4e7d2a90")
"""``rollup.completed`` ids are uuid5(namespace, "rollup.completed/<day>")."""


class RollupPolicy(BaseModel):
    """How the rollup job prunes. ``retention_days`` is raised to the largest usage
    window of any scope or session plus one day, so pruning never changes a window."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1)


class RolledDay(BaseModel):
    """One day the job rolled up."""

    day: str
    rows: int
    digest: str
    position: int
    prune_before: str


class RollupReport(BaseModel):
    """What one run did: the days rolled up, and those another process did meanwhile."""

    now: Instant
    retention_days: int
    rolled: list[RolledDay]
    skipped: list[str]
    """Days found rolled up by someone else once the lock was held."""
    stopped: bool = False
    """True when asked to stop before every pending day was done."""


def rollup_event_id(day: date) -> str:
    """The idempotency key of ``day``'s ``rollup.completed``."""
    return str(uuid.uuid5(ROLLUP_ID_NAMESPACE, f"rollup.completed/{day.isoformat()}"))


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
    windows = [SessionPolicy.defaults().usage_window_days, TOP_TOOLS_WINDOW.days]
    for settings in [*by_scope.values(), *by_session.values()]:
        try:
            windows.append(SessionPolicy.from_settings(settings).usage_window_days)
        except PolicyError:
            continue
    return max(windows)


def effective_retention(conn: sa.Connection, policy: RollupPolicy) -> int:
    """``policy.retention_days``, never below the largest usage window plus one day."""
    return max(policy.retention_days, largest_usage_window(conn) + 1)


def run_rollup(ledger: Ledger, *, now: datetime | None = None,
               policy: RollupPolicy | None = None,
               should_stop: Callable[[], bool] | None = None) -> RollupReport:
    """Roll up every complete UTC day before ``now`` (default: the ledger's clock) that is
    not rolled up yet, oldest first; see the module docstring."""
    when = ensure_utc(now, "now") if now is not None else ledger.clock()
    chosen = policy or RollupPolicy()
    with ledger.log.connection() as conn:
        days = job.pending_days(conn, when)
        retention = effective_retention(conn, chosen)
    report = RollupReport(now=when, retention_days=retention, rolled=[], skipped=[])
    servers = mcp_server_of()
    for day in days:
        if should_stop is not None and should_stop():
            report.stopped = True
            break
        with ledger.log.transaction() as conn:
            job.lock_rollups(conn)
            if job.is_rolled(conn, day):
                report.skipped.append(day.isoformat())
                continue
            figures = job.compute_day(conn, day, server_of=servers)
            rows = job.write_day(conn, figures)
            prune_before = (day - job.DAY * (retention - 1)).isoformat()
            done = RolledDay(day=day.isoformat(), rows=rows, digest=figures.digest(),
                             position=0, prune_before=prune_before)
            result = ledger.log.append_in(conn, SYSTEM_STREAM, [{
                "type": "rollup.completed", "id": rollup_event_id(day),
                "data": done.model_dump(exclude={"position"})}])
        report.rolled.append(done.model_copy(update={"position": result.positions[0]}))
    return report
