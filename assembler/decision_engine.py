"""The budget and decision engine every profile assembles through.

A profile registers each thing it might put in the context as a ``Candidate`` (text plus
its token count, optionally a priority), then decides about it through the engine: a rule
(``include``, ``exclude``, ``rewrite``), a greedy fill under a budget
(``admit_while_fits``), or shedding in a given order until a budget holds
(``shed_until_fits``, which drops or shortens). The decision is recorded by the same call
that makes it, so an ``Assembly`` cannot say one thing and do another.

``finish`` takes the prompt twice: as a list of *pieces* (kept candidates and ``Frame``
texts: headers, separators, a template's literals), which it joins into the text, and as
*messages* (``Said`` chat messages of the log, ``Composed`` ones built from pieces), which
it turns into ``Assembly.messages``. It checks that every candidate was decided and that
both forms lay out exactly the kept ones in the same order, totals the tokens of the
messages form (items, framing and the messages' wrappers, where each stands), and seals
the result with its digest.

The terms it works in have their own modules: ``candidates`` (``Candidate``, ``Frame``,
``SectionLayout``, ``Said``, ``Composed``), ``budget`` (``Measure``, ``Additive``,
``ShedStep``), ``chat_tokens`` (what a message costs), ``outgoing`` (a stored message as
sent), ``details`` (how a decision's details are recorded) and ``ranking`` (``ranked``,
``round_score``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from itertools import chain, compress, count, islice, repeat
from operator import and_, attrgetter, eq, is_, is_not, itemgetter, not_
from types import MappingProxyType
from typing import cast

from ctxledger.assembler.budget import Additive, Measure, ShedResult, ShedStep
from ctxledger.assembler.caches import CacheWrite
from ctxledger.assembler.candidates import (
    Candidate,
    Composed,
    Frame,
    Outgoing,
    Piece,
    Said,
    SectionLayout,
    Unit,
)
from ctxledger.assembler.chat_tokens import DEFAULT_OVERHEAD, MessageOverhead, wrapper_tokens
from ctxledger.assembler.details import TYPE_CODES, DetailInput, detail_value, detail_values
from ctxledger.assembler.digest import seal
from ctxledger.assembler.errors import EngineError
from ctxledger.assembler.memo import CanonicalMemo, SessionMemos
from ctxledger.assembler.model import (
    KEPT_ACTIONS,
    WITHOUT_REGEX_KEYS,
    Action,
    Assembly,
    ContextMessage,
    Decision,
    DetailValue,
    Section,
    SectionItem,
    TokenTotals,
)
from ctxledger.assembler.outgoing import said_message
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.tokens import TokenCounter

_NO_DETAIL: Mapping[str, DetailValue] = MappingProxyType({})
"""A slot's details before any decision: one read-only mapping for all (every decision
replaces a slot's details with a new dict, never changes them in place)."""


@dataclass(slots=True)
class _Slot:
    candidate: Candidate
    action: Action | None = None
    reason: str = ""
    detail: Mapping[str, DetailValue] = field(default_factory=dict)
    shared: bool = False
    """``detail`` is a profile's memoized dict (``include_details``), not a new one."""
    covered: bool = False
    """Dropped under a range decision (``shed_until_fits(collapse=...)``): no decision
    of its own in the output."""


@dataclass(frozen=True, slots=True)
class _Decided:
    """An assembly's slots in order (what their decisions are a function of, by column)
    and each one's decision (None: covered), for the next assembly to reuse."""

    candidates: list[Candidate]
    details: list[Mapping[str, DetailValue]]
    actions: list[Action | None]
    reasons: list[str]
    covered: list[bool]
    made: list[Decision | None]


_CANDIDATE = attrgetter("candidate")
_DETAIL = attrgetter("detail")
_ACTION = attrgetter("action")
_REASON = attrgetter("reason")
_COVERED = attrgetter("covered")
_ID = attrgetter("id")
_SECTION = attrgetter("section")
_TOKENS = attrgetter("tokens")

_SaidParts = tuple[SectionItem, ContextMessage]
"""A kept chat message's section item and the message sent."""


@dataclass(frozen=True, slots=True)
class _SaidRun:
    """A walk's messages and, for each memoized chat message, what it laid out."""

    plans: list[Outgoing]
    parts: list[_SaidParts | None]


@dataclass(slots=True)
class _LaidOut:
    """The messages walked in prompt order: section items, framing tokens by section
    (None: the context), the counting methods met, and the kept ids in order."""

    items: dict[str, list[SectionItem]]
    framing: dict[str | None, int]
    methods: set[str]
    order: list[str]


class Engine:
    """Collects candidates and decisions for one assembly, then builds the ``Assembly``."""

    def __init__(self, counter: TokenCounter, memos: SessionMemos | None = None) -> None:
        self.counter = counter
        self.memos = memos
        """The caller's in-process memos (``assembler.memo``); None assembles cold."""
        self._slots: dict[str, _Slot] = {}
        self._order: list[str] = []
        self._cache_writes: list[CacheWrite] = []
        self._memo: CanonicalMemo | None = None
        self._counted: list[str] = []
        """Candidates registered with their tokens counted from their text (not given)."""

    # -- caches -------------------------------------------------------------------------

    def remember(self, write: CacheWrite) -> None:
        """Queue a cache write for the caller to persist after the assembly.

        Caches (memos of expensive sums) are not part of the ``Assembly``, so they never
        reach its digest: the same inputs give the same digest with or without them.
        """
        self._cache_writes.append(write)

    def memo_for(self, session: str) -> CanonicalMemo:
        """The memo of ``session`` (a fresh, empty one without ``memos``), which this
        engine also uses from now on: decisions equal to earlier ones, and their canonical
        JSON, are reused. Interned by content, so the result is the same either way."""
        self._memo = CanonicalMemo() if self.memos is None else self.memos.for_session(session)
        return self._memo

    @property
    def cache_writes(self) -> tuple[CacheWrite, ...]:
        """The cache writes queued with ``remember``, in order."""
        return tuple(self._cache_writes)

    # -- candidates ---------------------------------------------------------------------

    def candidate(self, item_id: str, section: str, text: str, *,
                  tier: str | None = None, priority: int | None = None,
                  tokens: int | None = None) -> Candidate:
        """Register a candidate; its tokens are counted (memoized) here, unless given
        (a chat message's cost as sent, which is not the count of its text line)."""
        if item_id in self._slots:
            raise EngineError(f"candidate {item_id!r} registered twice")
        if tokens is None:
            tokens = self.counter.count(text)
            self._counted.append(item_id)
        candidate = Candidate(item_id, section, text, tokens, tier, priority)
        self._slots[item_id] = _Slot(candidate, detail=_NO_DETAIL)
        self._order.append(item_id)
        return candidate

    def register_all(self, candidates: Iterable[Candidate]) -> None:
        """Register candidates made before, in order, with their tokens given (a
        memoized chat message's: the very object an earlier assembly registered, whose
        section item and sent message are reused with it)."""
        candidates = list(candidates)
        ids = list(map(_ID, candidates))
        slots = self._slots
        if len(set(ids)) != len(ids) or not slots.keys().isdisjoint(ids):
            seen = set(slots)
            for item_id in ids:
                if item_id in seen:
                    raise EngineError(f"candidate {item_id!r} registered twice")
                seen.add(item_id)
        slots.update(zip(ids, map(_Slot, candidates, repeat(None), repeat(""),
                                  repeat(_NO_DETAIL)), strict=True))
        self._order.extend(ids)

    def current(self, candidate: Candidate) -> Candidate:
        """The latest version of ``candidate`` (shortened text after a truncation)."""
        return self._slot(candidate).candidate

    def decision(self, candidate: Candidate) -> Decision:
        """The decision recorded so far for ``candidate``."""
        slot = self._slot(candidate)
        if slot.action is None:
            raise EngineError(f"no decision yet for {candidate.id!r}")
        return Decision(item=candidate.id, section=candidate.section, action=slot.action,
                        reason=slot.reason, priority=candidate.priority,
                        detail=dict(slot.detail))

    # -- decisions ----------------------------------------------------------------------

    def include(self, candidate: Candidate, reason: str, **detail: DetailInput) -> Candidate:
        """Keep ``candidate`` in the context."""
        self._record(candidate, "included", reason, detail)
        return self.current(candidate)

    def include_details(self, candidate: Candidate, reason: str,
                        detail: Mapping[str, DetailValue]) -> Candidate:
        """``include`` with details already made output values by ``detail_values`` (a
        profile that memoizes them across assemblies). ``detail`` is not copied: it
        must not change afterwards."""
        slot = self._slot(candidate)
        if slot.detail:
            merged = dict(slot.detail)
            merged.update(detail)
            detail = merged
        else:
            slot.shared = True
        slot.action = "included"
        slot.reason = reason
        slot.detail = detail
        return slot.candidate

    def include_all(self, candidates: Sequence[Candidate], reason: str,
                    details: Sequence[Mapping[str, DetailValue]]) -> None:
        """``include_details`` of each of ``candidates`` with its ``details``: a tight
        loop when none has details yet (checked by C-level walks), else one by one."""
        found = list(map(self._slots.get, map(_ID, candidates)))
        if all(map(is_not, found, repeat(None))) \
                and all(map(is_, map(_DETAIL, found), repeat(_NO_DETAIL))):
            for slot, detail in zip(cast("list[_Slot]", found), details, strict=True):
                slot.action = "included"
                slot.reason = reason
                slot.detail = detail
                slot.shared = True
            return
        for candidate, detail in zip(candidates, details, strict=True):
            self.include_details(candidate, reason, detail)

    def exclude(self, candidate: Candidate, action: Action, reason: str,
                **detail: DetailInput) -> None:
        """Leave ``candidate`` out: expired, dropped, masked or rejected."""
        if action in KEPT_ACTIONS:
            raise EngineError(f"exclude() cannot record {action!r}")
        self._record(candidate, action, reason, detail)

    def truncate(self, candidate: Candidate, text: str, reason: str,
                 **detail: DetailInput) -> Candidate:
        """Keep a shortened ``candidate`` whose text is now ``text``."""
        return self._replace_text(candidate, text, "truncated", reason, detail)

    def rewrite(self, candidate: Candidate, text: str, reason: str,
                **detail: DetailInput) -> Candidate:
        """Keep ``candidate`` with its text rewritten (e.g. an instruction removed)."""
        return self._replace_text(candidate, text, "rewritten", reason, detail)

    def _replace_text(self, candidate: Candidate, text: str, action: Action, reason: str,
                      detail: Mapping[str, DetailInput]) -> Candidate:
        slot = self._slot(candidate)
        before = slot.candidate
        changed = Candidate(before.id, before.section, text, self.counter.count(text),
                            before.tier, before.priority)
        slot.candidate = changed
        self._record(changed, action, reason, {
            "tokens_before": before.tokens, "tokens_after": changed.tokens,
            "chars_before": before.chars, "chars_after": changed.chars, **detail})
        return changed

    # -- budgets ------------------------------------------------------------------------

    def admit_while_fits(self, candidates: Sequence[Candidate], *, limit: int, unit: Unit,
                         measure: Measure, reason_in: str, reason_out: str,
                         details: Mapping[str, Mapping[str, DetailInput]] | None = None,
                         stop_at_first_misfit: bool = True) -> list[Candidate]:
        """Include candidates in order while ``measure`` of the kept ones stays <= ``limit``.

        With ``stop_at_first_misfit`` (the default) the first candidate that does not fit
        ends the fill and every later one is dropped too, so a shorter later item never
        jumps the order. ``details`` adds per-candidate numbers (by id) to the decisions.
        """
        kept: list[Candidate] = []
        closed = False
        kept_size = 0
        for candidate in candidates:
            extra = dict(details.get(candidate.id, {})) if details else {}
            if closed:
                self.exclude(candidate, "dropped", reason_out, limit=limit, unit=unit,
                             after_misfit=True, **extra)
                continue
            size = (kept_size + measure.share(candidate)
                    if isinstance(measure, Additive) and kept else measure([*kept, candidate]))
            if size <= limit:
                kept.append(candidate)
                kept_size = size
                self.include(candidate, reason_in, size_with=size, limit=limit, unit=unit,
                             **extra)
            else:
                self.exclude(candidate, "dropped", reason_out, size_with=size, limit=limit,
                             unit=unit, **extra)
                closed = stop_at_first_misfit
        return kept

    def shed_until_fits(self, kept: Sequence[Candidate], steps: Iterable[ShedStep], *,
                        limit: int, unit: Unit, measure: Measure, reason: str,
                        collapse: str | None = None,
                        **detail: DetailInput) -> ShedResult:
        """Apply ``steps`` in order until ``measure`` of what is kept is <= ``limit``.

        A step drops its items (those still kept) or, with ``shrink``, shortens its one
        item by the overflow. Steps after the budget holds are not applied (nor taken
        from ``steps``, which may be a generator). The result says whether it fits in the
        end; what to do when it does not is the profile's rule (overshoot with a warning,
        or an error).

        With ``collapse`` (an item id), the dropped items get no decision of their own:
        one ``dropped`` decision with that id records them all (``collapsed_drop``), so
        one more or one fewer drop changes one decision, not every later drop's running
        sizes. ``detail`` goes on that decision. Only plain drops collapse.
        """
        if collapse is not None:
            return self._shed_collapsed(kept, steps, limit=limit, unit=unit,
                                        measure=measure, reason=reason, item_id=collapse,
                                        detail=detail)
        # By id, in order: a step finds and removes its items without a scan of the rest.
        current = {item.id: item for item in kept}
        size = measure(kept)
        additive = measure if isinstance(measure, Additive) else None
        for step in steps:
            if size <= limit:
                break
            code = step.reason or reason
            if additive is not None and step.shrink is None and len(step.items) == 1:
                # The common step (drop one item, a sum): no lists, the size by difference.
                dropped = current.pop(step.items[0].id, None)
                if dropped is not None:
                    before = size
                    size = before - additive.share(dropped) if current else 0
                    self._shed_drop(dropped, code, before, size, limit, unit)
                continue
            present = [current[item.id] for item in step.items if item.id in current]
            if not present:
                continue
            if step.shrink is not None:
                if len(present) != 1:
                    raise EngineError("a shrinking shed step takes exactly one item")
                item = present[0]
                shortened_text = step.shrink(item, size - limit)
                shortened = self.truncate(item, shortened_text, code, size_before=size,
                                          limit=limit, unit=unit)
                current[item.id] = shortened
                size = measure(list(current.values()))
                self._merge_detail(shortened, {"size_after": size})
                continue
            before = size
            for item in present:
                del current[item.id]
            size = (before - sum(additive.share(item) for item in present)
                    if additive is not None and current else measure(list(current.values())))
            for item in present:
                self._shed_drop(item, code, before, size, limit, unit)
        return ShedResult(list(current.values()), size, size <= limit)

    def _shed_collapsed(self, kept: Sequence[Candidate], steps: Iterable[ShedStep], *,
                        limit: int, unit: Unit, measure: Measure, reason: str, item_id: str,
                        detail: Mapping[str, DetailInput]) -> ShedResult:
        current = {item.id: item for item in kept}
        start = size = measure(kept)
        additive = measure if isinstance(measure, Additive) else None
        dropped: list[Candidate] = []
        for step in steps:
            if size <= limit:
                break
            if step.shrink is not None or step.reason is not None:
                raise EngineError("a collapsed shed only drops items, under its one reason")
            if additive is not None and len(step.items) == 1:
                # The common step (one item, a sum): the size by difference, no lists.
                item = current.pop(step.items[0].id, None)
                if item is not None:
                    size = size - additive.share(item) if current else 0
                    dropped.append(item)
                continue
            present = [current.pop(item.id) for item in step.items if item.id in current]
            if not present:
                continue
            size = ((size - sum(additive.share(item) for item in present) if current else 0)
                    if additive is not None else measure(list(current.values())))
            dropped.extend(present)
        if dropped:
            self.collapsed_drop(item_id, dropped, reason, limit=limit, unit=unit,
                                size_before=start, used=size, **detail)
        return ShedResult(list(current.values()), size, size <= limit)

    def collapsed_drop(self, item_id: str, dropped: Sequence[Candidate], reason: str, *,
                       limit: int, unit: Unit, size_before: int, used: int,
                       **detail: DetailInput) -> None:
        """Record ``dropped`` (given in drop order) as one ``dropped`` decision
        ``item_id``: their count, ids, priority range and tokens; the limit, the size
        before the first drop and what is ``used`` after the last; and the item at the cut
        (the last dropped: the first that did not fit), like the history window's range.
        """
        if item_id in self._slots:
            raise EngineError(f"candidate {item_id!r} registered twice")
        slots = self._slots
        for item in dropped:
            slot = slots[item.id]  # a KeyError here is a bug: they come from a shed
            slot.action = "dropped"
            slot.reason = reason
            slot.covered = True
        priorities = [item.priority for item in dropped if item.priority is not None]
        cut = dropped[-1]
        # Registered without counting: a range has no text (and no tokenizer call).
        slots[item_id] = _Slot(Candidate(item_id, dropped[0].section, "", 0), "dropped",
                               reason)
        self._order.append(item_id)
        self._counted.append(item_id)
        # The ids are strings already: no per-id conversion of a list of thousands.
        slots[item_id].detail = {
            "count": len(dropped), "items": [item.id for item in dropped],
            "priority_min": min(priorities, default=None),
            "priority_max": max(priorities, default=None),
            "tokens_dropped": sum(item.tokens for item in dropped),
            "limit": limit, "unit": unit, "size_before": size_before, "used": used,
            "remaining": limit - used, "over_budget": used > limit,
            "first_misfit": cut.id, "first_misfit_tokens": cut.tokens,
            "first_misfit_priority": cut.priority, **detail_values(detail)}

    def _shed_drop(self, item: Candidate, reason: str, before: int, after: int, limit: int,
                   unit: Unit) -> None:
        # A shed step's drop: the sizes around it, and what the item was before.
        slot = self._slot(item)
        detail = dict(slot.detail)
        detail.update({"size_before": detail_value(before), "size_after": detail_value(after),
                       "limit": detail_value(limit), "unit": unit,
                       "previous_action": slot.action, "previous_reason": slot.reason})
        slot.action = "dropped"
        slot.reason = reason
        slot.detail = detail
        slot.shared = False

    # -- output -------------------------------------------------------------------------

    def finish(self, *, profile: str, policy_version: str, session: str, position: int,
               now: datetime, pieces: Sequence[Piece], sections: Sequence[SectionLayout],
               report: ProfileReport, warnings: Sequence[str] = (),
               messages: Sequence[Outgoing] | None = None,
               overhead: MessageOverhead = DEFAULT_OVERHEAD,
               format_version: int = WITHOUT_REGEX_KEYS) -> Assembly:
        """Render ``pieces`` into the text and ``messages`` into the messages form, check
        the decisions, build the sealed result.

        Without ``messages`` the context is one system message holding the text. Both
        forms must lay out exactly the kept candidates, in the same order. The token
        totals count the messages form, as a chat API counts it (``chat_tokens``): each
        kept item's tokens under its section, a composed message's framing texts under
        theirs, and the messages' wrappers and the reply priming as the context's own.
        ``sections`` names every section in prompt order (with its tier); each kept
        candidate must belong to one of them, and a section with nothing in it is left
        out. ``format_version``: ``model.format_for``'s.
        """
        if None in map(_ACTION, self._slots.values()):
            undecided = [item for item in self._order if self._slots[item].action is None]
            raise EngineError(f"no decision for candidates {undecided}")
        known = [part.name for part in sections]
        if len(set(known)) != len(known):
            raise EngineError("a section is named twice")
        if messages is None:
            messages = [Composed("system", pieces)]
        text_order = self._lay_out_text(pieces)
        # The session's memo keeps the chat messages sent, even for a profile that does
        # not use it for its digest.
        memo = self._memo if self._memo is not None or self.memos is None \
            else self.memos.for_session(session)
        laid, built_messages = self._lay_out_messages(messages, known, overhead, memo,
                                                      profile)
        if laid.order != text_order:
            raise EngineError("the text and the messages lay out different items")
        for item in self._counted:  # a given count's texts were counted where it was made
            laid.methods.add(self.counter.measure(self._slots[item].candidate.text).method)
        built, tokens = self._totals(sections, laid)
        decisions = self._decisions(profile)
        sealed = seal(Assembly(
            format_version=format_version, profile=profile, policy_version=policy_version,
            session=session, position=position, now=now,
            text="".join([piece.text for piece in pieces]), messages=built_messages,
            sections=built, tokens=tokens, decisions=decisions, warnings=list(warnings),
            report=report, digest=""), self._memo)
        if memo is not None:
            memo.assembled()
        return sealed

    def _kept(self, piece: Candidate) -> Candidate:
        """The kept candidate ``piece`` stands for (checked: kept, with this text)."""
        slot = self._slots.get(piece.id)
        if slot is None:
            raise EngineError(f"unknown candidate {piece.id!r}")
        if slot.action not in KEPT_ACTIONS:
            raise EngineError(f"{piece.id!r} is laid out but its decision is {slot.action!r}")
        kept = slot.candidate
        if kept.text != piece.text:
            raise EngineError(f"{piece.id!r} is laid out with a stale text")
        return kept

    def _lay_out_text(self, pieces: Sequence[Piece]) -> list[str]:
        """Check the text's pieces (exactly the kept candidates, each once, with the text
        they were decided with); the kept ids in text order."""
        candidates = cast("list[Candidate]",
                          list(compress(pieces, map(isinstance, pieces, repeat(Candidate)))))
        laid_out = list(map(_ID, candidates))
        if not self._all_kept(candidates, laid_out):
            kept = self._kept  # one by one: which one is not, or a same text's other object
            laid_out = [kept(piece).id for piece in candidates]
        laid = set(laid_out)
        if len(laid) != len(laid_out):
            raise EngineError("a candidate is laid out twice")
        # Every laid-out id is kept, and ids are unique: the kept must be as many.
        slots = self._slots
        if sum(map(KEPT_ACTIONS.__contains__, map(_ACTION, slots.values()))) != len(laid):
            kept_ids = {item for item in self._order if slots[item].action in KEPT_ACTIONS}
            raise EngineError(f"kept candidates missing from the layout: "
                              f"{sorted(kept_ids - laid)}")
        return laid_out

    def _all_kept(self, candidates: Sequence[Candidate], ids: Sequence[str]) -> bool:
        """Whether each of ``candidates`` (whose ids are ``ids``) is the very candidate
        of a kept slot: ``_kept``'s check of them all, by C-level walks."""
        found = list(map(self._slots.get, ids))
        return all(map(is_not, found, repeat(None))) \
            and all(map(is_, map(_CANDIDATE, found), candidates)) \
            and all(map(KEPT_ACTIONS.__contains__, map(_ACTION, found)))

    def _lay_out_messages(self, messages: Sequence[Outgoing], known: Sequence[str],
                          overhead: MessageOverhead, memo: CanonicalMemo | None,
                          run_name: Hashable = None
                          ) -> tuple[_LaidOut, list[ContextMessage]]:
        """Walk the messages in order: each kept candidate under its section, each
        composed message's frames to their sections, wrappers and priming to the context;
        the messages form. With ``memo``, runs of the very ``Said`` objects of the last
        walk named ``run_name``, at the same places, are laid out whole (their section
        items and sent messages as then), once a C-level check finds them all kept."""
        laid = _LaidOut({name: [] for name in known}, {name: 0 for name in known}, set(), [])
        laid.framing[None] = 0
        built: list[ContextMessage] = []
        parts: list[_SaidParts | None] = []
        last = None if memo is None else memo.last_run(("said", run_name))
        usable: list[bool] = []
        if isinstance(last, _SaidRun):
            usable = list(map(and_, map(is_, messages, last.plans),
                              map(is_not, last.parts, repeat(None))))
        index, size = 0, len(messages)
        while index < size:
            run = next(compress(count(), map(not_, islice(usable, index, None))),
                       len(usable) - index) if index < len(usable) else 0
            if run and isinstance(last, _SaidRun):
                said = cast("list[Said]", messages[index:index + run])
                before = last.parts[index:index + run]
                if self._place_run(said, cast("list[_SaidParts]", before), laid, built):
                    parts.extend(before)
                    index += run
                    continue
            # One by one: a run that did not lay out whole, or up to the next reusable one.
            stop = index + run if run else next(
                compress(count(index), islice(usable, index, None)), size)
            for plan in messages[index:stop]:
                parts.append(self._lay_out_one(plan, laid, built, overhead, memo))
            index = stop
        if built:
            laid.framing[None] += overhead.reply_priming
        if memo is not None:
            memo.keep_run(("said", run_name), _SaidRun(list(messages), parts))
        return laid, built

    def _place_run(self, said: list[Said], parts: list[_SaidParts], laid: _LaidOut,
                   built: list[ContextMessage]) -> bool:
        """Lay out ``said`` with the section items and messages ``parts`` derived for
        them before, if each one's candidate is the kept one and all are in one known
        section (else False, nothing laid out)."""
        candidates = list(map(_CANDIDATE, said))
        ids = list(map(_ID, candidates))
        section = candidates[0].section
        target = laid.items.get(section)
        if target is None or not self._all_kept(candidates, ids) \
                or not all(map(eq, map(_SECTION, candidates), repeat(section))):
            return False
        target.extend(map(itemgetter(0), parts))
        laid.order.extend(ids)
        built.extend(map(itemgetter(1), parts))
        return True

    def _lay_out_one(self, plan: Outgoing, laid: _LaidOut, built: list[ContextMessage],
                     overhead: MessageOverhead, memo: CanonicalMemo | None
                     ) -> _SaidParts | None:
        """Lay out one message; a memoized chat message's section item and message."""
        items, framing, methods, order = laid.items, laid.framing, laid.methods, laid.order
        counter = self.counter
        if isinstance(plan, Said):
            kept = self._kept(plan.candidate)
            if memo is not None and kept is plan.candidate:
                # The candidate object names its message, text, tokens and section; a
                # memoized one comes back every assembly (``Engine.register_all``), and
                # with it its section item and sent message (and their JSON).
                derived = memo.derived(kept, ("said", plan.message.position, plan.as_text),
                                       partial(_said_parts, plan, kept))
                self._place_item(kept, derived[0], items, order)
                built.append(derived[1])
                return derived
            self._place(kept, items, order)
            built.append(self._said(plan, kept, memo))
            return None
        texts: list[str] = []
        spanned: list[str] = []
        cost = 0
        for piece in plan.pieces:
            if isinstance(piece, Frame):
                if piece.section not in framing:
                    raise EngineError(f"framing for unknown section {piece.section!r}")
                if piece.text:
                    measured = counter.measure(piece.text)
                    framing[piece.section] += measured.tokens
                    cost += measured.tokens
                    methods.add(measured.method)
                section = piece.section
            else:
                kept = self._kept(piece)
                self._place(kept, items, order)
                cost += kept.tokens
                section = kept.section
            texts.append(piece.text)
            if section is not None and section not in spanned:
                spanned.append(section)
        content = "".join(texts)
        if not content:
            return None
        wrapper = wrapper_tokens(counter, plan.role, overhead)
        framing[None] += wrapper
        if plan.exact:
            # What the joins merged (or split) is the context's own, so the parts
            # still add up to the total.
            whole = counter.count(content)
            framing[None] += whole - cost
            cost = whole
        built.append(self._composed(plan, content, spanned, wrapper + cost, memo))
        return None

    def _said(self, plan: Said, kept: Candidate, memo: CanonicalMemo | None
              ) -> ContextMessage:
        # A stored message is immutable (its log position names it): with a memo, the
        # same message object (and its JSON) serves every assembly that sends it.
        if memo is None:
            return said_message(plan, kept)
        key = ("said", kept.id, plan.message.position, plan.as_text, kept.tokens,
               kept.section)
        return memo.intern(key, lambda: said_message(plan, kept))

    @staticmethod
    def _composed(plan: Composed, content: str, spanned: list[str], tokens: int,
                  memo: CanonicalMemo | None = None) -> ContextMessage:
        def build() -> ContextMessage:
            return ContextMessage.model_construct(
                role=plan.role, content=content, name=None, tool_calls=None,
                tool_call_id=None, is_error=None, item=None, sections=spanned, tokens=tokens)

        if memo is None:
            return build()
        # The same message as last time is the same object (and its JSON is not made
        # again): the card's memory text is the same turn after turn.
        return memo.intern(("composed", plan.role, content, *spanned, tokens), build)

    @staticmethod
    def _place(kept: Candidate, items: dict[str, list[SectionItem]],
               order: list[str]) -> None:
        Engine._place_item(kept, _section_item(kept), items, order)

    @staticmethod
    def _place_item(kept: Candidate, item: SectionItem, items: dict[str, list[SectionItem]],
                    order: list[str]) -> None:
        section = items.get(kept.section)
        if section is None:
            raise EngineError(f"{kept.id!r} is in unknown section {kept.section!r}")
        section.append(item)
        order.append(kept.id)

    def _totals(self, sections: Sequence[SectionLayout],
                laid: _LaidOut) -> tuple[list[Section], TokenTotals]:
        """The non-empty sections in prompt order, and the tokens by section and tier."""
        built: list[Section] = []
        framing = laid.framing
        for part in sections:
            members = laid.items[part.name]
            if not members and not framing[part.name]:
                continue
            built.append(Section(
                name=part.name, tier=part.tier, items=members,
                framing_tokens=framing[part.name],
                tokens=framing[part.name] + sum(map(_TOKENS, members))))
        by_section = {section.name: section.tokens for section in built}
        tiers: dict[str, int] = {}
        for section in built:
            if section.tier is not None:
                tiers[section.tier] = tiers.get(section.tier, 0) + section.tokens
        return built, TokenTotals(
            encoding=self.counter.encoding, sections=by_section, tiers=tiers,
            framing=framing[None], total=framing[None] + sum(by_section.values()),
            methods=sorted(laid.methods))

    # -- internals ----------------------------------------------------------------------

    def _decisions(self, profile: str) -> list[Decision]:
        """The decisions of the uncovered slots, in order. With a memo, a slot in the
        very state it was in at the same place last time (the same candidate and detail
        objects, action, reason and coverage) has the decision it had then: a long
        history's slots are, and they are matched by C-level walks, not one by one."""
        slots = list(map(self._slots.__getitem__, self._order))
        memo = self._memo
        if memo is None:
            return [self._final_decision(slot) for slot in slots if not slot.covered]
        now = _Decided(list(map(_CANDIDATE, slots)), list(map(_DETAIL, slots)),
                       list(map(_ACTION, slots)), list(map(_REASON, slots)),
                       list(map(_COVERED, slots)), [])
        made = now.made
        last = memo.last_run(("decisions", profile))
        stale: Iterable[int] = ()
        if isinstance(last, _Decided):
            same = list(map(all, zip(
                map(is_, now.candidates, last.candidates), map(is_, now.details, last.details),
                map(eq, now.actions, last.actions), map(eq, now.reasons, last.reasons),
                map(is_, now.covered, last.covered), strict=True)))
            made.extend(last.made[:len(same)])
            stale = compress(count(), map(not_, same))
        known = len(made)
        made.extend(repeat(None, len(slots) - known))
        for index in chain(stale, range(known, len(slots))):
            slot = slots[index]
            made[index] = None if slot.covered else self._final_decision(slot)
        memo.keep_run(("decisions", profile), now)
        return cast("list[Decision]", list(compress(made, map(is_not, made, repeat(None)))))

    def _final_decision(self, slot: _Slot) -> Decision:
        candidate = slot.candidate
        action: Action = slot.action or "dropped"

        def build() -> Decision:
            return Decision(item=candidate.id, section=candidate.section, action=action,
                            reason=slot.reason, priority=candidate.priority,
                            detail=dict(slot.detail))

        memo = self._memo
        if memo is None:
            return build()
        detail = slot.detail
        # A profile's memoized details (``include_details``) are the very same dict as
        # last time: look the decision up by that dict first, no content key to build.
        # The entry holds the dict, so its id cannot be another dict's meanwhile.
        by_detail = cast("tuple[Mapping[str, DetailValue], Decision] | None",
                         memo.lookup(("detail", id(detail)))) if slot.shared else None
        if by_detail is not None:
            held, known = by_detail
            if held is detail and known.item == candidate.id \
                    and known.section == candidate.section and known.action == action \
                    and known.reason == slot.reason and known.priority == candidate.priority:
                return known
        # One flat tuple of plain values (which the garbage collector stops tracking), and
        # the values' types are part of it: True == 1 == 1.0, but not in JSON.
        try:
            key = ("decision", candidate.id, candidate.section, action, slot.reason,
                   candidate.priority, len(detail), *detail, *detail.values(),
                   *map(TYPE_CODES.__getitem__, map(type, detail.values())))
            decision = memo.intern(key, build)
        except (KeyError, TypeError):  # a list in the detail: built afresh, not interned
            return build()
        if slot.shared:
            memo.remember(("detail", id(detail)), (detail, decision))
        return decision

    def _slot(self, candidate: Candidate) -> _Slot:
        slot = self._slots.get(candidate.id)
        if slot is None:
            raise EngineError(f"unknown candidate {candidate.id!r}")
        return slot

    def _record(self, candidate: Candidate, action: Action, reason: str,
                detail: Mapping[str, DetailInput]) -> None:
        slot = self._slot(candidate)
        # A later decision (e.g. dropped by a total budget after a section admitted it)
        # replaces the earlier one but keeps its numbers, so "why" can show both.
        merged = dict(slot.detail)
        merged.update({key: detail_value(value) for key, value in detail.items()})
        slot.action = action
        slot.reason = reason
        slot.detail = merged
        slot.shared = False

    def _merge_detail(self, candidate: Candidate, detail: Mapping[str, DetailInput]) -> None:
        slot = self._slot(candidate)
        # A new dict: the old one may be shared (``include_details``).
        slot.detail = {**slot.detail,
                       **{key: detail_value(value) for key, value in detail.items()}}
        slot.shared = False


def _section_item(kept: Candidate) -> SectionItem:
    # Built from a candidate's own fields (a str and two ints): nothing to validate.
    return SectionItem.model_construct(id=kept.id, tokens=kept.tokens, chars=kept.chars)


def _said_parts(plan: Said, kept: Candidate) -> tuple[SectionItem, ContextMessage]:
    """A kept chat message's section item and the message sent."""
    return _section_item(kept), said_message(plan, kept)
