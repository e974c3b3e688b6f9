"""A multi-day log for rollup tests, and its daily figures counted straight from the events.

The oracle here reads only ``ledger.events()``: it shares no code with the job, so a
rollup figure that differs from it is a bug in one or the other.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ctxledger import Ledger
from ctxledger.jobs._rollup import RollupPolicy, RollupReport
from ctxledger.projections.usage_rollups import (
    usage_daily_messages,
    usage_daily_servers,
    usage_daily_tokens,
    usage_daily_tools,
)
from ctxledger.store.streams import stream_kind
from helpers.scenario import StepClock

DIGEST = "0" * 64


def _event(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def write_usage_log(ledger: Ledger, clock: StepClock, first: date, days: int,
                    empty_days: frozenset[int] = frozenset({2})) -> None:
    """Sessions in scopes alpha, beta and (no session.started) default, with messages,
    retractions, tool uses (some MCP) and ``context.assembled`` on each day but
    ``empty_days``. Times are hours into each day, so every event falls inside it."""
    base = datetime.combine(first, datetime.min.time(), UTC)
    clock.now = base + timedelta(hours=1)
    ledger.append("s1", _event("session.started", scope="alpha"))
    ledger.append("s2", _event("session.started", scope="beta"))
    for i in range(days):
        if i in empty_days:
            continue
        clock.now = base + timedelta(days=i, hours=2)
        for n in range(i % 3 + 1):
            ledger.append("s1", _event("message.appended", role="user", content=f"d{i}m{n}",
                                       message_id=f"d{i}m{n}"))
        if i % 2 == 0:
            ledger.append("s1", _event("message.retracted", message_id=f"d{i}m0"))
        clock.now = base + timedelta(days=i, hours=9, minutes=i)
        for _ in range(i + 1):
            ledger.append("s1", _event("tool.used", tool_name="Read"))
        for _ in range(i % 2 + 1):
            ledger.append("s1", _event("tool.used", tool_name="mcp__gh__issues"))
        if i % 3 == 0:
            ledger.append("s1", _event("tool.used", tool_name="mcp__gh__pulls"))
        ledger.append("s1", _event("context.assembled", profile="card", policy_version="card@1",
                                   position=1, now="2026-01-01T00:00:00Z", digest=DIGEST,
                                   tokens=100 * (i + 1)))
        clock.now = base + timedelta(days=i, hours=23, minutes=59, seconds=59)
        ledger.append("s2", [_event("message.appended", role="assistant", content="ok"),
                             _event("tool.used", tool_name="Bash"),
                             _event("context.assembled", profile="session",
                                    policy_version="session@1", position=1,
                                    now="2026-01-01T00:00:00Z", digest=DIGEST)])
        if i == 1:
            ledger.append("s3", _event("message.appended", role="user", content="orphan"))


Figures = dict[str, Counter[tuple[Any, ...]]]


def figures_from_events(ledger: Ledger, before: date) -> Figures:
    """Daily figures of every day before ``before``, counted from the raw events."""
    scope_of: dict[str, str] = {}
    out: Figures = {"tools": Counter(), "servers": Counter(), "appended": Counter(),
                    "retracted": Counter(), "assemblies": Counter(), "tokens": Counter()}
    for event in ledger.events():
        day = event.recorded_at.date()
        if event.type == "session.started":
            scope_of[event.stream_id] = event.data.get("scope") or "default"
        if day >= before or stream_kind(event.stream_id) != "session":
            continue
        scope = scope_of.get(event.stream_id, "default")
        if event.type == "tool.used":
            name = event.data["tool_name"]
            out["tools"][(scope, name, day)] += 1
            if name.startswith("mcp__"):
                out["servers"][(scope, name.split("__")[1], day)] += 1
        elif event.type in ("message.appended", "message.retracted"):
            out[event.type.split(".")[1]][(scope, day)] += 1
        elif event.type == "context.assembled":
            out["assemblies"][(scope, event.data["profile"], day)] += 1
            out["tokens"][(scope, event.data["profile"], day)] += event.data.get("tokens") or 0
    return {k: Counter({key: n for key, n in v.items() if n}) for k, v in out.items()}


def figures_from_rollups(ledger: Ledger) -> Figures:
    """The same figures as the rollup tables hold them (zero counts left out)."""
    out: Figures = {}
    with ledger.engine.connect() as conn:
        def read(table: sa.Table, keys: list[str], value: str) -> Counter[tuple[Any, ...]]:
            rows = conn.execute(sa.select(*(table.c[k] for k in keys), table.c[value])).all()
            return Counter({tuple(r[:-1]): r[-1] for r in rows if r[-1]})

        out["tools"] = read(usage_daily_tools, ["scope", "tool_name", "day"], "uses")
        out["servers"] = read(usage_daily_servers, ["scope", "server_name", "day"], "uses")
        out["appended"] = read(usage_daily_messages, ["scope", "day"], "appended")
        out["retracted"] = read(usage_daily_messages, ["scope", "day"], "retracted")
        out["assemblies"] = read(usage_daily_tokens, ["scope", "profile", "day"], "assemblies")
        out["tokens"] = read(usage_daily_tokens, ["scope", "profile", "day"], "tokens_total")
    return out


def rollup_events(ledger: Ledger) -> list[tuple[str, int, str]]:
    """Every ``rollup.completed`` as (day, rows, event id), in log order."""
    return [(e.data["day"], e.data["rows"], e.event_id) for e in ledger.events("system")
            if e.type == "rollup.completed"]


def at(day: date, hour: int = 0) -> datetime:
    """``hour`` o'clock UTC on ``day``."""
    return datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=hour)


def roll(ledger: Ledger, clock: StepClock, now: datetime | None = None,
         policy: RollupPolicy | None = None) -> RollupReport:
    """The rollup as of ``now``, with the ledger's clock moved there first (a rollup may
    not run ahead of the clock)."""
    if now is not None:
        clock.now = now
    return ledger.rollup(policy=policy)
