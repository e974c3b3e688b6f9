"""Reading a ``BookState`` out as the assembly: the sections in prompt order (the
separator before an item belongs to that item's section, so to its tier), the token
totals, the report with its stats line, and the decisions (the kept items in put order,
then each tier's range), sealed from the canonical JSON each part keeps. Each section and
tier's rows are made again only when what they show changed.
"""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any, cast

from ctxledger.assembler.chat_tokens import wrapper_tokens
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.digest import (
    Fragment,
    array_fragment,
    json_object,
    message_fragment,
    object_fragment,
    seal_known,
)
from ctxledger.assembler.model import (
    Assembly,
    ContextMessage,
    Decision,
    Section,
    TokenTotals,
    format_for,
)
from ctxledger.assembler.profiles.novel.policy import TIERS
from ctxledger.assembler.profiles.novel.prepared import Prepared
from ctxledger.assembler.profiles.novel.ranked import ITEM_ID, TOKENS, ShownRanked
from ctxledger.assembler.profiles.novel.report import (
    NovelItemRow,
    NovelReport,
    TierReport,
    stats_line,
)
from ctxledger.assembler.profiles.novel.sandwich import (
    SECTION_PREFIX,
    SECTION_SUFFIX,
    SECTION_TIERS,
)
from ctxledger.assembler.profiles.novel.tiers import current_chapter, summary_window
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import SessionView
from ctxledger.store.canonical import canonical_json

if TYPE_CHECKING:
    from ctxledger.assembler.profiles.novel.book import BookState

TEXT = attrgetter("candidate.text")
LAID, LAID_JSON = attrgetter("section_item"), attrgetter("section_item_json")
"""Getters mapped in C over a section's items."""


def read_out(state: BookState, engine: Engine, view: SessionView,
             now: datetime) -> Assembly:
    """The assembly ``state`` stands for, sealed."""
    policy, counter = state.policy, engine.counter
    cold, warm = state.tiers["cold"], state.tiers["warm"]
    prefix = [state.prepared[i] for i in (state.plan, state.first_exemplar) if i is not None]
    members = {SECTION_PREFIX: prefix, "cold": cold.preps[:cold.cut],
               "warm": warm.preps[:warm.cut], SECTION_SUFFIX: state.suffix.preps}
    made: dict[Hashable, Hashable] = {
        SECTION_PREFIX: tuple(map(id, prefix)), "cold": (cold.kept_version, cold.cut),
        "warm": (warm.kept_version, warm.cut), SECTION_SUFFIX: state.suffix.version}
    sections, section_json, texts = _sections(state, counter, members, made)
    totals = _totals(state, counter, sections,
                     order_count=sum(len(part) for part in members.values()))
    report, report_json = _report(state, view, prefix)
    decisions, decision_json = _decisions(state)
    text = policy.separator.join(texts)
    # The book goes out as one message: its wrapper and the reply priming are framing.
    message = ContextMessage.model_construct(
        role=policy.context_role, content=text, name=None, tool_calls=None,
        tool_call_id=None, is_error=None, item=None,
        sections=[section.name for section in sections],
        tokens=totals.total + wrapper_tokens(counter, policy.context_role,
                                             policy.message_overhead))
    messages = [message] if text else []
    if messages:
        framing = message.tokens - totals.total + policy.message_overhead.reply_priming
        totals = totals.model_copy(update={"framing": framing,
                                           "total": totals.total + framing})
    missing = _missing_required(state)
    warnings = [*_warnings(state), *missing]
    assembly = Assembly.model_construct(
        profile="novel", policy_version=policy.version, session=view.stream_id,
        position=view.position, now=now, text=text, messages=messages,
        sections=sections, tokens=totals, decisions=decisions, warnings=warnings,
        report=report, digest="",
        format_version=format_for(format_7=bool(missing)))
    return seal_known(assembly, {
        "sections": "[" + ",".join(section_json) + "]",
        "decisions": "[" + ",".join(decision_json) + "]",
        "messages": array_fragment([message_fragment(m) for m in messages]),
        "report": report_json})


def _sections(state: BookState, counter: TokenCounter, members: dict[str, list[Prepared]],
              made: dict[Hashable, Hashable]) -> tuple[list[Section], list[str], list[str]]:
    """The non-empty sections in prompt order, with their JSON and texts; each remade only
    when what it shows changed (after a put: one section)."""
    separator = state.policy.separator
    framing_each = counter.count(separator) if separator else 0
    sections: list[Section] = []
    section_json: list[str] = []
    texts: list[str] = []
    opening = True
    for name, tier in SECTION_TIERS:
        if not members[name]:
            continue
        source = (made[name], opening, framing_each)
        known = state.sections.get(name)
        if known is None or known[0] != source:
            known = state.sections[name] = (source, *_section(
                name, tier, members[name], separator, framing_each, opening))
        opening = False
        sections.append(known[1])
        section_json.append(known[2])
        texts.append(known[3])
    return sections, section_json, texts


def _totals(state: BookState, counter: TokenCounter, sections: list[Section], *,
            order_count: int) -> TokenTotals:
    """Tokens by section and by tier, and the counting methods used."""
    policy = state.policy
    by_section = {section.name: section.tokens for section in sections}
    tier_tokens: dict[str, int] = {}
    # Separators charged to the framing are in their sections, not in any tier's figure.
    in_tier = policy.separators == "tier"
    for section in sections:
        tier = section.tier or ""
        tier_tokens[tier] = tier_tokens.get(tier, 0) + section.tokens - (
            0 if in_tier else section.framing_tokens)
    methods = {method for method, count in state.methods.items() if count > 0}
    if any(state.sheds[tier].dropped is not None for tier in ("cold", "warm", "hot")):
        methods.add(counter.measure("").method)  # a range decision has no text
    if policy.separator and order_count > 1:
        methods.add(counter.measure(policy.separator).method)
    return TokenTotals(encoding=counter.encoding, sections=by_section, tiers=tier_tokens,
                       framing=0, total=sum(by_section.values()), methods=sorted(methods))


def _missing_required(state: BookState) -> list[str]:
    """A line for each required kind the bundle lacks: a scene plan and an exemplar (the
    prefix holds them; without them the sandwich has no plan or voice to hold)."""
    missing: list[str] = []
    if state.plan is None:
        missing.append("no scene plan: a novel bundle requires one (item.put kind "
                       "scene_plan); the prefix has no plan")
    if state.first_exemplar is None:
        missing.append("no style exemplar: a novel bundle requires one (item.put kind "
                       "exemplar); the prefix and suffix have no voice to imitate")
    return missing


def _warnings(state: BookState) -> list[str]:
    """Hot over its budget with nothing left it may drop."""
    hot_shed = state.sheds["hot"]
    if hot_shed.fits:
        return []
    return [f"hot tier is {hot_shed.size} tokens, over its budget of "
            f"{state.policy.hot_budget}: scene plans, exemplars, anti-exemplars and "
            "characters are never dropped or shortened, so it overshoots"]


def _report(state: BookState, view: SessionView,
            prefix: list[Prepared]) -> tuple[NovelReport, Fragment]:
    """The report and its canonical JSON, the item rows joined from the tiers' own."""
    policy = state.policy
    tier_reports = [_tier_report(state, tier) for tier in TIERS]
    # Rank order within each tier, tiers in report order: one list of references.
    rows: list[NovelItemRow] = []
    row_json: list[str] = []
    for tier in TIERS:
        tier_rows, tier_json = _tier_rows(state, tier)
        rows += tier_rows
        if tier_json:
            row_json.append(tier_json)
    report = NovelReport.model_construct(
        chapter=current_chapter(state.chapter), moved=view.chapter is not None,
        scene=view.scene, warm_window=policy.warm_window,
        window=summary_window(state.chapter, policy),
        tiers=tier_reports, total_tokens=sum(tier.tokens for tier in tier_reports),
        total_budget=policy.total_budget, prefix=[p.item.item_id for p in prefix],
        suffix=list(map(ITEM_ID, state.suffix.preps)), items=rows,
        stats=stats_line(tier_reports, policy.total_budget))
    report_parts: dict[str, Fragment] = {
        key: canonical_json(value)
        for key, value in report.model_dump(mode="json", exclude={"items"}).items()}
    report_parts["items"] = array_fragment(row_json)
    return report, object_fragment(report_parts)


def _decisions(state: BookState) -> tuple[list[Decision], list[str]]:
    """The engine's order: the items in put order (the kept ones: the dropped are covered
    by their tier's range), then the ranges in the order they were shed; with the JSON."""
    if state.kept_joined is None:
        state.kept_joined = ",".join(state.kept_json)
    decisions = list(state.kept_decisions)
    decision_json = [state.kept_joined] if state.kept_joined else []
    for tier in ("cold", "warm", "hot"):
        dropped = state.sheds[tier].dropped
        if dropped is not None:
            decisions.append(dropped[0])
            decision_json.append(dropped[1])
    return decisions, decision_json


def _section(name: str, tier: str, members: list[Prepared], separator: str,
             framing_each: int, opening: bool) -> tuple[Section, str, str]:
    # The separator before an item belongs to that item's section; the item that
    # opens the prompt has none.
    for prep in members:
        if prep.section_item is None:
            prep.laid_out()
    framing = framing_each * (len(members) - 1 if opening else len(members))
    tokens = framing + sum(map(TOKENS, members))
    section = Section.model_construct(name=name, tier=tier,
                                      items=list(map(LAID, members)),
                                      framing_tokens=framing, tokens=tokens)
    made = json_object({
        "framing_tokens": str(framing),
        "items": "[" + ",".join(map(LAID_JSON, members)) + "]",
        "name": canonical_json(name), "tier": canonical_json(tier),
        "tokens": str(tokens)})
    return section, made, separator.join(list(map(TEXT, members)))

def _tier_rows(state: BookState, tier: str) -> tuple[list[NovelItemRow], str]:
    """The rows a tier's items show, in rank order, and their JSON joined by commas:
    read again only after a change. In warm and cold the status is where the item
    stands against the cut; in hot only a droppable past hot's cut is dropped."""
    ranked, drops = state.tiers[tier], state.drops
    source = ((ranked.version, drops.version, drops.cut) if tier == "hot"
              else (ranked.version, ranked.cut))
    if ranked.rows is None or ranked.rows[0] != source:
        rows: list[Any]
        if tier == "hot":
            kept_drops = state.kept_drops()
            out = [prep.droppable and prep not in kept_drops for prep in ranked.preps]
            rows = [prep.row_out if gone else prep.row_in
                    for prep, gone in zip(ranked.preps, out, strict=True)]
            text = ",".join([prep.row_out_json if gone else prep.row_in_json
                             for prep, gone in zip(ranked.preps, out, strict=True)])
        else:
            assert isinstance(ranked, ShownRanked)
            rows = ranked.row_models
            text = ",".join(ranked.row_texts)
        ranked.rows = (source, cast("list[NovelItemRow]", rows), text)
    return ranked.rows[1], ranked.rows[2]

def _tier_report(state: BookState, tier: str) -> TierReport:
    shed = state.sheds[tier]
    total = len(state.tiers[tier])
    return TierReport(tier=tier, budget=state.policy.budget(tier),
                      tokens=shed.size, item_tokens=shed.item_tokens,
                      framing_tokens=shed.size - shed.item_tokens, items=shed.kept,
                      dropped=total - shed.kept, over_budget=not shed.fits)
