"""Rules an event must keep with its own stream's history, checked under the write lock.

- a stream has at most one ``session.started``, and a session's scope is fixed by it:
  events before it belong to scope ``default``, so a stream that has any names no
  other scope (a ``default`` writer cannot hand a stream to another scope);
- ``message.retracted`` names a message of the stream that is not retracted already;
- ``history.summarized`` summarizes through a message of the stream.

They are checked here, against the stream's own events, rather than by a hook into the
projections: the rule is a property of the log, so it holds for ``EventLog`` used alone,
for a ledger with other projections, and while a projection is lagging or rebuilding; and
``store`` keeps knowing nothing of projections. Only a batch holding one of these three
types pays for it: one indexed look-up per rule over the stream's rows, with the message
id pulled out of the JSON by the database, never the message contents.

The caller holds what ``Backend.lock_append`` takes (the write lock on SQLite, the
stream's lock on PostgreSQL), so nothing can change the stream between
this check and the insert. Without a global lock, two racing writers to one stream
still cannot both pass: they insert the same ``stream_version`` and one of them fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ctxledger.store.backends import backend_for
from ctxledger.store.errors import StreamRuleError
from ctxledger.store.records import NewEvent
from ctxledger.store.streams import DEFAULT_SCOPE

STARTED = "session.started"
APPENDED = "message.appended"
RETRACTED = "message.retracted"
SUMMARIZED = "history.summarized"
RULED_TYPES = frozenset({STARTED, RETRACTED, SUMMARIZED})


_LIVE, _GONE = "live", "retracted"


def _message_states(conn: sa.Connection, stream_id: str, ids: set[str]) -> dict[str, str]:
    """Each of ``ids`` that the stream has appended: live, or retracted (absent: unknown)."""
    if not ids:
        return {}
    # The message id of a message.appended (its data's message_id, else its event id) or
    # of a message.retracted (its data's message_id), computed from the JSON text.
    expr = f"coalesce({backend_for(conn).json_text_sql('data', 'message_id')}, event_id)"
    rows = conn.execute(sa.text(
        f"SELECT type, {expr} AS mid FROM events WHERE stream_id = :stream"
        f" AND type IN ('{APPENDED}', '{RETRACTED}') AND {expr} IN :ids"
        " ORDER BY stream_version"
    ).bindparams(sa.bindparam("ids", expanding=True)),
        {"stream": stream_id, "ids": sorted(ids)}).all()
    states: dict[str, str] = {}
    for kind, mid in rows:
        states[mid] = _LIVE if kind == APPENDED else _GONE
    return states


def started_scope(data: Mapping[str, Any] | None) -> str:
    """The scope a ``session.started`` with ``data`` names (``default`` when none)."""
    scope = data.get("scope") if isinstance(data, Mapping) else None
    return scope if isinstance(scope, str) and scope else DEFAULT_SCOPE


def opening_scope(batch: Sequence[Any]) -> str:
    """The scope ``batch`` (event inputs, ``{"type", "data", ...}`` mappings) puts a stream
    with no events in: the scope of its ``session.started`` when that is its first event,
    else ``default`` (any other first event is in ``default``, and then a ``session.started``
    naming another scope is refused). What the service authorizes a new stream's append by."""
    first = batch[0] if batch else None
    if isinstance(first, Mapping) and first.get("type") == STARTED:
        return started_scope(first.get("data"))
    return DEFAULT_SCOPE


def _stream_scope(conn: sa.Connection, stream_id: str) -> tuple[str | None, bool]:
    """The stream's scope so far (None: no events yet) and whether it has started."""
    scope_sql = backend_for(conn).json_text_sql("data", "scope")
    # The first event and the first session.started: one indexed read of two rows.
    rows = conn.execute(sa.text(
        f"SELECT type, {scope_sql} FROM events WHERE stream_id = :stream"
        f" AND (stream_version = 1 OR type = '{STARTED}') ORDER BY stream_version LIMIT 2"),
        {"stream": stream_id}).all()
    for kind, scope in rows:
        if kind == STARTED:
            return scope or DEFAULT_SCOPE, True
    return (DEFAULT_SCOPE if rows else None), False


def check_stream_rules(conn: sa.Connection, stream_id: str, batch: Sequence[NewEvent]) -> None:
    """Raise ``StreamRuleError`` (naming the event's index) for the first event of ``batch``
    that contradicts the stream's history or an earlier event of the batch."""
    if not any(event.type in RULED_TYPES for event in batch):
        return
    wanted = {str(e.data["message_id"]) for e in batch if e.type == RETRACTED}
    wanted |= {str(e.data["through_message_id"]) for e in batch if e.type == SUMMARIZED}
    states = _message_states(conn, stream_id, wanted)
    scope: str | None = None
    started = False
    if any(e.type == STARTED for e in batch):
        scope, started = _stream_scope(conn, stream_id)

    def fail(index: int, reason: str) -> StreamRuleError:
        where = f"event {index + 1}: " if len(batch) > 1 else ""
        return StreamRuleError(f"{where}{reason}", index=index, reason=reason)

    for index, event in enumerate(batch):
        kind = event.type
        if scope is None and kind != STARTED:
            scope = DEFAULT_SCOPE  # an event before the session starts is in default
        if kind == STARTED:
            named = started_scope(event.data)
            if scope is not None and named != scope:
                raise fail(index, f"{STARTED}: stream {stream_id!r} is in scope {scope!r};"
                                  f" it cannot move to scope {named!r}")
            if started:
                raise fail(index, f"{STARTED}: stream {stream_id!r} has already started")
            scope, started = named, True
        elif kind == APPENDED:
            states[str(event.data.get("message_id") or event.event_id)] = _LIVE
        elif kind == RETRACTED:
            mid = str(event.data["message_id"])
            state = states.get(mid)
            if state is None:
                raise fail(index, f"{RETRACTED}: stream {stream_id!r} has no message {mid!r}")
            if state == _GONE:
                raise fail(index, f"{RETRACTED}: message {mid!r} is already retracted")
            states[mid] = _GONE
        elif kind == SUMMARIZED:
            mid = str(event.data["through_message_id"])
            if mid not in states:
                raise fail(index, f"{SUMMARIZED}: stream {stream_id!r} has no message {mid!r}")
