"""Profile ``novel`` (seed 000): tiered hot/warm/cold context with the sandwich layout.

Rules (SPEC §3 "Profile novel"):

- Items are the session's ``item.put`` items; the current chapter is the last
  ``chapter.moved``, and 1 before any (issue #9).
- Tiers: hot = exemplar, anti_exemplar, scene_plan, emotional_directive, characters in the
  scene, relationship states in the scene (*promoted*); warm = summaries inside the window
  ``current − warm_window <= chapter < current``, other relationship states, active
  foreshadowing, plot, style; cold = everything else (world, act_summary, summaries
  outside the window, inactive foreshadowing, characters not in the scene). A summary
  with no chapter, or with chapter >= current, is cold with priority 1. With several
  scene plans the latest put is the scene plan; the others are cold.
- Priorities come from the policy's table; within a tier items rank by priority
  descending, then put order, then item_id (a total order). Dropping goes from the end
  of that order, so equal priorities drop the latest put first and what stays is the
  longest prefix that fits (an item is never skipped to keep a later one).
- Budgets per tier (15000/25000/40000 tokens). Hot over budget: emotional directives go
  first (lowest priority first), then promoted relationship states; scene plans,
  exemplars, anti-exemplars and characters are never dropped: if still over, everything
  stays, the tier overshoots and the assembly warns. Anti-exemplars are never dropped
  in hot either. Warm and cold over budget: the lowest priority goes first. Nothing is
  ever shortened, characters least of all.
- Sandwich: prefix = the scene plan, then the first exemplar; suffix = the remaining
  exemplars, then anti-exemplars, then emotional directives, then promoted relationship
  states, then characters (issue #9: in the suffix, before the characters). Prompt
  order: prefix, cold, warm, suffix. With two or more exemplars one is in the prefix and
  the others in the suffix.
- Framing: the separator before an item belongs to that item's section (so to its
  tier); tier totals include it, tier budgets are checked with it, and the stats line
  adds up to the assembly's total.
- The stats line: ``Hot: X/15000 tokens (N items) | Warm: X/25000 (N items) | Cold:
  X/40000 (N items) | Total: X/80000``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from ctxledger.assembler.engine import (
    Engine,
    SectionLayout,
    ranked,
)
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.profiles.novel.report import NovelReport, TierReport
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.view import Item, SessionView, ViewRequest

if TYPE_CHECKING:
    from rich.console import RenderableType

SECTION_PREFIX = "prefix"
SECTION_COLD = "cold"
SECTION_WARM = "warm"
SECTION_SUFFIX = "suffix"
SECTIONS: tuple[SectionLayout, ...] = (
    SectionLayout(SECTION_PREFIX, "hot"), SectionLayout(SECTION_COLD, "cold"),
    SectionLayout(SECTION_WARM, "warm"), SectionLayout(SECTION_SUFFIX, "hot"))
"""Prompt order: prefix, cold, warm, suffix."""

HOT_KINDS = frozenset({"exemplar", "anti_exemplar", "scene_plan", "emotional_directive"})
NEVER_DROPPED = frozenset({"scene_plan", "exemplar", "anti_exemplar", "character"})
WARM_KINDS = frozenset({"plot", "style"})
SUFFIX_ORDER = ("exemplar", "anti_exemplar", "emotional_directive", "relationship_state",
                "character")
"""The suffix: remaining exemplars, anti-exemplars, emotional directives, promoted
relationship states (before the characters, issue #9), characters."""


@dataclass(frozen=True, slots=True)
class Placement:
    """An item's tier, why, and whether it was promoted to hot."""

    tier: str
    reason: str
    promoted: bool = False


FIRST_CHAPTER = 1
"""The current chapter before any ``chapter.moved``."""


def current_chapter(chapter: int | None) -> int:
    """The current chapter: the last ``chapter.moved``, or 1 before any."""
    return FIRST_CHAPTER if chapter is None else chapter


def summary_window(chapter: int | None, policy: NovelPolicy) -> tuple[int, int]:
    """Chapters ``(first, last)`` whose summaries are warm."""
    current = current_chapter(chapter)
    return current - policy.warm_window, current - 1


def summary_is_ahead(item: Item, chapter: int | None) -> bool:
    """A summary with no chapter, or with chapter >= current: cold with priority 1."""
    return item.chapter is None or item.chapter >= current_chapter(chapter)


def latest_scene_plan(items: Sequence[Item]) -> str | None:
    """The item_id of the scene plan: the latest put (ties by item_id)."""
    plans = [item for item in items if item.kind == "scene_plan"]
    if not plans:
        return None
    return ranked(plans, key=lambda i: (-i.position, i.item_id))[0].item_id


def assign_tier(item: Item, chapter: int | None, policy: NovelPolicy, *,
                scene_plan: str | None = None) -> Placement:
    """The tier of ``item`` when the current chapter is ``chapter`` (None: 1).

    ``scene_plan`` is the id of the session's scene plan (``latest_scene_plan``); any
    other scene plan is cold. None treats a scene plan as the scene plan.
    """
    kind = item.kind
    if kind == "scene_plan" and scene_plan is not None and item.item_id != scene_plan:
        return Placement("cold", "scene_plan_superseded")
    if kind in HOT_KINDS:
        return Placement("hot", "hot_kind")
    if kind == "character":
        return (Placement("hot", "character_in_scene") if item.in_scene
                else Placement("cold", "character_not_in_scene"))
    if kind == "relationship_state":
        return (Placement("hot", "relationship_in_scene_promoted", promoted=True)
                if item.in_scene else Placement("warm", "relationship_state"))
    if kind == "summary":
        window = summary_window(chapter, policy)
        if item.chapter is None:
            return Placement("cold", "summary_without_chapter")
        if summary_is_ahead(item, chapter):
            return Placement("cold", "summary_not_before_current")
        if window[0] <= item.chapter <= window[1]:
            return Placement("warm", "summary_in_window")
        return Placement("cold", "summary_outside_window")
    if kind == "foreshadowing":
        return (Placement("warm", "foreshadowing_active") if item.active
                else Placement("cold", "foreshadowing_inactive"))
    if kind in WARM_KINDS:
        return Placement("warm", "warm_kind")
    return Placement("cold", "cold_kind")


def priority_of(item: Item, chapter: int | None, policy: NovelPolicy, *,
                emotional_arc: bool) -> int:
    """The priority of ``item`` (SPEC's table; ``emotional_arc``: the scene plan evolves).

    ``chapter`` None is chapter 1 (before any ``chapter.moved``).
    """
    table = policy.priorities
    kind = item.kind
    chapter = current_chapter(chapter)
    if kind == "character":
        return table.character_pov if item.pov else table.character
    if kind == "emotional_directive":
        return table.emotional_directive_arc if emotional_arc else table.emotional_directive
    if kind == "relationship_state":
        evolving_now = bool(item.evolving) and (item.chapter is None or item.chapter == chapter)
        return table.relationship_evolving if evolving_now else table.relationship_state
    if kind == "summary":
        if item.chapter is None or summary_is_ahead(item, chapter):
            return table.summary_min
        return max(table.summary_min, table.summary_base - (chapter - item.chapter))
    if kind == "foreshadowing":
        return table.foreshadowing_active if item.active else table.foreshadowing
    value: int = getattr(table, kind)
    return value


def rank_key(priority: int, item: Item) -> tuple[int, int, str]:
    """Priority descending, then put order, then item_id."""
    return (-priority, item.position, item.item_id)


def stats_line(tiers: Sequence[TierReport], total_budget: int) -> str:
    """``Hot: X/15000 tokens (N items) | Warm: X/25000 (N items) | Cold: X/40000 (N items)
    | Total: X/80000``."""
    by_tier = {tier.tier: tier for tier in tiers}
    hot, warm, cold = by_tier["hot"], by_tier["warm"], by_tier["cold"]
    total = hot.tokens + warm.tokens + cold.tokens
    return (f"Hot: {hot.tokens}/{hot.budget} tokens ({hot.items} items) | "
            f"Warm: {warm.tokens}/{warm.budget} ({warm.items} items) | "
            f"Cold: {cold.tokens}/{cold.budget} ({cold.items} items) | "
            f"Total: {total}/{total_budget}")


def dropped_item(tier: str) -> str:
    """The item id of the decision covering ``tier``'s dropped items: ``<tier>:dropped``
    (like the history window's ``history:dropped``)."""
    return f"{tier}:dropped"


CHAPTER_KINDS = frozenset({"summary", "relationship_state"})
"""Kinds whose tier, priority or details depend on the current chapter."""


class NovelProfile(Profile):
    """The ``novel`` profile."""

    name: ClassVar[str] = "novel"
    policy_type: ClassVar[type[Policy]] = NovelPolicy
    report_type: ClassVar[type[ProfileReport]] = NovelReport
    inputs: ClassVar[Inputs] = Inputs(session=frozenset({
        "item.put", "item.removed", "chapter.moved"}))

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """The session's context items (the chapter is always in the view)."""
        assert isinstance(policy, NovelPolicy)
        return ViewRequest(now=now, items=True)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Tier, rank and fit the items, then lay them out as a sandwich: the session's
        kept ``BookState`` brought up to the view by what changed (a new one, built from
        every item, without a memo or under another policy)."""
        from ctxledger.assembler.profiles.novel.incremental import assemble_book

        assert isinstance(policy, NovelPolicy)
        return assemble_book(engine, view, now, policy)

    def render(self, assembly: Assembly) -> RenderableType:
        """Items by tier (rank order) with priority, tokens and placement; the stats line."""
        from ctxledger.assembler.profiles.novel.view import novel_table

        return novel_table(report_of(assembly, NovelReport))

    def summary_line(self, assembly: Assembly) -> str:
        """The stats line and the digest."""
        report = report_of(assembly, NovelReport)
        return f"novel: {report.stats}, digest {assembly.digest[:16]}"
