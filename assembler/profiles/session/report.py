"""The ``session`` profile's report: sizes, the usage window, and the ranked tools."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ctxledger.assembler.model import UtcTime
from ctxledger.assembler.report import ProfileReport


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolRank(_Frozen):
    """One entry of the ranked tool list (shown or not)."""

    entry: str
    """The item id of the entry, e.g. ``tool:/deploy`` or ``mcp_server:github``."""
    name: str
    tool_type: str
    rank: int
    score: float
    window_count: int
    window_last_used: UtcTime | None = None
    age_days: float | None = None
    lifetime_count: int
    shown: bool


class SessionReport(ProfileReport):
    """The ``session`` profile's figures (Laminark's session-start injection)."""

    profile: Literal["session"] = "session"
    chars: int
    """The context's length, in the policy's ``length_unit`` (as every figure here)."""
    max_chars: int
    welcome: bool
    previous_session: str | None = None
    """The stream id of the previous session whose summary was considered."""
    observations: dict[str, int]
    """Observation lines shown per kind, in section order."""
    tool_section_chars: int
    """The tool section's length, heading and line breaks included."""
    tool_section_budget: int
    more_available: int
    """N in ``(N more available)`` (0 when the line is absent)."""
    usage_window_start: UtcTime
    usage_window_end: UtcTime
    max_usage: int
    tools: list[ToolRank]
