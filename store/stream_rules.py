"""Rules an event must keep with its own stream's history, checked under the write lock.

- a stream has at most one ``session.started``;
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

from collections.abc import Sequence

import sqlalchemy as sa

from ctxledger.store.backends import backend_for
from ctxledger.store.errors import StreamRuleError
from ctxledger.store.records import NewEvent

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


def _started(conn: sa.Connection, stream_id: str) -> bool:
    return conn.execute(sa.text(
        f"SELECT 1 FROM events WHERE stream_id = :stream AND type = '{STARTED}' LIMIT 1"),
        {"stream": stream_id}).first() is not None


def check_stream_rules(conn: sa.Connection, stream_id: str, batch: Sequence[NewEvent]) -> None:
    """Raise ``StreamRuleError`` (naming the event's index) for the first event of ``batch``
    that contradicts the stream's history or an earlier event of the batch."""
    if not any(event.type in RULED_TYPES for event in batch):
        return
    wanted = {str(e.data["message_id"]) for e in batch if e.type == RETRACTED}
    wanted |= {str(e.data["through_message_id"]) for e in batch if e.type == SUMMARIZED}
    states = _message_states(conn, stream_id, wanted)
    started = any(e.type == STARTED for e in batch) and _started(conn, stream_id)

    def fail(index: int, reason: str) -> StreamRuleError:
        where = f"event {index + 1}: " if len(batch) > 1 else ""
        return StreamRuleError(f"{where}{reason}", index=index, reason=reason)

    for index, event in enumerate(batch):
        kind = event.type
        if kind == STARTED:
            if started:
                raise fail(index, f"{STARTED}: stream {stream_id!r} has already started")
            started = True
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
