"""The chat-history window: the rule every profile that sends chat history follows.

With a budget (``context_limit − response_reserve`` minus what comes before the history),
the history is filled newest first as a contiguous suffix of the non-retracted messages:

- the newest message is always kept (if it alone is over, the context overshoots and the
  caller warns);
- older messages are kept while they fit; the first that does not fit, and every older
  one, is ``dropped`` with reason ``over_budget`` and the numbers (its tokens, the
  budget, what was used and what remained);
- messages the read view left unread (older than the window) are one ``dropped``
  decision for their whole range, ``history:dropped``, so a turn costs O(window) and not
  O(history), while every message not sent is still accounted for by a decision.

Without a budget every loaded message is kept. A summary, when the profile uses one, sits
before the suffix; messages dropped between it and the suffix form the *gap*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxledger.assembler.candidates import Candidate
from ctxledger.assembler.engine import Engine
from ctxledger.assembler.message_ranges import DROPPED_RANGE_ITEM
from ctxledger.projections.view import Message


def message_item(message: Message) -> str:
    """The item id of a chat message: ``message:<message_id>``."""
    return f"message:{message.message_id}"


@dataclass(frozen=True, slots=True)
class WindowMessage:
    """A loaded message as a registered candidate."""

    message: Message
    candidate: Candidate


@dataclass(slots=True)
class WindowResult:
    """What the fill kept (oldest first) and what it left out."""

    kept: list[Candidate]
    used: int
    """Tokens counted against the budget after the fill (base included)."""
    dropped: int = 0
    """Messages dropped: loaded ones that did not fit plus the unread older ones."""
    dropped_range: tuple[int, int] | None = None
    """``(first_seq, last_seq)`` of the dropped messages (they are contiguous)."""
    overshoot: bool = False
    """True when the newest message alone took the context over the budget."""


def fill_window(engine: Engine, messages: Sequence[WindowMessage], *, base: int,
                budget: int | None, separator_tokens: int, first_needs_separator: bool,
                reason: str, unloaded: int = 0, oldest_unloaded: Message | None = None,
                **detail: int | str | None) -> WindowResult:
    """Decide every loaded message (given oldest first) under ``budget``.

    ``base`` is what the context already uses. The kept messages are the longest newest
    suffix whose exact cost fits: their tokens plus ``separator_tokens`` for each line
    break between two of them, plus one more when ``first_needs_separator`` (something
    of the history, a summary, precedes them). ``reason`` is the reason code of kept
    messages; ``detail`` is added to every decision.
    """
    if budget is None:
        kept = [engine.include(item.candidate, reason, seq=item.message.seq, **detail)
                for item in messages]
        used = base + sum(item.candidate.tokens for item in messages) \
            + separator_tokens * max(0, len(messages) - (0 if first_needs_separator else 1))
        return WindowResult(kept=kept, used=used)

    newest_first = list(reversed(messages))
    kept_newest_first: list[Candidate] = []
    used = base
    dropped_seqs: list[int] = []
    closed = False
    result = WindowResult(kept=[], used=base)
    for index, item in enumerate(newest_first):
        # Each line break is charged to the older of the two messages it joins: a message
        # kept next to a newer one adds itself and the break after it, so the oldest kept
        # message pays for no break before it (none is sent), unless the history has
        # something before the messages (``first_needs_separator``), whose break the
        # newest message pays. The suffix's total is then exactly what is sent.
        cost = item.candidate.tokens + (
            separator_tokens if (index > 0 or first_needs_separator) else 0)
        numbers = {"seq": item.message.seq, "tokens": item.candidate.tokens,
                   "budget": budget, "used": used, "remaining": budget - used}
        if index == 0:
            used += cost
            result.overshoot = used > budget
            kept_newest_first.append(engine.include(
                item.candidate, reason, **numbers, must_keep=True,
                over_budget=result.overshoot, **detail))
            continue
        if not closed and used + cost <= budget:
            used += cost
            kept_newest_first.append(engine.include(item.candidate, reason, **numbers,
                                                    **detail))
            continue
        engine.exclude(item.candidate, "dropped", "over_budget", **numbers,
                       after_misfit=closed, **detail)
        dropped_seqs.append(item.message.seq)
        closed = True
    loaded_dropped = len(dropped_seqs)
    if unloaded > 0 and oldest_unloaded is not None:
        newest_unread = (min(dropped_seqs) if dropped_seqs else
                         min((item.message.seq for item in messages), default=None))
        section = messages[0].candidate.section if messages else "chat_history"
        range_item = engine.candidate(DROPPED_RANGE_ITEM, section, "")
        engine.exclude(range_item, "dropped", "over_budget", messages=unloaded,
                       first_seq=oldest_unloaded.seq,
                       first_message_id=oldest_unloaded.message_id,
                       before_seq=newest_unread, budget=budget, **detail)
        dropped_seqs.append(oldest_unloaded.seq)
    result.kept = list(reversed(kept_newest_first))
    result.used = used
    result.dropped = loaded_dropped + unloaded
    if dropped_seqs:
        result.dropped_range = (min(dropped_seqs), max(dropped_seqs))
    return result
