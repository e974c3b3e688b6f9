"""The chat-history window: the rule every profile that sends chat history follows.

The history is cut into *units*: a message on its own, or an assistant message that calls
tools together with the tool messages right after it that answer those calls (a chat API
refuses a tool result whose call is not in the list, and a call whose results are not).
A unit is kept or dropped as a whole.

With a budget (``context_limit − response_reserve`` minus what comes before the history),
the history is filled newest unit first as a contiguous suffix of the non-retracted
messages:

- the newest unit is always kept (if it alone is over, the context overshoots and the
  caller warns);
- older units are kept while they fit; the first that does not fit, and every older
  one, is ``dropped`` with reason ``over_budget`` and the numbers (its tokens, the
  budget, what was used and what remained), each message of a unit naming the unit;
- messages the read view left unread (older than the window) are one ``dropped``
  decision for their whole range, ``history:dropped``, so a turn costs O(window) and not
  O(history), while every message not sent is still accounted for by a decision.

A tool message whose call is not right before it (legacy logs, a call summarized away,
a result appended out of place) is *unpaired*: it is sent as a user message holding its
text line, and its decision says so (``sent_as``).

Without a budget every loaded message is kept. A summary, when the profile uses one, sits
before the suffix; messages dropped between it and the suffix form the *gap*.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, count, islice
from operator import attrgetter, is_not

from ctxledger.assembler.candidates import Candidate, Said
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.details import detail_values
from ctxledger.assembler.memo import CanonicalMemo
from ctxledger.assembler.message_ranges import DROPPED_RANGE_ITEM
from ctxledger.assembler.model import DetailValue
from ctxledger.projections.session_view import Message


def message_item(message: Message) -> str:
    """The item id of a chat message: ``message:<message_id>``."""
    return f"message:{message.message_id}"


@dataclass(frozen=True, slots=True)
class WindowMessage:
    """A loaded message as a registered candidate (its tokens: its cost as sent), and how
    it is sent when kept."""

    message: Message
    candidate: Candidate
    said: Said


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages kept or dropped together, oldest first: one message, or a call with its
    answers. ``unpaired`` marks a lone tool message whose call is not right before it."""

    members: tuple[WindowMessage, ...]
    unpaired: bool = False
    unanswered: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The ids of the unit's calls with no answer in it (made once: a unit is kept in the
    memo and its calls are checked every assembly)."""

    def __post_init__(self) -> None:
        head = self.members[0].message
        unanswered: tuple[str, ...] = ()
        if head.tool_calls:
            answered = {member.message.tool_call_id for member in self.members[1:]}
            unanswered = tuple(call for call in head.call_ids if call not in answered)
        object.__setattr__(self, "unanswered", unanswered)

    @property
    def tokens(self) -> int:
        """What the unit costs as sent."""
        return sum(member.candidate.tokens for member in self.members)

    @property
    def label(self) -> str | None:
        """The item id of the call that heads a unit of several messages, else None."""
        return self.members[0].candidate.id if len(self.members) > 1 else None


def pairing(messages: Sequence[Message]) -> list[tuple[int, int, bool]]:
    """``messages`` (oldest first) cut into units: ``(start, stop, unpaired)`` index
    ranges, in order."""
    out: list[tuple[int, int, bool]] = []
    open_calls: set[str] = set()
    start: int | None = None
    for index, message in enumerate(messages):
        if start is not None and message.role == "tool" \
                and message.tool_call_id in open_calls:
            open_calls.discard(message.tool_call_id)
            continue
        if start is not None:
            out.append((start, index, False))
            start = None
        if message.role == "assistant" and message.tool_calls:
            start = index
            open_calls = set(message.call_ids)
        else:
            out.append((index, index + 1, message.role == "tool"))
    if start is not None:
        out.append((start, len(messages), False))
    return out


_MEMBERS = attrgetter("members")
_CANDIDATE = attrgetter("candidate")


@dataclass(slots=True)
class WindowResult:
    """What the fill kept (oldest first) and what it left out."""

    kept: list[Unit]
    used: int
    """Tokens counted against the budget after the fill (base included)."""
    dropped: int = 0
    """Messages dropped: loaded ones that did not fit plus the unread older ones."""
    dropped_range: tuple[int, int] | None = None
    """``(first_seq, last_seq)`` of the dropped messages (they are contiguous)."""
    overshoot: bool = False
    """True when the newest unit alone took the context over the budget."""

    @property
    def kept_candidates(self) -> list[Candidate]:
        """The kept messages' candidates, oldest first."""
        return list(map(_CANDIDATE, chain.from_iterable(map(_MEMBERS, self.kept))))


def _unit_detail(unit: Unit, position: int) -> dict[str, int | str | None]:
    detail: dict[str, int | str | None] = {}
    if unit.label is not None:
        detail.update(unit=unit.label, unit_messages=len(unit.members),
                      unit_tokens=unit.tokens)
        if position == 0 and unit.unanswered:
            detail["unanswered_calls"] = len(unit.unanswered)
    if unit.unpaired:
        detail["sent_as"] = "user"
    return detail


def _kept_alone(member: WindowMessage, detail: Mapping[str, int | str | None]
                ) -> dict[str, DetailValue]:
    return detail_values({"seq": member.message.seq, **detail})


@dataclass(frozen=True, slots=True)
class _KeptAll:
    """A window without a budget: its units, the members' candidates and details in
    order, and how many members the units up to each one hold."""

    cut: list[Unit]
    candidates: list[Candidate]
    details: list[Mapping[str, DetailValue]]
    ends: list[int]


_TOKENS = attrgetter("tokens")


def _keep_all(engine: Engine, cut: Sequence[Unit], reason: str, memo: CanonicalMemo,
              detail: Mapping[str, int | str | None]) -> list[Candidate]:
    """Include every member of ``cut`` with its details, memoized per member (so its
    decision is found by them, ``Engine.include_details``); the units the last window
    of the same reason and ``detail`` started with, the very same objects, keep their
    members' details whole. The kept candidates, in order."""
    name = ("window", reason, *detail.items())
    last = memo.last_run(name)
    same = 0
    if isinstance(last, _KeptAll):
        same = next(compress(count(), map(is_not, cut, last.cut)), min(len(cut), len(last.cut)))
    done = last.ends[same - 1] if isinstance(last, _KeptAll) and same else 0
    now = _KeptAll(list(cut), [], [], [])
    if isinstance(last, _KeptAll):
        now.candidates.extend(last.candidates[:done])
        now.details.extend(last.details[:done])
        now.ends.extend(last.ends[:same])
    # A lone message's details are its seq and ``detail``: one key for all of them.
    alone = ("kept", reason, *detail.items())
    for unit in islice(cut, same, None):
        if len(unit.members) == 1 and not unit.unpaired:
            # The same member kept for the same reasons: the same details.
            member = unit.members[0]
            now.candidates.append(member.candidate)
            now.details.append(memo.derived(member, alone,
                                            partial(_kept_alone, member, detail)))
        else:
            for position, member in enumerate(unit.members):
                given = {"seq": member.message.seq, **_unit_detail(unit, position),
                         **detail}
                now.candidates.append(member.candidate)
                now.details.append(memo.derived(member, ("kept", reason, *given.items()),
                                                partial(detail_values, given)))
        now.ends.append(len(now.candidates))
    engine.include_all(now.candidates, reason, now.details)
    memo.keep_run(name, now)
    return now.candidates


def fill_window(engine: Engine, cut: Sequence[Unit], *, base: int,
                budget: int | None, reason: str, unloaded: int = 0,
                oldest_unloaded: Message | None = None, memo: CanonicalMemo | None = None,
                **detail: int | str | None) -> WindowResult:
    """Decide every loaded message under ``budget``, unit by unit (``cut``: the loaded
    messages cut into units by ``pairing``, oldest first).

    ``base`` is what the context already uses. The kept units are the longest newest
    suffix whose cost fits: the sum of their messages' costs (a message's cost as sent
    is additive, so the suffix's total is exactly what is sent). ``reason`` is the reason
    code of kept messages; ``detail`` is added to every decision. ``memo``: the session's
    memo, in which a kept member's details are kept with it.
    """
    if budget is None:
        if memo is not None:
            candidates = _keep_all(engine, cut, reason, memo, detail)
            return WindowResult(kept=list(cut), used=base + sum(map(_TOKENS, candidates)))
        for unit in cut:
            for position, member in enumerate(unit.members):
                given = {"seq": member.message.seq, **_unit_detail(unit, position),
                         **detail}
                engine.include(member.candidate, reason, **given)
        used = base + sum(member.candidate.tokens for unit in cut for member in unit.members)
        return WindowResult(kept=list(cut), used=used)

    kept_newest_first: list[Unit] = []
    used = base
    dropped_seqs: list[int] = []
    closed = False
    result = WindowResult(kept=[], used=base)
    for index, unit in enumerate(reversed(cut)):
        cost = unit.tokens
        fits = index == 0 or (not closed and used + cost <= budget)
        before = used
        if fits:
            used += cost
        if index == 0:
            result.overshoot = used > budget
        for position, member in enumerate(unit.members):
            numbers: dict[str, int | str | bool | None] = {
                "seq": member.message.seq, "tokens": member.candidate.tokens,
                "budget": budget, "used": before, "remaining": budget - before,
                **_unit_detail(unit, position)}
            if index == 0:
                engine.include(member.candidate, reason, **numbers, must_keep=True,
                               over_budget=result.overshoot, **detail)
            elif fits:
                engine.include(member.candidate, reason, **numbers, **detail)
            else:
                engine.exclude(member.candidate, "dropped", "over_budget", **numbers,
                               after_misfit=closed, **detail)
                dropped_seqs.append(member.message.seq)
        if fits:
            kept_newest_first.append(unit)
        else:
            closed = True
    loaded_dropped = len(dropped_seqs)
    if unloaded > 0 and oldest_unloaded is not None:
        oldest_loaded = cut[0].members[0] if cut else None
        newest_unread = (min(dropped_seqs) if dropped_seqs else
                         None if oldest_loaded is None else oldest_loaded.message.seq)
        section = "chat_history" if oldest_loaded is None else oldest_loaded.candidate.section
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
