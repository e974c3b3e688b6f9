"""The ``novel`` profile's report: per-tier figures, the sandwich, the stats line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from ctxledger.assembler.report import ProfileReport

Tier = Literal["hot", "warm", "cold"]
ItemStatus = Literal["included", "dropped"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NovelItemRow(_Frozen):
    """One context item: where it went and why (rank order within its tier)."""

    json_native: ClassVar[bool] = True
    """Its fields are JSON values already (``memo.CanonicalMemo.json_of``)."""

    item_id: str
    kind: str
    tier: Tier
    priority: int
    tokens: int
    status: ItemStatus
    placement: Literal["prefix", "cold", "warm", "suffix"] | None = None
    """Where the item sits in the prompt (None when dropped)."""
    promoted: bool = False
    """A relationship state in the scene, promoted to hot."""


class TierReport(_Frozen):
    """One tier: its budget, what it kept and what it dropped."""

    tier: Tier
    budget: int
    tokens: int
    """The tier's total: its included items plus their framing (the separator before
    each item belongs to that item's tier), so the tiers add up to the assembly's total
    and this equals ``tokens.tiers[tier]`` of the assembly."""
    item_tokens: int
    """Tokens of the included items alone."""
    framing_tokens: int
    """Tokens of the separators that introduce the tier's items."""
    items: int
    dropped: int
    over_budget: bool
    """True only for hot: what may never be dropped is over the budget (overshoot)."""


class NovelReport(ProfileReport):
    """The ``novel`` profile's breakdown."""

    profile: Literal["novel"] = "novel"
    chapter: int
    """The current chapter: the last ``chapter.moved``, or 1 before any."""
    moved: bool
    """Whether any ``chapter.moved`` set the chapter."""
    scene: str | None
    warm_window: int
    window: tuple[int, int]
    """Chapters ``(first, last)`` whose summaries are warm."""
    tiers: list[TierReport]
    """hot, warm, cold."""
    total_tokens: int
    total_budget: int
    prefix: list[str]
    """Item ids of the sandwich's prefix: the scene plan, then the first exemplar."""
    suffix: list[str]
    """Item ids of the suffix: remaining exemplars and anti-exemplars, emotional
    directives, promoted relationship states, then characters."""
    items: list[NovelItemRow]
    stats: str
    """``Hot: X/15000 tokens (N items) | Warm: X/25000 (N items) | Cold: X/40000 (N items) |
    Total: X/80000``."""


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
