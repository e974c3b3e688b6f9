"""Session stats: messages by role (retractions excluded), last activity, chapter and scene,
the session's scope and summaries. Also keeps each message, for chat history."""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.catalog import stream_kind
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType, UTCDateTime

ROLES = ("system", "user", "assistant", "tool")

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("scope", sa.String(200), nullable=False),
    sa.Column("title", sa.Text),
    sa.Column("agent", sa.String(200)),
    sa.Column("started_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("ended_position", PositionType),
    sa.Column("end_summary", sa.Text),
    *(sa.Column(f"messages_{role}", sa.Integer, nullable=False, server_default="0")
      for role in ROLES),
    sa.Column("messages_total", sa.Integer, nullable=False, server_default="0"),
    sa.Column("messages_retracted", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_activity", UTCDateTime),
    sa.Column("last_position", PositionType, nullable=False),
    sa.Column("chapter", sa.Integer),
    sa.Column("scene", sa.Text),
    sa.Column("summary_text", sa.Text),
    sa.Column("summary_through_message_id", sa.String(200)),
    sa.Column("summary_through_seq", sa.Integer),
    sa.Column("summary_position", PositionType),
    sa.Index("ix_sessions_scope_ended", "scope", "ended_position"),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One row per session stream."""

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("message_id", sa.String(200), primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("name", sa.String(200)),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("retracted", sa.Boolean, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sa.Column("recorded_at", UTCDateTime, nullable=False),
    sa.Index("ix_messages_stream_seq", "stream_id", "seq"),
)
"""Every message of every session. ``seq`` is the event's stream version, so it orders
messages within a session without a counter."""

_SESSION_TYPES = frozenset({
    "session.started", "session.ended", "message.appended", "message.retracted",
    "history.summarized", "tool.used", "setting.changed", "card.set", "chapter.moved",
    "item.put", "item.removed", "observation.recorded", "document.put", "persona.set",
    "context.assembled",
})


class SessionStatsProjection(Projection):
    """Counts and positions of each session, updated with blind increments."""

    name: ClassVar[str] = "session_stats"
    # v2: appending an explicit message_id again replaces that message instead of
    # counting it twice. v3: a replaced message counts as retracted.
    version: ClassVar[int] = 3
    tables: ClassVar[tuple[sa.Table, ...]] = (sessions, messages)
    handles: ClassVar[frozenset[str]] = _SESSION_TYPES

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Fold one session event into its session row (and its message row)."""
        if stream_kind(event.stream_id) != "session":
            return
        data = event.data
        key = {"stream_id": event.stream_id}
        add: dict[str, int] = {}
        assign: dict[str, Any] = {"last_activity": event.recorded_at,
                                  "last_position": event.position}
        kind = event.type
        if kind == "message.appended":
            role = data["role"]
            add = {f"messages_{role}": 1, "messages_total": 1}
            message_id = data.get("message_id") or event.event_id
            if data.get("message_id"):
                # An app-chosen id may repeat: the new message replaces the old one, so a
                # still-counted old message stops counting (default ids are unique: no read).
                old = rows.get(messages, (event.stream_id, message_id))
                if old is not None and not old["retracted"]:
                    old_role = f"messages_{old['role']}"
                    add[old_role] = add.get(old_role, 0) - 1
                    add["messages_total"] -= 1
                    # The old message is withdrawn like a retraction; counting it keeps
                    # token memos keyed on retractions from going stale.
                    add["messages_retracted"] = 1
            rows.put(messages, {
                "stream_id": event.stream_id,
                "message_id": message_id,
                "seq": event.stream_version, "role": role, "name": data.get("name"),
                "content": data["content"], "retracted": False,
                "position": event.position, "recorded_at": event.recorded_at,
            })
        elif kind == "message.retracted":
            found = rows.get(messages, (event.stream_id, data["message_id"]))
            if found is not None and not found["retracted"]:
                rows.put(messages, {**found, "retracted": True})
                add = {f"messages_{found['role']}": -1, "messages_total": -1,
                       "messages_retracted": 1}
        elif kind == "history.summarized":
            through = rows.get(messages, (event.stream_id, data["through_message_id"]))
            assign.update(summary_text=data["summary"],
                          summary_through_message_id=data["through_message_id"],
                          summary_through_seq=None if through is None else through["seq"],
                          summary_position=event.position)
        elif kind == "session.started":
            assign.update(scope=data.get("scope", "default"), title=data.get("title"),
                          agent=data.get("agent"), started_at=event.recorded_at)
        elif kind == "session.ended":
            assign.update(ended_at=event.recorded_at, ended_position=event.position,
                          end_summary=data.get("summary"))
        elif kind == "chapter.moved":
            assign.update(chapter=data["chapter"], scene=data.get("scene"))
        rows.bump(sessions, key, add=add, set=assign, defaults={"scope": "default"})
