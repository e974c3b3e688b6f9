"""Observations per scope: ``observation.recorded`` in any session of the scope, attributed
through the session's ``session.started``. The primary key ``(scope, position)`` is the
index behind "the scope's most recent N observations before a position"."""

from __future__ import annotations

from typing import ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.fork_copies import counts_in_scope
from ctxledger.projections.rowstore import RowStore
from ctxledger.projections.session_scopes import (
    record_session_scope,
    session_scope,
    session_scope_table,
)
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType, UTCDateTime
from ctxledger.store.streams import stream_kind

observation_scopes = session_scope_table("observation_session_scopes")
"""The scope each session's observations are attributed to."""

observations = sa.Table(
    "observations",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("position", PositionType, primary_key=True),
    sa.Column("stream_id", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("source", sa.Text),
    sa.Column("recorded_at", UTCDateTime, nullable=False),
    sa.Index("ix_observations_stream_id", "stream_id"),  # an erase deletes by session
)
"""Every observation, keyed by scope and log position."""


class ObservationsProjection(Projection):
    """Observations by scope, in log order."""

    name: ClassVar[str] = "observations"
    # v2: a fork's copies that do not count toward the scope add no observation.
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[sa.Table, ...]] = (observation_scopes, observations)
    handles: ClassVar[frozenset[str]] = frozenset({"session.started", "observation.recorded"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Record the session's scope, or append the observation to that scope."""
        if stream_kind(event.stream_id) != "session":
            return
        if event.type == "session.started":
            record_session_scope(observation_scopes, event, rows)
            return
        if not counts_in_scope(event.metadata):
            return  # the scope has it already, from the session the fork copied
        data = event.data
        rows.put(observations, {
            "scope": session_scope(observation_scopes, event.stream_id, rows),
            "position": event.position, "stream_id": event.stream_id, "kind": data["kind"],
            "content": data["content"], "source": data.get("source"),
            "recorded_at": event.recorded_at,
        })
