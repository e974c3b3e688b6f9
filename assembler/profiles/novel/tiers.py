"""Which tier an item is in (SPEC §3 "Profile novel"): hot, warm or cold.

- hot: exemplar, anti_exemplar, scene_plan, emotional_directive, characters in the scene,
  relationship states in the scene (*promoted*);
- warm: summaries inside the window ``current − warm_window <= chapter < current``, other
  relationship states, active foreshadowing, plot, style;
- cold: everything else (world, act_summary, summaries outside the window, inactive
  foreshadowing, characters not in the scene). A summary with no chapter, or with chapter
  >= current, is cold. With several scene plans the latest put is the scene plan; the
  others are cold.

The current chapter is the last ``chapter.moved``, and 1 before any. Over its budget, hot
drops only its emotional directives and promoted relationship states
(``droppable_in_hot``): scene plans, exemplars, anti-exemplars and characters stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.ranking import ranked
from ctxledger.projections.session_view import Item

HOT_KINDS = frozenset({"exemplar", "anti_exemplar", "scene_plan", "emotional_directive"})
WARM_KINDS = frozenset({"plot", "style"})
CHAPTER_KINDS = frozenset({"summary", "relationship_state"})
"""Kinds whose tier, priority or details depend on the current chapter."""


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


def droppable_in_hot(kind: str, placed: Placement) -> bool:
    """Hot may drop it when over its budget: an emotional directive or a promoted
    relationship state. Everything else in hot is never dropped or shortened."""
    return placed.tier == "hot" and (kind == "emotional_directive" or placed.promoted)
