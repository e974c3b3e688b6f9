"""Profile ``card`` (CardShark): character-card fields that expire, plus chat history.

Rules (SPEC §3 "Profile card"):

- ``compression_level`` is one of none < chat_only < chat_dialogue < aggressive (default
  none; session setting over scope setting over default), read at every assembly, so
  lowering it brings fields back.
- A field is expired when it is not permanent, the level is not none, the level is at or
  above the field's lowest expiring level, and the message count (non-retracted messages)
  is at or above its threshold. The expiration table is policy data.
- The memory text is the template (default, or the setting ``card_template``) with the
  expired fields blank; ``{{char}}`` is the card's ``name`` (``Character`` when it has
  none) and ``{{user}}`` the setting ``user_name``, also inside field texts. The
  breakdown has one row per field; ``total_tokens`` counts the included fields,
  ``saved_tokens`` the expired ones.
- From chat_only up, a usable ``history.summarized`` (through message K) makes the history
  the summary plus the messages after K; otherwise it is the messages. The report gives
  "chat history X tokens (summarized from Y)".
- The messages form: the memory as one message (role ``context_role``), the summary as
  one more when it is used, the chat messages as stored (roles, names, parts, tool calls
  and their answers), then the card's ``post_history_instructions`` (section
  ``post_history``); the text holds the same, the history a line per message.
- With ``context_limit``, the context as messages (counted as a chat API counts them,
  ``assembler.chat_tokens``) fits ``context_limit − response_reserve``: the history is a
  window filled newest unit first (``assembler.history_window``: a tool call stays with
  its answers); if the card, the summary, the post-history instructions and the newest
  unit alone are over, ``overflow_order`` gives way; if what must be kept is still over,
  the context overshoots with a warning. It is flagged when use is above
  ``pressure_threshold`` (80%) of the limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from itertools import accumulate, chain, compress, islice
from operator import attrgetter, is_, itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

from ctxledger.assembler.budget import ShedStep
from ctxledger.assembler.caches import HistoryMemoRow
from ctxledger.assembler.candidates import (
    Candidate,
    Composed,
    Frame,
    Outgoing,
    Piece,
    Said,
    SectionLayout,
    interleaved,
    joined,
)
from ctxledger.assembler.chat_tokens import cost_key, wrapper_tokens
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.history_window import (
    Unit,
    WindowMessage,
    WindowResult,
    fill_window,
    message_item,
    pairing,
)
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.memo import CanonicalMemo
from ctxledger.assembler.message_ranges import SUMMARIZED_PREFIX
from ctxledger.assembler.model import Assembly, format_for
from ctxledger.assembler.outgoing import UNPAIRED_ROLE, cost_texts, sent_cost
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.card.lore import Lore, decide_lore, lore_rows
from ctxledger.assembler.profiles.card.policy import LORE_VARIABLES, CardPolicy
from ctxledger.assembler.profiles.card.report import (
    CardReport,
    ChatHistoryReport,
    FieldRow,
    FieldStatus,
)
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.template import Macros
from ctxledger.assembler.tokens import TokenCounter, counter_key
from ctxledger.projections.session_view import History, Message, SessionView, ViewRequest

if TYPE_CHECKING:
    from rich.console import RenderableType

SECTION_CARD = "card"
SECTION_HISTORY = "chat_history"
SECTION_POST_HISTORY = "post_history"
GREETING_KEY = "first_mes"
"""The card field holding the greeting (the chosen one: ``CardPolicy.greeting``)."""
POST_HISTORY_KEY = "post_history_instructions"
"""The card field sent after the chat history, in its own section."""
DEFAULT_CHAR_NAME = "Character"
MEMORY_SEPARATOR = "\n\n"
"""Between the memory text and the chat history."""
LINE_SEPARATOR = "\n"
"""Between the lines of the chat history."""
LORE_SEPARATOR = "\n"
"""Between the lorebook entries in one place (as SillyTavern joins them)."""

_MEMBERS = attrgetter("members")
_CANDIDATE = attrgetter("candidate")
_SAID = attrgetter("said")
_TOKENS = attrgetter("tokens")
_UNANSWERED = attrgetter("unanswered")


def chat_line(message: Message) -> str:
    """One chat line: ``speaker: content``, an assistant's tool calls after it as
    ``[calls name(arguments), ...]``, a tool result's speaker its name or
    ``tool[<call id>]``. It depends only on the message, so memoized totals stay valid."""
    speaker = message.name or (f"tool[{message.tool_call_id}]"
                               if message.role == "tool" and message.tool_call_id
                               else message.role)
    line = f"{speaker}: {message.content}"
    if message.tool_calls:
        calls = ", ".join(f"{call['function']['name']}({call['function']['arguments']})"
                          for call in message.tool_calls)
        line = f"{line} [calls {calls}]" if message.content else f"{line}[calls {calls}]"
    return line


def _summary_text(summary: str, policy: CardPolicy) -> str:
    return f"{policy.summary_header}\n{summary}"


def _raw(card: Mapping[str, Any], key: str) -> str:
    value = card.get(key)
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


class CardProfile(Profile):
    """The ``card`` profile."""

    name: ClassVar[str] = "card"
    policy_type: ClassVar[type[Policy]] = CardPolicy
    report_type: ClassVar[type[ProfileReport]] = CardReport
    inputs: ClassVar[Inputs] = Inputs(
        session=frozenset({"message.appended", "message.retracted", "history.summarized",
                           "card.set"}),
        scope=frozenset({"card.set", "lorebook.set", "lorebook.removed"}))

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """``tail`` (+ the token memo) when summaries apply, else ``full``; windowed to the
        budget when there is a ``context_limit``."""
        assert isinstance(policy, CardPolicy)
        overhead = policy.message_overhead

        def measure(messages: Sequence[Message]) -> list[int]:
            counter.prefetch([text for message in messages for text in cost_texts(message)])
            return [sent_cost(counter, message, overhead) for message in messages]

        budget = policy.budget
        window: dict[str, Any] = {} if budget is None else {
            "history_budget": budget, "history_measure": measure,
            "history_whole_units": True}
        if policy.summarizes():
            return ViewRequest(history="tail", now=now, lorebooks=True,
                               token_encoding=cost_key(
                                   counter_key(policy.token_encoding, policy.text_unit),
                                   overhead),
                               **window)
        return ViewRequest(history="full", now=now, lorebooks=True, **window)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Expire card fields, render the memory text, fit the chat history."""
        assert isinstance(policy, CardPolicy)
        history = view.history
        if history is None:
            raise AssemblyError(
                f"session {view.stream_id!r}: the read view holds no chat history "
                "(the card profile requests history 'tail' or 'full')")
        card = _Card(policy, _macros(policy, view.card), engine.counter, view.card)
        memo = None if engine.memos is None else engine.memo_for(view.stream_id)
        loading = _Loading.of(engine, history.messages, policy, memo)
        fields = _expire_fields(engine, card, view, history, loading.uncounted())

        summarizing = policy.summarizes() and history.summary is not None \
            and history.summary.through_seq is not None
        if not summarizing and not history.complete and policy.budget is None:
            raise AssemblyError(
                f"session {view.stream_id!r}: the read view holds part of the history only, "
                f"but level {policy.compression_level!r} sends every message")
        replaced = self._remember_memo(engine, view, history, summarizing, policy)
        summary = _summary(engine, history, policy, summarizing, replaced)
        loaded = _loaded(engine, loading, policy, memo)
        post = _post_history(engine, card)
        lore = decide_lore(engine, policy, card.macros, view, history.messages,
                           SECTION_CARD, SECTION_HISTORY)
        # The newest unit: what the window always keeps.
        newest = [member.candidate for member in loaded[-1].members] if loaded else []
        kept_fields, summary = _give_way(engine, card, fields.included, summary, newest,
                                         post, history, lore)

        budget = policy.budget
        card_pieces = card.pieces(kept_fields, lore)
        laid_out = {piece.id for piece in card_pieces if isinstance(piece, Candidate)}
        for key in [key for key in kept_fields if key not in laid_out]:
            engine.exclude(kept_fields.pop(key), "dropped", "not_in_template",
                           template_variable=policy.rule(key).variable)
        for variable, place in (("lore_before", lore.before), ("lore_after", lore.after)):
            for placed in [p for p in place if p.candidate.id not in laid_out]:
                engine.exclude(placed.candidate, "dropped", "not_in_template",
                               template_variable=variable)
                place.remove(placed)
                lore.not_in_template.add(placed.candidate.id)
        base = card.before_history(card_pieces, summary, post, lore)
        window = fill_window(
            engine, loaded, base=base, budget=budget,
            reason="after_summary" if summarizing else "chat_message",
            unloaded=history.unloaded, oldest_unloaded=history.oldest_unloaded, memo=memo,
            **({"through_seq": history.summary.through_seq}
               if summarizing and history.summary is not None else {}))

        role = policy.context_role
        said = _with_depth_entries(window.kept, lore)
        history_pieces = interleaved([*([summary] if summary else []),
                                      *map(itemgetter(0), said)], LINE_SEPARATOR,
                                     SECTION_HISTORY)
        pieces = joined([card_pieces, history_pieces, [post] if post else []],
                        MEMORY_SEPARATOR)
        messages: list[Outgoing] = [Composed(role, card_pieces, exact=True)]
        if summary is not None:
            messages.append(Composed(role, [summary], exact=True))
        messages.extend(map(itemgetter(1), said))
        if post is not None:
            messages.append(Composed(role, [post], exact=True))
        used = window.used
        warnings, gap, pressure = _warnings(policy, history, window, summarizing, used)
        warnings[:0] = [*card.warnings(), *lore.warnings,
                        *_unknown_macros([*card.sent_raw(kept_fields, post), *lore.texts])]
        kept_tail = sum(map(_TOKENS, window.kept_candidates))
        report = _report(
            policy, view, fields, kept_fields,
            memory="".join(piece.text for piece in card_pieces),
            chat_history=ChatHistoryReport(
                tokens=kept_tail + (card.composed(role, [summary]) if summary else 0),
                summarized_from=None if summary is None or replaced is None
                else replaced + kept_tail,
                messages=sum(map(len, map(_MEMBERS, window.kept))),
                summarized_messages=history.summarized_count if summarizing else 0,
                dropped_messages=window.dropped,
                summary_through_seq=(history.summary.through_seq
                                     if summarizing and history.summary else None),
                gap=gap),
            used=used, pressure=pressure, lore=lore, engine=engine, greeting=card.greeting)
        return engine.finish(
            profile=self.name, policy_version=policy.version, session=view.stream_id,
            position=view.position, now=now, pieces=pieces, messages=messages,
            overhead=policy.message_overhead,
            sections=[SectionLayout(SECTION_CARD), SectionLayout(SECTION_HISTORY),
                      SectionLayout(SECTION_POST_HISTORY)],
            report=report, warnings=warnings,
            format_version=format_for(regex_keys=lore.regex_keys))

    def _remember_memo(self, engine: Engine, view: SessionView, history: History,
                       summarizing: bool, policy: CardPolicy) -> int | None:
        """Tokens of everything the summary replaced (each message's cost as stored),
        memoized for the next assembly."""
        summary = history.summary
        if not summarizing or summary is None or summary.through_seq is None:
            return None
        counter, overhead = engine.counter, policy.message_overhead
        counter.prefetch([text for message in history.summarized_messages
                          for text in cost_texts(message)])
        replaced = (history.prefix_tokens or 0) + sum(
            sent_cost(counter, message, overhead) for message in history.summarized_messages)
        if (history.prefix_through_seq, history.prefix_tokens) != (summary.through_seq,
                                                                   replaced):
            engine.remember(HistoryMemoRow(
                stream_id=view.stream_id, encoding=cost_key(counter.key, overhead),
                through_seq=summary.through_seq,
                retracted_count=history.summarized_retracted, tokens=replaced))
        return replaced

    def render(self, assembly: Assembly) -> RenderableType:
        """The card breakdown table (expired rows struck through) and the history line."""
        from ctxledger.assembler.profiles.card.breakdown import card_table

        return card_table(report_of(assembly, CardReport))


def _tokens(counter: TokenCounter, pieces: Sequence[Piece]) -> int:
    return sum(piece.tokens if isinstance(piece, Candidate) else counter.count(piece.text)
               for piece in pieces)


@dataclass(frozen=True, slots=True)
class _Loading:
    """The loaded messages cut into units (``history_window.pairing``): the units an
    earlier assembly made of the same message objects, and the ranges of the rest, each
    message with the window member a memo kept for that very object (None: to make)."""

    messages: Sequence[Message]
    reused: list[Unit]
    """The units of the last assembly's history that this one starts with unchanged
    (all but its last unit, which a new message may still extend)."""
    units: list[tuple[int, int, bool]]
    """The ranges of the other units, in ``messages``."""
    known: dict[int, WindowMessage]
    """By index in ``messages``: the members a memo holds, of the other units."""
    costs: str
    """``cost_key`` of the counter and the policy's message overhead."""

    @classmethod
    def of(cls, engine: Engine, messages: Sequence[Message], policy: CardPolicy,
           memo: CanonicalMemo | None) -> _Loading:
        """What is known of ``messages`` already."""
        costs = cost_key(engine.counter.key, policy.message_overhead)
        reused: list[Unit] = []
        first = 0
        last = None if memo is None else memo.state(("loaded", costs))
        if isinstance(last, _Loaded):
            before = last.messages
            # The last history is a prefix of this one, the very same objects (a C-level
            # walk): its units but the last stay as they were (pairing closes a unit at
            # the next message), and pairing starts again at the last one's start.
            if 0 < len(before) <= len(messages) and last.units \
                    and all(map(is_, islice(messages, len(before)), before)):
                reused = last.units[:-1]
                first = len(before) - len(last.units[-1].members)
        units = [(first + start, first + stop, unpaired)
                 for start, stop, unpaired in pairing(messages[first:])]
        known: dict[int, WindowMessage] = {}
        if memo is not None:
            for start, stop, unpaired in units:
                for index in range(start, stop):
                    made = memo.derived_before(messages[index], (costs, unpaired))
                    if made is not None:
                        known[index] = made
        return cls(messages, reused, units, known, costs)

    def uncounted(self) -> list[str]:
        """The texts of the messages still to measure (a chat message's line is never
        counted: its cost is counted from its parts)."""
        return [text for start, stop, _ in self.units for index in range(start, stop)
                if index not in self.known for text in cost_texts(self.messages[index])]


@dataclass(frozen=True, slots=True)
class _Loaded:
    """A history's message objects and the units made of them (kept in the memo)."""

    messages: Sequence[Message]
    units: list[Unit]


def _loaded(engine: Engine, loading: _Loading, policy: CardPolicy,
            memo: CanonicalMemo | None) -> list[Unit]:
    """The loaded messages cut into units, each message a candidate whose tokens are its
    cost as sent (an unpaired tool result as the user message holding its line). With
    ``memo``, a message object seen before keeps its candidate (a whole history's
    messages come back as the same objects), and the units of the last history that this
    one starts with are reused whole."""
    counter, overhead = engine.counter, policy.message_overhead
    messages, known = loading.messages, loading.known

    def member(message: Message, unpaired: bool) -> WindowMessage:
        line = chat_line(message)
        cost = sent_cost(counter, message, overhead, line=line if unpaired else None)
        candidate = Candidate(message_item(message), SECTION_HISTORY, line, cost)
        return WindowMessage(message, candidate, Said(candidate, message,
                                                      UNPAIRED_ROLE if unpaired else None))

    loaded: list[Unit] = list(loading.reused)
    for start, stop, unpaired in loading.units:
        members = []
        for index in range(start, stop):
            made = known.get(index)
            if made is None:
                made = member(messages[index], unpaired)
                if memo is not None:
                    memo.keep_derived(messages[index], (loading.costs, unpaired), made)
            members.append(made)
        loaded.append(Unit(tuple(members), unpaired))
    engine.register_all(map(_CANDIDATE, chain.from_iterable(map(_MEMBERS, loaded))))
    if memo is not None:
        memo.keep_state(("loaded", loading.costs), _Loaded(messages, loaded), _LOADED_KEPT)
    return loaded


_LOADED_KEPT = 4
"""Histories whose units a session's memo keeps (one per counter and overhead)."""


def _post_history(engine: Engine, card: _Card) -> Candidate | None:
    """The post-history instructions (the card's, else the policy's), sent after the
    history (kept whenever there are some, like a permanent field)."""
    text = card.text(POST_HISTORY_KEY)
    if not text:
        return None
    candidate = engine.candidate(POST_HISTORY_KEY, SECTION_POST_HISTORY, text)
    return engine.include(candidate, "after_history", tokens=candidate.tokens,
                          source=card.source(POST_HISTORY_KEY))


def _macros(policy: CardPolicy, card: Mapping[str, Any]) -> Macros:
    """The macro values: ``{{char}}`` is the card's V3 ``nickname``, else its ``name``
    (``Character`` without one); ``{{user}}`` the policy's ``user_name``."""
    bare = Macros(user=policy.user_name, char="")
    char = bare.apply(_raw(card, "nickname")) or bare.apply(_raw(card, "name"))
    return Macros(user=policy.user_name, char=char or DEFAULT_CHAR_NAME)


def _unknown_macros(texts: Sequence[str]) -> list[str]:
    """One warning listing the macros left as written, if any."""
    found: list[str] = []
    for text in texts:
        found.extend(macro for macro in Macros.unknown(text) if macro not in found)
    if not found:
        return []
    return [f"unknown macros left as written: {', '.join(found)} (substituted: {{{{char}}}},"
            " {{user}}, {{original}}, {{newline}}, {{// …}}, <BOT>, <USER>, <CHAR>)"]


def _with_depth_entries(kept: Sequence[Unit], lore: Lore) -> list[tuple[Candidate, Outgoing]]:
    """The kept chat messages (each with its line) with what goes inside the history
    (``Lore.at_depth``) placed among them: at depth d, before the last d messages (after
    the last one at 0; before the first when d is larger), moved earlier to the start of
    a tool call's unit rather than inside it; deeper first, then in the given order."""
    members = list(chain.from_iterable(map(_MEMBERS, kept)))
    said: list[tuple[Candidate, Outgoing]] = list(zip(map(_CANDIDATE, members),
                                                      map(_SAID, members), strict=True))
    placed = lore.at_depth()
    if not placed:
        return said
    starts = [0, *accumulate(len(unit.members) for unit in kept)][:len(kept)]
    total = len(said)
    inserts: dict[int, list[tuple[Candidate, Outgoing]]] = {}
    for item in sorted(placed, key=lambda item: -item.depth):  # stable: given order next
        at = max(0, total - item.depth)
        if at < total:
            at = max([start for start in starts if start <= at], default=0)
        inserts.setdefault(at, []).append(
            (item.candidate, Composed(item.role, [item.candidate], exact=True)))
    out: list[tuple[Candidate, Outgoing]] = []
    for index in range(total + 1):
        out.extend(inserts.get(index, ()))
        if index < total:
            out.append(said[index])
    return out


def _summary(engine: Engine, history: History, policy: CardPolicy, summarizing: bool,
             replaced: int | None) -> Candidate | None:
    """Register the summary (and the block of messages it stands for); decide it unless it
    goes into the context, which the budget may still change."""
    summary = history.summary
    if summary is None:
        return None
    candidate = engine.candidate(f"summary:{summary.through_message_id}", SECTION_HISTORY,
                                 _summary_text(summary.summary, policy))
    if summary.through_seq is None:
        engine.exclude(candidate, "rejected", "summary_unresolved",
                       through_message_id=summary.through_message_id)
        return None
    if not summarizing:
        engine.exclude(candidate, "dropped", "level_below_history_minimum",
                       level=policy.compression_level,
                       history_min_level=policy.history_min_level)
        return None
    if any(message.seq <= summary.through_seq for message in history.messages):
        raise AssemblyError(f"the read view's tail overlaps the summary (through seq "
                            f"{summary.through_seq})")
    block = engine.candidate(f"{SUMMARIZED_PREFIX}{summary.through_message_id}",
                             SECTION_HISTORY, "")
    engine.exclude(block, "dropped", "summarized", through_seq=summary.through_seq,
                   messages=history.summarized_count, tokens=replaced)
    return engine.include(candidate, "summary_replaces_messages",
                          through_seq=summary.through_seq,
                          summarized_messages=history.summarized_count,
                          replaced_tokens=replaced)


def _status(key: str, permanent: bool, active: set[str], kept: Mapping[str, Candidate],
            nonempty: Mapping[str, Candidate]) -> FieldStatus:
    if key not in active:
        return "expired"
    if permanent:
        return "permanent"
    # An empty field is active with 0 tokens; a non-empty one left out gave way.
    return "dropped" if key in nonempty and key not in kept else "active"


@dataclass(frozen=True, slots=True)
class _Card:
    """What the steps of one assembly share: the policy, the macros, the counter, and the
    card's texts as the policy reads them."""

    policy: CardPolicy
    macros: Macros
    counter: TokenCounter
    card: Mapping[str, Any]

    @property
    def greeting(self) -> int:
        """The greeting sent: the policy's choice, or 0 when the card lacks it."""
        chosen = self.policy.greeting
        alternates = self.card.get("alternate_greetings") or []
        return chosen if chosen <= len(alternates) else 0

    def raw(self, key: str) -> str:
        """A field's text as written: ``first_mes`` is the chosen greeting; the system
        prompt and post-history instructions are the policy's when the card has none."""
        if key == "first_mes" and self.greeting:
            return str(self.card["alternate_greetings"][self.greeting - 1])
        own = _raw(self.card, key)
        if key in _DEFAULTED and not own.strip():
            return str(getattr(self.policy, key))
        return own

    def source(self, key: str) -> str:
        """Where a defaulted field's text comes from: ``card`` or ``policy``."""
        return "card" if _raw(self.card, key).strip() else "policy"

    def text(self, key: str) -> str:
        """A field's text with the macros substituted (``{{original}}``: the policy's
        default of a field that has one)."""
        original = self.macros.apply(str(getattr(self.policy, key))) if key in _DEFAULTED \
            else ""
        return self.macros.apply(self.raw(key), original=original)

    def sent_raw(self, kept: Mapping[str, Candidate], post: Candidate | None) -> list[str]:
        """The texts as written of what is sent, for the unknown-macro warning."""
        return [*(self.raw(key) for key in kept), *([self.raw(POST_HISTORY_KEY)] if post
                                                     else [])]

    def warnings(self) -> list[str]:
        """A greeting asked for that the card does not have."""
        chosen = self.policy.greeting
        if chosen and chosen != self.greeting:
            count = len(self.card.get("alternate_greetings") or [])
            return [f"greeting {chosen} asked for, but the card has {count} alternate "
                    "greeting(s): first_mes is used"]
        return []

    def composed(self, role: str, pieces: Sequence[Piece]) -> int:
        """What a composed message of ``pieces`` costs as sent, counted whole as the API
        counts it (0 when it is empty)."""
        content = "".join([piece.text for piece in pieces])
        if not content:
            return 0
        return wrapper_tokens(self.counter, role, self.policy.message_overhead) \
            + self.counter.count(content)

    def before_history(self, card_pieces: Sequence[Piece], summary: Candidate | None,
                       post: Candidate | None, lore: Lore,
                       shed: frozenset[str] = frozenset()) -> int:
        """What the context costs besides the chat messages: the card, summary,
        post-history and depth-entry messages, and the reply priming (``shed``: depth
        entries left out)."""
        role = self.policy.context_role
        return (self.policy.message_overhead.reply_priming
                + self.composed(role, card_pieces)
                + (self.composed(role, [summary]) if summary is not None else 0)
                + (self.composed(role, [post]) if post is not None else 0)
                + sum(self.composed(item.role, [item.candidate])
                      for item in lore.at_depth(shed)))

    def pieces(self, kept: Mapping[str, Candidate], lore: Lore,
               shed: frozenset[str] = frozenset()) -> list[Piece]:
        """The memory text's pieces: the template with the ``kept`` fields and the
        lorebook entries (but ``shed``) filled in."""
        policy = self.policy
        lists: dict[str, list[Candidate]] = {
            "lore_before": [p.candidate for p in lore.before if p.candidate.id not in shed],
            "lore_after": [p.candidate for p in lore.after if p.candidate.id not in shed]}
        values = {"user": self.macros.user, "char": self.macros.char}
        values.update({rule.variable: kept[rule.key].text
                       for rule in policy.fields if rule.key in kept})
        values.update({name: LORE_SEPARATOR.join(c.text for c in entries)
                       for name, entries in lists.items()})
        slots = {rule.variable: rule.key for rule in policy.fields}
        parts = policy.parsed_template().render_parts(values, [*slots, *LORE_VARIABLES])
        pieces: list[Piece] = []
        for name, text in parts:
            if name is None:
                pieces.append(Frame(text, SECTION_CARD))
            elif name in lists:
                for index, entry in enumerate(lists[name]):
                    if index:
                        pieces.append(Frame(LORE_SEPARATOR, SECTION_CARD))
                    pieces.append(entry)
            else:
                pieces.append(kept[slots[name]])
        return pieces


_DEFAULTED = ("system_prompt", POST_HISTORY_KEY)
"""Fields the policy gives a default for, which ``{{original}}`` in the card's stands for."""


@dataclass(frozen=True, slots=True)
class _Fields:
    """The card fields after expiry: every one registered, the active (not expired) keys,
    and the included ones (active and not empty)."""

    registered: dict[str, Candidate]
    active: set[str]
    included: dict[str, Candidate]
    in_history: set[str]
    """The greeting, left out because the history's first message is it."""


def _expire_fields(engine: Engine, card: _Card, view: SessionView, history: History,
                   uncounted: Sequence[str]) -> _Fields:
    """Decide each field by the expiration rule (``card.expiry``), at the policy's level
    and the session's message count."""
    policy, counter = card.policy, card.counter
    level, count = policy.compression_level, view.counts.total
    field_texts = {rule.key: card.text(rule.key) for rule in policy.fields}
    greeting_message = _greeting_in_history(card, history)
    # One lookup for every text not counted yet: the fields' and the messages'.
    counter.prefetch([policy.context_role, *field_texts.values(), *uncounted])
    fields = _Fields({}, set(), {}, set())
    for rule in policy.fields:
        candidate = fields.registered[rule.key] = engine.candidate(
            rule.key, SECTION_CARD, field_texts[rule.key])
        expired, reason = policy.expiry(rule, level, count)
        detail: dict[str, int | str | bool | None] = {
            "level": level, "level_rank": policy.level_rank(level),
            "min_level": rule.min_level, "min_level_rank": policy.level_rank(rule.min_level),
            "message_count": count, "expires_at_message": rule.expires_at_message,
            "permanent": rule.permanent, "tokens": candidate.tokens}
        if expired:
            engine.exclude(candidate, "expired", reason, **detail)
            continue
        fields.active.add(rule.key)
        if not candidate.text:
            engine.exclude(candidate, "dropped", "empty_field", **detail)
        elif rule.key == GREETING_KEY and greeting_message is not None:
            fields.in_history.add(rule.key)
            engine.exclude(candidate, "dropped", "greeting_in_history",
                           message_id=greeting_message.message_id, greeting=card.greeting,
                           **detail)
        else:
            fields.included[rule.key] = engine.include(candidate, reason, **detail)
    return fields


def _greeting_in_history(card: _Card, history: History) -> Message | None:
    """The session's first message when it is one of the card's greetings (an assistant
    message with a greeting's text, macros substituted or as written): apps that store
    the greeting as message 1, as SillyTavern does, then send it once, as that message."""
    messages = history.messages
    if not messages or history.unloaded or not (history.complete
                                                or not history.summarized_count):
        return None
    first = messages[0]
    said = first.content.strip()
    if first.role != "assistant" or not said:
        return None
    greetings = [_raw(card.card, GREETING_KEY),
                 *(str(text) for text in card.card.get("alternate_greetings") or [])]
    forms = {form.strip() for text in greetings for form in (text, card.macros.apply(text))}
    return first if said in forms else None


def _give_way(engine: Engine, card: _Card, fields: dict[str, Candidate],
              summary: Candidate | None, newest: Sequence[Candidate],
              post: Candidate | None, history: History, lore: Lore
              ) -> tuple[dict[str, Candidate], Candidate | None]:
    """With a budget, shed ``overflow_order`` until the card, the lorebook entries, the
    summary, the post-history instructions and the newest unit fit together: the fields
    and the summary that stay (``lore`` keeps only the entries that stay)."""
    policy, budget = card.policy, card.policy.budget
    if budget is None:
        return dict(fields), summary
    newest_tokens = sum(candidate.tokens for candidate in newest)
    entries = {placed.candidate.id for placed in lore.kept}

    def size_before_history(kept: Sequence[Candidate]) -> int:
        """Card, lorebook entries, summary, post-history and the newest unit: what the
        window starts from."""
        by_id = {candidate.id: candidate for candidate in kept}
        shed = frozenset(entries.difference(by_id))
        pieces = card.pieces({key: by_id[key] for key in fields if key in by_id}, lore, shed)
        kept_summary = summary if summary is not None and summary.id in by_id else None
        return card.before_history(pieces, kept_summary, post, lore, shed) + newest_tokens

    before = [*fields.values(), *(placed.candidate for placed in lore.kept),
              *([summary] if summary is not None else [])]
    by_id = {candidate.id: candidate for candidate in before}
    steps: list[ShedStep] = []
    for name in policy.overflow_order:
        if name == "lorebook":
            steps.extend(ShedStep((candidate,)) for candidate in lore.shed_order())
            continue
        if name == "summary" and history.summary is not None:
            name = f"summary:{history.summary.through_message_id}"
        if name in by_id:
            steps.append(ShedStep((by_id[name],)))
    shed = engine.shed_until_fits(before, steps, limit=budget, unit="tokens",
                                  measure=size_before_history, reason="over_budget")
    kept_ids = {candidate.id for candidate in shed.kept}
    kept = {key: c for key, c in fields.items() if c.id in kept_ids}
    for place in (lore.before, lore.after, lore.depth):
        place[:] = [placed for placed in place if placed.candidate.id in kept_ids]
    return kept, None if summary is not None and summary.id not in kept_ids else summary


def _warnings(policy: CardPolicy, history: History, window: WindowResult, summarizing: bool,
              used: int) -> tuple[list[str], tuple[int, int] | None, bool]:
    """The warnings (a history gap, over the budget, context pressure), the gap and
    whether the context is under pressure."""
    budget = policy.budget
    warnings: list[str] = []
    for unit in compress(window.kept, map(_UNANSWERED, window.kept)):
        head = unit.members[0].message
        warnings.append(
            f"message {head.message_id!r} calls tools with no result after it "
            f"({', '.join(unit.unanswered)}): chat APIs refuse a call without its "
            "answer; append the tool messages before sending")
    gap = None
    if summarizing and window.dropped_range is not None:
        gap = window.dropped_range
        warnings.append(
            f"history gap: {window.dropped} messages (seq {gap[0]}-{gap[1]}) between the "
            f"summary (through seq {history.summary.through_seq if history.summary else 0})"
            f" and the kept messages were dropped to fit the budget of {budget} tokens; "
            f"summarize through seq {gap[1]} to close it")
    if budget is not None and used > budget:
        warnings.append(
            f"context is {used} tokens, over the budget of {budget} (context_limit "
            f"{policy.context_limit} - response_reserve {policy.response_reserve}): "
            "the permanent card fields and the newest message alone do not fit")
    limit = policy.context_limit
    # Exact decimal arithmetic: 0.8 * limit in floats can land a hair off the boundary.
    pressure = limit is not None and used > Fraction(repr(policy.pressure_threshold)) * limit
    if pressure:
        warnings.append(
            f"context pressure: {used} tokens is above "
            f"{policy.pressure_threshold:.0%} of context_limit {limit}")
    return warnings, gap, pressure


def _report(policy: CardPolicy, view: SessionView, fields: _Fields,
            kept_fields: Mapping[str, Candidate], *, memory: str,
            chat_history: ChatHistoryReport, used: int, pressure: bool, lore: Lore,
            engine: Engine, greeting: int) -> CardReport:
    """The breakdown (a row per field, a row per lorebook entry) and the figures of the
    assembly."""
    budget = policy.budget
    rows = [FieldRow(field_key=rule.key, label=rule.label,
                     tokens=fields.registered[rule.key].tokens,
                     status="in_history" if rule.key in fields.in_history else
                     _status(rule.key, rule.permanent, fields.active, kept_fields,
                             fields.included),
                     expired_at_message=(None if rule.key in fields.active
                                         else rule.expires_at_message))
            for rule in policy.fields]
    return CardReport(
        compression_level=policy.compression_level, message_count=view.counts.total,
        memory=memory, breakdown=rows,
        total_tokens=sum(c.tokens for c in kept_fields.values()),
        saved_tokens=sum(row.tokens for row in rows if row.status == "expired"),
        chat_history=chat_history,
        lorebook=lore_rows(lore, None if engine.memos is None
                           else engine.memo_for(view.stream_id).intern),
        lorebook_tokens=sum(placed.candidate.tokens for placed in lore.kept),
        greeting=greeting,
        used_tokens=used, context_limit=policy.context_limit,
        response_reserve=policy.response_reserve,
        budget=budget, over_budget=budget is not None and used > budget,
        pressure_threshold=policy.pressure_threshold, pressure=pressure)
