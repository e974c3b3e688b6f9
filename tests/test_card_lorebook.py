"""Lorebooks in the ``card`` profile, through the ledger on SQLite and PostgreSQL: the
card's ``character_book`` and the scope's books, each entry decided (activated by a key
in a message, not matched, disabled, over the budget), placed before or after the
character or at a depth in the messages, and shown in the report, the table and ``why``.
The activation rules themselves are tested in ``test_lorebook_engine.py``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers.card_sessions import assemble_card, card_session
from helpers.databases import module_database
from rich.console import Console

from ctxledger import Ledger
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles.card import CardReport

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """One ledger per backend for the whole module (each test has its own scope)."""
    with (module_database(request.param, tmp_path_factory.mktemp("lore")) as url,
          Ledger.open(url) as opened):
        yield opened


def entry(content: str, *keys: str, **fields: Any) -> dict[str, Any]:
    return {"keys": list(keys), "content": content, "extensions": {}, "enabled": True,
            "insertion_order": fields.pop("insertion_order", 100), **fields}


BOOK: dict[str, Any] = {"name": "Hollow Vale", "scan_depth": 2, "entries": [
    entry("The Vale is a valley of glass orchards.", "vale", id=1, name="vale",
          position="before_char", insertion_order=5),
    entry("Sir Brannoc guards the bridge.", "BRANNOC", "bridge", id=2, name="brannoc",
          position="after_char", insertion_order=20),
    entry("{{char}} distrusts the moon cult.", "moon", id=3, name="moon cult",
          selective=True, secondary_keys=["cult"], insertion_order=10),
    entry("Always: the air smells of honey.", id=4, name="honey", constant=True,
          insertion_order=1, position="before_char"),
    entry("Never sent.", "vale", id=5, name="off", enabled=False),
]}
CARD: dict[str, Any] = {"name": "Wren", "description": "Wren keeps bees.",
                        "scenario": "Spring.", "character_book": BOOK}


def session(ledger: Ledger, messages: Sequence[str], *, card: Mapping[str, Any] = CARD,
            settings: Mapping[str, Any] | None = None,
            scope_events: Sequence[Mapping[str, Any]] = ()) -> str:
    """A new session in its own scope; ``messages`` alternate user/assistant, ids m0..."""
    said = [(("user", "assistant")[index % 2], text) for index, text in enumerate(messages)]
    return card_session(ledger, f"lore-{next(_ids)}", card, messages=said,
                        settings=settings, scope_events=scope_events, first_id=0)


def assemble(ledger: Ledger, name: str) -> tuple[Assembly, CardReport]:
    return assemble_card(ledger, name, NOW)


def decisions(assembly: Assembly) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {d.item: (d.action, d.reason, dict(d.detail)) for d in assembly.decisions
            if d.item.startswith("lore:")}


def test_entries_activate_by_key_and_are_placed_around_the_character(
        ledger: Ledger) -> None:
    name = session(ledger, ["We rode past the old mill.", "Then over the Bridge at dusk."])
    assembly, report = assemble(ledger, name)
    found = decisions(assembly)
    assert found["lore:card:2"][:2] == ("included", "activated")
    assert {k: found["lore:card:2"][2][k] for k in ("by", "key", "message_id", "book")} == {
        "by": "key", "key": "bridge", "message_id": "m1", "book": "card"}
    assert found["lore:card:4"][:2] == ("included", "activated")
    assert found["lore:card:4"][2]["by"] == "constant"
    assert found["lore:card:1"][:2] == ("dropped", "not_matched")
    assert found["lore:card:3"][:2] == ("dropped", "not_matched")
    assert found["lore:card:5"][:2] == ("dropped", "disabled")
    text = assembly.text
    # before_char entries before the description, the rest after the scenario.
    assert text.index("Always: the air smells of honey.") < text.index("Wren keeps bees.")
    assert text.index("Scenario: Spring.") < text.index("Sir Brannoc guards the bridge.")
    assert "glass orchards" not in text and "Never sent" not in text
    rows = {row.entry_id: row for row in report.lorebook}
    assert [rows[f"lore:card:{i}"].status for i in range(1, 6)] == [
        "not_matched", "activated", "not_matched", "activated", "disabled"]
    assert (rows["lore:card:2"].key, rows["lore:card:2"].message_id) == ("bridge", "m1")
    assert report.lorebook_tokens == rows["lore:card:2"].tokens + rows["lore:card:4"].tokens


def test_keys_are_read_in_the_last_scan_depth_messages_only(ledger: Ledger) -> None:
    messages = ["The vale was quiet.", "Yes.", "And then?"]
    assembly, _ = assemble(ledger, session(ledger, messages))
    assert decisions(assembly)["lore:card:1"][:2] == ("dropped", "not_matched")
    deeper = session(ledger, messages, settings={"lorebook_scan_depth": 9},
                     card={**CARD, "character_book": {**BOOK, "scan_depth": None}})
    assembly, _ = assemble(ledger, deeper)
    assert decisions(assembly)["lore:card:1"][2]["message_id"] == "m0"


def test_selective_entries_need_a_secondary_key(ledger: Ledger) -> None:
    only_primary = session(ledger, ["The moon is up."])
    assert decisions(assemble(ledger, only_primary)[0])["lore:card:3"][:2] == (
        "dropped", "not_matched")
    both = session(ledger, ["The moon is up.", "The cult gathers."])
    assembly, _ = assemble(ledger, both)
    action, _, detail = decisions(assembly)["lore:card:3"]
    assert (action, detail["key"], detail["secondary_key"]) == ("included", "moon", "cult")
    assert "Wren distrusts the moon cult." in assembly.text  # macros apply to entries


def test_the_book_budget_drops_the_lowest_priority_first(ledger: Ledger) -> None:
    book = {"token_budget": 12, "entries": [
        entry("Alpha alpha alpha alpha alpha.", "go", id="a", priority=5),
        entry("Beta beta beta beta beta.", "go", id="b", priority=1),
        entry("Gamma gamma gamma.", "go", id="c", priority=9)]}
    name = session(ledger, ["go"], card={"name": "Wren", "character_book": book})
    assembly, report = assemble(ledger, name)
    found = decisions(assembly)
    assert found["lore:card:b"][:2] == ("dropped", "over_budget")
    assert found["lore:card:b"][2]["token_budget"] == 12
    assert found["lore:card:a"][0] == found["lore:card:c"][0] == "included"
    assert {row.entry_id: row.status for row in report.lorebook}["lore:card:b"] \
        == "over_budget"


def test_depth_entries_are_messages_inside_the_history(ledger: Ledger) -> None:
    book = {"entries": [
        entry("@@depth 1\n@@role assistant\nWren remembers the bridge.", "bridge", id="d"),
        entry("Wren hums.", id="z", constant=True,
              extensions={"position": 4, "depth": 0, "role": 1})]}
    name = session(ledger, ["Cross the bridge?", "Yes.", "Now."],
                   card={"name": "Wren", "character_book": book},
                   settings={"lorebook_scan_depth": 3})
    assembly, _ = assemble(ledger, name)
    said = [(m.role, m.content) for m in assembly.messages]  # no card text: no memory
    assert said == [("user", "Cross the bridge?"), ("assistant", "Yes."),
                    ("assistant", "Wren remembers the bridge."), ("user", "Now."),
                    ("user", "Wren hums.")]
    assert decisions(assembly)["lore:card:d"][2]["depth"] == 1
    lines = assembly.text.splitlines()
    assert lines.index("Wren remembers the bridge.") == lines.index("user: Now.") - 1


def test_scope_books_are_used_replaced_and_removed(ledger: Ledger) -> None:
    world = {"spec": "lorebook_v3", "data": {"entries": [
        entry("The capital is Lumen.", "capital", id=1, use_regex=False),
        entry("Dragons sleep under Lumen.", "/drag(on|ons)\\b/i", id=2, use_regex=True)]}}
    name = session(ledger, ["Is the capital far? DRAGONS!"], card={"name": "Wren"},
                   scope_events=[{"type": "lorebook.set",
                                  "data": {"book_id": "atlas", "book": world}}])
    assembly, _ = assemble(ledger, name)
    found = decisions(assembly)
    assert found["lore:world:atlas:1"][:2] == ("included", "activated")
    assert found["lore:world:atlas:2"][2]["key"] == "/drag(on|ons)\\b/i"
    assert "Dragons sleep under Lumen." in assembly.text
    ledger.append(f"scope:{name}", {"type": "lorebook.removed",
                                    "data": {"book_id": "atlas"}})
    assembly, report = assemble(ledger, name)
    assert "Lumen" not in assembly.text and report.lorebook == []


def test_the_context_budget_sheds_entries_first(ledger: Ledger) -> None:
    messages = ["Over the bridge."]
    roomy, _ = assemble(ledger, session(ledger, messages))
    used = roomy.report.used_tokens  # type: ignore[union-attr]
    tight = session(ledger, messages, settings={"context_limit": used - 5})
    assembly, report = assemble(ledger, tight)
    found = decisions(assembly)
    # The honey entry (priority = insertion order 1) is the lowest: it goes first.
    assert found["lore:card:4"][:2] == ("dropped", "over_budget")
    assert found["lore:card:2"][:2] == ("included", "activated")
    assert {row.entry_id: row.status for row in report.lorebook}["lore:card:4"] \
        == "over_budget"
    assert report.used_tokens <= used - 5


def test_recursive_scanning_is_an_option(ledger: Ledger) -> None:
    book = {"entries": [entry("Brannoc serves the moon cult.", "bridge", id="a"),
                        entry("The cult meets at night.", "cult", id="b")]}
    card = {"name": "Wren", "character_book": book}
    plain, _ = assemble(ledger, session(ledger, ["the bridge"], card=card))
    assert decisions(plain)["lore:card:b"][:2] == ("dropped", "not_matched")
    deep, _ = assemble(ledger, session(ledger, ["the bridge"], card=card,
                                       settings={"lorebook_recursive_scanning": True}))
    action, _, detail = decisions(deep)["lore:card:b"]
    assert (action, detail["by"], detail["via"]) == ("included", "recursion", "lore:card:a")


def test_the_card_book_can_be_switched_off(ledger: Ledger) -> None:
    assembly, report = assemble(ledger, session(ledger, ["bridge"],
                                                settings={"card_lorebook": False}))
    assert report.lorebook == [] and "Brannoc" not in assembly.text


def test_the_table_and_why_show_entries(ledger: Ledger) -> None:
    name = session(ledger, ["Over the bridge."])
    assembly, _ = assemble(ledger, name)
    console = Console(width=160, record=True)
    from ctxledger.assembler.profiles.card.breakdown import card_table
    console.print(card_table(assembly.report))  # type: ignore[arg-type]
    table = console.export_text()
    assert "lore: brannoc" in table and "activated: 'bridge' in m0 (after_char)" in table
    assert "lore: off" in table and "disabled" in table
    why = ledger.why(name, "lore:card:2")
    text = why.model_dump_json() if hasattr(why, "model_dump_json") else str(why)
    assert "activated" in text and "bridge" in text


def test_warm_and_cold_assemblies_agree(ledger: Ledger) -> None:
    messages = ["Over the bridge.", "The moon.", "The cult."]
    name = session(ledger, messages)
    first = ledger.assemble(name, "card", now=NOW)
    ledger.append(name, {"type": "message.appended",
                         "data": {"role": "user", "content": "Back to the vale."}})
    warm = ledger.assemble(name, "card", now=NOW)
    cold = ledger.replay(name, profile="card", now=NOW)
    assert first.digest != warm.digest
    assert warm.digest == cold.digest


def test_the_character_note_goes_in_at_its_depth(ledger: Ledger) -> None:
    card = {"name": "Wren", "extensions": {"depth_prompt": {
        "prompt": "[{{char}} is wary of {{user}}.]", "depth": 1, "role": "system"}}}
    name = session(ledger, ["One.", "Two.", "Three."], card=card)
    assembly, _ = assemble(ledger, name)
    said = [(m.role, m.content) for m in assembly.messages]
    assert said == [("user", "One."), ("assistant", "Two."),
                    ("system", "[Wren is wary of User.]"), ("user", "Three.")]
    note = [d for d in assembly.decisions if d.item == "depth_prompt"]
    assert [(d.action, d.reason, d.detail["depth"]) for d in note] == [
        ("included", "character_note", 1)]
    # An empty note (SillyTavern writes one on every card) sends nothing.
    quiet = session(ledger, ["One."], card={"name": "Wren", "extensions": {
        "depth_prompt": {"prompt": "", "depth": 4, "role": "system"}}})
    assembly, _ = assemble(ledger, quiet)
    assert [m.content for m in assembly.messages] == ["One."]


def test_a_template_without_the_lore_variables_leaves_entries_out(ledger: Ledger) -> None:
    name = session(ledger, ["Over the bridge."],
                   settings={"card_template": "{{description}}"})
    assembly, report = assemble(ledger, name)
    assert assembly.text.startswith("Wren keeps bees.") and "Brannoc" not in assembly.text
    action, reason, detail = decisions(assembly)["lore:card:2"]
    assert (action, reason, detail["template_variable"]) == (
        "dropped", "not_in_template", "lore_after")
    assert {row.entry_id: row.status for row in report.lorebook}["lore:card:2"] \
        == "not_in_template"
    assert report.lorebook_tokens == 0


def test_catastrophic_regex_keys_assemble_fast_and_the_same_every_run(
        ledger: Ledger) -> None:
    # 60 keys that take a backtracking engine exponential time over "aaa...b": RE2 scans
    # each text once per key, in linear time, and never depends on the machine.
    book = {"scan_depth": 2, "entries": [
        entry(f"Echo {i}.", "/(a|aa)+$/", id=i, use_regex=True) for i in range(60)] + [
        entry("Bee.", "/(a|aa)+b$/", id=60, use_regex=True)]}
    long = "a" * 20_000 + "b"
    name = session(ledger, [long, long], card={"name": "Wren", "character_book": book})
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        runs.append(ledger.assemble(name, "card", now=NOW))
        assert time.perf_counter() - started < 2.0  # a generous bound: a regression
    assert len({assembly.digest for assembly in runs}) == 1
    found = decisions(runs[0])
    assert [found[f"lore:card:{i}"][:2] for i in range(60)] == [
        ("dropped", "not_matched")] * 60
    assert found["lore:card:60"][:2] == ("included", "activated")
    assert found["lore:card:60"][2]["message_id"] == "m1"
    assert runs[0].format_version == 6 and not runs[0].warnings
    assert ledger.replay(name, profile="card", now=NOW).digest == runs[0].digest


ECHO = "/(\\w+) \\1/"


def test_a_key_re2_refuses_is_its_own_decision_and_a_warning(ledger: Ledger) -> None:
    book = {"entries": [
        entry("Knights.", "/(?<=sir )knight/i", id="look", name="knights", use_regex=True),
        entry("Echoes.", ECHO, "echo", id="both", name="echoes", use_regex=True),
        entry("Plain.", "knight", id="plain", name="plain")]}
    name = session(ledger, ["Sir Knight, echo echo."],
                   card={"name": "Wren", "character_book": book})
    assembly, report = assemble(ledger, name)
    found = decisions(assembly)
    action, reason, detail = found["lore:card:look"]
    assert (action, reason, detail["match"]) == ("dropped", "regex_unsupported",
                                                 "regex_unsupported")
    assert detail["problem"] == ("regex key '/(?<=sir )knight/i' is not supported by RE2: "
                                 "lookbehind (invalid perl operator: (?<=)")
    # Another key of the entry still matches: the entry is decided by it.
    assert found["lore:card:both"][:2] == ("included", "activated")
    assert found["lore:card:both"][2]["key"] == "echo"
    assert found["lore:card:plain"][:2] == ("included", "activated")
    assert assembly.warnings[:2] == [
        "lorebook 'card' entry 'knights': regex key '/(?<=sir )knight/i' is not supported"
        " by RE2: lookbehind (invalid perl operator: (?<=)",
        f"lorebook 'card' entry 'echoes': regex key {ECHO!r} is not supported by"
        " RE2: a backreference (invalid escape sequence: \\1)"]
    assert {row.entry_id: row.status for row in report.lorebook}["lore:card:look"] \
        == "not_matched"
    why = ledger.why(name, "lore:card:look")
    assert [(run.action, run.reason) for run in why.runs] == [("dropped",
                                                                "regex_unsupported")]
    assert "match regex_unsupported" in why.line() and "lookbehind" in why.line()
