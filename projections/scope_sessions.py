"""A scope's open session and observations as the coding-agent surfaces read them.

Reads of existing projections (``sessions``, ``observations``), not a projection of its
own: the MCP server picks the session an observation goes to, and searches the
project's observations with their provenance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from ctxledger.projections.observations import observations
from ctxledger.projections.session_stats import sessions
from ctxledger.store.schema import events

FILES_KEY = "files"
"""The key of an observation's files in its metadata's ``extra`` (its ``source`` joins
them for people)."""


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

