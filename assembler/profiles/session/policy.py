"""The ``session`` profile's policy (SPEC §3 "Profile session"): budgets, the ranking
formula's numbers, headings and the trim order, as data with SPEC's defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.session.tool_ranking import RankingWeights
from ctxledger.assembler.text import LengthUnit
from ctxledger.projections.tool_window import TOOL_WINDOW_DAYS
from ctxledger.store.tool_names import MCP_SERVER_PATTERN

SECTION_PREVIOUS = "previous_session"
SECTION_TOOLS = "tools"
SECTION_WELCOME = "welcome"
DROP_TOOLS = "tools"
"""The name of the tool section in ``trim_order``."""
SHORTEN_PREVIOUS = "previous_session"
"""The name of the "shorten the previous summary" step in ``trim_order``."""


class ObservationGroup(BaseModel):
    """How one observation kind is shown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    section: str
    heading: str


DEFAULT_GROUPS: tuple[ObservationGroup, ...] = (
    ObservationGroup(kind="change", section="changes", heading="## Recent Changes"),
    ObservationGroup(kind="decision", section="decisions", heading="## Active Decisions"),
    ObservationGroup(kind="finding", section="findings", heading="## Recent Findings"),
    ObservationGroup(kind="reference", section="references", heading="## Reference Docs"),
)


class SessionPolicy(Policy):
    """Policy of the ``session`` profile. Settings (key -> field):

    ``session_max_chars`` -> max_chars, ``tool_section_budget`` -> tool_section_budget,
    ``usage_window_days`` -> usage_window_days, ``observation_limit`` ->
    observation_limit, ``observation_max_chars`` -> observation_max_chars,
    ``welcome_message`` -> welcome_message, ``token_encoding`` -> token_encoding,
    ``context_role`` -> context_role, ``length_unit`` -> length_unit;
    ``policy.session`` -> any field (weights, decay, headings, trim order...).
    """

    # 2: a tool use that names its server through ``server_name`` counts toward that
    # server (the name pattern only when it names none). 3: lengths in ``length_unit``,
    # UTF-16 units by default as the app (JavaScript) counts them.
    REVISION: ClassVar[int] = 3
    SETTINGS: ClassVar[Mapping[str, str]] = {
        "session_max_chars": "max_chars",
        "tool_section_budget": "tool_section_budget",
        "usage_window_days": "usage_window_days",
        "observation_limit": "observation_limit",
        "observation_max_chars": "observation_max_chars",
        "welcome_message": "welcome_message",
        "token_encoding": "token_encoding",
        "model": "model",
        "context_role": "context_role",
        "length_unit": "length_unit",
    }

    profile: Literal["session"] = "session"
    length_unit: LengthUnit = "utf16"
    """The unit of ``max_chars``, ``tool_section_budget`` and ``observation_max_chars``:
    ``utf16`` (JavaScript's ``String.length``, the app's) or ``codepoints``."""
    max_chars: int = Field(default=6000, gt=0)
    tool_section_budget: int = Field(default=500, gt=0)
    usage_window_days: int = Field(default=TOOL_WINDOW_DAYS, ge=1)
    frequency_weight: float = Field(default=0.7, ge=0.0)
    recency_weight: float = Field(default=0.3, ge=0.0)
    recency_decay: float = Field(default=0.693, ge=0.0)
    recency_half_life_days: float = Field(default=7.0, gt=0.0)
    mcp_server_pattern: str = MCP_SERVER_PATTERN
    excluded_tool_types: tuple[str, ...] = ("builtin",)
    observation_limit: int = Field(default=20, ge=0)
    """How many of the scope's most recent observations are candidates."""
    observation_max_chars: int = Field(default=120, ge=1)
    groups: tuple[ObservationGroup, ...] = DEFAULT_GROUPS
    trim_order: tuple[str, ...] = (DROP_TOOLS, "reference", "finding", "change", "decision",
                                   SHORTEN_PREVIOUS)
    """What goes, in order, when the text is over ``max_chars``: the tool section, an
    observation kind (oldest first), or shortening the previous summary."""
    header: str = "[ctxledger - Session Context]"
    previous_heading: str = "## Previous Session"
    tools_heading: str = "## Available Tools"
    welcome_message: str = (
        "[ctxledger] First session detected. Memory system is active and capturing "
        "observations.\nObservations and tool usage recorded in this scope will appear "
        "here next time.")

    @model_validator(mode="after")
    def _consistent(self) -> SessionPolicy:
        try:
            re.compile(self.mcp_server_pattern)
        except re.error as exc:
            raise ValueError(f"mcp_server_pattern is not a regular expression: {exc}") from None
        kinds = [group.kind for group in self.groups]
        sections = [group.section for group in self.groups]
        if len(set(kinds)) != len(kinds) or len(set(sections)) != len(sections):
            raise ValueError("observation groups need distinct kinds and sections")
        if {SECTION_PREVIOUS, SECTION_TOOLS, SECTION_WELCOME} & set(sections):
            raise ValueError("observation group sections clash with built-in sections")
        for step in self.trim_order:
            if step not in (DROP_TOOLS, SHORTEN_PREVIOUS, *kinds):
                raise ValueError(f"trim_order step {step!r} is not 'tools', "
                                 "'previous_session' or an observation kind")
        return self

    @property
    def text_unit(self) -> LengthUnit:
        """``length_unit``: the unit every character budget of the profile counts in."""
        return self.length_unit

    @property
    def usage_window(self) -> timedelta:
        """The tool-usage window."""
        return timedelta(days=self.usage_window_days)

    @property
    def weights(self) -> RankingWeights:
        """The score formula's numbers."""
        return RankingWeights(self.frequency_weight, self.recency_weight, self.recency_decay,
                              self.recency_half_life_days)
