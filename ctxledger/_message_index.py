"""Which message of a session each ``message_id`` named, at any log position.

``Assembly.decision("message:<id>")`` needs a message's sequence number to find the range
decision (``history:dropped``, ``summarized:<id>``) that covers it. A ``MessageIndex`` is
built in one pass over the session's events and answers for any position of that prefix,
so a timeline shares one index between all its steps. It follows the ``session_stats``
projection's rules: appending an app-chosen id again replaces the older message, and a
retraction withdraws the current message of that id.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from ctxledger.assembler.model import MessageSeqs
from ctxledger.store.records import RecordedEvent


def message_id_of(event: RecordedEvent) -> str:
    """The id a ``message.appended`` is known by (its own, else its event id)."""
    return str(event.data.get("message_id") or event.event_id)


class MessageIndex:
    """Per ``message_id``, the positions at which it started or stopped naming a message."""

    def __init__(self, session: str, events: Iterable[RecordedEvent]) -> None:
        # message_id -> positions (ascending) and, at each, the seq it named (None: none).
        self._positions: dict[str, list[int]] = {}
        self._seqs: dict[str, list[int | None]] = {}
        for event in events:
            if event.stream_id != session:
                continue
            if event.type == "message.appended":
                self._mark(message_id_of(event), event.position, event.stream_version)
            elif event.type == "message.retracted":
                self._mark(str(event.data["message_id"]), event.position, None)

    def _mark(self, message_id: str, position: int, seq: int | None) -> None:
        self._positions.setdefault(message_id, []).append(position)
        self._seqs.setdefault(message_id, []).append(seq)

    def seq_at(self, message_id: str, position: int) -> int | None:
        """The seq of the non-retracted message called ``message_id`` at ``position``."""
        positions = self._positions.get(message_id)
        if positions is None:
            return None
        at = bisect_right(positions, position)
        return self._seqs[message_id][at - 1] if at else None

    def at(self, position: int) -> MessageSeqs:
        """The lookup an assembly made at ``position`` attaches."""
        def seq(message_id: str) -> int | None:
            return self.seq_at(message_id, position)
        return seq
