"""Profile ``novel``: hot/warm/cold tiers with the sandwich layout."""

from ctxledger.assembler.profiles.novel.policy import TIERS, NovelPolicy, NovelPriorities
from ctxledger.assembler.profiles.novel.priorities import priority_of
from ctxledger.assembler.profiles.novel.profile import NovelProfile
from ctxledger.assembler.profiles.novel.report import (
    NovelItemRow,
    NovelReport,
    TierReport,
    stats_line,
)
from ctxledger.assembler.profiles.novel.tiers import (
    Placement,
    assign_tier,
    current_chapter,
    latest_scene_plan,
)

__all__ = ["TIERS", "NovelItemRow", "NovelPolicy", "NovelPriorities", "NovelProfile",
           "NovelReport", "Placement", "TierReport", "assign_tier", "current_chapter",
           "latest_scene_plan", "priority_of", "stats_line"]
