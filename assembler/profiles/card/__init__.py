"""Profile ``card`` (CardShark): expiring character-card fields plus a chat-history window."""

from ctxledger.assembler.profiles.card.expiry import DEFAULT_FIELDS, LEVELS, FieldRule
from ctxledger.assembler.profiles.card.policy import (
           DEFAULT_TEMPLATE,
           TEMPLATE_VARIABLES,
           CardPolicy,
)
from ctxledger.assembler.profiles.card.profile import CardProfile, chat_line
from ctxledger.assembler.profiles.card.report import (
    CardReport,
    ChatHistoryReport,
    FieldRow,
    LoreRow,
)

__all__ = ["DEFAULT_FIELDS", "DEFAULT_TEMPLATE", "LEVELS", "TEMPLATE_VARIABLES", "CardPolicy",
           "CardProfile", "CardReport", "ChatHistoryReport", "FieldRow", "FieldRule",
           "LoreRow", "chat_line"]
