"""Profile ``novel`` (seed 000): hot/warm/cold tiers with the sandwich layout."""

from ctxledger.assembler.profiles.novel.policy import TIERS, NovelPolicy, NovelPriorities
from ctxledger.assembler.profiles.novel.profile import (
    NovelProfile,
    Placement,
    assign_tier,
    current_chapter,
    latest_scene_plan,
    priority_of,
    stats_line,
)
from ctxledger.assembler.profiles.novel.report import NovelItemRow, NovelReport, TierReport

__all__ = ["TIERS", "NovelItemRow", "NovelPolicy", "NovelPriorities", "NovelProfile",
           "NovelReport", "Placement", "TierReport", "assign_tier", "current_chapter",
           "latest_scene_plan", "priority_of", "stats_line"]
