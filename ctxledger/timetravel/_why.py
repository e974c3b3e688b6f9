"""Why: one item's decisions across a session's timeline, collapsed into runs (SPEC §4).

The timeline steps on every event that changes the profile's inputs (``Profile.inputs``);
consecutive steps with the same action, reason and range decision form a run, e.g.
``mes_example: included at steps 1-5 (level chat_dialogue ≥ chat_dialogue, 0 < 5 …
level chat_dialogue ≥ chat_dialogue, 4 < 5); expired at message 5 (…, 5 ≥ 5)``. A run
whose steps are all messages is named by its message numbers. Every step keeps its own
numbers (``WhyRun.steps``: the table and the JSON show them all); the line shows a run's
first and last.

A chat message older than the history window, or replaced by a summary, and a novel item
dropped in its tier's tail have no decision of their own: ``Assembly.decision`` finds the
range decision that covers them (``history:dropped``, ``summarized:<id>``,
``warm:dropped``, ...), and ``why`` names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ctxledger._message_index import message_id_of
from ctxledger.assembler.message_ranges import MESSAGE_PREFIX
from ctxledger.assembler.model import Decision, DetailValue
from ctxledger.store.errors import LedgerError
from ctxledger.store.records import RecordedEvent
from ctxledger.timetravel._replay import TimelineStep


class WhyError(LedgerError):
    """The item was never a candidate in the session's timeline."""


@dataclass(frozen=True, slots=True)
class WhyStep:
    """The item's decision at one step of the timeline, with its numbers."""

    step: int
    message: int
    """The session's messages so far."""
    position: int
    event_type: str
    stream_id: str
    is_message: bool
    """The step is one of the session's messages."""
    numbers: str
    detail: dict[str, DetailValue]
    sentence: str = ""
    """The decision in a plain sentence (``decision_sentence``)."""

    def label(self, session: str) -> str:
        """``message 3``, ``card.set`` or ``tool.used in alice-2``."""
        if self.is_message:
            return f"message {self.message}"
        return self.event_type + ("" if self.stream_id == session else f" in {self.stream_id}")


@dataclass(frozen=True, slots=True)
class WhyRun:
    """Consecutive steps at which the item got the same action and reason."""

    first: int
    """The run's first step (1-based). When every step of the timeline is a message, the
    step numbers are the message numbers."""
    last: int
    action: str
    reason: str
    numbers: str
    """The numbers behind the decision at ``first``, e.g. ``5 ≥ 5``."""
    detail: dict[str, DetailValue]
    covered_by: str | None = None
    """The range decision (``history:dropped``, ``summarized:<id>``, ``warm:dropped``)
    that decided it."""
    first_message: int = 0
    """The session's messages so far at ``first``; ``last_message`` at ``last``."""
    last_message: int = 0
    steps: list[WhyStep] = field(default_factory=list)
    """Every step of the run, each with its own numbers."""
    sentence: str = ""
    """The decision at ``first`` in a plain sentence (``decision_sentence``)."""

    def span(self) -> str:
        """``message 5`` or ``messages 1-4`` when every step is a message, else ``step 6``
        or ``steps 1-5``."""
        if self.steps and all(s.is_message for s in self.steps):
            a, b, unit = self.first_message, self.last_message, "message"
        else:
            a, b, unit = self.first, self.last, "step"
        return f"{unit} {a}" if a == b else f"{unit}s {a}-{b}"

    def describe(self) -> str:
        """``expired at message 5 (…)`` or ``included at steps 1-4 (first … last)``."""
        via = f" via {self.covered_by}" if self.covered_by else ""
        last = self.steps[-1].numbers if self.steps else self.numbers
        shown = self.numbers if last == self.numbers else f"{self.numbers} … {last}"
        numbers = f" ({shown})" if shown else ""
        return f"{self.action} at {self.span()}{via}{numbers}"


@dataclass(frozen=True, slots=True)
class WhyReport:
    """An item's history of decisions in one session."""

    session: str
    item: str
    profile: str
    messages: int
    """The session's messages in the timeline."""
    runs: list[WhyRun]
    steps: int = 0
    """The timeline's steps."""

    def line(self) -> str:
        """The whole explanation on one line."""
        return f"{self.item}: " + "; ".join(run.describe() for run in self.runs)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data (the same runs as the text, each with every step)."""
        return {"session": self.session, "item": self.item, "profile": self.profile,
                "messages": self.messages, "steps": self.steps,
                "explanation": self.line(), "runs": [asdict(run) for run in self.runs]}


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


def decision_sentence(decision: Decision, via: str | None = None) -> str:
    """``decision`` in a plain sentence, from the same record as ``decision_numbers``:
    its action, its reason code in words and, for a card field's expiry, what the level
    and the message count say."""
    d = decision.detail
    action = decision.action.replace("_", " ")
    if {"level", "min_level", "message_count"} <= d.keys() and not d.get("permanent"):
        level, floor = d["level"], d["min_level"]
        count, threshold = d["message_count"], d.get("expires_at_message")
        ranks = d.get("level_rank"), d.get("min_level_rank")
        if level == "none" or decision.reason == "compression_off":
            return f"Compression is off, so this field never expires: {action}."
        if isinstance(ranks[0], int) and isinstance(ranks[1], int) and ranks[0] < ranks[1]:
            return (f"The compression level {level} is below {floor}, the level at which"
                    f" this field may expire, so it is {action}.")
        if isinstance(count, int) and isinstance(threshold, int):
            at = "is" if ranks[0] == ranks[1] else "is above"
            reached = (f"has {count} messages, reaching the {threshold} at which"
                       if count >= threshold else
                       f"has only {count} messages, fewer than the {threshold} at which")
            return (f"The compression level {level} {at} {floor}, the level at which this"
                    f" field may expire, and the chat {reached} it expires, so it is"
                    f" {action}.")
    if d.get("permanent"):
        return f"This field is permanent and never expires: {action}."
    reason = decision.reason.replace("_", " ")
    covered = f", decided for the whole range {via}" if via else ""
    return f"{action.capitalize()} because of the rule \"{reason}\"{covered}."


def _message_seq(events: Sequence[RecordedEvent], message_id: str) -> int | None:
    for event in events:
        if event.type == "message.appended" and message_id_of(event) == message_id:
            return event.stream_version
    return None


def explain_item(session: str, item: str, profile: str, steps: Iterable[TimelineStep],
                 events: Sequence[RecordedEvent]) -> WhyReport:
    """Collapse ``item``'s decision at each step (``Assembly.decision``) into runs.

    ``steps`` is read once, in order, and only the item's decision is kept of each (its
    run and numbers): a timeline of any length holds one assembly at a time."""
    # A message is "not a candidate" (retracted, say) only once it has been appended.
    seq = (_message_seq(events, item[len(MESSAGE_PREFIX):])
           if item.startswith(MESSAGE_PREFIX) else None)
    runs: list[WhyRun] = []
    known: set[str] = set()  # for the hint of an item never decided: names only
    candidate = False
    count = messages = 0
    for step in steps:
        count, messages = count + 1, step.message
        try:
            decision = step.assembly.decision(item)
        except KeyError:
            if seq is None or step.seq < seq:
                known.update(d.item for d in step.assembly.decisions)
                continue
            decision = Decision(item=item, section="", action="dropped",
                                reason="not_a_candidate")
        if decision.reason == "not_a_candidate":
            known.update(d.item for d in step.assembly.decisions)
        else:
            candidate = True
        _add(runs, item, step, decision)
    if not candidate:
        ordered = sorted(known)
        hint = ", ".join(ordered[:8]) + (", ..." if len(ordered) > 8 else "")
        raise WhyError(f"{item!r} is not a candidate in any assembly of session {session!r}"
                       f" ({profile}); items: {hint or 'none'}")
    return WhyReport(session, item, profile, messages, runs, count)


def _add(runs: list[WhyRun], item: str, step: TimelineStep, decision: Decision) -> None:
    """Add the step's decision to the last run, or start a new one."""
    via = None if decision.item == item else decision.item
    numbers = decision_numbers(decision)
    sentence = decision_sentence(decision, via)
    shown = WhyStep(step.step, step.message, step.position, step.event_type,
                    step.stream_id, step.is_message, numbers, dict(decision.detail),
                    sentence)
    last = runs[-1] if runs else None
    if last is not None and (last.action, last.reason, last.covered_by) == (
            decision.action, decision.reason, via) and last.last + 1 == step.step:
        last.steps.append(shown)
        runs[-1] = replace(last, last=step.step, last_message=step.message)
        return
    runs.append(WhyRun(step.step, step.step, decision.action, decision.reason, numbers,
                       dict(decision.detail), via, step.message, step.message, [shown],
                       sentence))
