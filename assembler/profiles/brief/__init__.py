"""Profile ``brief`` (Novel Engine): the TurnBrief for one persona agent."""

from assembler.profiles.brief.policy import BriefPolicy
from assembler.profiles.brief.profile import BriefModeError, BriefProfile
from assembler.profiles.brief.report import BriefReport, SnippetRow

__all__ = ["BriefModeError", "BriefPolicy", "BriefProfile", "BriefReport", "SnippetRow"]
