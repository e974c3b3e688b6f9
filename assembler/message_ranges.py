"""Range decisions over a session's chat messages, and the one that covers a message.

A message older than the history window (``history:dropped``: ``first_seq`` up to, not
including, ``before_seq``) or replaced by a summary (``summarized:<id>``: up to
``through_seq``) has no decision of its own. The range decision names the messages by
sequence number, not by id (listing every id would cost O(history) a turn), so finding
the one that covers ``message:<id>`` takes the message's ``seq``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar


class RangeDecision(Protocol):
    """What a range lookup reads of a decision (``model.Decision``, whose own lookup calls
    this module: naming the protocol keeps the import one way)."""

    @property
    def item(self) -> str: ...

    @property
    def detail(self) -> Mapping[str, object]: ...


Decision = TypeVar("Decision", bound=RangeDecision)

DROPPED_RANGE_ITEM = "history:dropped"
"""Item id of the decision covering the messages older than the history window."""
MESSAGE_PREFIX = "message:"
"""Item ids of chat messages: ``message:<message_id>``."""
SUMMARIZED_PREFIX = "summarized:"
"""Item ids of the block of messages a summary replaced: ``summarized:<through id>``."""


def covering(decisions: Sequence[Decision], seq: int) -> Decision | None:
    """The range decision that covers the message with sequence number ``seq``, if any."""
    for decision in decisions:
        d = decision.detail
        if decision.item == DROPPED_RANGE_ITEM:
            first, before = d.get("first_seq"), d.get("before_seq")
            if isinstance(first, int) and first <= seq and (
                    not isinstance(before, int) or seq < before):
                return decision
        elif decision.item.startswith(SUMMARIZED_PREFIX):
            through = d.get("through_seq")
            if isinstance(through, int) and seq <= through:
                return decision
    return None


def covering_first(decisions: Sequence[Decision], message_id: str) -> Decision | None:
    """The ``history:dropped`` decision whose oldest message is ``message_id``: known by id
    alone, without the message's ``seq``."""
    for decision in decisions:
        if decision.item == DROPPED_RANGE_ITEM \
                and decision.detail.get("first_message_id") == message_id:
            return decision
    return None
