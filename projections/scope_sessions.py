"""A scope's sessions and observations as the coding-agent surfaces list them.

Reads of existing projections (``sessions``, ``observations``), not a projection of its
own: the MCP server lists a project's sessions, picks the session an observation goes
to, and searches the project's observations with their provenance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ctxledger.projections.observations import observations
from ctxledger.projections.session_stats import sessions
from ctxledger.store.clock import format_utc
from ctxledger.store.schema import events

FILES_KEY = "files"
"""The key of an observation's files in its metadata's ``extra`` (its ``source`` joins
them for people)."""


def scope_sessions(conn: sa.Connection, scope: str) -> list[dict[str, Any]]:
    """The sessions of ``scope``, most recently active first (then by id): id, title,
    agent, start, end, last activity, message count and the end summary."""
    rows = conn.execute(
        sa.select(sessions.c.stream_id, sessions.c.title, sessions.c.agent,
                  sessions.c.started_at, sessions.c.ended_at, sessions.c.last_activity,
                  sessions.c.messages_total, sessions.c.end_summary,
                  sessions.c.last_position)
        .where(sessions.c.scope == scope)).mappings().all()
    # Sorted here, not in SQL, so both databases give one order (ids compare by bytes).
    ordered = sorted(rows, key=lambda r: (-int(r["last_position"]), r["stream_id"]))
    return [{"session": r["stream_id"], "title": r["title"], "agent": r["agent"],
             "started_at": _iso(r["started_at"]), "ended_at": _iso(r["ended_at"]),
             "last_activity": _iso(r["last_activity"]), "messages": r["messages_total"],
             "summary": r["end_summary"]} for r in ordered]


def session_scope_of(conn: sa.Connection, session: str) -> str | None:
    """The scope ``session`` started in (None: it has not started)."""
    found = conn.execute(sa.select(sessions.c.scope)
                         .where(sessions.c.stream_id == session)).scalar()
    return None if found is None else str(found)


def active_session(conn: sa.Connection, scope: str) -> str | None:
    """The session of ``scope`` that has not ended and was active last (None: none)."""
    rows = conn.execute(sa.select(sessions.c.stream_id, sessions.c.last_position)
                        .where(sessions.c.scope == scope,
                               sessions.c.ended_at.is_(None))).all()
    if not rows:
        return None
    return str(min(rows, key=lambda r: (-int(r.last_position), r.stream_id)).stream_id)


@dataclass(frozen=True, slots=True)
class ScopeObservation:
    """One observation of a scope with where it comes from in the log."""

    event_id: str
    position: int
    session: str
    kind: str
    content: str
    source: str | None
    files: tuple[str, ...]
    recorded_at: datetime


def scope_observations(conn: sa.Connection, scope: str) -> list[ScopeObservation]:
    """Every observation of ``scope``, in log order, with its event id and files."""
    rows = conn.execute(
        sa.select(observations, events.c.event_id, events.c.metadata)
        .join(events, events.c.position == observations.c.position)
        .where(observations.c.scope == scope)
        .order_by(observations.c.position)).mappings()
    found: list[ScopeObservation] = []
    for row in rows:
        extra = json.loads(row["metadata"]).get("extra")
        files = extra.get(FILES_KEY) if isinstance(extra, dict) else None
        found.append(ScopeObservation(
            event_id=str(row["event_id"]), position=int(row["position"]),
            session=str(row["stream_id"]), kind=str(row["kind"]),
            content=str(row["content"]), source=row["source"],
            files=tuple(str(f) for f in files) if isinstance(files, list) else (),
            recorded_at=row["recorded_at"]))
    return found


def _iso(value: datetime | None) -> str | None:
    return None if value is None else format_utc(value)
