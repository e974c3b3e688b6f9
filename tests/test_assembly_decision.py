"""``Assembly.decision(item)`` answers for every candidate: its own decision, or the range
decision that covers it (a card's ``history:dropped`` and ``summarized:<id>``, a novel
tier's ``<tier>:dropped``), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ctxledger import Ledger
from ctxledger.assembler import Assembly
from ctxledger.assembler.history_window import DROPPED_RANGE_ITEM

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _said(i: int) -> dict[str, Any]:
    return {"type": "message.appended",
            "data": {"message_id": f"m{i}", "role": "user" if i % 2 else "assistant",
                     "content": f"line {i} " + "word " * (3 + i % 5)}}


def _chat(ledger: Ledger, messages: int, limit: int = 120) -> None:
    ledger.append("chat", [
        {"type": "session.started", "data": {"scope": "s"}},
        {"type": "card.set", "data": {"name": "Mara", "description": "A captain."}},
        {"type": "setting.changed", "data": {"key": "context_limit", "value": limit}},
        *(_said(i) for i in range(messages))])


def test_a_message_older_than_the_window_resolves_to_history_dropped(
        ledger: Ledger) -> None:
    _chat(ledger, 80)
    live = ledger.assemble("chat", "card", now=NOW)
    unread = live.decision(DROPPED_RANGE_ITEM)
    first, before = unread.detail["first_seq"], unread.detail["before_seq"]
    assert isinstance(first, int) and isinstance(before, int) and before - first > 2
    # Message mK is stream version K + 4 (started, card and the setting come first).
    oldest, middle = f"message:m{first - 4}", f"message:m{(first + before) // 2 - 4}"
    assert oldest == "message:m0"
    assert {d.item for d in live.decisions}.isdisjoint({oldest, middle})
    for item in (oldest, middle):
        assert live.decision(item) == unread
    # The same through a replay and a timeline step.
    replayed = ledger.replay("chat", profile="card", now=NOW)
    assert replayed.decision(middle) == replayed.decision(DROPPED_RANGE_ITEM)
    last = ledger.timeline("chat", profile="card")[-1].assembly
    assert last.decision(middle).item == DROPPED_RANGE_ITEM
    # A message the assembly decided itself keeps its own decision.
    kept = next(d for d in live.decisions if d.item.startswith("message:"))
    assert live.decision(kept.item) == kept


def test_unknown_retracted_and_later_messages_raise_a_clear_key_error(
        ledger: Ledger) -> None:
    _chat(ledger, 60)
    ledger.append("chat", {"type": "message.retracted", "data": {"message_id": "m3"}})
    before = ledger.assemble("chat", "card", now=NOW)
    ledger.append("chat", _said(60))
    assert before.decision("message:m2").item == DROPPED_RANGE_ITEM
    for item in ("message:m3", "message:nope", "message:m60", "nothing"):
        with pytest.raises(KeyError, match="was not a candidate of this card assembly"):
            before.decision(item)


def test_read_back_from_json_it_still_knows_the_oldest_dropped_message(
        ledger: Ledger) -> None:
    """Without the ledger's lookup the range decision names only its oldest message."""
    _chat(ledger, 80)
    live = ledger.assemble("chat", "card", now=NOW)
    again = Assembly.model_validate_json(live.model_dump_json())
    assert again == live  # the lookup is no part of what an assembly is
    assert again.decision("message:m0").item == DROPPED_RANGE_ITEM
    with pytest.raises(KeyError):
        again.decision("message:m5")


def test_a_message_a_summary_replaced_resolves_to_its_block(ledger: Ledger) -> None:
    _chat(ledger, 20, limit=4000)
    ledger.append("chat", [
        {"type": "setting.changed", "data": {"key": "compression_level",
                                             "value": "chat_only"}},
        {"type": "history.summarized", "data": {"through_message_id": "m9",
                                                "summary": "They met."}}])
    live = ledger.assemble("chat", "card", now=NOW)
    assert live.decision("message:m4").item == "summarized:m9"
    assert live.decision("message:m12").item == "message:m12"


def test_a_novel_item_in_a_tiers_tail_resolves_to_the_tiers_range(ledger: Ledger) -> None:
    ledger.append("book", [
        {"type": "session.started", "data": {"scope": "b"}},
        {"type": "setting.changed", "data": {"key": "cold_budget", "value": 20}},
        *({"type": "item.put", "data": {"item_id": f"w{n}", "kind": "world",
                                        "content": f"World fact number {n}."}}
          for n in range(5))])
    live = ledger.assemble("book", "novel", now=NOW)
    assert live.decision("w4").item == "cold:dropped"
