"""An item prepared under its context: what it contributes before any budget.

Its tier, priority, section and details are a pure function of the item, the policy and
its context (the current chapter, the scene plan, the plan's emotional arc, the first
exemplar), so an item whose context did not change keeps its ``Prepared``, with the
decision, section item and report rows made from it (each with its canonical JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxledger.assembler.candidates import Candidate
from ctxledger.assembler.details import detail_values
from ctxledger.assembler.model import Decision, DetailValue, SectionItem
from ctxledger.assembler.profiles.novel.policy import NovelPolicy
from ctxledger.assembler.profiles.novel.priorities import priority_of, rank_key
from ctxledger.assembler.profiles.novel.report import NovelItemRow
from ctxledger.assembler.profiles.novel.sandwich import SUFFIX_ORDER, section_of
from ctxledger.assembler.profiles.novel.tiers import Placement, assign_tier, droppable_in_hot
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import Item
from ctxledger.store.canonical import canonical_json

Key = tuple[Any, ...]
"""A sort key in a tier (or hot's keep order, or the suffix): ends in the item id."""


def native_json(model: Decision | NovelItemRow | SectionItem) -> str:
    """Canonical JSON of a model whose fields are JSON values already."""
    return canonical_json(model.__dict__)


@dataclass(slots=True, eq=False)
class Prepared:
    """What an item contributes before any budget: a pure function of the item, the
    policy and its context. Its decision, section item and rows are made on first use
    (each with its canonical JSON) and kept with it."""

    item: Item
    tier: str
    reason: str
    promoted: bool
    priority: int
    section: str
    rank: tuple[int, int, str]
    detail: Mapping[str, DetailValue]
    candidate: Candidate
    method: str
    droppable: bool
    """Hot may drop it: an emotional directive or a promoted relationship state."""
    decision: Decision | None = None
    decision_json: str = ""
    section_item: SectionItem | None = None
    section_item_json: str = ""
    row_in: NovelItemRow | None = None
    """The report row when it is kept (laid out in its section), made by ``ready``."""
    row_in_json: str = ""
    row_out: NovelItemRow | None = None
    """The report row when it is dropped."""
    row_out_json: str = ""

    def same_as(self, other: Prepared) -> bool:
        """``other`` (the item under another context) says exactly what this says, so
        nothing that shows either changes."""
        return (self.item is other.item and self.tier == other.tier
                and self.reason == other.reason and self.priority == other.priority
                and self.section == other.section and self.promoted == other.promoted
                and self.detail == other.detail)

    def takes_place_of(self, other: Prepared) -> bool:
        """It ranks exactly where ``other`` (the same item under another context) ranks,
        in warm or cold, so it can be swapped in without moving anything: only what
        its decision says differs (a summary's reason when the chapter moves)."""
        return (self.item is other.item and self.tier == other.tier != "hot"
                and self.rank == other.rank and self.section == other.section
                and self.method == other.method)

    def drop_key(self) -> Key:
        """Keep order among hot's droppables: promoted relationship states, then
        emotional directives, each by rank (so the directives are dropped first)."""
        return (1 if self.item.kind == "emotional_directive" else 0, *self.rank)

    def suffix_key(self) -> Key:
        """Order in the suffix: by the sandwich's kind order, then by rank."""
        return (SUFFIX_ORDER.index(self.item.kind), *self.rank)

    def kept_decision(self) -> Decision:
        """The ``included`` decision of the item (made once, with ``decision_json``)."""
        if self.decision is None:
            made = Decision(item=self.item.item_id, section=self.section, action="included",
                            reason=self.reason, priority=self.priority,
                            detail=dict(self.detail))
            self.decision, self.decision_json = made, native_json(made)
        return self.decision

    def laid_out(self) -> SectionItem:
        """The item as a section lists it (made once, with ``section_item_json``)."""
        if self.section_item is None:
            made = SectionItem(id=self.item.item_id, tokens=self.candidate.tokens,
                               chars=len(self.candidate.text))
            self.section_item, self.section_item_json = made, native_json(made)
        return self.section_item

    def ready(self) -> None:
        """Make both report rows (kept, dropped): a tier's rows are then read out in C
        from where its cut stands, whatever the item's status."""
        if self.row_in is None:
            self.row_in, self.row_in_json = self._row(self.section)
            self.row_out, self.row_out_json = self._row(None)

    def _row(self, placement: str | None) -> tuple[NovelItemRow, str]:
        made = NovelItemRow(
            item_id=self.item.item_id, kind=self.item.kind, tier=self.tier,
            priority=self.priority, tokens=self.candidate.tokens,
            status="included" if placement is not None else "dropped",
            placement=placement, promoted=self.promoted)
        return made, native_json(made)


_PLACEMENTS: dict[Placement, Placement] = {}


def prepare(item: Item, chapter: int, plan: str | None, arc: bool,
            first_exemplar: str | None, policy: NovelPolicy,
            counter: TokenCounter) -> Prepared:
    """An item's tier, priority, section and details under its context."""
    # A few distinct placements for thousands of items: one object each.
    placed = assign_tier(item, chapter, policy, scene_plan=plan)
    placed = _PLACEMENTS.setdefault(placed, placed)
    priority = priority_of(item, chapter, policy, emotional_arc=arc)
    section = section_of(placed.tier, item, first_exemplar)
    measured = counter.measure(item.content)
    detail: dict[str, int | str | bool | None] = {
        "kind": item.kind, "tier": placed.tier, "tokens": measured.tokens,
        "tier_budget": policy.budget(placed.tier), "put_position": item.position}
    # Only the item's own values: the current chapter and the window are on the report
    # once, so a chapter move changes only the records whose tier or priority it changes.
    if item.kind == "summary":
        detail["chapter"] = item.chapter
    elif item.kind == "relationship_state":
        detail.update({"chapter": item.chapter, "evolving": item.evolving,
                       "promoted": placed.promoted})
    elif item.kind == "emotional_directive":
        detail["emotional_arc"] = arc
    elif item.kind == "scene_plan":
        detail["scene_plan"] = plan
    return Prepared(item, placed.tier, placed.reason, placed.promoted, priority, section,
                    rank_key(priority, item), detail_values(detail),
                    Candidate(item.item_id, section, item.content, measured.tokens,
                              placed.tier, priority), measured.method,
                    droppable=droppable_in_hot(item.kind, placed))
