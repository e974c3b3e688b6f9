"""The current card: ``card.set`` merges field by field; ``""`` or null clears a field."""

from __future__ import annotations

from typing import Any

from ctxledger import Ledger


def card_set(**fields: Any) -> dict[str, Any]:
    return {"type": "card.set", "data": fields}


def test_card_set_merges_and_clears(ledger: Ledger) -> None:
    ledger.append("chat", card_set(name="Ava", description="A pilot.", scenario="Hangar",
                                   tags=["sci-fi"]))
    ledger.append("chat", card_set(description="A retired pilot.", mes_example="<START>"))
    assert ledger.view("chat").card == {
        "description": "A retired pilot.", "mes_example": "<START>", "name": "Ava",
        "scenario": "Hangar", "tags": ["sci-fi"]}
    ledger.append("chat", card_set(scenario="", tags=None, extensions={"depth": 4}))
    card = ledger.view("chat").card
    assert card == {"description": "A retired pilot.", "extensions": {"depth": 4},
                    "mes_example": "<START>", "name": "Ava"}
    assert list(card) == sorted(card)


def test_cards_are_per_session(ledger: Ledger) -> None:
    ledger.append("one", card_set(name="Ava"))
    ledger.append("two", card_set(name="Bo", first_mes="Hi"))
    ledger.append("two", card_set(first_mes=""))
    assert ledger.view("one").card == {"name": "Ava"}
    assert ledger.view("two").card == {"name": "Bo"}
    assert ledger.view("three").card == {}
