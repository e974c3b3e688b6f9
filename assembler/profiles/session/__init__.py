"""Profile ``session`` (Laminark): the context injected when a session starts."""

from assembler.profiles.session.policy import ObservationGroup, SessionPolicy
from assembler.profiles.session.profile import SessionProfile
from assembler.profiles.session.report import SessionReport, ToolRank

__all__ = ["ObservationGroup", "SessionPolicy", "SessionProfile", "SessionReport", "ToolRank"]
