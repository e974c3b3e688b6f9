"""The ``card`` profile's policy: the compression level, the expiration table (its
defaults and rule in ``card.expiry``), the memory template, and the context budget
(SPEC §3 "Profile card"), as data with SPEC's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ctxledger.assembler.policy import Policy, PolicyError
from ctxledger.assembler.profiles.card.expiry import (
    DEFAULT_FIELDS,
    LEVELS,
    FieldRule,
    expiry,
    level_includes,
    level_rank,
)
from ctxledger.assembler.template import Template, TemplateError, parse_template
from ctxledger.assembler.text import LengthUnit

LORE_VARIABLES: tuple[str, ...] = ("lore_before", "lore_after")
"""The lorebook entries placed before and after the character's fields."""
TEMPLATE_VARIABLES: tuple[str, ...] = (
    "system", "description", "personality", "scenario", "examples", "first_mes", "user",
    "char", *LORE_VARIABLES)

DEFAULT_TEMPLATE = (
    "{{#if system}}{{system}}\n\n{{/if}}"
    "{{#if lore_before}}{{lore_before}}\n\n{{/if}}"
    "{{#if description}}{{char}}'s description:\n{{description}}\n\n{{/if}}"
    "{{#if personality}}{{char}}'s personality: {{personality}}\n\n{{/if}}"
    "{{#if scenario}}Scenario: {{scenario}}\n\n{{/if}}"
    "{{#if lore_after}}{{lore_after}}\n\n{{/if}}"
    "{{#if examples}}Example dialogue:\n{{examples}}\n\n{{/if}}"
    "{{#if first_mes}}{{char}}'s first message:\n{{first_mes}}{{/if}}"
)
"""Fields in SPEC order, each block present only when its field is (not expired, not
empty); lorebook entries around the character's fields, where SillyTavern's story string
puts them (before the description, after the scenario)."""
NEVER_IN_PROMPT: frozenset[str] = frozenset({
    "creator_notes", "creator_notes_multilingual", "tags", "creator", "character_version",
    "extensions", "character_book", "alternate_greetings", "group_only_greetings",
    "assets", "source", "nickname", "creation_date", "modification_date", "spec",
    "spec_version", "card_extra", "data_extra", "replace", "name"})
"""Card keys that are about the card, not the character: no field rule may send them
(the specs say creator notes, tags, creator and version never reach the prompt)."""


COMPRESSION_ENABLED = "compressionEnabled"
"""The card app's switch before compression levels: true means ``chat_only``."""


class CardPolicy(Policy):
    """Policy of the ``card`` profile. Settings (key -> field):

    ``compression_level`` -> compression_level, ``card_template`` -> template,
    ``context_limit`` -> context_limit, ``user_name`` -> user_name,
    ``card_expiration`` -> fields (an object ``{field_key: {rule fields}}`` merged into the
    table), ``card_pressure_threshold`` -> pressure_threshold, ``response_reserve`` ->
    response_reserve, ``token_encoding`` -> token_encoding,
    ``context_role`` -> context_role, ``system_prompt``, ``post_history_instructions``,
    ``greeting``, ``card_lorebook``, ``lorebook_scan_depth``, ``lorebook_token_budget``,
    ``lorebook_recursive_scanning``, ``length_unit`` -> the same; ``policy.card`` -> any
    field.
    Legacy: ``compressionEnabled`` true -> compression_level ``chat_only`` (false:
    ``none``) unless a compression level is set.
    """

    REVISION: ClassVar[int] = 5
    """2: the history window no longer charges the oldest kept message a line break that
    is never sent, so at some limits it keeps one message more. 3: the budget holds for
    the context sent as chat messages (each message's cost as an API counts it), a tool
    call is kept or dropped with its results, and post-history instructions are sent.
    4: lorebooks, the greeting sent once, default system prompt and post-history
    instructions, and the macros ``{{original}}``, ``{{newline}}``, ``{{// …}}``,
    ``<BOT>``, ``<USER>``, ``<CHAR>``. 5: the ``chars4`` estimate counts lengths in
    ``length_unit``, UTF-16 units by default as the app (JavaScript) counts them."""
    SETTINGS: ClassVar[Mapping[str, str]] = {
        "compression_level": "compression_level",
        "card_template": "template",
        "context_limit": "context_limit",
        "user_name": "user_name",
        "card_expiration": "fields",
        "card_pressure_threshold": "pressure_threshold",
        "response_reserve": "response_reserve",
        "token_encoding": "token_encoding",
        "model": "model",
        "context_role": "context_role",
        "system_prompt": "system_prompt",
        "post_history_instructions": "post_history_instructions",
        "greeting": "greeting",
        "card_lorebook": "card_lorebook",
        "lorebook_scan_depth": "lorebook_scan_depth",
        "lorebook_token_budget": "lorebook_token_budget",
        "lorebook_recursive_scanning": "lorebook_recursive_scanning",
        "length_unit": "length_unit",
    }

    LEGACY_SETTINGS: ClassVar[frozenset[str]] = frozenset({COMPRESSION_ENABLED})

    profile: Literal["card"] = "card"
    length_unit: LengthUnit = "utf16"
    """The unit the ``chars4`` estimate (ceil(length/4)) measures a text's length in:
    ``utf16`` (JavaScript's ``String.length``, the app's) or ``codepoints``."""
    levels: tuple[str, ...] = LEVELS
    compression_level: str = "none"
    history_min_level: str = "chat_only"
    """From this level up, a summary replaces the messages it covers."""
    fields: tuple[FieldRule, ...] = DEFAULT_FIELDS
    template: str = DEFAULT_TEMPLATE
    user_name: str = "User"
    context_limit: int | None = Field(default=None, gt=0)
    response_reserve: int = Field(default=0, ge=0)
    """Tokens kept free for the model's reply: the context fits ``context_limit`` minus
    this."""
    pressure_threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    summary_header: str = "[Summary of the conversation so far]"
    overflow_order: tuple[str, ...] = ("lorebook", "first_mes", "scenario", "mes_example",
                                       "summary")
    """What gives way, in this order, when the card, the lorebook entries, the summary and
    the newest message are over the budget together: ``lorebook`` (its entries, lowest
    priority first), card fields (by key) and ``summary``. Permanent fields and the newest
    message never give way; if they alone are over, the context overshoots with a
    warning."""
    system_prompt: str = ""
    """The app's system prompt: sent when the card has none, and what ``{{original}}``
    in the card's ``system_prompt`` stands for."""
    post_history_instructions: str = ""
    """The app's instructions after the history (SillyTavern's jailbreak prompt): sent when
    the card has none, and what ``{{original}}`` in the card's stands for."""
    greeting: int = Field(default=0, ge=0)
    """Which greeting is the first message: 0 ``first_mes``, n the card's n-th
    ``alternate_greetings``."""
    card_lorebook: bool = True
    """Use the card's ``character_book`` (the V2 spec: by default, a frontend must)."""
    lorebook_scan_depth: int = Field(default=2, ge=0)
    """How many of the newest messages a book without ``scan_depth`` scans (SillyTavern's
    default is 2)."""
    lorebook_token_budget: int | None = Field(default=None, ge=0)
    """The token budget of a book without ``token_budget`` (None: no budget of its own;
    the context's budget still holds)."""
    lorebook_recursive_scanning: bool | None = None
    """Scan activated entries for other entries' keys: None follows each book's
    ``recursive_scanning``."""

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
            if variable not in TEMPLATE_VARIABLES or variable in ("user", "char",
                                                                 *LORE_VARIABLES):
                raise ValueError(f"field variable {variable!r} is not a card template variable")
        for key in keys:
            if key in NEVER_IN_PROMPT:
                raise ValueError(f"card key {key!r} never reaches the prompt: it is not a "
                                 "field a rule can send")
        return self

    @model_validator(mode="after")
    def _overflow(self) -> CardPolicy:
        rules = {rule.key: rule for rule in self.fields}
        for name in self.overflow_order:
            if name in ("summary", "lorebook"):
                continue
            if name not in rules:
                raise ValueError(f"overflow_order names unknown field {name!r}")
            if rules[name].permanent:
                raise ValueError(f"overflow_order names permanent field {name!r}")
        if len(set(self.overflow_order)) != len(self.overflow_order):
            raise ValueError("overflow_order names an item twice")
        return self

    @property
    def text_unit(self) -> LengthUnit:
        """``length_unit``: the unit the ``chars4`` estimate counts lengths in."""
        return self.length_unit

    @property
    def budget(self) -> int | None:
        """``context_limit − response_reserve`` (at least 0), or None without a limit."""
        if self.context_limit is None:
            return None
        return max(0, self.context_limit - self.response_reserve)

    @field_validator("template")
    @classmethod
    def _template(cls, template: str) -> str:
        try:
            parse_template(template, TEMPLATE_VARIABLES)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        return template

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Self:
        """``Policy.from_settings``, reading the legacy ``compressionEnabled`` as the app
        that wrote it did: true is ``chat_only``, false ``none``; a compression level
        set by ``compression_level`` or ``policy.card`` wins over it."""
        if COMPRESSION_ENABLED not in settings:
            return super().from_settings(settings)
        enabled = settings[COMPRESSION_ENABLED]
        if not isinstance(enabled, bool):
            raise PolicyError(f"invalid card policy: setting {COMPRESSION_ENABLED!r}: "
                              f"must be true or false, not {enabled!r}")
        rest = {key: settings[key] for key in settings if key != COMPRESSION_ENABLED}
        generic = rest.get("policy.card")
        if "compression_level" not in rest and not (
                isinstance(generic, Mapping) and "compression_level" in generic):
            rest["compression_level"] = "chat_only" if enabled else "none"
        return super().from_settings(rest)

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
        return level_rank(self.levels, level)

    def level_includes(self, current: str, required: str) -> bool:
        """True when ``current`` is at or above ``required`` (compressionLevelIncludes)."""
        return level_includes(self.levels, current, required)

    def rule(self, key: str) -> FieldRule:
        """The expiration rule of field ``key``."""
        for rule in self.fields:
            if rule.key == key:
                return rule
        raise KeyError(key)

    def expiry(self, rule: FieldRule, level: str, message_count: int) -> tuple[bool, str]:
        """Whether ``rule``'s field is expired, with the reason code either way."""
        return expiry(rule, self.levels, level, message_count)

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
