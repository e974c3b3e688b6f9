"""Profile ``novel`` (a novel-writing app): tiers, priorities, budgets and the sandwich.

Read views are built by hand with the ``chars4`` encoding (tokens = ceil(len / 4)), so an
item of ``4 * n`` characters costs exactly ``n`` tokens and budgets can be hit exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ctxledger import Ledger
from ctxledger.assembler import assemble
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles.novel import (
    TIERS,
    NovelPolicy,
    NovelReport,
    assign_tier,
    priority_of,
)
from ctxledger.projections.session_view import Item, SessionView

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


def test_before_any_chapter_moved_the_current_chapter_is_one() -> None:
    items = [item("s1", "summary", chapter=1), item("s4", "summary", chapter=4),
             item("s0", "summary", chapter=0), item("none", "summary"),
             item("rel", "relationship_state", evolving=True, chapter=1)]
    assembly = run(items, chapter=None)
    assert (report(assembly).chapter, report(assembly).moved) == (1, False)
    assert report(assembly).window == (-4, 0)
    # chapter >= 1 or no chapter: cold with priority 1.
    for cold in ("s1", "s4", "none"):
        assert (assembly.decision(cold).section, assembly.decision(cold).priority) == \
            ("cold", 1), cold
    # Chapter 0 is before chapter 1: warm, 8 - (1 - 0).
    assert (assembly.decision("s0").section, assembly.decision("s0").priority) == ("warm", 7)
    # Evolving in chapter 1, the current chapter: 8.
    assert assembly.decision("rel").priority == 8


@pytest.mark.parametrize("chapter", [None, 12, 13, 40])
def test_a_summary_without_chapter_or_not_before_current_is_cold_priority_one(
        chapter: int | None) -> None:
    summary = item("s", "summary", chapter=chapter)
    assert assign_tier(summary, 12, policy()).tier == "cold"
    assert priority_of(summary, 12, policy(), emotional_arc=False) == 1


def test_the_latest_scene_plan_is_the_scene_plan_the_others_are_cold() -> None:
    items = [item("plan-b", "scene_plan", evolving=True, position=1),
             item("plan-a", "scene_plan", evolving=False, position=3),
             item("ex", "exemplar", position=4), item("ed", "emotional_directive", position=5)]
    assembly = run(items)
    assert report(assembly).prefix == ["plan-a", "ex"]
    old = assembly.decision("plan-b")
    assert (old.section, old.reason, old.priority) == ("cold", "scene_plan_superseded", 10)
    # The emotional arc is the scene plan's: the latest one does not evolve.
    assert assembly.decision("ed").priority == 6
    # Put again later, the older one becomes the scene plan.
    again = run([*items[1:], item("plan-b", "scene_plan", evolving=True, position=6)])
    assert report(again).prefix == ["plan-b", "ex"]
    assert again.decision("plan-a").section == "cold"
    assert again.decision("ed").priority == 9


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
    # 60 protected + 30 droppable, plus one separator token before each item but the
    # first: 84 fits after dropping one directive (the later put).
    assembly = run(items, hot_budget=84)
    assert assembly.decision("ed-b").action == "dropped"
    assert assembly.decision("ed-b").reason == "hot_over_budget"
    assert assembly.decision("ed-a").action == "included"
    assert assembly.decision("rel").action == "included"
    # 73: both directives go before the promoted relationship state.
    assembly = run(items, hot_budget=73)
    assert [assembly.decision(i).action for i in ("ed-a", "ed-b", "rel")] == \
        ["dropped", "dropped", "included"]
    # 62: then the promoted relationship state.
    assembly = run(items, hot_budget=62)
    assert assembly.decision("rel").action == "dropped"
    assert not assembly.warnings
    assert report(assembly).tiers[0].tokens == 62 == assembly.tokens.tiers["hot"]


def test_hot_overshoots_with_a_warning_and_never_touches_protected_items() -> None:
    characters = [item(f"char-{n}", "character", 500, in_scene=True, pov=n == 0)
                  for n in range(6)]
    items = [item("plan", "scene_plan", 400), item("ex1", "exemplar", 375),
             item("ex2", "exemplar", 375), item("anti", "anti_exemplar", 100),
             *characters, item("ed", "emotional_directive", 50)]
    assembly = run(items, hot_budget=3000)
    hot = report(assembly).tiers[0]
    # 10 items kept, the prefix opens the prompt: 9 separators of 1 token.
    assert hot.over_budget and hot.tokens == 400 + 750 + 100 + 3000 + 9
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
    # No prefix, so cold opens the prompt: its first item has no separator before it;
    # each warm item has one (1 token).
    assembly = run(items, warm_budget=93, cold_budget=30)
    # warm by priority: fs 7 (put first), s11 7, plot 6, style 5, s7 3: the top three stay.
    assert [i.id for i in assembly.section("warm").items] == ["fs", "s11", "plot"]  # type: ignore[union-attr]
    assert [assembly.decision(i).action for i in ("style", "s7")] == ["dropped"] * 2
    # cold by priority: world 4, act 3, old summary 1.
    assert [i.id for i in assembly.section("cold").items] == ["world"]  # type: ignore[union-attr]
    assert assembly.decision("old").reason == "cold_over_budget"
    tiers = {tier.tier: tier for tier in report(assembly).tiers}
    assert (tiers["warm"].tokens, tiers["warm"].dropped) == (93, 2)
    assert tiers["warm"].framing_tokens == 3
    assert (tiers["cold"].tokens, tiers["cold"].dropped) == (30, 2)


def test_equal_priorities_drop_the_latest_put_first() -> None:
    items = [item("w-early", "world", 10, position=1), item("w-late", "world", 10, position=3),
             item("w-mid", "world", 10, position=2)]
    # Cold opens the prompt: 10 + 1 + 10 = 21 keeps two of the three.
    assembly = run(items, cold_budget=21)
    assert [i.id for i in assembly.section("cold").items] == ["w-early", "w-mid"]  # type: ignore[union-attr]
    assert assembly.decision("w-late").action == "dropped"


@pytest.mark.parametrize("tier", ["warm", "cold"])
def test_dropping_keeps_the_longest_priority_prefix_and_never_skips(tier: str) -> None:
    if tier == "warm":
        items = [item("top", "foreshadowing", 30, active=True), item("big", "plot", 50),
                 item("small", "style", 5)]
    else:
        items = [item("top", "world", 30), item("big", "act_summary", 50),
                 item("small", "summary", 5, chapter=1)]
    # Alone in the prompt: top (30) + small (5) + a separator would fit 40, but big
    # ranks between them and does not fit, so small goes too.
    assembly = run(items, **{f"{tier}_budget": 40})
    assert [d.item for d in assembly.decisions if d.action == "included"] == ["top"]
    assert [assembly.decision(i).action for i in ("big", "small")] == ["dropped"] * 2
    assert report(assembly).tiers[TIERS.index(tier)].tokens == 30


def test_anti_exemplars_are_never_dropped_in_hot() -> None:
    items = [item("plan", "scene_plan", 20), item("anti-1", "anti_exemplar", 20),
             item("anti-2", "anti_exemplar", 20), item("ed", "emotional_directive", 5)]
    assembly = run(items, hot_budget=10)
    assert [assembly.decision(i).action for i in ("plan", "anti-1", "anti-2", "ed")] == \
        ["included", "included", "included", "dropped"]
    assert report(assembly).tiers[0].over_budget and assembly.warnings


@pytest.mark.parametrize("with_prefix", [True, False])
def test_tier_totals_include_their_framing_and_add_up_to_the_total(
        with_prefix: bool) -> None:
    items = [item("ex", "exemplar", 8), item("char", "character", 9, in_scene=True),
             item("rel", "relationship_state", 4, in_scene=True),
             item("plot", "plot", 5), item("style", "style", 3), item("world", "world", 7),
             item("fs", "foreshadowing", 2)]
    if with_prefix:
        items.append(item("plan", "scene_plan", 12))
    assembly = run(items)
    tiers = {tier.tier: tier for tier in report(assembly).tiers}
    assert {name: tier.tokens for name, tier in tiers.items()} == assembly.tokens.tiers
    # The book goes out as one system message: its wrapper and the reply priming are the
    # only tokens outside the tiers (3 + "system" in chars4 + 3).
    assert assembly.tokens.framing == 3 + 2 + 3
    assert sum(tier.tokens for tier in tiers.values()) + assembly.tokens.framing \
        == assembly.tokens.total
    tier_total = assembly.tokens.total - assembly.tokens.framing
    assert report(assembly).stats.endswith(f"Total: {tier_total}/80000")
    [message] = assembly.messages
    assert (message.role, message.content) == ("system", assembly.text)
    # One separator (1 token) between every two items; each tier holds its own.
    laid_out = kept(assembly)
    assert sum(t.framing_tokens for t in tiers.values()) == len(laid_out) - 1
    for tier in tiers.values():
        assert tier.tokens == tier.item_tokens + tier.framing_tokens
    assert assembly.text.count("\n\n") == len(laid_out) - 1


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
    # The promoted relationship state goes in the suffix, before the characters.
    assert kept(assembly) == ["plan", "ex1", "world", "plot", "ex2", "ex3", "anti", "ed",
                              "rel", "char"]
    assert report(assembly).prefix == ["plan", "ex1"]
    assert report(assembly).suffix == ["ex2", "ex3", "anti", "ed", "rel", "char"]
    assert assembly.text.split("\n\n") == [it.content for it in sorted(
        items, key=lambda it: kept(assembly).index(it.item_id))]


def test_two_exemplars_one_in_prefix_one_in_suffix() -> None:
    assembly = run([item("b", "exemplar"), item("a", "exemplar")])
    assert report(assembly).prefix == ["b"] and report(assembly).suffix == ["a"]


def test_stats_line_and_tier_tokens() -> None:
    items = [item("plan", "scene_plan", 12), item("ex", "exemplar", 8),
             item("plot", "plot", 5), item("world", "world", 7)]
    assembly = run(items)
    # Tier totals include the separator before each item but the first (1 token each).
    assert report(assembly).stats == (
        "Hot: 21/15000 tokens (2 items) | Warm: 6/25000 (1 items) | "
        "Cold: 8/40000 (1 items) | Total: 35/80000")
    assert assembly.tokens.tiers == {"hot": 21, "cold": 8, "warm": 6}
    # The stats line adds up the tiers; the message's wrapper and the reply priming are
    # the only tokens outside them.
    assert assembly.tokens.framing == 8 and assembly.tokens.total == 35 + 8


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
    # The window and the current chapter are on the report once; a summary's decision
    # holds only its own chapter (format 3), so a chapter move leaves it alone.
    assert report(assembly).window == (7, 11) and report(assembly).chapter == 12
    assert assembly.decision("s7").detail["chapter"] == 7
    assert not {"current_chapter", "window_start"} & assembly.decision("s7").detail.keys()
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


def _prose(label: str, sentences: int) -> str:
    """Distinct prose; the real counter gives roughly 12 tokens a sentence."""
    return " ".join(f"{label} walks the causeway at low water, sentence {n}, and counts "
                    "the bells." for n in range(sentences))


def test_every_tier_over_budget_with_real_tokens(ledger: Ledger) -> None:
    """Synthetic book: 6 in-scene characters of about 2,000 tokens put hot over 15000;
    plot items over warm's 25000; world items over cold's 40000 (cl100k_base)."""
    puts: list[dict[str, Any]] = [
        {"item_id": "plan", "kind": "scene_plan", "content": _prose("Plan", 100),
         "evolving": True},
        {"item_id": "ex-1", "kind": "exemplar", "content": _prose("Exemplar", 80)},
        {"item_id": "anti", "kind": "anti_exemplar", "content": _prose("Anti", 40)},
        *({"item_id": f"char-{n}", "kind": "character", "in_scene": True,
           "pov": n == 0, "content": _prose(f"Character {n}", 170)} for n in range(6)),
        *({"item_id": f"ed-{n}", "kind": "emotional_directive",
           "content": _prose(f"Directive {n}", 20)} for n in range(3)),
        *({"item_id": f"plot-{n:02d}", "kind": "plot", "content": _prose(f"Plot {n}", 170)}
          for n in range(14)),
        *({"item_id": f"world-{n:02d}", "kind": "world",
           "content": _prose(f"World {n}", 170)} for n in range(22)),
    ]
    ledger.append("book", [{"type": "session.started", "data": {"scope": "b"}},
                           {"type": "chapter.moved", "data": {"chapter": 3}},
                           *({"type": "item.put", "data": put} for put in puts)])
    assembly = ledger.assemble("book", "novel", now=NOW)
    tiers = {tier.tier: tier for tier in report(assembly).tiers}
    # Hot: every directive goes, then it still overshoots; nothing protected is touched.
    assert tiers["hot"].over_budget and tiers["hot"].tokens > 15000
    assert all(assembly.decision(f"ed-{n}").action == "dropped" for n in range(3))
    assert any("overshoots" in warning for warning in assembly.warnings)
    for kept_id in ("plan", "ex-1", "anti", *(f"char-{n}" for n in range(6))):
        assert assembly.decision(kept_id).action == "included", kept_id
    separator = 1  # "\n\n" is one cl100k_base token
    for tier, prefix, budget in (("warm", "plot", 25000), ("cold", "world", 40000)):
        rows = [row for row in report(assembly).items if row.item_id.startswith(prefix)]
        actions = [row.status for row in rows]
        first_dropped = actions.index("dropped")
        # The longest prefix (put order here: equal priorities) that fits, then nothing.
        assert set(actions[first_dropped:]) == {"dropped"} and first_dropped > 0
        tokens = [row.tokens for row in rows]
        kept_size = sum(tokens[:first_dropped]) + separator * first_dropped
        assert tiers[tier].tokens == kept_size <= budget
        assert kept_size + tokens[first_dropped] + separator > budget
        assert not tiers[tier].over_budget
        # The dropped tail is one decision, lowest first, with the numbers at the cut;
        # a dropped item has no decision of its own.
        dropped = [row.item_id for row in rows[first_dropped:]]
        tail = assembly.decision(f"{tier}:dropped")
        assert (tail.action, tail.reason) == ("dropped", f"{tier}_over_budget")
        assert tail.detail["items"] == dropped[::-1]
        assert tail.detail["count"] == len(dropped) == tiers[tier].dropped
        assert tail.detail["tokens_dropped"] == sum(tokens[first_dropped:])
        assert (tail.detail["limit"], tail.detail["used"]) == (budget, kept_size)
        assert tail.detail["remaining"] == budget - kept_size
        assert tail.detail["first_misfit"] == dropped[0]
        assert tail.detail["first_misfit_tokens"] == tokens[first_dropped]
        assert tail.detail["tier"] == tier and tail.detail["over_budget"] is False
        assert all(assembly.decision(item) == tail for item in dropped)
        assert not set(dropped) & {d.item for d in assembly.decisions}
    assert not any(d.action == "truncated" for d in assembly.decisions)
    assert sum(t.tokens for t in tiers.values()) + 7 == assembly.tokens.total
    assert report(assembly).stats.endswith(f"Total: {assembly.tokens.total - 7}/80000")


def test_issue_rules_through_the_ledger(ledger: Ledger) -> None:
    """Chapter 1 before any move, the latest scene plan, the promoted relationship state
    before the characters, tier totals adding up: on each backend."""
    def put(item_id: str, kind: str, **data: Any) -> dict[str, Any]:
        return {"type": "item.put", "data": {"item_id": item_id, "kind": kind,
                                             "content": f"{item_id} text.", **data}}
    ledger.append("book", [
        {"type": "session.started", "data": {"scope": "b"}},
        put("plan-old", "scene_plan", evolving=True), put("plan-new", "scene_plan"),
        put("ed", "emotional_directive"), put("s1", "summary", chapter=1),
        put("s-none", "summary"), put("char", "character", in_scene=True),
        put("rel", "relationship_state", in_scene=True, evolving=True, chapter=1)])
    assembly = ledger.assemble("book", "novel", now=NOW)
    assert (report(assembly).chapter, report(assembly).moved) == (1, False)
    for summary in ("s1", "s-none"):
        assert (assembly.decision(summary).section, assembly.decision(summary).priority) \
            == ("cold", 1)
    assert assembly.decision("plan-old").section == "cold"
    assert report(assembly).prefix == ["plan-new"]
    assert assembly.decision("ed").priority == 6  # the scene plan (plan-new) has no arc
    assert report(assembly).suffix == ["ed", "rel", "char"]
    assert assembly.decision("rel").priority == 8  # evolving in chapter 1, the current one
    # 3 + "system" + 3: the one message's wrapper and the reply priming.
    assert sum(t.tokens for t in report(assembly).tiers) + 7 == assembly.tokens.total
    ledger.append("book", {"type": "chapter.moved", "data": {"chapter": 3}})
    moved = ledger.assemble("book", "novel", now=NOW)
    assert (moved.decision("s1").section, moved.decision("s1").priority) == ("warm", 6)
