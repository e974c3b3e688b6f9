"""Profile ``brief`` (Novel Engine): the TurnBrief for one persona agent."""

from ctxledger.assembler.profiles.brief.policy import BriefPolicy
from ctxledger.assembler.profiles.brief.profile import BriefModeError, BriefProfile
from ctxledger.assembler.profiles.brief.report import BriefReport, SnippetRow

__all__ = ["BriefModeError", "BriefPolicy", "BriefProfile", "BriefReport", "SnippetRow"]
