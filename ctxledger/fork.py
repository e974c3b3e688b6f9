"""Fork: a new session stream that starts as a copy of another's prefix (SPEC §4).

The copies keep their data (and so their stream versions, message sequence numbers and
everything the assembly shows); only ids and times are new. A ``message.appended``
without its own ``message_id`` was known by its event id, so the copy names that id
explicitly: retractions and summaries that point at it keep working, and the fork's
assembly at the fork point equals the original's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxledger.store.errors import LedgerError
from ctxledger.store.records import RecordedEvent
from ctxledger.store.streams import stream_kind


class ForkError(LedgerError):
    """A fork cannot be made: unknown session, a point outside it, a non-session stream."""


def fork_events(events: Sequence[RecordedEvent], session: str, new_session: str, at: int,
                *, head: int) -> list[dict[str, Any]]:
    """The events to append to ``new_session``: ``session``'s events up to position ``at``."""
    if stream_kind(session) != "session" or stream_kind(new_session) != "session":
        raise ForkError("only session streams can be forked (not scope: or system streams)")
    if session == new_session:
        raise ForkError("the new session must differ from the one forked")
    if not events:
        raise ForkError(f"unknown session {session!r}")
    if isinstance(at, bool) or not isinstance(at, int) or at < events[0].position:
        raise ForkError(f"--at {at} is before session {session!r} starts "
                        f"(its first event is at position {events[0].position})")
    if at > events[-1].position:
        raise ForkError(f"--at {at} is beyond session {session!r} (its last event is at "
                        f"position {events[-1].position}; the log head is {head})")
    copies: list[dict[str, Any]] = []
    for event in events:
        if event.position > at:
            break
        data = dict(event.data)
        if event.type == "message.appended" and not data.get("message_id"):
            data["message_id"] = event.event_id
        metadata = {**event.metadata, "causation_id": event.event_id,
                    "forked_from": session, "forked_at": str(at)}
        copies.append({"type": event.type, "data": data, "metadata": metadata})
    return copies
