"""The ``card`` profile's report: the field breakdown (CardShark's ``MemoryContextResult``)
and the chat history figures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxledger.assembler.report import ProfileReport

FieldStatus = Literal["permanent", "active", "expired", "dropped", "in_history"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FieldRow(_Frozen):
    """One row of the card breakdown (CardShark's ``FieldTokenInfo``)."""

    field_key: str
    label: str
    tokens: int
    status: FieldStatus
    """``dropped``: active by the expiration table, left out to fit the budget;
    ``in_history``: the greeting, sent as the history's first message instead."""
    expired_at_message: int | None = None
    """The threshold it expired at, only when ``status`` is ``expired``."""


LoreStatus = Literal["activated", "not_matched", "over_budget", "disabled", "empty",
                     "not_in_template"]


class LoreRow(_Frozen):
    """One lorebook entry in the breakdown."""

    entry_id: str
    """The entry's item id (``lore:<book>:<entry>``), for ``why``."""
    book: str
    """``card`` (the card's ``character_book``) or ``world:<book_id>`` (a scope's)."""
    label: str
    tokens: int
    status: LoreStatus
    """``over_budget``: activated, left out by the book's token budget or the context's;
    ``empty``: activated with no text; ``not_in_template``: activated, but the template
    has no ``{{lore_before}}``/``{{lore_after}}`` for it."""
    by: Literal["key", "constant", "recursion"] | None = None
    """What activated it (only when ``status`` is ``activated``)."""
    key: str | None = None
    """The key that matched, as written."""
    message_id: str | None = None
    """The newest scanned message holding the key."""
    placement: str
    """``before_char``, ``after_char`` or ``depth N``."""


class ChatHistoryReport(_Frozen):
    """Chat history figures: "chat history X tokens (summarized from Y)"."""

    tokens: int
    """X: tokens of the history as sent (summary, messages and the line breaks between)."""
    summarized_from: int | None = None
    """Y: tokens of everything the summary replaced plus the messages sent verbatim; None
    without a summary in the context."""
    messages: int
    """Messages sent verbatim (kept)."""
    summarized_messages: int = 0
    """Messages the summary stands for."""
    dropped_messages: int = 0
    """Messages neither sent nor summarized: left out to fit the budget."""
    summary_through_seq: int | None = None
    gap: tuple[int, int] | None = None
    """``(first_seq, last_seq)`` of messages dropped between the summary and the kept
    tail (a summary through ``last_seq`` would close it)."""

    def describe(self) -> str:
        """``chat history X tokens (summarized from Y)`` (the part in brackets only with
        a summary)."""
        text = f"chat history {self.tokens} tokens"
        if self.summarized_from is not None:
            text += f" (summarized from {self.summarized_from})"
        return text


class CardReport(ProfileReport):
    """The ``card`` profile's breakdown."""

    profile: Literal["card"] = "card"
    compression_level: str
    message_count: int
    memory: str
    """The memory text alone (the rendered template), for apps that send it separately."""
    breakdown: list[FieldRow]
    total_tokens: int
    """Tokens of the included card fields."""
    saved_tokens: int
    """Tokens of the expired card fields."""
    chat_history: ChatHistoryReport
    lorebook: list[LoreRow] = Field(default_factory=list)
    """Every entry of the card's book and the scope's books, book by book."""
    lorebook_tokens: int = 0
    """Tokens of the entries sent."""
    greeting: int = 0
    """The greeting chosen (0 ``first_mes``, n the n-th alternate greeting)."""
    used_tokens: int
    """Everything sent: the memory text and the chat history."""
    context_limit: int | None = None
    response_reserve: int = 0
    budget: int | None = None
    """``context_limit − response_reserve``: what the context may use."""
    over_budget: bool = False
    """True when what must be kept (permanent fields, the newest message) alone is over
    the budget, so the context overshoots (with a warning)."""
    pressure_threshold: float
    pressure: bool
    """True when ``used_tokens`` is above ``pressure_threshold`` of ``context_limit``."""

    @property
    def overhead_tokens(self) -> int:
        """What no other row shows: the template's labels and separators, the per-message
        overhead and the reply priming, so that Active + Lorebook + Chat history + this
        = ``used_tokens``. Derived from the hashed figures, so not stored or hashed."""
        return (self.used_tokens - self.total_tokens - self.lorebook_tokens
                - self.chat_history.tokens)
