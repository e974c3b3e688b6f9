"""Profile ``card`` (CardShark): expiring character-card fields plus a chat-history window."""

from assembler.profiles.card.policy import (
    DEFAULT_FIELDS,
    DEFAULT_TEMPLATE,
    LEVELS,
    TEMPLATE_VARIABLES,
    CardPolicy,
    FieldRule,
)
from assembler.profiles.card.profile import CardProfile, render_message
from assembler.profiles.card.report import CardReport, ChatHistoryReport, FieldRow

__all__ = ["DEFAULT_FIELDS", "DEFAULT_TEMPLATE", "LEVELS", "TEMPLATE_VARIABLES", "CardPolicy",
           "CardProfile", "CardReport", "ChatHistoryReport", "FieldRow", "FieldRule",
           "render_message"]
