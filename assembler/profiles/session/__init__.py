"""Profile ``session`` (Laminark): the context injected when a session starts."""

from ctxledger.assembler.profiles.session.policy import ObservationGroup, SessionPolicy
from ctxledger.assembler.profiles.session.profile import SessionProfile
from ctxledger.assembler.profiles.session.report import SessionReport, ToolRank

__all__ = ["ObservationGroup", "SessionPolicy", "SessionProfile", "SessionReport", "ToolRank"]
