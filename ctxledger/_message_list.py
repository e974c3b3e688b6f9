"""A session's live messages read incrementally (``Ledger.messages_since``).

A chat adapter asks for the whole history on every turn; reading and decoding every
message again each time makes a turn O(history). A ``MessageList`` remembers the stream
version and the ``seq`` of each live message it holds, so the next read decodes only the
messages appended since. The live ``seq`` list comes from the ``messages`` projection
(integers only) and is compared on every read, never skipped on an unchanged version: a
retraction, a replacement by the same ``message_id`` or an erasure (which keeps the
stream's version) changes it, and then every message is read again.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from ctxledger.store.records import RecordedEvent


@dataclass(frozen=True, slots=True)
class MessageList:
    """The ``message.appended`` events of ``session`` that still count, in order, as of
    the stream's ``version``; ``seqs`` are their stream versions."""

    session: str
    version: int
    seqs: tuple[int, ...]
    events: tuple[RecordedEvent, ...]


def read_message_list(conn: sa.Connection, session: str,
                      known: MessageList | None) -> MessageList:
    """The session's live messages on ``conn`` (in the caller's read snapshot), reading
    only those past ``known`` when every message ``known`` holds still counts."""
    from ctxledger.projections.read_history import live_message_seqs
    from ctxledger.store.append import stream_head

    version = stream_head(conn, session)[0]
    seqs = tuple(live_message_seqs(conn, session))
    if known is not None and known.session == session:
        kept = len(known.seqs)
        if seqs[:kept] == known.seqs and all(seq > known.version for seq in seqs[kept:]):
            return MessageList(session, version, seqs,
                               known.events + events_at(conn, session, seqs[kept:]))
    return MessageList(session, version, seqs, events_at(conn, session, seqs))


def events_at(conn: sa.Connection, session: str,
              seqs: tuple[int, ...]) -> tuple[RecordedEvent, ...]:
    """The events of ``session`` at the (ascending) stream versions ``seqs``."""
    from ctxledger.store.read import read_stream

    if not seqs:
        return ()
    wanted = set(seqs)
    return tuple(event for event in read_stream(conn, session, seqs[0], seqs[-1])
                 if event.stream_version in wanted)
