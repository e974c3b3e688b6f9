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
    joined,
)
from ctxledger.assembler.chat_tokens import cost_key, wrapper_tokens
from ctxledger.assembler.engine import Engine
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
from ctxledger.assembler.message_ranges import SUMMARIZED_PREFIX
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.outgoing import UNPAIRED_ROLE, cost_texts, sent_cost
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.card.policy import CardPolicy
from ctxledger.assembler.profiles.card.report import (
    CardReport,
    ChatHistoryReport,
    FieldRow,
    FieldStatus,
)
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.template import substitute_macros
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.view import History, Message, SessionView, ViewRequest

if TYPE_CHECKING:
    from rich.console import RenderableType

SECTION_CARD = "card"
SECTION_HISTORY = "chat_history"
SECTION_POST_HISTORY = "post_history"
POST_HISTORY_KEY = "post_history_instructions"
"""The card field sent after the chat history, in its own section."""
DEFAULT_CHAR_NAME = "Character"
MEMORY_SEPARATOR = "\n\n"
"""Between the memory text and the chat history."""
LINE_SEPARATOR = "\n"
"""Between the lines of the chat history."""


def render_message(message: Message) -> str:
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


def _field_text(card: Mapping[str, Any], key: str, *, user: str, char: str) -> str:
    raw = card.get(key)
    if raw is None:
        return ""
    text = raw if isinstance(raw, str) else str(raw)
    return substitute_macros(text, user=user, char=char)


class CardProfile(Profile):
    """The ``card`` profile."""

    name: ClassVar[str] = "card"
    policy_type: ClassVar[type[Policy]] = CardPolicy
    report_type: ClassVar[type[ProfileReport]] = CardReport
    inputs: ClassVar[Inputs] = Inputs(session=frozenset({
        "message.appended", "message.retracted", "history.summarized", "card.set"}))

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
            return ViewRequest(history="tail", now=now,
                               token_encoding=cost_key(policy.token_encoding, overhead),
                               **window)
        return ViewRequest(history="full", now=now, **window)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Expire card fields, render the memory text, fit the chat history."""
        assert isinstance(policy, CardPolicy)
        history = view.history
        if history is None:
            raise AssemblyError(
                f"session {view.stream_id!r}: the read view holds no chat history "
                "(the card profile requests history 'tail' or 'full')")
        card = _Card(policy, policy.user_name,
                     _field_text(view.card, "name", user=policy.user_name, char="")
                     or DEFAULT_CHAR_NAME, engine.counter)
        fields = _expire_fields(engine, card, view, history)

        summarizing = policy.summarizes() and history.summary is not None \
            and history.summary.through_seq is not None
        if not summarizing and not history.complete and policy.budget is None:
            raise AssemblyError(
                f"session {view.stream_id!r}: the read view holds part of the history only, "
                f"but level {policy.compression_level!r} sends every message")
        replaced = self._remember_memo(engine, view, history, summarizing, policy)
        summary = _summary(engine, history, policy, summarizing, replaced)
        loaded = _loaded(engine, history.messages, policy)
        post = _post_history(engine, card, view)
        # The newest unit: what the window always keeps.
        newest = [member.candidate for member in loaded[-1].members] if loaded else []
        kept_fields, summary = _give_way(engine, card, fields.included, summary, newest,
                                         post, history)

        budget = policy.budget
        card_pieces = card.pieces(kept_fields)
        laid_out = {piece.id for piece in card_pieces if isinstance(piece, Candidate)}
        for key in [key for key in kept_fields if key not in laid_out]:
            engine.exclude(kept_fields.pop(key), "dropped", "not_in_template",
                           template_variable=policy.rule(key).variable)
        base = card.before_history(card_pieces, summary, post)
        window = fill_window(
            engine, loaded, base=base, budget=budget,
            reason="after_summary" if summarizing else "chat_message",
            unloaded=history.unloaded, oldest_unloaded=history.oldest_unloaded,
            **({"through_seq": history.summary.through_seq}
               if summarizing and history.summary is not None else {}))

        history_pieces = joined([[summary] if summary else [],
                                 *([c] for c in window.kept_candidates)], LINE_SEPARATOR,
                                SECTION_HISTORY)
        pieces = joined([card_pieces, history_pieces, [post] if post else []],
                        MEMORY_SEPARATOR)
        role = policy.context_role
        messages: list[Outgoing] = [Composed(role, card_pieces, exact=True)]
        if summary is not None:
            messages.append(Composed(role, [summary], exact=True))
        messages.extend(Said(member.candidate, member.message,
                             UNPAIRED_ROLE if unit.unpaired else None)
                        for unit in window.kept for member in unit.members)
        if post is not None:
            messages.append(Composed(role, [post], exact=True))
        used = window.used
        warnings, gap, pressure = _warnings(policy, history, window, summarizing, used)
        kept_tail = sum(c.tokens for c in window.kept_candidates)
        report = _report(
            policy, view, fields, kept_fields,
            memory="".join(piece.text for piece in card_pieces),
            chat_history=ChatHistoryReport(
                tokens=kept_tail + (card.composed(role, [summary]) if summary else 0),
                summarized_from=None if summary is None or replaced is None
                else replaced + kept_tail,
                messages=sum(len(unit.members) for unit in window.kept),
                summarized_messages=history.summarized_count if summarizing else 0,
                dropped_messages=window.dropped,
                summary_through_seq=(history.summary.through_seq
                                     if summarizing and history.summary else None),
                gap=gap),
            used=used, pressure=pressure)
        return engine.finish(
            profile=self.name, policy_version=policy.version, session=view.stream_id,
            position=view.position, now=now, pieces=pieces, messages=messages,
            overhead=policy.message_overhead,
            sections=[SectionLayout(SECTION_CARD), SectionLayout(SECTION_HISTORY),
                      SectionLayout(SECTION_POST_HISTORY)],
            report=report, warnings=warnings)

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
                stream_id=view.stream_id, encoding=cost_key(counter.encoding, overhead),
                through_seq=summary.through_seq,
                retracted_count=history.summarized_retracted, tokens=replaced))
        return replaced

    def render(self, assembly: Assembly) -> RenderableType:
        """The card breakdown table (expired rows struck through) and the history line."""
        from ctxledger.assembler.profiles.card.view import card_table

        return card_table(report_of(assembly, CardReport))


def _tokens(counter: TokenCounter, pieces: Sequence[Piece]) -> int:
    return sum(piece.tokens if isinstance(piece, Candidate) else counter.count(piece.text)
               for piece in pieces)


def _loaded(engine: Engine, messages: Sequence[Message], policy: CardPolicy) -> list[Unit]:
    """The loaded messages cut into units (``history_window.pairing``), each message a
    candidate whose tokens are its cost as sent (an unpaired tool result as the user
    message holding its line)."""
    counter, overhead = engine.counter, policy.message_overhead
    loaded: list[Unit] = []
    for start, stop, unpaired in pairing(messages):
        members = []
        for message in messages[start:stop]:
            line = render_message(message)
            cost = sent_cost(counter, message, overhead, line=line if unpaired else None)
            members.append(WindowMessage(message, engine.candidate(
                message_item(message), SECTION_HISTORY, line, tokens=cost)))
        loaded.append(Unit(tuple(members), unpaired))
    return loaded


def _post_history(engine: Engine, card: _Card, view: SessionView) -> Candidate | None:
    """The card's post-history instructions, sent after the history (kept whenever the
    card has them, like a permanent field)."""
    text = _field_text(view.card, POST_HISTORY_KEY, user=card.user, char=card.char)
    if not text:
        return None
    candidate = engine.candidate(POST_HISTORY_KEY, SECTION_POST_HISTORY, text)
    return engine.include(candidate, "after_history", tokens=candidate.tokens)


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
    """What the steps of one assembly share: the policy, the macro names, the counter."""

    policy: CardPolicy
    user: str
    char: str
    counter: TokenCounter

    def composed(self, role: str, pieces: Sequence[Piece]) -> int:
        """What a composed message of ``pieces`` costs as sent, counted whole as the API
        counts it (0 when it is empty)."""
        content = "".join([piece.text for piece in pieces])
        if not content:
            return 0
        return wrapper_tokens(self.counter, role, self.policy.message_overhead) \
            + self.counter.count(content)

    def before_history(self, card_pieces: Sequence[Piece], summary: Candidate | None,
                       post: Candidate | None) -> int:
        """What the context costs besides the chat messages: the card, summary and
        post-history messages, and the reply priming."""
        role = self.policy.context_role
        return (self.policy.message_overhead.reply_priming
                + self.composed(role, card_pieces)
                + (self.composed(role, [summary]) if summary is not None else 0)
                + (self.composed(role, [post]) if post is not None else 0))

    def pieces(self, kept: Mapping[str, Candidate]) -> list[Piece]:
        """The memory text's pieces: the template with the ``kept`` fields filled in."""
        policy = self.policy
        values = {"user": self.user, "char": self.char}
        values.update({rule.variable: kept[rule.key].text
                       for rule in policy.fields if rule.key in kept})
        slots = {rule.variable: rule.key for rule in policy.fields}
        parts = policy.parsed_template().render_parts(values, list(slots))
        return [kept[slots[name]] if name is not None else Frame(text, SECTION_CARD)
                for name, text in parts]


@dataclass(frozen=True, slots=True)
class _Fields:
    """The card fields after expiry: every one registered, the active (not expired) keys,
    and the included ones (active and not empty)."""

    registered: dict[str, Candidate]
    active: set[str]
    included: dict[str, Candidate]


def _expire_fields(engine: Engine, card: _Card, view: SessionView,
                   history: History) -> _Fields:
    """Decide each field by the expiration rule (``card.expiry``), at the policy's level
    and the session's message count."""
    policy, counter = card.policy, card.counter
    level, count = policy.compression_level, view.counts.total
    field_texts = {rule.key: _field_text(view.card, rule.key, user=card.user, char=card.char)
                   for rule in policy.fields}
    # A chat message's line is never counted (its cost is counted from its parts).
    counter.prefetch([policy.context_role, *field_texts.values(),
                      *(text for message in history.messages
                        for text in cost_texts(message))])
    fields = _Fields({}, set(), {})
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
        else:
            fields.included[rule.key] = engine.include(candidate, reason, **detail)
    return fields


def _give_way(engine: Engine, card: _Card, fields: dict[str, Candidate],
              summary: Candidate | None, newest: Sequence[Candidate],
              post: Candidate | None, history: History
              ) -> tuple[dict[str, Candidate], Candidate | None]:
    """With a budget, shed ``overflow_order`` until the card, the summary, the
    post-history instructions and the newest unit fit together: the fields and the
    summary that stay."""
    policy, budget = card.policy, card.policy.budget
    if budget is None:
        return dict(fields), summary
    newest_tokens = sum(candidate.tokens for candidate in newest)

    def size_before_history(kept: Sequence[Candidate]) -> int:
        """Card, summary, post-history and the newest unit: what the window starts
        from."""
        by_id = {candidate.id: candidate for candidate in kept}
        pieces = card.pieces({key: by_id[key] for key in fields if key in by_id})
        kept_summary = summary if summary is not None and summary.id in by_id else None
        return card.before_history(pieces, kept_summary, post) + newest_tokens

    before = [*fields.values(), *([summary] if summary is not None else [])]
    by_id = {candidate.id: candidate for candidate in before}
    order = [f"summary:{history.summary.through_message_id}"
             if name == "summary" and history.summary is not None else name
             for name in policy.overflow_order]
    steps = [ShedStep((by_id[name],)) for name in order if name in by_id]
    shed = engine.shed_until_fits(before, steps, limit=budget, unit="tokens",
                                  measure=size_before_history, reason="over_budget")
    kept_ids = {candidate.id for candidate in shed.kept}
    kept = {key: c for key, c in fields.items() if c.id in kept_ids}
    return kept, None if summary is not None and summary.id not in kept_ids else summary


def _warnings(policy: CardPolicy, history: History, window: WindowResult, summarizing: bool,
              used: int) -> tuple[list[str], tuple[int, int] | None, bool]:
    """The warnings (a history gap, over the budget, context pressure), the gap and
    whether the context is under pressure."""
    budget = policy.budget
    warnings: list[str] = []
    for unit in window.kept:
        if unit.unanswered:
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
            chat_history: ChatHistoryReport, used: int, pressure: bool) -> CardReport:
    """The breakdown (a row per field) and the figures of the assembly."""
    budget = policy.budget
    rows = [FieldRow(field_key=rule.key, label=rule.label,
                     tokens=fields.registered[rule.key].tokens,
                     status=_status(rule.key, rule.permanent, fields.active, kept_fields,
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
        used_tokens=used, context_limit=policy.context_limit,
        response_reserve=policy.response_reserve,
        budget=budget, over_budget=budget is not None and used > budget,
        pressure_threshold=policy.pressure_threshold, pressure=pressure)
