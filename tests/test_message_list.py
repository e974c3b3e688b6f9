"""``Ledger.messages_since``: a session's live messages read incrementally, always equal
to ``Ledger.messages``, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from ctxledger import Ledger, MessageList


def _message(text: str, message_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"role": "user", "content": text}
    if message_id is not None:
        data["message_id"] = message_id
    return {"type": "message.appended", "data": data}


def _same(ledger: Ledger, listed: MessageList) -> None:
    expected = ledger.messages(listed.session)
    assert [e.position for e in listed.events] == [e.position for e in expected]
    assert [e.data for e in listed.events] == [e.data for e in expected]
    assert listed.seqs == tuple(e.stream_version for e in expected)


def test_only_what_came_since_is_read(ledger: Ledger) -> None:
    ledger.append("s", [{"type": "session.started", "data": {"scope": "p"}},
                        _message("a"), _message("b")])
    first = ledger.messages_since("s")
    _same(ledger, first)
    ledger.append("s", [{"type": "tool.used", "data": {"tool_name": "Read"}}, _message("c")])
    second = ledger.messages_since("s", first)
    _same(ledger, second)
    # The messages held are the very objects read before: nothing was decoded again.
    assert all(a is b for a, b in zip(first.events, second.events, strict=False))
    assert len(second.events) == 3 and second.version == ledger.events("s")[-1].stream_version
    assert ledger.messages_since("s", second).events == second.events  # nothing new


def test_a_retraction_a_replacement_or_an_erasure_reads_everything_again(
        ledger: Ledger) -> None:
    ledger.append("s", [{"type": "session.started", "data": {"scope": "p"}},
                        _message("a", "m1"), _message("b", "m2"), _message("c", "m3")])
    known = ledger.messages_since("s")
    ledger.retract_messages("s", ["m2"])
    after_retraction = ledger.messages_since("s", known)
    _same(ledger, after_retraction)
    assert [e.data["content"] for e in after_retraction.events] == ["a", "c"]
    assert after_retraction.events[0] is not known.events[0]  # read again
    ledger.append("s", _message("a, replaced", "m1"))
    after_replacement = ledger.messages_since("s", after_retraction)
    _same(ledger, after_replacement)
    assert [e.data["content"] for e in after_replacement.events] == ["c", "a, replaced"]
    ledger.erase(session="s", reason="asked")
    after_erasure = ledger.messages_since("s", after_replacement)
    _same(ledger, after_erasure)
    assert after_erasure.events == ()


def test_what_another_session_returned_is_not_taken(ledger: Ledger) -> None:
    ledger.append("a", [{"type": "session.started", "data": {"scope": "p"}}, _message("x")])
    ledger.append("b", [{"type": "session.started", "data": {"scope": "p"}}, _message("y"),
                        _message("z")])
    listed = ledger.messages_since("b", ledger.messages_since("a"))
    _same(ledger, listed)
    assert [e.data["content"] for e in listed.events] == ["y", "z"]
    assert ledger.messages_since("none") == MessageList("none", 0, (), ())
