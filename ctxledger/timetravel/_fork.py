"""Fork: a new session stream that starts as a copy of another's prefix (SPEC §4).

The copies keep their data and their ``recorded_at`` (and so their stream versions,
message sequence numbers, times and everything the assembly shows); only ids are new.
Their metadata names the event copied (``causation_id``), the session (``forked_from``),
the fork point (``forked_at``, a position) and when the fork was made (``fork_time``). A
``message.appended`` without its own ``message_id`` was known by its event id, so the
copy names that id explicitly: retractions and summaries that point at it keep working.

The copies are the original's history, not new activity: they count toward the scope
(tool usage, observations, ended sessions, rollups) only for a fork made with
``count=True`` (``fork_counts`` in their metadata; see ``projections.fork_copies``). So
a fork changes nothing the original or its scope shows, and the fork's assembly at the
original's ``now`` equals the original's at the fork point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxledger.projections.fork_copies import COUNTS, FORK_COUNTS, FORK_TIME, FORKED_FROM
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import LedgerError
from ctxledger.store.records import RecordedEvent
from ctxledger.store.streams import stream_kind


class ForkError(LedgerError):
    """A fork cannot be made: unknown session, a point outside it, a non-session stream."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One event to append to the fork, at the original's time."""

    event: dict[str, Any]
    recorded_at: datetime


def check_fork_streams(session: str, new_session: str) -> None:
    """Raise ``ForkError`` unless both are session streams and differ: decided by the ids
    alone, before anything is read, so the answer never says whether a stream exists."""
    if stream_kind(session) != "session" or stream_kind(new_session) != "session":
        raise ForkError("only session streams can be forked (not scope: or system streams)")
    if session == new_session:
        raise ForkError("the new session must differ from the one forked")


def fork_events(events: Sequence[RecordedEvent], session: str, new_session: str, at: int,
                *, head: int, fork_time: datetime, count: bool = False) -> list[Copy]:
    """The events to append to ``new_session``: ``session``'s events up to position ``at``,
    each with its original ``recorded_at``; ``count`` makes them count toward the scope.
    The caller has passed both ids through ``check_fork_streams`` before reading
    ``events``."""
    if not events:
        raise ForkError(f"unknown session {session!r}")
    if isinstance(at, bool) or not isinstance(at, int) or at < events[0].position:
        raise ForkError(f"--at {at} is before session {session!r} starts "
                        f"(its first event is at position {events[0].position})")
    if at > events[-1].position:
        raise ForkError(f"--at {at} is beyond session {session!r} (its last event is at "
                        f"position {events[-1].position}; the log head is {head})")
    mark: dict[str, Any] = {FORKED_FROM: session, "forked_at": str(at),
                            FORK_TIME: format_utc(fork_time)}
    if count:
        mark[FORK_COUNTS] = COUNTS
    copies: list[Copy] = []
    for event in events:
        if event.position > at:
            break
        data = dict(event.data)
        if event.type == "message.appended" and not data.get("message_id"):
            data["message_id"] = event.event_id
        # A copy of a copy is this fork's copy: whether it counts is this fork's choice.
        kept = {k: v for k, v in event.metadata.items() if k != FORK_COUNTS}
        metadata = {**kept, "causation_id": event.event_id, **mark}
        copies.append(Copy({"type": event.type, "data": data, "metadata": metadata},
                           event.recorded_at))
    return copies
