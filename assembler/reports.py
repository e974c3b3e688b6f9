"""Profile-specific figures carried in ``Assembly.report``, discriminated by ``profile``.

A new profile adds its report class here and to ``ProfileReport``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- card ----------------------------------------------------------------------------------

FieldStatus = Literal["permanent", "active", "expired"]


class FieldRow(_Frozen):
    """One row of the card breakdown (CardShark's ``FieldTokenInfo``)."""

    field_key: str
    label: str
    tokens: int
    status: FieldStatus
    expired_at_message: int | None = None
    """The threshold it expired at, only when ``status`` is ``expired``."""


class HistoryMemo(_Frozen):
    """What the facade stores in ``history_token_memo`` after this assembly.

    ``tokens`` is the total of every non-retracted message with ``seq <= through_seq``,
    counted as the card profile renders them, so the next assembly only counts messages
    summarized since.
    """

    encoding: str
    through_seq: int
    retracted_count: int
    tokens: int


class ChatHistoryReport(_Frozen):
    """Chat history figures: "chat history X tokens (summarized from Y)"."""

    tokens: int
    """X: tokens of the history as sent (summary plus tail, or every message)."""
    summarized_from: int | None = None
    """Y: tokens of everything the summary replaced plus the tail; None without a summary."""
    messages: int
    """Messages sent verbatim."""
    summarized_messages: int = 0
    """Messages the summary stands for."""
    summary_through_seq: int | None = None
    memo: HistoryMemo | None = None

    def describe(self) -> str:
        """``chat history X tokens (summarized from Y)`` (the part in brackets only with
        a summary)."""
        text = f"chat history {self.tokens} tokens"
        if self.summarized_from is not None:
            text += f" (summarized from {self.summarized_from})"
        return text


class CardReport(_Frozen):
    """The ``card`` profile's breakdown (CardShark's ``MemoryContextResult``)."""

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
    used_tokens: int
    """Everything sent: the memory text and the chat history."""
    context_limit: int | None = None
    pressure_threshold: float
    pressure: bool
    """True when ``used_tokens`` is above ``pressure_threshold`` of ``context_limit``."""


# -- session -------------------------------------------------------------------------------


class ToolRank(_Frozen):
    """One entry of the ranked tool list (shown or not)."""

    entry: str
    """The item id of the entry, e.g. ``tool:/deploy`` or ``mcp_server:github``."""
    name: str
    tool_type: str
    rank: int
    score: float
    window_count: int
    window_last_used: datetime | None = None
    age_days: float | None = None
    lifetime_count: int
    shown: bool


class SessionReport(_Frozen):
    """The ``session`` profile's figures (Laminark's session-start injection)."""

    profile: Literal["session"] = "session"
    chars: int
    max_chars: int
    welcome: bool
    previous_session: str | None = None
    """The stream id of the previous session whose summary was considered."""
    observations: dict[str, int]
    """Observation lines shown per kind, in section order."""
    tool_section_chars: int
    tool_section_budget: int
    more_available: int
    """N in ``(N more available)`` (0 when the line is absent)."""
    usage_window_start: datetime
    usage_window_end: datetime
    max_usage: int
    tools: list[ToolRank]


ProfileReport = Annotated[CardReport | SessionReport, Field(discriminator="profile")]
"""The report of any profile."""
