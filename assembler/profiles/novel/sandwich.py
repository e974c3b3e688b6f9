"""The sandwich layout (SPEC §3 "Profile novel"): where each kept item stands in the prompt.

Prompt order: prefix, cold, warm, suffix. The prefix is hot's scene plan, then the first
exemplar; the suffix holds the rest of hot: the remaining exemplars, then anti-exemplars,
then emotional directives, then promoted relationship states, then characters (the
relationship states before the characters). With two or more exemplars one is in the
prefix and the others in the suffix. Warm and cold items stand in their tier's section.
"""

from __future__ import annotations

from ctxledger.projections.session_view import Item

SECTION_PREFIX = "prefix"
SECTION_SUFFIX = "suffix"
SECTION_TIERS: tuple[tuple[str, str], ...] = (
    (SECTION_PREFIX, "hot"), ("cold", "cold"), ("warm", "warm"), (SECTION_SUFFIX, "hot"))
"""Prompt order: prefix, cold, warm, suffix (with each section's tier)."""
SUFFIX_ORDER = ("exemplar", "anti_exemplar", "emotional_directive", "relationship_state",
                "character")
"""The suffix's order by kind (within a kind, by rank)."""


def section_of(tier: str, item: Item, first_exemplar: str | None) -> str:
    """The section ``item`` (in ``tier``) is laid out in; ``first_exemplar`` is the id of
    the exemplar put first."""
    if tier != "hot":
        return tier
    if item.kind == "scene_plan" or item.item_id == first_exemplar:
        return SECTION_PREFIX
    return SECTION_SUFFIX
