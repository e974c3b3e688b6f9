"""Session stats: message counts without retracted messages, chapter, scope, activity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from freezegun import freeze_time
from helpers.legacy import append_legacy

from ctxledger import Ledger
from ctxledger.projections.session_view import MessageCounts, ViewRequest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def msg(role: str, content: str, message_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"role": role, "content": content}
    if message_id is not None:
        data["message_id"] = message_id
    if role == "tool":
        data["tool_call_id"] = "call-1"
    return {"type": "message.appended", "data": data}


def test_counts_by_role_exclude_retracted_messages(ledger: Ledger) -> None:
    ledger.append("s", [ev("session.started", scope="book"), msg("system", "rules", "m0"),
                        msg("user", "hi", "m1"), msg("assistant", "hello", "m2"),
                        msg("user", "again", "m3"), msg("tool", "{}", "m4")])
    assert ledger.view("s").counts == MessageCounts(system=1, user=2, assistant=1, tool=1,
                                                    total=5, retracted=0)
    ledger.append("s", ev("message.retracted", message_id="m3"))
    assert ledger.view("s").counts == MessageCounts(system=1, user=1, assistant=1, tool=1,
                                                    total=4, retracted=1)


def test_retracting_twice_or_an_unknown_id_changes_nothing(ledger: Ledger) -> None:
    ledger.append("s", [msg("user", "a", "m1"), msg("assistant", "b", "m2")])
    ledger.append("other", msg("user", "x", "m9"))
    ledger.append("s", ev("message.retracted", message_id="m1"))
    after_one = ledger.view("s").counts
    # The store refuses these now; logs written before it did must still fold the same.
    append_legacy(ledger, "s", [ev("message.retracted", message_id="m1"),
                                ev("message.retracted", message_id="nope"),
                                ev("message.retracted", message_id="m9")])  # another session's
    assert ledger.view("s").counts == after_one == MessageCounts(assistant=1, total=1,
                                                                 retracted=1)
    assert ledger.view("other").counts == MessageCounts(user=1, total=1)


def test_an_explicit_message_id_appended_again_replaces_the_message(ledger: Ledger) -> None:
    ledger.append("s", [msg("user", "draft", "m1"), msg("assistant", "reply", "m2")])
    ledger.append("s", msg("assistant", "edited", "m1"))
    view = ledger.view("s", ViewRequest(history="full"))
    # The replaced draft is withdrawn: it counts as retracted, like an edit by retraction.
    assert view.counts == MessageCounts(assistant=2, total=2, retracted=1)
    assert view.history is not None
    assert [(m.message_id, m.role, m.content) for m in view.history.messages] == [
        ("m2", "assistant", "reply"), ("m1", "assistant", "edited")]
    # Re-appending a retracted id brings a message back without undoing the retraction count.
    ledger.append("s", ev("message.retracted", message_id="m2"))
    ledger.append("s", msg("user", "back", "m2"))
    assert ledger.view("s").counts == MessageCounts(user=1, assistant=1, total=2, retracted=2)


def test_chapter_scene_scope_and_activity(ledger: Ledger) -> None:
    with freeze_time(T0) as frozen:
        ledger.append("novel", ev("session.started", scope="book-1", title="Draft", agent="w"))
        frozen.tick(timedelta(minutes=5))
        ledger.append("novel", ev("chapter.moved", chapter=2, scene="harbor"))
        frozen.tick(timedelta(minutes=5))
        ledger.append("novel", ev("chapter.moved", chapter=3))
        view = ledger.view("novel")
    assert (view.scope, view.title, view.agent) == ("book-1", "Draft", "w")
    assert (view.chapter, view.scene) == (3, None)
    assert view.started_at == T0
    assert view.last_activity == T0 + timedelta(minutes=10)
    assert view.ended_at is None


def test_session_without_start_is_in_the_default_scope(ledger: Ledger) -> None:
    ledger.append("loose", msg("user", "hi"))
    view = ledger.view("loose")
    assert view.exists and view.scope == "default"
    assert not ledger.view("never-written").exists
