"""The ``novel`` profile's policy (SPEC §3 "Profile novel"): tier budgets, the warm window,
the priority table, and the sandwich's separator, as data with SPEC's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxledger.assembler.policy import Policy

TIERS: tuple[str, ...] = ("hot", "warm", "cold")


class NovelPriorities(BaseModel):
    """The priority table (a higher number is kept first; ties go by put order, then id)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exemplar: int = 10
    scene_plan: int = 10
    anti_exemplar: int = 9
    character_pov: int = 10
    character: int = 9
    emotional_directive_arc: int = 9
    """An emotional directive when a scene plan has an emotional arc (``evolving``)."""
    emotional_directive: int = 6
    relationship_evolving: int = 8
    """A relationship state evolving in the current chapter."""
    relationship_state: int = 5
    summary_base: int = 8
    """A summary's priority is ``summary_base − (current − chapter)``..."""
    summary_min: int = 1
    """... and at least this."""
    foreshadowing_active: int = 7
    foreshadowing: int = 3
    plot: int = 6
    style: int = 5
    world: int = 4
    act_summary: int = 3


class NovelPolicy(Policy):
    """Policy of the ``novel`` profile. Settings (key -> field):

    ``warm_window`` -> warm_window, ``hot_budget`` -> hot_budget, ``warm_budget`` ->
    warm_budget, ``cold_budget`` -> cold_budget, ``token_encoding`` -> token_encoding,
    ``context_role`` -> context_role;
    ``policy.novel`` -> any field (priorities, separator...).
    """

    SETTINGS: ClassVar[Mapping[str, str]] = {
        "warm_window": "warm_window",
        "hot_budget": "hot_budget",
        "warm_budget": "warm_budget",
        "cold_budget": "cold_budget",
        "token_encoding": "token_encoding",
        "model": "model",
        "context_role": "context_role",
    }

    profile: Literal["novel"] = "novel"
    warm_window: int = Field(default=5, ge=0)
    """Summaries of chapters ``current − warm_window <= chapter < current`` are warm."""
    hot_budget: int = Field(default=15000, ge=0)
    warm_budget: int = Field(default=25000, ge=0)
    cold_budget: int = Field(default=40000, ge=0)
    priorities: NovelPriorities = NovelPriorities()
    separator: str = "\n\n"
    """Between two items in the prompt."""
    separators: Literal["tier", "framing"] = "tier"
    """Who pays for the separator before an item: ``tier`` (the default) charges it to
    the item's tier budget, so a tier's budget bounds what the tier really adds to the
    prompt, separators included (a hot budget equal to the exact sum of its items then
    keeps one item fewer); ``framing`` charges it to the context's framing, as the
    original document does: a tier's budget bounds its items' tokens alone, and its
    figures in ``tokens.tiers`` and the report leave the separators out."""

    def budget(self, tier: str) -> int:
        """The token budget of ``tier``."""
        return {"hot": self.hot_budget, "warm": self.warm_budget,
                "cold": self.cold_budget}[tier]

    @property
    def total_budget(self) -> int:
        """The three budgets together (80000 by default)."""
        return self.hot_budget + self.warm_budget + self.cold_budget
