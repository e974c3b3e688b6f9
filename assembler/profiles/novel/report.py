"""The ``novel`` profile's report: per-tier figures, the sandwich, the stats line."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from assembler.report import ProfileReport

Tier = Literal["hot", "warm", "cold"]
ItemStatus = Literal["included", "dropped"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NovelItemRow(_Frozen):
    """One context item: where it went and why (rank order within its tier)."""

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
    """Tokens of the included items (framing between items is not in any tier)."""
    items: int
    dropped: int
    over_budget: bool
    """True only for hot: what may never be dropped is over the budget (overshoot)."""


class NovelReport(ProfileReport):
    """The ``novel`` profile's breakdown."""

    profile: Literal["novel"] = "novel"
    chapter: int | None
    scene: str | None
    warm_window: int
    window: tuple[int, int] | None
    """Chapters ``(first, last)`` whose summaries are warm; None without a chapter."""
    tiers: list[TierReport]
    """hot, warm, cold."""
    total_tokens: int
    total_budget: int
    prefix: list[str]
    """Item ids of the sandwich's prefix: the scene plan(s), then the first exemplar."""
    suffix: list[str]
    """Item ids of the suffix: remaining exemplars and anti-exemplars, emotional
    directives, characters, then promoted relationship states."""
    items: list[NovelItemRow]
    stats: str
    """``Hot: X/15000 tokens (N items) | Warm: X/25000 (N items) | Cold: X/40000 (N items) |
    Total: X/80000``."""
