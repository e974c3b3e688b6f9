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

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, ClassVar, cast

from ctxledger.assembler.engine import (
    Additive,
    Candidate,
    Engine,
    EngineError,
    Frame,
    Piece,
    SectionLayout,
    ShedStep,
    detail_values,
    ranked,
)
from ctxledger.assembler.model import Assembly, DetailValue
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles.base import Profile, report_of
from ctxledger.assembler.profiles.novel.policy import TIERS, NovelPolicy
from ctxledger.assembler.profiles.novel.report import NovelItemRow, NovelReport, TierReport
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.view import Item, SessionView, ViewRequest
from ctxledger.store.canonical import canonical_json

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


def framed_total(separator_tokens: int, *, leads: bool) -> Additive:
    """A tier's size: its items plus one separator before each, except the item that
    opens the prompt (when the tier ``leads``)."""
    return Additive("tokens", per_item=separator_tokens,
                    first_free=separator_tokens if leads else 0)


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


_PLACEMENTS: dict[Placement, Placement] = {}


@dataclass(frozen=True, slots=True)
class Prepared:
    """What an item contributes before any budget: a pure function of the item, the
    policy and its memo key's context (see ``NovelProfile.assemble``)."""

    item: Item
    placement: Placement
    priority: int
    section: str
    rank: tuple[int, int, str]
    detail: Mapping[str, DetailValue]
    candidate: Candidate
    rows: dict[str | None, NovelItemRow] = field(default_factory=dict, compare=False)
    """The item's report row by where it is laid out (None: dropped), made on first use:
    a row is a function of the item, this and that place."""


def _prepare(item: Item, chapter: int, plan: str | None,
             arc: bool, first_exemplar: str | None, policy: NovelPolicy,
             counter: TokenCounter) -> Prepared:
    # A few distinct placements for thousands of items: one object each (the memo holds
    # every item's, and fewer live objects make each garbage collection cheaper).
    placed = assign_tier(item, chapter, policy, scene_plan=plan)
    placed = _PLACEMENTS.setdefault(placed, placed)
    priority = priority_of(item, chapter, policy, emotional_arc=arc)
    section = (placed.tier if placed.tier != "hot"
               else SECTION_PREFIX if item.kind == "scene_plan"
               or item.item_id == first_exemplar else SECTION_SUFFIX)
    detail: dict[str, int | str | bool | None] = {
        "kind": item.kind, "tier": placed.tier, "tokens": counter.count(item.content),
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
    return Prepared(item, placed, priority, section, rank_key(priority, item),
                    detail_values(detail),
                    Candidate(item.item_id, section, item.content, counter.count(item.content),
                              placed.tier, priority))


def ranked_exactly(keyed: list[tuple[tuple[int, int, str], Candidate]]) -> list[Candidate]:
    """``ranked`` for keys without floats (nothing to round): sorted by key, a tie on
    the whole key an error."""
    keyed.sort(key=itemgetter(0))
    for (first, _), (second, _) in itertools.pairwise(keyed):
        if first == second:
            raise EngineError(f"ranking key {first!r} is not unique: add a tie-breaker")
    return [candidate for _, candidate in keyed]


def _row(prepared: Prepared, candidate: Candidate, kind: str,
         placement: str | None) -> NovelItemRow:
    # Kept with the memoized item: an unchanged row is the same object as last time,
    # whose canonical JSON the digest already has.
    row = prepared.rows.get(placement)
    if row is None:
        placed = prepared.placement
        row = prepared.rows[placement] = NovelItemRow(
            item_id=candidate.id, kind=kind, tier=placed.tier, priority=prepared.priority,
            tokens=candidate.tokens, status="included" if placement is not None else "dropped",
            placement=placement, promoted=placed.promoted)
    return row


class NovelProfile(Profile):
    """The ``novel`` profile."""

    name: ClassVar[str] = "novel"
    policy_type: ClassVar[type[Policy]] = NovelPolicy
    report_type: ClassVar[type[ProfileReport]] = NovelReport

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        """The session's context items (the chapter is always in the view)."""
        assert isinstance(policy, NovelPolicy)
        return ViewRequest(now=now, items=True)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        """Tier, rank and fit the items, then lay them out as a sandwich."""
        assert isinstance(policy, NovelPolicy)
        memo = engine.memo_for(view.stream_id)
        chapter = current_chapter(view.chapter)
        window = summary_window(chapter, policy)
        items = {item.item_id: item for item in view.items}
        plan = latest_scene_plan(view.items)
        arc = plan is not None and bool(items[plan].evolving)
        engine.counter.prefetch([policy.separator, *(item.content for item in view.items)])
        separator_tokens = engine.counter.count(policy.separator)

        placements: dict[str, Placement] = {}
        prepared_of: dict[str, Prepared] = {}
        first_exemplar = next((item.item_id for item in ranked(
            (i for i in view.items if i.kind == "exemplar"),
            key=lambda i: (i.position, i.item_id))), None)
        by_tier: dict[str, list[tuple[tuple[int, int, str], Candidate]]] = {
            tier: [] for tier in TIERS}
        policy_key = canonical_json(policy.model_dump(mode="json"))
        for item in view.items:
            kind = item.kind
            # Everything an item's tier, priority, section and details depend on besides
            # the item and the policy: its key in the memo.
            context = (chapter if kind in CHAPTER_KINDS else plan if kind == "scene_plan"
                       else arc if kind == "emotional_directive"
                       else item.item_id == first_exemplar if kind == "exemplar" else None)
            # By the item's identity: the read view hands the same Item objects on while
            # they are unchanged (``ItemSet``), and comparing by identity skips hashing
            # and comparing every field. The entry holds its item, so no other object
            # can have that id meanwhile; another (equal) object is merely a miss.
            key = ("novel_item", policy_key, id(item), context)
            prepared = cast("Prepared | None", memo.lookup(key))
            if prepared is None or prepared.item is not item:
                prepared = _prepare(item, chapter, plan, arc, first_exemplar, policy,
                                    engine.counter)
                memo.remember(key, prepared)
            prepared_of[item.item_id] = prepared
            placed = placements[item.item_id] = prepared.placement
            candidate = engine.adopt(prepared.candidate, placed.reason, prepared.detail)
            by_tier[placed.tier].append((prepared.rank, candidate))

        ordered = {tier: ranked_exactly(by_tier[tier]) for tier in TIERS}
        # The prefix (scene plan, first exemplar) is never dropped, so whether it opens
        # the prompt is known before any budget is checked.
        hot_leads = any(c.section == SECTION_PREFIX for c in ordered["hot"])
        warnings: list[str] = []
        kept: dict[str, list[Candidate]] = {}
        reports: dict[str, TierReport] = {}
        # Prompt order is prefix, cold, warm, suffix: the tier that opens the prompt has
        # no separator before its first item, so cold and warm are fitted before hot.
        for tier in ("cold", "warm", "hot"):
            leads = (hot_leads if tier == "hot" and hot_leads
                     else not hot_leads and not any(kept.get(t) for t in ("cold", "warm")))
            measure = framed_total(separator_tokens, leads=leads)
            # Generators: only the steps that are taken are made (a step per dropped item).
            lowest_first = ordered[tier][::-1]
            steps: Iterable[ShedStep]
            if tier == "hot":
                steps = itertools.chain(
                    (ShedStep((c,)) for c in lowest_first
                     if items[c.id].kind == "emotional_directive"),
                    (ShedStep((c,)) for c in lowest_first if placements[c.id].promoted))
            else:
                steps = (ShedStep((c,)) for c in lowest_first)
            # The tier's dropped tail is one decision (``<tier>:dropped``): one new item
            # moves the cut by an item or so, and no other record changes with it.
            shed = engine.shed_until_fits(ordered[tier], steps, limit=policy.budget(tier),
                                          unit="tokens", measure=measure,
                                          reason=f"{tier}_over_budget",
                                          collapse=dropped_item(tier), tier=tier)
            kept[tier] = shed.kept
            if not shed.fits:
                warnings.append(
                    f"hot tier is {shed.size} tokens, over its budget of "
                    f"{policy.budget(tier)}: scene plans, exemplars, anti-exemplars and "
                    "characters are never dropped or shortened, so it overshoots")
            item_tokens = sum(c.tokens for c in shed.kept)
            reports[tier] = TierReport(
                tier=tier, budget=policy.budget(tier), tokens=shed.size,
                item_tokens=item_tokens, framing_tokens=shed.size - item_tokens,
                items=len(shed.kept), dropped=len(ordered[tier]) - len(shed.kept),
                over_budget=not shed.fits)
        tier_reports = [reports[tier] for tier in TIERS]

        hot = kept["hot"]
        prefix = [c for c in hot if c.section == SECTION_PREFIX]
        # Layout order: by the sandwich's kind order, then by rank within a kind.
        rank = {c.id: index for index, c in enumerate(hot)}
        prefix = ranked(prefix, key=lambda c: (items[c.id].kind != "scene_plan", rank[c.id]))
        suffix = ranked((c for c in hot if c.section == SECTION_SUFFIX),
                        key=lambda c: (SUFFIX_ORDER.index(items[c.id].kind), rank[c.id]))
        order = [*prefix, *kept["cold"], *kept["warm"], *suffix]
        pieces: list[Piece] = []
        for candidate in order:
            if pieces:
                # The separator belongs to the section of the item it introduces.
                pieces.append(Frame(policy.separator, candidate.section))
            pieces.append(candidate)
        where = {c.id: c.section for c in order}

        rows = [_row(prepared_of[c.id], c, items[c.id].kind, where.get(c.id))
                for tier in TIERS for c in ordered[tier]]
        report = NovelReport(
            chapter=chapter, moved=view.chapter is not None, scene=view.scene,
            warm_window=policy.warm_window, window=window, tiers=tier_reports,
            total_tokens=sum(tier.tokens for tier in tier_reports),
            total_budget=policy.total_budget, prefix=[c.id for c in prefix],
            suffix=[c.id for c in suffix], items=rows,
            stats=stats_line(tier_reports, policy.total_budget))
        return engine.finish(
            profile=self.name, policy_version=policy.version, session=view.stream_id,
            position=view.position, now=now, pieces=pieces, sections=SECTIONS,
            report=report, warnings=warnings)

    def render(self, assembly: Assembly) -> RenderableType:
        """Items by tier (rank order) with priority, tokens and placement; the stats line."""
        from ctxledger.assembler.profiles.novel.view import novel_table

        return novel_table(report_of(assembly, NovelReport))

    def summary_line(self, assembly: Assembly) -> str:
        """The stats line and the digest."""
        report = report_of(assembly, NovelReport)
        return f"novel: {report.stats}, digest {assembly.digest[:16]}"
