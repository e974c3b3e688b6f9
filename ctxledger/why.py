"""Why: one item's decisions across a session's timeline, collapsed into runs (SPEC §4).

For example ``mes_example: included at messages 1-4 (level chat_dialogue ≥ chat_dialogue,
4 < 5); expired at message 5 (level chat_dialogue ≥ chat_dialogue, 5 ≥ 5)``. Each run
shows the numbers of its first step: the ones that drove the change.

A chat message older than the history window, or replaced by a summary, has no decision
of its own: one range decision (``history:dropped``, ``summarized:<id>``) covers it, and
``why`` resolves ``message:<id>`` through it by the message's sequence number. Likewise
a novel item dropped in its tier's tail is listed (``items``) by the tier's one range
decision (``warm:dropped``, …), which ``why`` shows for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxledger.assembler.history_window import DROPPED_RANGE_ITEM
from ctxledger.assembler.model import Decision, DetailValue
from ctxledger.replay import TimelineStep, message_id_of
from ctxledger.store.errors import LedgerError
from ctxledger.store.records import RecordedEvent

MESSAGE_PREFIX = "message:"
SUMMARIZED_PREFIX = "summarized:"


class WhyError(LedgerError):
    """The item was never a candidate in the session's timeline."""


@dataclass(frozen=True, slots=True)
class WhyRun:
    """Consecutive messages at which the item got the same action and reason."""

    first: int
    last: int
    action: str
    reason: str
    numbers: str
    """The numbers behind the decision at ``first``, e.g. ``5 ≥ 5``."""
    detail: dict[str, DetailValue]
    covered_by: str | None = None
    """The range decision (``history:dropped``, ``summarized:<id>``, ``warm:dropped``)
    that decided it."""

    def describe(self) -> str:
        """``expired at message 5 (…)`` or ``included at messages 1-4 (…)``."""
        span = (f"message {self.first}" if self.first == self.last
                else f"messages {self.first}-{self.last}")
        via = f" via {self.covered_by}" if self.covered_by else ""
        numbers = f" ({self.numbers})" if self.numbers else ""
        return f"{self.action} at {span}{via}{numbers}"


@dataclass(frozen=True, slots=True)
class WhyReport:
    """An item's history of decisions in one session."""

    session: str
    item: str
    profile: str
    messages: int
    runs: list[WhyRun]

    def line(self) -> str:
        """The whole explanation on one line."""
        name = self.item
        return f"{name}: " + "; ".join(run.describe() for run in self.runs)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data (the same runs as the text)."""
        return {"session": self.session, "item": self.item, "profile": self.profile,
                "messages": self.messages, "explanation": self.line(),
                "runs": [asdict(run) for run in self.runs]}


def _compare(a: Any, b: Any) -> str:
    return "≥" if a >= b else "<"


def decision_numbers(decision: Decision) -> str:
    """The numbers that drove ``decision``, in words."""
    d = decision.detail
    if {"level", "min_level", "message_count"} <= d.keys():
        if d.get("permanent"):
            return "permanent"
        parts = []
        level, min_level = d["level"], d["min_level"]
        if level == "none":
            parts.append("level none")
        elif isinstance(d.get("level_rank"), int) and isinstance(d.get("min_level_rank"), int):
            parts.append(f"level {level} {_compare(d['level_rank'], d['min_level_rank'])} "
                         f"{min_level}")
        count, threshold = d["message_count"], d.get("expires_at_message")
        if isinstance(count, int) and isinstance(threshold, int):
            parts.append(f"{count} {_compare(count, threshold)} {threshold}")
        return ", ".join(parts)
    shown = [f"{key} {value}" for key, value in d.items()
             if value is not None and not isinstance(value, list) and key != "must_keep"]
    return ", ".join(shown)


def _message_seq(events: Sequence[RecordedEvent], message_id: str) -> int | None:
    for event in events:
        if event.type == "message.appended" and message_id_of(event) == message_id:
            return event.stream_version
    return None


def covering(decisions: Sequence[Decision], seq: int) -> Decision | None:
    """The range decision that covers message ``seq``, if any."""
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


def explain_item(session: str, item: str, profile: str, steps: Sequence[TimelineStep],
                 events: Sequence[RecordedEvent]) -> WhyReport:
    """Collapse ``item``'s decision at each step into runs."""
    seq = (_message_seq(events, item[len(MESSAGE_PREFIX):])
           if item.startswith(MESSAGE_PREFIX) else None)
    found: list[tuple[int, Decision, str | None]] = []
    for step in steps:
        decisions = step.assembly.decisions
        own = next((d for d in decisions if d.item == item), None)
        if own is not None:
            found.append((step.message, own, None))
            continue
        if seq is None:
            # A novel item dropped in its tier's tail: the tier's range decision lists it.
            tail = next((d for d in decisions if d.covers(item)), None)
            if tail is not None:
                found.append((step.message, tail, tail.item))
            continue
        if step.seq < seq:
            continue  # not a candidate yet (or never)
        cover = covering(decisions, seq)
        if cover is not None:
            found.append((step.message, cover, cover.item))
        else:
            found.append((step.message, Decision(item=item, section="", action="dropped",
                                                 reason="not_a_candidate"), None))
    if not found or all(d.reason == "not_a_candidate" for _, d, _ in found):
        known = sorted({d.item for step in steps for d in step.assembly.decisions})
        hint = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise WhyError(f"{item!r} is not a candidate in any assembly of session {session!r}"
                       f" ({profile}); items: {hint or 'none'}")
    runs: list[WhyRun] = []
    for message, decision, via in found:
        key = (decision.action, decision.reason, via)
        last = runs[-1] if runs else None
        if last is not None and (last.action, last.reason, last.covered_by) == key \
                and last.last + 1 == message:
            runs[-1] = WhyRun(last.first, message, last.action, last.reason, last.numbers,
                              last.detail, last.covered_by)
            continue
        runs.append(WhyRun(message, message, decision.action, decision.reason,
                           decision_numbers(decision), _plain(decision.detail), via))
    return WhyReport(session, item, profile, len(steps), runs)


def _plain(detail: Mapping[str, DetailValue]) -> dict[str, DetailValue]:
    return dict(detail)
