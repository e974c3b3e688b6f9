"""A whole history read again reads only the messages after the one a memo holds.

``ViewRequest.history_probe`` offers the history an earlier read view loaded
(``MessageSet``); the loader takes it only while it is a prefix of the session in this
database: the same chained hash at its newest message and no message retracted or
replaced since. Otherwise the history is read whole. Either way a warm assembly equals a
cold one (a replay), on both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxledger import Ledger
from ctxledger.assembler.api import request_for
from ctxledger.assembler.memo import SessionMemos
from ctxledger.assembler.profiles.card.policy import CardPolicy
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import History, MessageSet
from ctxledger.projections.view_loader import load_session_view

NOW = datetime(2030, 1, 1, tzinfo=UTC)
SESSION = "reuse"


def _say(ledger: Ledger, *texts: str, message_id: str | None = None) -> None:
    for text in texts:
        data: dict[str, Any] = {"role": "user", "content": text}
        if message_id is not None:
            data["message_id"] = message_id
        ledger.append(SESSION, {"type": "message.appended", "data": data})


def _history(ledger: Ledger, memos: SessionMemos) -> History:
    """The card profile's whole history, read with ``memos`` offering what they hold, and
    the set it loaded kept in them (as an assembly keeps it)."""
    request = request_for("card", CardPolicy(), NOW, TokenCounter("chars4"), memos)
    assert request.history_probe is not None
    memos.for_session(SESSION)
    with ledger.engine.connect() as conn:
        history = load_session_view(conn, SESSION, request).history
    assert history is not None
    if history.message_set is not None:
        memos.keep_message_set(history.message_set)
    return history


def _texts(history: History) -> list[str]:
    return [message.content for message in history.messages]


def _start(ledger: Ledger) -> None:
    ledger.append(SESSION, {"type": "session.started", "data": {"scope": "reuse"}})


def test_a_later_read_reuses_the_earlier_messages_and_reads_the_new_ones(
        ledger: Ledger) -> None:
    _start(ledger)
    memos = SessionMemos()
    _say(ledger, "one", "two")
    first = _history(ledger, memos)
    _say(ledger, "three")
    second = _history(ledger, memos)
    assert _texts(second) == ["one", "two", "three"]
    # The very objects of the first read: only "three" was read from the tables.
    assert second.messages[0] is first.messages[0] and second.messages[1] is first.messages[1]
    assert isinstance(second.message_set, MessageSet)
    assert second.message_set.messages == second.messages
    # Nothing new: the set itself comes back.
    third = _history(ledger, memos)
    assert third.messages is second.messages


def test_a_retraction_or_a_replaced_id_reads_the_history_whole(ledger: Ledger) -> None:
    _start(ledger)
    memos = SessionMemos()
    _say(ledger, "keep", "oops")
    _say(ledger, "draft", message_id="m1")
    first = _history(ledger, memos)
    oops = first.messages[1].message_id
    ledger.append(SESSION, {"type": "message.retracted", "data": {"message_id": oops}})
    after_retraction = _history(ledger, memos)
    assert _texts(after_retraction) == ["keep", "draft"]
    _say(ledger, "final", message_id="m1")  # replaces "draft"
    after_replacing = _history(ledger, memos)
    assert _texts(after_replacing) == ["keep", "final"]


def test_a_set_from_another_database_is_not_taken(ledger: Ledger, tmp_path: Path) -> None:
    _start(ledger)
    memos = SessionMemos()
    _say(ledger, "here", "also here")
    _history(ledger, memos)
    # Another database, the same session id, as many messages and more.
    with Ledger.open(f"sqlite:///{tmp_path / 'other.db'}") as other:
        _start(other)
        _say(other, "there", "also there", "and more")
        assert _texts(_history(other, memos)) == ["there", "also there", "and more"]


def test_an_erased_and_rewritten_session_is_read_whole(ledger: Ledger) -> None:
    _start(ledger)
    memos = SessionMemos()
    _say(ledger, "secret one", "secret two")
    _history(ledger, memos)
    ledger.erase(session=SESSION, reason="test")
    _say(ledger, "new one", "new two", "new three")
    assert _texts(_history(ledger, memos)) == ["new one", "new two", "new three"]


def test_warm_assemblies_of_a_long_whole_history_equal_replays(ledger: Ledger) -> None:
    _start(ledger)
    for turn in range(12):
        _say(ledger, f"turn {turn}")
        if turn == 5:
            [fifth] = [m for m in ledger.assemble(SESSION, "card", now=NOW).messages
                       if m.content == "turn 2"]
            assert fifth.item is not None
            ledger.append(SESSION, {"type": "message.retracted",
                                    "data": {"message_id": fifth.item.split(":", 1)[1]}})
        warm = ledger.assemble(SESSION, "card", now=NOW)
        assert warm.digest == ledger.replay(SESSION, profile="card", now=NOW).digest, turn


def test_a_window_read_again_hands_back_the_messages_read_before(ledger: Ledger) -> None:
    """With a budget the history is read newest first each time; the messages read before
    (the same position and chained hash) come back as the objects read before."""
    _start(ledger)
    memos = SessionMemos()
    _say(ledger, "one", "two", "three")
    policy = CardPolicy(context_limit=2_000)
    request = request_for("card", policy, NOW, TokenCounter("chars4"), memos)
    assert request.history_budget is not None and request.message_pool is not None
    with ledger.engine.connect() as conn:
        first = load_session_view(conn, SESSION, request).history
        _say(ledger, "four")
        second = load_session_view(conn, SESSION, request).history
    assert first is not None and second is not None
    assert _texts(second) == ["one", "two", "three", "four"]
    assert all(a is b for a, b in zip(first.messages, second.messages, strict=False))
    # Without memos every read makes new objects.
    cold = request_for("card", policy, NOW, TokenCounter("chars4"))
    with ledger.engine.connect() as conn:
        again = load_session_view(conn, SESSION, cold).history
    assert again is not None and again.messages[0] is not second.messages[0]
    assert again.messages == second.messages


def test_a_call_answered_a_turn_later_is_one_unit_warm_and_cold(ledger: Ledger) -> None:
    """The units an assembly made are reused by the next one, all but the last: a call
    whose answers come in later turns still becomes one unit with them."""
    _start(ledger)
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": "", "tool_calls": [call, {**call, "id": "c2"}]},
        {"role": "tool", "content": "one", "tool_call_id": "c1"},
        {"role": "tool", "content": "two", "tool_call_id": "c2"},
        {"role": "tool", "content": "stray", "tool_call_id": "c9"},
        {"role": "assistant", "content": "found"},
    ]
    for turn, data in enumerate(turns):
        ledger.append(SESSION, {"type": "message.appended", "data": data})
        warm = ledger.assemble(SESSION, "card", now=NOW)
        cold = ledger.replay(SESSION, profile="card", now=NOW)
        assert warm.digest == cold.digest, turn
        assert warm.decisions == cold.decisions, turn
    last = ledger.assemble(SESSION, "card", now=NOW)
    unit = [d for d in last.decisions if d.detail.get("unit") is not None]
    assert len(unit) == 3 and all(d.detail["unit_messages"] == 3 for d in unit)
    [stray] = [d for d in last.decisions if d.detail.get("sent_as") == "user"]
    assert stray.action == "included"
