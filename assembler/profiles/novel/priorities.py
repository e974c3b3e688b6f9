"""An item's priority (SPEC's table, ``NovelPolicy.priorities``) and its rank in a tier:
priority descending, then put order, then item_id (a total order). Dropping goes from the
end of that order, so equal priorities drop the latest put first."""

from __future__ import annotations

from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.profiles.novel.tiers import current_chapter, summary_is_ahead
from ctxledger.projections.session_view import Item


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
