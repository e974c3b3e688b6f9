"""Importing a card or a lorebook names each entry that cannot work as written (a regex
key RE2 refuses, an invalid one): a ``LorebookWarning`` from ``Ledger.import_card`` and
``Ledger.set_lorebook``, ``warnings`` in any append's result (and the HTTP append's
answer), a ``warning:`` line on stderr from ``card import`` and ``lorebook import``. The
import still goes ahead; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served
from typer.testing import CliRunner

from ctxledger import Ledger, LorebookWarning
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR

__all__ = ["served"]  # the fixture, used by name

BOOK: dict[str, Any] = {"entries": [
    {"keys": ["/(?<=sir )knight/i"], "use_regex": True, "content": "Knights.",
     "name": "knights"},
    {"keys": ["/(unclosed/"], "use_regex": True, "content": "Broken.", "name": "broken"},
    {"keys": ["/drag(on|ons)\\b/i"], "use_regex": True, "content": "Dragons.",
     "name": "dragons"}]}
CARD: dict[str, Any] = {"spec": "chara_card_v2", "spec_version": "2.0",
                        "data": {"name": "Wren", "character_book": BOOK}}
KNIGHTS = ("entry 'knights': regex key '/(?<=sir )knight/i' is not supported by RE2: "
           "lookbehind (invalid perl operator: (?<=)")
BROKEN = "entry 'broken': invalid regex key '/(unclosed/': missing ): (unclosed"


def lines(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(found.message) for found in caught
            if issubclass(found.category, LorebookWarning)]


def test_import_card_and_set_lorebook_warn_and_still_write(ledger: Ledger) -> None:
    with pytest.warns(LorebookWarning) as caught:
        done = ledger.import_card(CARD, session="s1")
    assert lines(caught.list) == [f"lorebook 'card' {KNIGHTS}", f"lorebook 'card' {BROKEN}"]
    assert ledger.export_card(session="s1")["data"]["character_book"] == BOOK
    with pytest.warns(LorebookWarning) as caught:
        ledger.set_lorebook("p", "atlas", BOOK)
    assert lines(caught.list) == [f"lorebook 'world:atlas' {KNIGHTS}",
                                  f"lorebook 'world:atlas' {BROKEN}"]
    assert done.positions
    fine = {"entries": [BOOK["entries"][2]]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", LorebookWarning)
        ledger.import_card({"name": "Ash", "character_book": fine}, session="s2")
        ledger.set_lorebook("p", "fine", fine)


def test_cli_imports_print_a_warning_line_per_entry(db_url: str, tmp_path: Path) -> None:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})
    card, book = tmp_path / "wren.json", tmp_path / "atlas.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")
    book.write_text(json.dumps(BOOK), encoding="utf-8")
    done = runner.invoke(app, ["--db", db_url, "card", "import", str(card), "--session",
                               "s1"])
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["lorebook_entries"] == 3
    assert done.stderr.splitlines() == [f"warning: lorebook 'card' {KNIGHTS}",
                                        f"warning: lorebook 'card' {BROKEN}"]
    done = runner.invoke(app, ["--db", db_url, "lorebook", "import", str(book), "--scope",
                               "p"])
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["book_id"] == "atlas"
    assert done.stderr.splitlines() == [f"warning: lorebook 'world:atlas' {KNIGHTS}",
                                        f"warning: lorebook 'world:atlas' {BROKEN}"]
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert ledger.export_card(session="s1")["data"]["character_book"] == BOOK
    # The plain append of a card.set says the same in its record.
    line = json.dumps({"type": "card.set", "data": CARD})
    done = runner.invoke(app, ["--db", db_url, "append", "s2"], input=line + "\n")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == [f"lorebook 'card' {KNIGHTS}",
                                                   f"lorebook 'card' {BROKEN}"]


def test_any_append_that_sets_a_book_says_what_it_noticed(ledger: Ledger) -> None:
    done = ledger.append("s1", [
        {"type": "session.started", "data": {"scope": "p"}},
        {"type": "card.set", "data": {"name": "Wren", "character_book": BOOK}}])
    assert done.warnings == (f"lorebook 'card' {KNIGHTS}", f"lorebook 'card' {BROKEN}")
    done = ledger.append("scope:p", {"type": "lorebook.set",
                                     "data": {"book_id": "atlas", "book": BOOK}})
    assert done.warnings == (f"lorebook 'world:atlas' {KNIGHTS}",
                             f"lorebook 'world:atlas' {BROKEN}")
    assert ledger.append("s1", {"type": "message.appended", "data": {
        "role": "user", "content": "sir knight"}}).warnings == ()
    decided = {d.item: d for d in ledger.assemble("s1", "card").decisions}
    for item in ("lore:card:#0", "lore:world:atlas:#0"):
        assert (decided[item].action, decided[item].reason) == ("dropped",
                                                               "regex_unsupported")


def test_the_http_append_answers_with_the_warnings(served: Served) -> None:
    scope, session = fresh("scope"), fresh("s")
    with client(served.base, make_key(served.url, [scope])) as http:
        done = http.post(f"/streams/{session}/events", json={"events": [
            {"type": "session.started", "data": {"scope": scope}},
            {"type": "card.set", "data": CARD},
            {"type": "message.appended", "data": {"role": "user", "content": "Sir Knight"}}]})
        assert done.status_code == 200, done.text
        assert done.json()["warnings"] == [f"lorebook 'card' {KNIGHTS}",
                                           f"lorebook 'card' {BROKEN}"]
        done = http.post(f"/streams/scope:{scope}/events", json={"events": [
            {"type": "lorebook.set", "data": {"book_id": "atlas", "book": BOOK}}]})
        assert done.status_code == 200, done.text
        assert done.json()["warnings"][0] == f"lorebook 'world:atlas' {KNIGHTS}"
        plain = http.post(f"/streams/{session}/events", json={"events": [
            {"type": "message.appended", "data": {"role": "user", "content": "hi"}}]})
        assert plain.status_code == 200 and plain.json()["warnings"] == []
        context = http.get(f"/sessions/{session}/assemble", params={"profile": "card"})
        assert context.status_code == 200, context.text
        decided = {d["item"]: d for d in context.json()["decisions"]}
        assert decided["lore:card:#0"]["reason"] == "regex_unsupported"
        assert "lookbehind" in decided["lore:card:#0"]["detail"]["problem"]
