"""The card fields a character card's spec gives a meaning, honoured in the assembly:

- the macros (``{{char}}``, ``{{user}}``, ``<BOT>``, ``<USER>``, ``<CHAR>``,
  ``{{original}}``, ``{{newline}}``, ``{{// …}}``; unknown ones kept and listed once);
- ``system_prompt`` and ``post_history_instructions`` replacing the app's defaults, with
  ``{{original}}``; the post-history instructions last, as a system message;
- the greeting: chosen among ``alternate_greetings``, and sent once when the app stored
  it as message 1;
- what is about the card, not the character (creator notes, tags, …), never sent.

Through the ledger, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers.card_sessions import assemble_card, card_session
from helpers.databases import module_database

from ctxledger import Ledger
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import PolicyError
from ctxledger.assembler.profiles.card import CardReport
from ctxledger.assembler.template import Macros

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """One ledger per backend for the whole module (each test has its own session)."""
    with (module_database(request.param, tmp_path_factory.mktemp("rules")) as url,
          Ledger.open(url) as opened):
        yield opened


def session(ledger: Ledger, card: Mapping[str, Any], *,
            settings: Mapping[str, Any] | None = None,
            messages: Sequence[tuple[str, str]] = ()) -> str:
    """A new session with ``card``, ``settings`` and ``messages`` (role, text), ids m1..."""
    return card_session(ledger, f"rules-{next(_ids)}", card, settings=settings,
                        messages=messages)


def assemble(ledger: Ledger, name: str) -> tuple[Assembly, CardReport]:
    return assemble_card(ledger, name, NOW)


def decision(assembly: Assembly, item: str) -> tuple[str, str, dict[str, Any]]:
    (found,) = [d for d in assembly.decisions if d.item == item]
    return found.action, found.reason, dict(found.detail)


def test_macros_are_substituted_in_every_form(ledger: Ledger) -> None:
    name = session(ledger, {
        "name": "Wren",
        "description": "<BOT> keeps bees. <USER> visits {{Char}}.{{newline}}<CHAR> smiles."
                       "{{// a note for the card's author}}",
        "personality": "Calls {{user}} 'friend' at {{time}} and on {{random::a,b}} days; "
                       "{{time}} again.",
    }, settings={"user_name": "Ash"})
    assembly, _ = assemble(ledger, name)
    assert "Wren keeps bees. Ash visits Wren.\nWren smiles.\n\n" in assembly.text
    assert "author" not in assembly.text and "<BOT>" not in assembly.text
    assert "Calls Ash 'friend' at {{time}} and on {{random::a,b}} days; {{time}} again." \
        in assembly.text
    (warning,) = [w for w in assembly.warnings if w.startswith("unknown macros")]
    assert warning.startswith("unknown macros left as written: {{time}}, {{random::a,b}} ")


def test_macro_names_are_case_insensitive_and_legacy_tags_too() -> None:
    macros = Macros(user="Ash", char="Wren")
    assert macros.apply("{{USER}} {{ char }} <bot> <User> {{Original}}", original="O") \
        == "Ash Wren Wren Ash O"
    assert Macros.unknown("{{user}} {{idle_duration}} {{// x}} <BOT>") == ["{{idle_duration}}"]


def test_the_v3_nickname_is_what_char_stands_for(ledger: Ledger) -> None:
    name = session(ledger, {"name": "Wren Alder", "nickname": "Wren",
                            "description": "{{char}} keeps bees."})
    assembly, _ = assemble(ledger, name)
    assert "Wren keeps bees." in assembly.text and "Wren Alder keeps" not in assembly.text


def test_system_prompt_replaces_the_default_with_original(ledger: Ledger) -> None:
    default = "Write {{char}}'s next reply."
    own = session(ledger, {"name": "Wren", "system_prompt": "Be terse. {{original}}"},
                  settings={"system_prompt": default})
    assembly, _ = assemble(ledger, own)
    assert assembly.text.startswith("Be terse. Write Wren's next reply.")
    none = session(ledger, {"name": "Wren"}, settings={"system_prompt": default})
    assembly, _ = assemble(ledger, none)
    assert assembly.text.startswith("Write Wren's next reply.")
    replaced = session(ledger, {"name": "Wren", "system_prompt": "Only this."},
                       settings={"system_prompt": default})
    assembly, _ = assemble(ledger, replaced)
    assert assembly.text.startswith("Only this.") and "next reply" not in assembly.text


def test_post_history_instructions_go_last_as_a_system_message(ledger: Ledger) -> None:
    name = session(ledger, {"name": "Wren", "description": "A beekeeper.",
                            "post_history_instructions": "{{original}} Stay as {{char}}."},
                   settings={"post_history_instructions": "[Reply in two lines.]"},
                   messages=[("user", "Hello there"), ("assistant", "Hi.")])
    assembly, _ = assemble(ledger, name)
    expected = "[Reply in two lines.] Stay as Wren."
    assert assembly.text.endswith("assistant: Hi.\n\n" + expected)
    assert (assembly.messages[-1].role, assembly.messages[-1].content) == ("system", expected)
    assert [m.role for m in assembly.messages[-3:-1]] == ["user", "assistant"]
    action, reason, detail = decision(assembly, "post_history_instructions")
    assert (action, reason, detail["source"]) == ("included", "after_history", "card")
    # Without the card's, the app's default is sent.
    plain = session(ledger, {"name": "Wren"},
                    settings={"post_history_instructions": "[Reply in two lines.]"},
                    messages=[("user", "Hello there")])
    assembly, _ = assemble(ledger, plain)
    assert assembly.messages[-1].content == "[Reply in two lines.]"
    assert decision(assembly, "post_history_instructions")[2]["source"] == "policy"


GREETINGS: dict[str, Any] = {
    "name": "Wren", "description": "A beekeeper.",
    "first_mes": "*{{char}} waves.* Hello, {{user}}!",
    "alternate_greetings": ["*{{char}} looks up from a hive.* Oh, {{user}}.",
                            "Bees everywhere, {{user}}. Mind your step."],
}


def test_a_setting_chooses_the_greeting(ledger: Ledger) -> None:
    first = session(ledger, GREETINGS)
    assembly, report = assemble(ledger, first)
    assert "*Wren waves.* Hello, User!" in assembly.text and report.greeting == 0
    second = session(ledger, GREETINGS, settings={"greeting": 2})
    assembly, report = assemble(ledger, second)
    assert "Bees everywhere, User. Mind your step." in assembly.text
    assert "waves" not in assembly.text and report.greeting == 2
    missing = session(ledger, GREETINGS, settings={"greeting": 3})
    assembly, report = assemble(ledger, missing)
    assert "*Wren waves.* Hello, User!" in assembly.text and report.greeting == 0
    assert "greeting 3 asked for, but the card has 2 alternate greeting(s): first_mes is " \
           "used" in assembly.warnings


@pytest.mark.parametrize("stored", ["*Wren looks up from a hive.* Oh, User.",
                                    "*{{char}} looks up from a hive.* Oh, {{user}}."])
def test_a_greeting_stored_as_message_1_is_sent_once(ledger: Ledger, stored: str) -> None:
    name = session(ledger, GREETINGS, settings={"greeting": 1},
                   messages=[("assistant", stored), ("user", "Hi Wren.")])
    assembly, report = assemble(ledger, name)
    assert assembly.text.count("looks up from a hive") == 1
    assert sum("looks up from a hive" in (m.content or "") for m in assembly.messages) == 1
    action, reason, detail = decision(assembly, "first_mes")
    assert (action, reason, detail["greeting"], detail["message_id"]) == (
        "dropped", "greeting_in_history", 1, "m1")
    (row,) = [r for r in report.breakdown if r.field_key == "first_mes"]
    assert row.status == "in_history"


def test_any_greeting_stored_as_message_1_counts(ledger: Ledger) -> None:
    # The app stored first_mes; the setting asks for another greeting: still one greeting.
    name = session(ledger, GREETINGS, settings={"greeting": 2},
                   messages=[("assistant", "*Wren waves.* Hello, User!")])
    assembly, _ = assemble(ledger, name)
    assert decision(assembly, "first_mes")[:2] == ("dropped", "greeting_in_history")
    assert "Bees everywhere" not in assembly.text


def test_a_different_first_message_keeps_the_greeting_field(ledger: Ledger) -> None:
    name = session(ledger, GREETINGS,
                   messages=[("assistant", "Something else."), ("user", "Hi Wren.")])
    assembly, _ = assemble(ledger, name)
    assert decision(assembly, "first_mes")[:2] == ("included", "compression_off")
    assert "*Wren waves.* Hello, User!" in assembly.text


def test_what_is_about_the_card_never_reaches_the_prompt(ledger: Ledger) -> None:
    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Wren", "description": "A beekeeper.", "personality": "", "scenario": "",
        "first_mes": "Hello.", "mes_example": "",
        "creator_notes": "NOTES-7f3", "tags": ["TAG-7f3"], "creator": "CREATOR-7f3",
        "character_version": "VERSION-7f3", "system_prompt": "",
        "post_history_instructions": "", "alternate_greetings": [],
        "extensions": {"talkativeness": "0.5", "x": "EXT-7f3"}}}
    name = session(ledger, card)
    assembly, _ = assemble(ledger, name)
    assert "7f3" not in assembly.text
    assert all("7f3" not in (m.content or "") for m in assembly.messages)
    with pytest.raises(PolicyError, match="'creator_notes' never reaches the prompt"):
        ledger.assemble(name, "card", now=NOW, policy={
            "profile": "card", "fields": [{"key": "creator_notes", "label": "Notes",
                                           "variable": "scenario"}]})
