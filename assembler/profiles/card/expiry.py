"""When a card field expires (SPEC §3 "Profile card", CardShark's field expiration).

A field is expired when it is not permanent, the compression level is not ``none``, the
level is at or above the field's lowest expiring level, and the session holds at least
the field's threshold of (non-retracted) messages. By default ``mes_example`` (the example
dialogue) expires from ``chat_dialogue`` up once the session has 5 messages; ``scenario``
and ``first_mes`` from ``aggressive`` up at 3. The table is policy data: the setting
``card_expiration`` changes it per field.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

LEVELS: tuple[str, ...] = ("none", "chat_only", "chat_dialogue", "aggressive")
"""CardShark's COMPRESSION_LEVEL_HIERARCHY: a higher index is more aggressive."""


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


def level_rank(levels: Sequence[str], level: str) -> int:
    """Position of ``level`` in the hierarchy ``levels`` (0 = none)."""
    return list(levels).index(level)


def level_includes(levels: Sequence[str], current: str, required: str) -> bool:
    """True when ``current`` is at or above ``required`` (compressionLevelIncludes)."""
    return level_rank(levels, current) >= level_rank(levels, required)


def expiry(rule: FieldRule, levels: Sequence[str], level: str,
           message_count: int) -> tuple[bool, str]:
    """Whether ``rule``'s field is expired at ``level`` after ``message_count`` messages,
    with the reason code either way."""
    if rule.permanent:
        return False, "permanent"
    if rule.expires_at_message is None:
        return False, "no_expiry_threshold"
    if level == levels[0]:
        return False, "compression_off"
    if not level_includes(levels, level, rule.min_level):
        return False, "level_below_minimum"
    if message_count < rule.expires_at_message:
        return False, "below_message_threshold"
    return True, "expired_by_level_and_count"
