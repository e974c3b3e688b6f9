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
  the summary plus every message after K; otherwise it is every message. The report gives
  "chat history X tokens (summarized from Y)".
- With ``context_limit``, the assembly is flagged when use is above 80% of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from assembler.engine import Candidate, Engine, SectionLayout
from assembler.errors import AssemblyError
from assembler.model import Assembly
from assembler.policy import Policy, PolicyError
from assembler.profiles.base import Profile
from assembler.reports import CardReport, ChatHistoryReport, FieldRow, HistoryMemo
from assembler.template import Template, TemplateError, parse_template, substitute_macros
from projections.view import History, Message, SessionView, ViewRequest

LEVELS: tuple[str, ...] = ("none", "chat_only", "chat_dialogue", "aggressive")
"""CardShark's COMPRESSION_LEVEL_HIERARCHY: a higher index is more aggressive."""

TEMPLATE_VARIABLES: tuple[str, ...] = (
    "system", "description", "personality", "scenario", "examples", "first_mes", "user",
    "char")

DEFAULT_TEMPLATE = (
    "{{#if system}}{{system}}\n\n{{/if}}"
    "{{#if description}}{{char}}'s description:\n{{description}}\n\n{{/if}}"
    "{{#if personality}}{{char}}'s personality: {{personality}}\n\n{{/if}}"
    "{{#if scenario}}Scenario: {{scenario}}\n\n{{/if}}"
    "{{#if examples}}Example dialogue:\n{{examples}}\n\n{{/if}}"
    "{{#if first_mes}}{{char}}'s first message:\n{{first_mes}}{{/if}}"
)
"""Fields in SPEC order, each block present only when its field is (not expired, not empty)."""

SECTION_CARD = "card"
SECTION_HISTORY = "chat_history"
DEFAULT_CHAR_NAME = "Character"


class FieldRule(BaseModel):
    """How one card field expires (CardShark's ``FieldExpirationConfig`` plus its labels)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1)
    """The Character Card V2 field, e.g. ``mes_example``."""
    label: str
    variable: str
    """The template variable it fills, e.g. ``examples``."""
    permanent: bool = False
    expires_at_message: int | None = Field(default=None, ge=0)
    min_level: str = "none"
    """The lowest compression level that expires it."""


DEFAULT_FIELDS: tuple[FieldRule, ...] = (
    FieldRule(key="system_prompt", label="System Prompt", variable="system", permanent=True),
    FieldRule(key="description", label="Description", variable="description", permanent=True),
    FieldRule(key="personality", label="Personality", variable="personality", permanent=True),
    FieldRule(key="scenario", label="Scenario", variable="scenario", expires_at_message=3,
              min_level="aggressive"),
    FieldRule(key="mes_example", label="Example Dialogue", variable="examples",
              expires_at_message=5, min_level="chat_dialogue"),
    FieldRule(key="first_mes", label="First Message", variable="first_mes",
              expires_at_message=3, min_level="aggressive"),
)


class CardPolicy(Policy):
    """Policy of the ``card`` profile. Settings (key -> field):

    ``compression_level`` -> compression_level, ``card_template`` -> template,
    ``context_limit`` -> context_limit, ``user_name`` -> user_name,
    ``card_expiration`` -> fields (an object ``{field_key: {rule fields}}`` merged into the
    table), ``card_pressure_threshold`` -> pressure_threshold, ``token_encoding`` ->
    token_encoding; ``policy.card`` -> any field.
    """

    SETTINGS: ClassVar[Mapping[str, str]] = {
        "compression_level": "compression_level",
        "card_template": "template",
        "context_limit": "context_limit",
        "user_name": "user_name",
        "card_expiration": "fields",
        "card_pressure_threshold": "pressure_threshold",
        "token_encoding": "token_encoding",
    }

    profile: Literal["card"] = "card"
    levels: tuple[str, ...] = LEVELS
    compression_level: str = "none"
    history_min_level: str = "chat_only"
    """From this level up, a summary replaces the messages it covers."""
    fields: tuple[FieldRule, ...] = DEFAULT_FIELDS
    template: str = DEFAULT_TEMPLATE
    user_name: str = "User"
    context_limit: int | None = Field(default=None, gt=0)
    pressure_threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    summary_header: str = "[Summary of the conversation so far]"

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: tuple[str, ...]) -> tuple[str, ...]:
        if not levels or levels[0] != "none" or len(set(levels)) != len(levels):
            raise ValueError("levels must be distinct and start with 'none'")
        return levels

    @field_validator("compression_level", "history_min_level")
    @classmethod
    def _known_level(cls, level: str, info: ValidationInfo) -> str:
        levels = info.data.get("levels", LEVELS)
        if level not in levels:
            raise ValueError(f"{level!r} is not one of {', '.join(levels)}")
        return level

    @field_validator("fields")
    @classmethod
    def _rule_levels(cls, fields: tuple[FieldRule, ...],
                     info: ValidationInfo) -> tuple[FieldRule, ...]:
        levels = info.data.get("levels", LEVELS)
        for rule in fields:
            if rule.min_level not in levels:
                raise ValueError(f"{rule.key}.min_level {rule.min_level!r} is not one of "
                                 f"{', '.join(levels)}")
        return fields

    @model_validator(mode="after")
    def _consistent(self) -> CardPolicy:
        keys = [rule.key for rule in self.fields]
        variables = [rule.variable for rule in self.fields]
        if len(set(keys)) != len(keys) or len(set(variables)) != len(variables):
            raise ValueError("field keys and template variables must be distinct")
        for variable in variables:
            if variable not in TEMPLATE_VARIABLES or variable in ("user", "char"):
                raise ValueError(f"field variable {variable!r} is not a card template variable")
        return self

    @field_validator("template")
    @classmethod
    def _template(cls, template: str) -> str:
        try:
            parse_template(template, TEMPLATE_VARIABLES)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        return template

    @classmethod
    def overlay_setting(cls, field: str, current: Any, value: Any) -> Any:
        """``card_expiration`` merges per field key; other settings replace."""
        if field != "fields":
            return value
        if not isinstance(value, Mapping):
            raise PolicyError("setting 'card_expiration' must be an object of field rules")
        rules = [dict(rule) for rule in current]
        by_key = {rule["key"]: rule for rule in rules}
        for key in sorted(value):
            change = value[key]
            if not isinstance(change, Mapping):
                raise PolicyError(f"setting 'card_expiration': {key!r} must be an object")
            if key in by_key:
                by_key[key].update(change)
            else:
                rules.append({"key": key, **change})
        return rules

    # -- rules --------------------------------------------------------------------------

    def level_rank(self, level: str) -> int:
        """Position of ``level`` in the hierarchy (0 = none)."""
        return self.levels.index(level)

    def level_includes(self, current: str, required: str) -> bool:
        """True when ``current`` is at or above ``required`` (compressionLevelIncludes)."""
        return self.level_rank(current) >= self.level_rank(required)

    def rule(self, key: str) -> FieldRule:
        """The expiration rule of field ``key``."""
        for rule in self.fields:
            if rule.key == key:
                return rule
        raise KeyError(key)

    def expiry(self, rule: FieldRule, level: str, message_count: int) -> tuple[bool, str]:
        """Whether ``rule``'s field is expired, with the reason code either way."""
        if rule.permanent:
            return False, "permanent"
        if rule.expires_at_message is None:
            return False, "no_expiry_threshold"
        if level == self.levels[0]:
            return False, "compression_off"
        if not self.level_includes(level, rule.min_level):
            return False, "level_below_minimum"
        if message_count < rule.expires_at_message:
            return False, "below_message_threshold"
        return True, "expired_by_level_and_count"

    def should_expire(self, key: str, level: str, message_count: int) -> bool:
        """CardShark's ``shouldExpireField``: unknown fields never expire."""
        try:
            rule = self.rule(key)
        except KeyError:
            return False
        return self.expiry(rule, level, message_count)[0]

    def parsed_template(self) -> Template:
        """The parsed memory template."""
        return parse_template(self.template, TEMPLATE_VARIABLES)

    def summarizes(self) -> bool:
        """Whether this level replaces summarized messages by their summary."""
        return self.level_includes(self.compression_level, self.history_min_level)


def render_message(message: Message) -> str:
    """One chat line. It depends only on the message, so memoized totals stay valid."""
    return f"{message.name or message.role}: {message.content}"


def _prefetch(engine: Engine, view: SessionView, policy: CardPolicy,
              texts: list[str]) -> None:
    """Look every text this assembly will count up in the token cache at once."""
    history = view.history
    if history is not None:
        texts = texts + [""] + [render_message(message) for message in
                         (*history.messages, *history.summarized_messages)]
        if history.summary is not None:
            texts.append(_summary_text(history.summary.summary, policy))
    engine.counter.prefetch(texts)


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

    def request(self, policy: Policy, now: datetime) -> ViewRequest:
        """``tail`` (+ the token memo) when summaries apply, else the ``full`` history.

        ``tail`` already holds every message when there is no usable summary.
        """
        assert isinstance(policy, CardPolicy)
        if policy.summarizes():
            return ViewRequest(history="tail", now=now, token_encoding=policy.token_encoding)
        return ViewRequest(history="full", now=now)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Expire card fields, render the memory text, attach the chat history."""
        assert isinstance(policy, CardPolicy)
        level = policy.compression_level
        count = view.counts.total
        char = _field_text(view.card, "name", user=policy.user_name, char="") \
            or DEFAULT_CHAR_NAME
        user = policy.user_name

        field_texts = {rule.key: _field_text(view.card, rule.key, user=user, char=char)
                       for rule in policy.fields}
        _prefetch(engine, view, policy, [field_texts[rule.key] for rule in policy.fields])
        rows: list[FieldRow] = []
        kept_fields: list[Candidate] = []
        values: dict[str, str] = {"user": user, "char": char}
        conditions: dict[str, str] = dict(values)
        included_tokens = saved_tokens = 0
        for rule in policy.fields:
            text = field_texts[rule.key]
            candidate = engine.candidate(rule.key, SECTION_CARD, text)
            expired, reason = policy.expiry(rule, level, count)
            detail: dict[str, int | str | bool | None] = {
                "level": level, "level_rank": policy.level_rank(level),
                "min_level": rule.min_level, "min_level_rank": policy.level_rank(rule.min_level),
                "message_count": count, "expires_at_message": rule.expires_at_message,
                "permanent": rule.permanent, "tokens": candidate.tokens}
            if expired:
                engine.exclude(candidate, "expired", reason, **detail)
                saved_tokens += candidate.tokens
                values[rule.variable] = conditions[rule.variable] = ""
                rows.append(FieldRow(field_key=rule.key, label=rule.label,
                                     tokens=candidate.tokens, status="expired",
                                     expired_at_message=rule.expires_at_message))
            else:
                kept_fields.append(engine.include(candidate, reason, **detail))
                included_tokens += candidate.tokens
                values[rule.variable] = conditions[rule.variable] = text
                rows.append(FieldRow(field_key=rule.key, label=rule.label,
                                     tokens=candidate.tokens,
                                     status="permanent" if rule.permanent else "active"))

        template = policy.parsed_template()
        memory = template.render(values)
        # The template's own words (labels, blank lines), counted apart from the fields.
        framing = template.render({"user": user, "char": char}, conditions=conditions)

        history = _history(engine, view, policy)
        history_text = "\n".join(candidate.text for candidate in history.kept)
        text = "\n\n".join(part for part in (memory, history_text) if part)

        used = included_tokens + engine.counter.count(framing) + history.tokens
        limit = policy.context_limit
        # Exact decimal arithmetic: 0.8 * limit in floats can land a hair off the boundary.
        pressure = limit is not None and used > Fraction(repr(policy.pressure_threshold)) * limit
        warnings: list[str] = []
        if pressure:
            warnings.append(
                f"context pressure: {used} tokens is above "
                f"{policy.pressure_threshold:.0%} of context_limit {limit}")

        report = CardReport(
            compression_level=level, message_count=count, memory=memory, breakdown=rows,
            total_tokens=included_tokens, saved_tokens=saved_tokens,
            chat_history=history.report, used_tokens=used, context_limit=limit,
            pressure_threshold=policy.pressure_threshold, pressure=pressure)
        return engine.finish(
            profile=self.name, policy_version=policy.version, session=view.stream_id,
            position=view.position, now=now, text=text,
            layout=[SectionLayout(SECTION_CARD, kept_fields),
                    SectionLayout(SECTION_HISTORY, history.kept)],
            framing=[framing] if framing else [], report=report, warnings=warnings)


@dataclass(frozen=True, slots=True)
class _HistoryResult:
    """The history's kept candidates and figures."""

    kept: list[Candidate]
    tokens: int
    report: ChatHistoryReport


def _history(engine: Engine, view: SessionView, policy: CardPolicy) -> _HistoryResult:
    history = view.history
    if history is None:
        raise AssemblyError(
            f"session {view.stream_id!r}: the read view holds no chat history "
            "(the card profile requests history 'tail' or 'full')")
    summary = history.summary
    usable = summary is not None and summary.through_seq is not None
    if policy.summarizes() and usable:
        return _summarized_history(engine, view, history, policy)

    if not history.complete:
        raise AssemblyError(
            f"session {view.stream_id!r}: the read view holds part of the history only, "
            f"but level {policy.compression_level!r} sends every message")
    kept: list[Candidate] = []
    if summary is not None:
        candidate = engine.candidate(f"summary:{summary.through_message_id}", SECTION_HISTORY,
                                     _summary_text(summary.summary, policy))
        if not usable:
            engine.exclude(candidate, "rejected", "summary_unresolved",
                           through_message_id=summary.through_message_id)
        else:
            engine.exclude(candidate, "dropped", "level_below_history_minimum",
                           level=policy.compression_level,
                           history_min_level=policy.history_min_level)
    for message in history.messages:
        candidate = engine.candidate(f"message:{message.message_id}", SECTION_HISTORY,
                                     render_message(message))
        kept.append(engine.include(candidate, "chat_message", seq=message.seq))
    tokens = sum(candidate.tokens for candidate in kept)
    return _HistoryResult(kept, tokens, ChatHistoryReport(tokens=tokens, messages=len(kept)))


def _summarized_history(engine: Engine, view: SessionView, history: History,
                        policy: CardPolicy) -> _HistoryResult:
    summary = history.summary
    assert summary is not None and summary.through_seq is not None
    through = summary.through_seq
    if any(message.seq <= through for message in history.messages):
        raise AssemblyError(
            f"session {view.stream_id!r}: the read view's tail overlaps the summary "
            f"(through seq {through})")
    stale = [m.seq for m in history.summarized_messages
             if not history.prefix_through_seq < m.seq <= through]
    if stale:
        raise AssemblyError(
            f"session {view.stream_id!r}: summarized messages {stale} are outside "
            f"({history.prefix_through_seq}, {through}]")
    counter = engine.counter
    lines = [render_message(message) for message in history.summarized_messages]
    counter.prefetch(lines)
    replaced = (history.prefix_tokens or 0) + sum(counter.count(line) for line in lines)

    summary_candidate = engine.candidate(f"summary:{summary.through_message_id}",
                                         SECTION_HISTORY,
                                         _summary_text(summary.summary, policy))
    kept = [engine.include(summary_candidate, "summary_replaces_messages",
                           through_seq=through, summarized_messages=history.summarized_count,
                           replaced_tokens=replaced)]
    block = engine.candidate(f"summarized:{summary.through_message_id}", SECTION_HISTORY, "")
    # Nothing about the memo itself goes in: a replay without memos must match the digest.
    engine.exclude(block, "dropped", "summarized", through_seq=through,
                   messages=history.summarized_count, tokens=replaced)
    for message in history.messages:
        candidate = engine.candidate(f"message:{message.message_id}", SECTION_HISTORY,
                                     render_message(message))
        kept.append(engine.include(candidate, "after_summary", seq=message.seq,
                                   through_seq=through))
    tail_tokens = sum(candidate.tokens for candidate in kept[1:])
    tokens = kept[0].tokens + tail_tokens
    memo = HistoryMemo(encoding=counter.encoding, through_seq=through,
                       retracted_count=history.summarized_retracted, tokens=replaced)
    return _HistoryResult(kept, tokens, ChatHistoryReport(
        tokens=tokens, summarized_from=replaced + tail_tokens, messages=len(kept) - 1,
        summarized_messages=history.summarized_count, summary_through_seq=through,
        memo=memo))
