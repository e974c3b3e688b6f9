"""Session stats: messages by role (retractions excluded), last activity, chapter and scene,
the session's scope and summaries. Also keeps each message, for chat history."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from ctxledger.projections.base import Projection, RawEvent, TimeOf, metadata
from ctxledger.projections.fork_copies import (
    FORKED_FROM,
    counts_in_scope,
    is_copy,
    raw_counts_in_scope,
)
from ctxledger.projections.rowstore import Row, RowStore
from ctxledger.store.chat import CHAT_ROLES
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType, UTCDateTime
from ctxledger.store.streams import DEFAULT_SCOPE, stream_kind

ROLES = CHAT_ROLES
"""Every message role: each has its ``messages_<role>`` count."""

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
    # A fork's copies that do not count toward the scope are its first versions: the
    # daily rollups skip events of the session up to this version.
    sa.Column("copied_versions", sa.Integer, nullable=False, server_default="0"),
    sa.Column("forked_from", sa.String(200)),
    sa.Index("ix_sessions_scope_ended", "scope", "ended_position"),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""One row per session stream. ``forked_from`` is the session a fork copied (from its
copied ``session.started``); ``ended_position`` is left unset by a copied ``session.ended``
that does not count, so a fork is not one of the scope's ended sessions for its copy."""

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("message_id", sa.String(200), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("retracted", sa.Boolean, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per message written
)
"""Every message of every session, keyed so a session's history is one range of the key
(newest first for the window). ``seq`` is the event's stream version. Only what the
event row lacks is kept: the content, name and time are read from ``events`` at
``position`` (each fact written once)."""

message_ids = sa.Table(
    "message_ids",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("message_id", sa.String(200), primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sqlite_with_rowid=False,
)
"""The seq of each message with an app-chosen ``message_id``. A message without one is
known by its event id, which the log's own ``event_id`` index finds."""


def find_message(rows: RowStore, stream_id: str, message_id: str) -> Row | None:
    """The current message of ``stream_id`` called ``message_id``, or None."""
    named = rows.get(message_ids, (stream_id, message_id))
    if named is not None:
        seq = int(named["seq"])
    else:
        found = rows.event_version(message_id)
        if found is None or found[0] != stream_id:
            return None
        seq = found[1]
    row = rows.get(messages, (stream_id, seq))
    # A message replaced under an app-chosen id that was this event's id is gone.
    return row if row is not None and row["message_id"] == message_id else None


_SESSION_DEFAULTS = {"scope": DEFAULT_SCOPE, "copied_versions": 0}

_SESSION_TYPES = frozenset({
    "session.started", "session.ended", "message.appended", "message.retracted",
    "history.summarized", "tool.used", "setting.changed", "card.set", "chapter.moved",
    "item.put", "item.removed", "observation.recorded", "document.put", "persona.set",
    "context.assembled",
})


# Session events whose only effect is moving the session's last activity and position.
_ACTIVITY_ONLY = _SESSION_TYPES - {
    "session.started", "session.ended", "message.appended", "message.retracted",
    "history.summarized", "chapter.moved"}
_ROLE_COUNTS = {role: f"messages_{role}" for role in ROLES}
_COUNTS = dict.fromkeys((*_ROLE_COUNTS.values(), "messages_total", "messages_retracted"), 0)


_MESSAGE_COLUMNS = ("stream_id", "seq", "message_id", "role", "retracted", "position")


class _StatsRebuildFold:
    """``session_stats`` through a rebuild without a record per event.

    The two commonest cases are folded here, into the session row in place: a message
    without an app-chosen id (counted, its row held aside) and an event that only moves
    the session's last activity. ``last_activity`` is the last such event's time, parsed
    once per session when the rows are flushed. Everything else (chosen ids, retractions,
    summaries, starts, ends, chapters) goes through ``apply``, which sees the same rows.

    A message row held aside is a tuple, not a ``RowStore`` row: its key (the session
    and the event's stream version) is new, and only ``apply`` of that session's own
    events may read it back, so a session's rows are handed to the ``RowStore`` before
    such an event, and the rest are written as plain inserts, in log order, when the
    fold finishes (or holds too many).
    """

    __slots__ = ("_aside", "_handed", "_live", "_rows", "_time_of")

    def __init__(self, rows: RowStore, time_of: TimeOf) -> None:
        self._rows = rows
        self._time_of = time_of
        # session -> [its row, changed in place; its new message rows held aside; the raw
        # time of its last event folded here]
        self._live: dict[str, list[Any]] = {}
        # Every message row held aside, in log order (SQLite inserts them fastest in
        # that order: 1.19 us a row against 1.46 a session at a time), and the ids of
        # those since handed to the RowStore.
        self._aside: list[tuple[Any, ...]] = []
        self._handed: set[int] = set()

    def __call__(self, raw: RawEvent, data: dict[str, Any]) -> bool:
        stream: str = raw[1]
        meta = raw[7]
        if meta != "{}" and not raw_counts_in_scope(meta):  # "{}" holds no fork's mark
            return self._by_apply(stream)  # marks the session's copied versions
        kind = raw[4]
        if kind == "message.appended":
            role = data["role"]
            counter = _ROLE_COUNTS.get(role)
            if counter is None or data.get("message_id"):
                return self._by_apply(stream)
            live = self._live.get(stream) or self._edit(stream)
            if live is None:
                return True  # not a session: apply ignores it too
            row = live[0]
            row[counter] += 1
            row["messages_total"] += 1
            values = (stream, raw[2], raw[3], role, False, raw[0])
            live[1].append(values)
            aside = self._aside
            aside.append(values)
            if len(aside) >= RowStore.ASIDE_ROWS:
                self._write_aside()
        elif kind in _ACTIVITY_ONLY:
            live = self._live.get(stream) or self._edit(stream)
            if live is None:
                return True
            row = live[0]
        else:
            return self._by_apply(stream)
        row["last_position"] = raw[0]
        live[2] = raw[8]
        return True

    def _edit(self, stream: str) -> list[Any] | None:
        if stream_kind(stream) != "session":
            return None
        row = self._rows.editable(sessions, {"stream_id": stream}, _SESSION_DEFAULTS)
        for column, zero in _COUNTS.items():
            if row.get(column) is None:
                row[column] = zero
        live = self._live[stream] = [row, [], None]
        return live

    def _by_apply(self, stream: str) -> bool:
        # apply rewrites the row (and its last activity) through the RowStore, and may
        # read the session's messages there.
        live = self._live.pop(stream, None)
        if live is not None and live[1]:
            put = self._rows.put
            for values in live[1]:
                put(messages, dict(zip(_MESSAGE_COLUMNS, values, strict=True)))
                self._handed.add(id(values))  # still referenced by _aside: ids stay unique
        return False

    def _write_aside(self) -> None:
        held, handed = self._aside, self._handed
        if handed:
            held = [values for values in held if id(values) not in handed]
        if held:
            self._rows.insert_new(messages, _MESSAGE_COLUMNS, held)
        for live in self._live.values():
            live[1] = []
        self._aside = []
        handed.clear()

    def finish(self) -> None:
        self._write_aside()
        time_of = self._time_of
        for live in self._live.values():
            live[0]["last_activity"] = time_of(live[2])
        self._live.clear()


class SessionStatsProjection(Projection):
    """Counts and positions of each session, updated with blind increments."""

    name: ClassVar[str] = "session_stats"
    # v2: appending an explicit message_id again replaces that message instead of
    # counting it twice. v3: a replaced message counts as retracted. v4: a fork's
    # copies are marked (``copied_versions``, ``forked_from``). The ``developer`` count
    # came later without a new version: no log held such a message before it.
    version: ClassVar[int] = 4
    tables: ClassVar[tuple[sa.Table, ...]] = (sessions, messages, message_ids)
    handles: ClassVar[frozenset[str]] = _SESSION_TYPES

    def rebuild_fold(self, rows: RowStore, time_of: TimeOf) -> _StatsRebuildFold:
        """Messages and activity-only events folded in place (see ``_StatsRebuildFold``)."""
        return _StatsRebuildFold(rows, time_of)

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
        counts = counts_in_scope(event.metadata)
        if not counts:
            assign["copied_versions"] = event.stream_version
        if kind == "message.appended":
            role = data["role"]
            add = {f"messages_{role}": 1, "messages_total": 1}
            chosen = data.get("message_id")
            message_id = chosen or event.event_id
            if chosen:
                # An app-chosen id may repeat: the new message replaces the old one, so a
                # still-counted old message stops counting (default ids are unique: no read).
                old = find_message(rows, event.stream_id, message_id)
                if old is not None:
                    rows.delete(messages, (event.stream_id, old["seq"]))
                    if not old["retracted"]:
                        old_role = f"messages_{old['role']}"
                        add[old_role] = add.get(old_role, 0) - 1
                        add["messages_total"] -= 1
                        # The old message is withdrawn like a retraction; counting it keeps
                        # token memos keyed on retractions from going stale.
                        add["messages_retracted"] = 1
                rows.put(message_ids, {"stream_id": event.stream_id, "message_id": message_id,
                                       "seq": event.stream_version})
            rows.put(messages, {
                "stream_id": event.stream_id, "seq": event.stream_version,
                "message_id": message_id, "role": role, "retracted": False,
                "position": event.position,
            })
        elif kind == "message.retracted":
            found = find_message(rows, event.stream_id, data["message_id"])
            if found is not None and not found["retracted"]:
                rows.put(messages, {**found, "retracted": True})
                add = {f"messages_{found['role']}": -1, "messages_total": -1,
                       "messages_retracted": 1}
        elif kind == "history.summarized":
            through = find_message(rows, event.stream_id, data["through_message_id"])
            assign.update(summary_text=data["summary"],
                          summary_through_message_id=data["through_message_id"],
                          summary_through_seq=None if through is None else through["seq"],
                          summary_position=event.position)
        elif kind == "session.started":
            assign.update(scope=data.get("scope", DEFAULT_SCOPE), title=data.get("title"),
                          agent=data.get("agent"), started_at=event.recorded_at)
            if is_copy(event.metadata):
                assign["forked_from"] = event.metadata[FORKED_FROM]
        elif kind == "session.ended":
            assign.update(ended_at=event.recorded_at, end_summary=data.get("summary"))
            if counts:
                assign["ended_position"] = event.position
        elif kind == "chapter.moved":
            assign.update(chapter=data["chapter"], scene=data.get("scene"))
        rows.bump(sessions, key, add=add, set=assign, defaults=_SESSION_DEFAULTS)


def counted_in_scope(event_version: sa.ColumnElement[int]) -> sa.ColumnElement[bool]:
    """SQL for ``fork_copies.counts_in_scope`` of a session event joined to its
    ``sessions`` row (outer join: a stream without one counts): its stream version is
    past the session's uncounted copies."""
    return event_version > sa.func.coalesce(sessions.c.copied_versions, 0)


class SessionSummary(BaseModel):
    """One session of a scope as a list shows it (the browser view's scope page)."""

    model_config = ConfigDict(frozen=True)

    session: str
    title: str | None
    agent: str | None
    started_at: datetime | None
    ended_at: datetime | None
    last_activity: datetime | None
    messages: int
    """Messages appended, retracted ones included (``messages_total``)."""
    ended: bool
    summary: str | None
    """The summary the session ended with (``session.ended``), if any."""
    forked_from: str | None


def scope_sessions(conn: sa.Connection, scope: str) -> list[SessionSummary]:
    """The sessions whose current scope is ``scope``, most recently active first (by the
    position of their last event, which no clock can reorder; ties by id)."""
    rows = conn.execute(sa.select(sessions).where(sessions.c.scope == scope)).mappings()
    # Sorted here: PostgreSQL orders text by collation, SQLite by bytes.
    ordered = sorted(rows, key=lambda r: (-int(r["last_position"]), r["stream_id"]))
    return [SessionSummary(session=row["stream_id"], title=row["title"], agent=row["agent"],
                           started_at=row["started_at"], ended_at=row["ended_at"],
                           last_activity=row["last_activity"],
                           messages=row["messages_total"],
                           ended=row["ended_at"] is not None, summary=row["end_summary"],
                           forked_from=row["forked_from"]) for row in ordered]


