"""Profile ``novel`` (seed 000): tiers, priorities, budgets and the sandwich.

Read views are built by hand with the ``chars4`` encoding (tokens = ceil(len / 4)), so an
item of ``4 * n`` characters costs exactly ``n`` tokens and budgets can be hit exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from assembler import assemble
from assembler.model import Assembly
from assembler.profiles.novel import (
    NovelPolicy,
    NovelReport,
    assign_tier,
    priority_of,
)
from ctxledger import Ledger
from projections.view import Item, SessionView

NOW = datetime(2026, 4, 2, 12, 0, tzinfo=UTC)


def item(item_id: str, kind: str, tokens: int = 10, *, position: int | None = None,
         **flags: Any) -> Item:
    chapter = flags.pop("chapter", None)
    values = {flag: flags.pop(flag, None)
              for flag in ("active", "in_scene", "pov", "evolving", "critical")}
    assert not flags, flags
    return Item(item_id=item_id, kind=kind, content="x" * (4 * tokens), chapter=chapter,
                position=position if position is not None else _next_position(),
                **values)


_positions = iter(range(1, 1_000_000))


def _next_position() -> int:
    return next(_positions)


def view(items: list[Item], chapter: int | None = 12) -> SessionView:
    return SessionView(stream_id="book", scope="b", position=500, exists=True,
                       chapter=chapter, scene="12.2" if chapter else None,
                       items=tuple(items))


def policy(**values: Any) -> NovelPolicy:
    return NovelPolicy.model_validate({"token_encoding": "chars4", **values})


def run(items: list[Item], chapter: int | None = 12, **values: Any) -> Assembly:
    return assemble(view(items, chapter), "novel", NOW, policy(**values))


def report(assembly: Assembly) -> NovelReport:
    assert isinstance(assembly.report, NovelReport)
    return assembly.report


def kept(assembly: Assembly) -> list[str]:
    return [i.id for s in assembly.sections for i in s.items]


# -- tiers ------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "flags", "tier"), [
    ("exemplar", {}, "hot"),
    ("anti_exemplar", {}, "hot"),
    ("scene_plan", {}, "hot"),
    ("emotional_directive", {}, "hot"),
    ("character", {"in_scene": True}, "hot"),
    ("character", {"in_scene": False}, "cold"),
    ("character", {}, "cold"),
    ("relationship_state", {"in_scene": True}, "hot"),
    ("relationship_state", {}, "warm"),
    ("foreshadowing", {"active": True}, "warm"),
    ("foreshadowing", {"active": False}, "cold"),
    ("plot", {}, "warm"),
    ("style", {}, "warm"),
    ("world", {}, "cold"),
    ("act_summary", {}, "cold"),
])
def test_tier_of_each_kind(kind: str, flags: dict[str, Any], tier: str) -> None:
    assert assign_tier(item("i", kind, **flags), 12, policy()).tier == tier


@pytest.mark.parametrize(("chapter", "tier"), [
    (5, "cold"), (6, "cold"), (7, "warm"), (8, "warm"), (11, "warm"), (12, "cold"),
    (13, "cold"), (None, "cold")])
def test_summary_window_is_current_minus_five_up_to_before_current(
        chapter: int | None, tier: str) -> None:
    assert assign_tier(item("s", "summary", chapter=chapter), 12, policy()).tier == tier


def test_warm_window_is_a_setting() -> None:
    narrow = NovelPolicy.from_settings({"warm_window": 2})
    assert assign_tier(item("s", "summary", chapter=9), 12, narrow).tier == "cold"
    assert assign_tier(item("s", "summary", chapter=10), 12, narrow).tier == "warm"


def test_without_a_chapter_every_summary_is_cold() -> None:
    assert assign_tier(item("s", "summary", chapter=3), None, policy()).tier == "cold"


def test_promoted_relationship_is_marked() -> None:
    placed = assign_tier(item("r", "relationship_state", in_scene=True), 12, policy())
    assert placed.promoted and placed.reason == "relationship_in_scene_promoted"


# -- priorities ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "flags", "arc", "expected"), [
    ("exemplar", {}, False, 10),
    ("scene_plan", {}, False, 10),
    ("anti_exemplar", {}, False, 9),
    ("character", {"pov": True}, False, 10),
    ("character", {}, False, 9),
    ("emotional_directive", {}, True, 9),
    ("emotional_directive", {}, False, 6),
    ("relationship_state", {"evolving": True, "chapter": 12}, False, 8),
    ("relationship_state", {"evolving": True}, False, 8),
    ("relationship_state", {"evolving": True, "chapter": 11}, False, 5),
    ("relationship_state", {}, False, 5),
    ("foreshadowing", {"active": True}, False, 7),
    ("foreshadowing", {}, False, 3),
    ("plot", {}, False, 6),
    ("style", {}, False, 5),
    ("world", {}, False, 4),
    ("act_summary", {}, False, 3),
    ("summary", {"chapter": 11}, False, 7),
    ("summary", {"chapter": 7}, False, 3),
    ("summary", {"chapter": 5}, False, 1),
    ("summary", {"chapter": 1}, False, 1),
])
def test_priority_table(kind: str, flags: dict[str, Any], arc: bool, expected: int) -> None:
    assert priority_of(item("i", kind, **flags), 12, policy(), emotional_arc=arc) == expected


def test_emotional_directive_priority_follows_the_scene_plans_arc() -> None:
    directive = item("ed", "emotional_directive")
    flat = run([item("plan", "scene_plan", evolving=False), directive])
    arc = run([item("plan", "scene_plan", evolving=True), directive])
    assert flat.decision("ed").priority == 6
    assert arc.decision("ed").priority == 9
    assert arc.decision("ed").detail["emotional_arc"] is True


def test_ties_go_by_put_order_then_item_id() -> None:
    first = item("zz", "world", position=1)
    second = item("aa", "world", position=2)
    same_put = item("bb", "plot", position=3)
    assembly = run([second, first, same_put, item("ab", "plot", position=3)])
    # Within cold: equal priority, so put order decides.
    assert [i.id for i in assembly.section("cold").items] == ["zz", "aa"]  # type: ignore[union-attr]
    # Within warm: equal priority and put position, so item_id decides.
    assert [i.id for i in assembly.section("warm").items] == ["ab", "bb"]  # type: ignore[union-attr]


# -- budgets --------------------------------------------------------------------------------


def test_hot_over_budget_drops_emotional_directives_lowest_first_then_promoted() -> None:
    items = [
        item("plan", "scene_plan", 20, evolving=False),
        item("ex1", "exemplar", 20),
        item("pov", "character", 20, in_scene=True, pov=True),
        item("ed-a", "emotional_directive", 10),
        item("ed-b", "emotional_directive", 10),
        item("rel", "relationship_state", 10, in_scene=True, evolving=True),
    ]
    # 60 protected + 30 droppable; 80 fits after dropping one directive (the later put).
    assembly = run(items, hot_budget=80)
    assert assembly.decision("ed-b").action == "dropped"
    assert assembly.decision("ed-b").reason == "hot_over_budget"
    assert assembly.decision("ed-a").action == "included"
    assert assembly.decision("rel").action == "included"
    # 70: both directives go before the promoted relationship state.
    assembly = run(items, hot_budget=70)
    assert [assembly.decision(i).action for i in ("ed-a", "ed-b", "rel")] == \
        ["dropped", "dropped", "included"]
    # 60: then the promoted relationship state.
    assembly = run(items, hot_budget=60)
    assert assembly.decision("rel").action == "dropped"
    assert not assembly.warnings
    assert report(assembly).tiers[0].tokens == 60


def test_hot_overshoots_with_a_warning_and_never_touches_protected_items() -> None:
    characters = [item(f"char-{n}", "character", 500, in_scene=True, pov=n == 0)
                  for n in range(6)]
    items = [item("plan", "scene_plan", 400), item("ex1", "exemplar", 375),
             item("ex2", "exemplar", 375), item("anti", "anti_exemplar", 100),
             *characters, item("ed", "emotional_directive", 50)]
    assembly = run(items, hot_budget=3000)
    hot = report(assembly).tiers[0]
    assert hot.over_budget and hot.tokens == 400 + 750 + 100 + 3000
    assert assembly.decision("ed").action == "dropped"
    for protected in ("plan", "ex1", "ex2", "anti", *(c.item_id for c in characters)):
        decision = assembly.decision(protected)
        assert decision.action == "included", protected
    assert any("overshoots" in warning for warning in assembly.warnings)


def test_characters_are_never_shortened_in_any_tier() -> None:
    items = [item("c-hot", "character", 2000, in_scene=True),
             item("c-cold", "character", 2000)]
    assembly = run(items, hot_budget=100, cold_budget=100)
    assert assembly.decision("c-hot").action == "included"
    assert assembly.decision("c-cold").action == "dropped"  # cold drops whole items only
    assert not any(d.action == "truncated" for d in assembly.decisions)
    slot = next(i for s in assembly.sections for i in s.items if i.id == "c-hot")
    assert slot.tokens == 2000


def test_warm_and_cold_drop_the_lowest_priority_first() -> None:
    items = [item("plot", "plot", 30), item("style", "style", 30),
             item("fs", "foreshadowing", 30, active=True),
             item("s11", "summary", 30, chapter=11), item("s7", "summary", 30, chapter=7),
             item("world", "world", 30), item("act", "act_summary", 30),
             item("old", "summary", 30, chapter=2)]
    assembly = run(items, warm_budget=90, cold_budget=30)
    # warm by priority: fs 7 (put first), s11 7, plot 6, style 5, s7 3: the top three stay.
    assert [i.id for i in assembly.section("warm").items] == ["fs", "s11", "plot"]  # type: ignore[union-attr]
    assert [assembly.decision(i).action for i in ("style", "s7")] == ["dropped"] * 2
    # cold by priority: world 4, act 3, old summary 1.
    assert [i.id for i in assembly.section("cold").items] == ["world"]  # type: ignore[union-attr]
    assert assembly.decision("old").reason == "cold_over_budget"
    tiers = {tier.tier: tier for tier in report(assembly).tiers}
    assert (tiers["warm"].tokens, tiers["warm"].dropped) == (90, 2)
    assert (tiers["cold"].tokens, tiers["cold"].dropped) == (30, 2)


def test_budgets_are_settings() -> None:
    chosen = NovelPolicy.from_settings({"hot_budget": 1, "warm_budget": 2, "cold_budget": 3})
    assert (chosen.hot_budget, chosen.warm_budget, chosen.cold_budget) == (1, 2, 3)
    assert NovelPolicy.defaults().total_budget == 80000


# -- sandwich ---------------------------------------------------------------------------------


def test_sandwich_order_prefix_cold_warm_suffix() -> None:
    items = [item("char", "character", in_scene=True), item("ex1", "exemplar"),
             item("world", "world"), item("ed", "emotional_directive"),
             item("plan", "scene_plan"), item("anti", "anti_exemplar"),
             item("ex2", "exemplar"), item("ex3", "exemplar"), item("plot", "plot"),
             item("rel", "relationship_state", in_scene=True)]
    assembly = run(items)
    assert [s.name for s in assembly.sections] == ["prefix", "cold", "warm", "suffix"]
    assert kept(assembly) == ["plan", "ex1", "world", "plot", "ex2", "ex3", "anti", "ed",
                              "char", "rel"]
    assert report(assembly).prefix == ["plan", "ex1"]
    assert report(assembly).suffix == ["ex2", "ex3", "anti", "ed", "char", "rel"]
    assert assembly.text.split("\n\n") == [it.content for it in sorted(
        items, key=lambda it: kept(assembly).index(it.item_id))]


def test_two_exemplars_one_in_prefix_one_in_suffix() -> None:
    assembly = run([item("b", "exemplar"), item("a", "exemplar")])
    assert report(assembly).prefix == ["b"] and report(assembly).suffix == ["a"]


def test_stats_line_and_tier_tokens() -> None:
    items = [item("plan", "scene_plan", 12), item("ex", "exemplar", 8),
             item("plot", "plot", 5), item("world", "world", 7)]
    assembly = run(items)
    assert report(assembly).stats == (
        "Hot: 20/15000 tokens (2 items) | Warm: 5/25000 (1 items) | "
        "Cold: 7/40000 (1 items) | Total: 32/80000")
    assert assembly.tokens.tiers == {"hot": 20, "cold": 7, "warm": 5}
    assert assembly.tokens.total == 32 + assembly.tokens.framing


def test_empty_session_assembles_to_nothing() -> None:
    assembly = run([], chapter=None)
    assert assembly.text == "" and assembly.sections == []
    assert report(assembly).stats.endswith("Total: 0/80000")


def test_report_round_trips_through_json() -> None:
    assembly = run([item("plan", "scene_plan"), item("s", "summary", chapter=10)])
    again = Assembly.model_validate_json(assembly.model_dump_json())
    assert isinstance(again.report, NovelReport) and again == assembly


# -- through the ledger ---------------------------------------------------------------------


def test_novel_through_the_ledger_at_the_warm_window_edge(ledger: Ledger) -> None:
    ledger.append("book", [
        {"type": "session.started", "data": {"scope": "b"}},
        {"type": "chapter.moved", "data": {"chapter": 12}},
        {"type": "item.put", "data": {"item_id": "s7", "kind": "summary",
                                      "content": "Ch. 7 happened.", "chapter": 7}},
        {"type": "item.put", "data": {"item_id": "s6", "kind": "summary",
                                      "content": "Ch. 6 happened.", "chapter": 6}},
        {"type": "item.put", "data": {"item_id": "plan", "kind": "scene_plan",
                                      "content": "Scene."}},
    ])
    assembly = ledger.assemble("book", "novel", now=NOW)
    assert assembly.decision("s7").section == "warm"
    assert assembly.decision("s6").section == "cold"
    assert assembly.decision("s7").detail["window_start"] == 7
    ledger.append("book", {"type": "item.removed", "data": {"item_id": "s7"}})
    ledger.append("book", {"type": "setting.changed", "data": {"key": "warm_window",
                                                               "value": 6}})
    again = ledger.assemble("book", "novel", now=NOW)
    assert again.decision("s6").section == "warm"
    assert "s7" not in [d.item for d in again.decisions]
    assert again.policy_version.startswith("novel@1+")


def test_reassembling_after_one_new_item_counts_only_its_text(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url) as ledger:
        ledger.append("book", [{"type": "session.started", "data": {"scope": "b"}},
                               {"type": "chapter.moved", "data": {"chapter": 4}},
                               *({"type": "item.put", "data": {
                                   "item_id": f"w{n}", "kind": "world",
                                   "content": f"World fact number {n}."}}
                                 for n in range(20))])
        first = ledger.assemble("book", "novel", now=NOW)
        before = ledger.tokenizer_calls()
        assert ledger.assemble("book", "novel", now=NOW).digest == first.digest
        assert ledger.tokenizer_calls() == before
        ledger.append("book", {"type": "item.put", "data": {
            "item_id": "plan", "kind": "scene_plan", "content": "A brand new scene plan."}})
        again = ledger.assemble("book", "novel", now=NOW)
        assert ledger.tokenizer_calls() == before + 1
        assert again.section("prefix") is not None
