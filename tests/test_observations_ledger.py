"""The ledger's observation calls for coding agents (``record_observation``,
``search_observations``), a scope's sessions, and assembling a session about to start
(``starting_in``), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from ctxledger import InvalidArgument, Ledger, ViewRequest
from ctxledger.store.clock import Clock, format_utc

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def led(db_url: str) -> Iterator[Ledger]:
    clock: Clock = lambda: T0  # noqa: E731 (a fixed clock)
    with Ledger.open(db_url, clock=clock) as ledger:
        yield ledger


def test_an_observation_goes_to_the_active_session_of_the_scope(led: Ledger) -> None:
    led.append("old", [{"type": "session.started", "data": {"scope": "p"}}])
    led.append("live", [{"type": "session.started", "data": {"scope": "p"}}])
    led.append("old", [{"type": "message.appended", "data": {"role": "user", "content": "hi"}}])
    led.append("done", [{"type": "session.started", "data": {"scope": "p"}},
                        {"type": "session.ended", "data": {}}])
    # "old" was active last among the sessions that have not ended.
    event = led.record_observation("p", "change", "Moved the parser", files=["a.py"])
    assert event.stream_id == "old"
    assert event.data == {"kind": "change", "content": "Moved the parser", "source": "a.py"}
    assert event.metadata == {"extra": {"files": ["a.py"]}}
    seen = led.view("live", ViewRequest(observations=10)).observations
    assert [o.content for o in seen] == ["Moved the parser"]


def test_a_project_without_an_open_session_gets_one(led: Ledger) -> None:
    event = led.record_observation("p", "finding", "No open session")
    assert event.stream_id == "mcp-20260302T090000000000Z-p"
    started = led.events(event.stream_id)
    assert [e.type for e in started] == ["session.started", "observation.recorded"]
    assert started[0].data == {"scope": "p"}
    # A named session that has not started is started in the scope with it.
    named = led.record_observation("p", "decision", "Named", session="s-named")
    assert named.stream_id == "s-named" and led.view("s-named").scope == "p"


def test_bad_observations_write_nothing(led: Ledger) -> None:
    led.append("elsewhere", [{"type": "session.started", "data": {"scope": "q"}}])
    head = led.head()
    cases = [
        (dict(kind="idea", text="x"),
         "kind must be one of change, decision, finding, reference, got 'idea'"),
        (dict(kind="change", text=" \n"), "text must not be empty"),
        (dict(kind="change", text="x", files="a.py"),
         "files must be a list of paths, not one string"),
        (dict(kind="change", text="x", files=["ok", ""]), "files[1] must be a non-empty path"),
        (dict(kind="change", text="x", session="elsewhere"),
         "session 'elsewhere' belongs to scope 'q', not 'p'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidArgument) as caught:
            led.record_observation("p", **kwargs)  # type: ignore[arg-type]
        assert str(caught.value) == message
    assert led.head() == head


def test_search_ranks_by_bm25_with_provenance(led: Ledger) -> None:
    first = led.record_observation("p", "finding", "The cache keeps tokens in redis",
                                   session="s")
    led.record_observation("p", "decision", "Writers take an advisory lock", session="s")
    third = led.record_observation("p", "reference", "Redis setup guide",
                                   files=["docs/redis.md"], session="s")
    led.record_observation("q", "finding", "Redis elsewhere", session="other")
    hits = led.search_observations("p", "redis")
    # Both mention redis once; the shorter document scores higher under BM25.
    assert [h.event_id for h in hits] == [third.event_id, first.event_id]
    assert hits[0].score > hits[1].score > 0
    top = hits[0].to_json()
    assert top == {"event_id": third.event_id, "position": third.position, "session": "s",
                   "kind": "reference", "text": "Redis setup guide",
                   "files": ["docs/redis.md"],
                   "recorded_at": format_utc(third.recorded_at),
                   "score": hits[0].score}
    # Files are searched too; a query of unknown words finds nothing.
    assert [h.event_id for h in led.search_observations("p", "docs")] == [third.event_id]
    assert led.search_observations("p", "kubernetes") == []
    assert [h.event_id for h in led.search_observations("p", "redis", limit=1)] == [
        third.event_id]


def test_search_ties_go_to_the_newest(led: Ledger) -> None:
    older = led.record_observation("p", "finding", "flaky test", session="s")
    newer = led.record_observation("p", "finding", "flaky test", session="s")
    assert [h.event_id for h in led.search_observations("p", "flaky")] == [
        newer.event_id, older.event_id]


@pytest.mark.parametrize(("query", "limit", "message"), [
    ("", 10, "query must not be empty"),
    ("x", 0, "limit must be between 1 and 100, got 0"),
    ("x", 101, "limit must be between 1 and 100, got 101"),
])
def test_bad_searches(led: Ledger, query: str, limit: int, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        led.search_observations("p", query, limit=limit)
    assert str(caught.value) == message


def test_sessions_of_a_scope_most_recently_active_first(led: Ledger) -> None:
    led.append("a", [{"type": "session.started", "data": {"scope": "p", "title": "A"}}])
    led.append("b", [{"type": "session.started", "data": {"scope": "p"}}])
    led.append("c", [{"type": "session.started", "data": {"scope": "q"}}])
    led.append("a", [{"type": "session.ended", "data": {"summary": "did A"}}])
    listed = led.sessions("p")
    assert [s.session for s in listed] == ["a", "b"]
    assert listed[0].title == "A" and listed[0].summary == "did A"
    assert listed[0].ended_at is not None and listed[1].ended_at is None
    assert led.sessions("nobody") == []


def test_a_session_about_to_start_sees_the_project(led: Ledger) -> None:
    led.append("s1", [{"type": "session.started", "data": {"scope": "p"}},
                      {"type": "observation.recorded",
                       "data": {"kind": "decision", "content": "Use uv"}},
                      {"type": "session.ended", "data": {"summary": "Chose tools."}}])
    head = led.head()
    fresh = led.assemble("new-session", "session", starting_in="p")
    assert "## Previous Session\nChose tools." in fresh.text
    assert "- Use uv" in fresh.text
    # Without it the unknown session is refused, and nothing was written either way.
    with pytest.raises(Exception, match="unknown session 'new-session'"):
        led.assemble("new-session", "session")
    state = led.state("new-session", starting_in="p", agent="researcher")
    assert state["scope"] == "p" and state["_agent"] == "researcher"
    assert led.head() == head
    # Once the session has started, it is read as it is, whatever starting_in says.
    led.append("s2", [{"type": "session.started", "data": {"scope": "p"}}])
    later = T0 + timedelta(hours=1)
    assert led.assemble("s2", "session", starting_in="other", now=later).text == \
        led.assemble("s2", "session", now=later).text
