"""Rules an event keeps with its stream's history, checked at append under the write lock."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.assertions import ledger_state

from ctxledger import ConcurrencyError, Ledger, StreamRuleError


def message(message_id: str | None = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"role": "user", "content": "x", **extra}
    if message_id is not None:
        data["message_id"] = message_id
    return {"type": "message.appended", "data": data}


def retract(message_id: str) -> dict[str, Any]:
    return {"type": "message.retracted", "data": {"message_id": message_id}}


def summarize(through: str) -> dict[str, Any]:
    return {"type": "history.summarized", "data": {"through_message_id": through,
                                                    "summary": "s"}}


STARTED = {"type": "session.started", "data": {}}


@pytest.mark.parametrize(("batch", "index", "reason"), [
    ([retract("m9")], 0, "message.retracted: stream 's' has no message 'm9'"),
    ([retract("m1"), retract("m1")], 1, "message.retracted: message 'm1' is already retracted"),
    ([STARTED], 0, "session.started: stream 's' has already started"),
    ([message("m3"), STARTED], 1, "session.started: stream 's' has already started"),
    ([summarize("m9")], 0, "history.summarized: stream 's' has no message 'm9'"),
    ([message("m3"), retract("m3"), retract("m3")], 2,
     "message.retracted: message 'm3' is already retracted"),
    ([retract("o1")], 0, "message.retracted: stream 's' has no message 'o1'"),  # other's
])
def test_each_rule_is_one_error_naming_the_event(ledger: Ledger, batch: list[dict[str, Any]],
                                                  index: int, reason: str) -> None:
    ledger.append("s", [STARTED, message("m1"), message("m2")])
    ledger.append("other", [STARTED, message("o1")])
    before = ledger_state(ledger)
    with pytest.raises(StreamRuleError) as err:
        ledger.append("s", batch)
    assert (err.value.index, err.value.reason) == (index, reason)
    assert str(err.value) == (f"event {index + 1}: {reason}" if len(batch) > 1 else reason)
    assert ledger_state(ledger) == before


def test_what_the_rules_allow(ledger: Ledger) -> None:
    first = ledger.append("s", [STARTED, message("m1"), message()])
    default_id = ledger.events("s")[2].event_id
    ledger.append("s", [retract("m1"), summarize(default_id), retract(default_id)])
    ledger.append("s", message("m1"))  # an explicit id appended again is a new message
    ledger.append("s", [retract("m1"), summarize("m1")])  # a summary may name a retracted one
    ledger.append("t", [message("a"), retract("a")])  # a stream needs no session.started
    assert first.positions == (1, 2, 3) and ledger.head() == 11
    assert ledger.view("s").counts.retracted == 3


def test_a_retry_is_a_duplicate_and_a_conflict_comes_first(ledger: Ledger) -> None:
    ledger.append("s", [STARTED, message("m1")])
    batch = [{**retract("m1"), "id": "00000000-0000-4000-8000-000000000001"}]
    written = ledger.append("s", batch)
    again = ledger.append("s", batch)  # would break the rule, but it is the same batch
    assert again.duplicate and again.positions == written.positions
    with pytest.raises(ConcurrencyError):
        ledger.append("s", retract("m1"), expected_version=1)
