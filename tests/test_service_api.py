"""The HTTP service's routes against a real uvicorn server, on SQLite and PostgreSQL:
appends (conflicts, retries), paging, state, assembly in every format, a chat turn with
tool calls, and the time-travel routes."""

from __future__ import annotations

import uuid
from typing import Any

from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served

__all__ = ["served"]  # the fixture, used by name


def _started(scope: str) -> dict[str, Any]:
    return {"type": "session.started", "data": {"scope": scope}}


def _message(text: str, role: str = "user") -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": role, "content": text}}


def _session(served: Served) -> tuple[str, str]:
    """A new session in a new scope and a key for that scope."""
    scope = fresh("scope")
    token = make_key(served.url, [scope])
    session = fresh("s")
    with client(served.base, token) as http:
        done = http.post(f"/streams/{session}/events",
                         json={"events": [_started(scope), _message("hello")]})
        assert done.status_code == 200, done.text
    return session, token


def test_append_conflict_names_the_actual_version(served: Served) -> None:
    session, token = _session(served)
    with client(served.base, token) as http:
        stale = http.post(f"/streams/{session}/events",
                          json={"events": [_message("late")], "expected_version": 1})
        assert stale.status_code == 409
        assert stale.headers["content-type"] == "application/problem+json"
        problem = stale.json()
        assert problem["status"] == 409 and problem["actual_version"] == 2
        assert "actual version 2" in problem["detail"]
        by_header = http.post(f"/streams/{session}/events", json={"events": [_message("x")]},
                              headers={"If-Match": '"1"'})
        assert by_header.status_code == 409 and by_header.json()["actual_version"] == 2
        ok = http.post(f"/streams/{session}/events", json={"events": [_message("on time")]},
                       headers={"Expected-Version": "2"})
        assert ok.status_code == 200 and ok.json()["stream_version"] == 3
        bad = http.post(f"/streams/{session}/events", json={"events": [_message("x")]},
                        headers={"If-Match": "three"})
        assert bad.status_code == 400 and "If-Match" in bad.json()["detail"]
        events = http.get(f"/streams/{session}/events").json()["events"]
    assert [e["data"].get("content") for e in events] == [None, "hello", "on time"]


def test_a_retried_append_returns_the_same_positions(served: Served) -> None:
    session, token = _session(served)
    batch = {"events": [{**_message("once"), "id": str(uuid.uuid4())},
                        {**_message("twice"), "id": str(uuid.uuid4())}],
             "expected_version": 2}
    with client(served.base, token) as http:
        first = http.post(f"/streams/{session}/events", json=batch).json()
        again = http.post(f"/streams/{session}/events", json=batch).json()
        changed = {"events": [{**batch["events"][0], "data": {"role": "user",
                                                             "content": "other"}}]}
        conflict = http.post(f"/streams/{session}/events", json=changed)
        count = len(http.get(f"/streams/{session}/events").json()["events"])
    assert first["duplicate"] is False and again["duplicate"] is True
    assert again["positions"] == first["positions"] and len(first["positions"]) == 2
    assert again["stream_version"] == first["stream_version"] == 4
    assert conflict.status_code == 409 and "different content" in conflict.json()["detail"]
    assert count == 4


def test_events_are_paged_by_position(served: Served) -> None:
    session, token = _session(served)
    with client(served.base, token) as http:
        http.post(f"/streams/{session}/events",
                  json={"events": [_message(f"m{i}") for i in range(3)]})
        seen: list[int] = []
        after = 0
        while True:
            page = http.get(f"/streams/{session}/events",
                            params={"after": after, "limit": 2}).json()
            seen.extend(e["stream_version"] for e in page["events"])
            if page["next"] is None:
                break
            assert page["next"] == page["events"][-1]["position"]
            after = page["next"]
        too_many = http.get(f"/streams/{session}/events", params={"limit": 100_000})
    assert seen == [1, 2, 3, 4, 5]
    assert too_many.status_code == 422
    assert too_many.headers["content-type"] == "application/problem+json"
    admin = make_key(served.url, admin=True)
    with client(served.base, admin) as http:
        whole = http.get("/events", params={"limit": 1000}).json()
    positions = [e["position"] for e in whole["events"]]
    assert positions == sorted(positions) and len(positions) >= 5


def test_state_and_assemble_in_every_format(served: Served) -> None:
    session, token = _session(served)
    with client(served.base, token) as http:
        state = http.get(f"/sessions/{session}/state").json()
        assert state["messages"]["user"] == 1
        as_json = http.get(f"/sessions/{session}/assemble",
                           params={"now": "2030-01-01T00:00:00Z"})
        assembly = as_json.json()
        assert assembly["session"] == session and assembly["profile"] == "card"
        assert assembly["now"].startswith("2030-01-01") and "hello" in assembly["text"]
        other = http.get(f"/sessions/{session}/assemble", params={"profile": "session"})
        assert other.json()["profile"] == "session"
        text = http.get(f"/sessions/{session}/assemble", params={"format": "text"})
        assert text.headers["content-type"].startswith("text/plain")
        assert "hello" in text.text
        openai = http.get(f"/sessions/{session}/assemble", params={"format": "openai"}).json()
        assert openai["messages"][-1] == {"role": "user", "content": "hello"}
        anthropic = http.get(f"/sessions/{session}/assemble",
                             params={"format": "anthropic"}).json()
        assert anthropic["messages"][-1]["role"] == "user"
        posted = http.post(f"/sessions/{session}/assemble", json={},
                           params={"now": "2030-01-01T00:00:00Z"})
        assert posted.json()["digest"] == assembly["digest"]
        policy = http.post(f"/sessions/{session}/assemble", json={"policy": {"x": 1}})
        assert policy.status_code == 400
        naive = http.get(f"/sessions/{session}/assemble", params={"now": "2030-01-01T00:00"})
        assert naive.status_code == 400
        unknown = http.get(f"/sessions/{session}/assemble", params={"format": "yaml"})
        assert unknown.status_code == 422


def test_a_turn_with_tool_calls_appends_and_assembles(served: Served) -> None:
    session, token = _session(served)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    messages = [{"role": "user", "content": "weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    with client(served.base, token) as http:
        done = http.post(f"/sessions/{session}/turn",
                         json={"messages": messages, "expected_version": 2,
                               "format": "openai", "profile": "card"})
        assert done.status_code == 200, done.text
        turn = done.json()
        assert turn["append"]["positions"] and turn["append"]["stream_version"] == 5
        # The turn's assembly is recorded after its messages (context.assembled).
        assert turn["recorded"]["stream_version"] == 6
        sent = turn["context"]["messages"]
        assert sent[-2]["tool_calls"][0]["id"] == "call_1"
        assert sent[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        stale = http.post(f"/sessions/{session}/turn",
                          json={"messages": messages[:1], "expected_version": 2})
        assert stale.status_code == 409 and stale.json()["actual_version"] == 6
        bad = http.post(f"/sessions/{session}/turn",
                        json={"messages": [{"role": "tool", "content": "no call id"}]})
        assert bad.status_code == 400 and bad.json()["detail"].startswith("messages[0]")
        after = http.get(f"/streams/{session}/events").json()["events"]
    assert len(after) == 6  # neither failed turn wrote anything
    assert after[-1]["type"] == "context.assembled"


def test_time_travel_routes(served: Served) -> None:
    session, token = _session(served)
    with client(served.base, token) as http:
        head = http.get(f"/streams/{session}/events").json()["events"][-1]["position"]
        replay = http.get(f"/sessions/{session}/replay", params={"until": str(head)}).json()
        assert replay["position"] == head and "hello" in replay["text"]
        steps = http.get(f"/sessions/{session}/replay", params={"timeline": "true"}).json()
        assert isinstance(steps, list) and steps
        bad_until = http.get(f"/sessions/{session}/replay", params={"until": "soon"})
        assert bad_until.status_code == 400 and "until" in bad_until.json()["detail"]
        audit = http.get(f"/sessions/{session}/audit").json()
        assert audit["ok"] is True
        message = http.get(f"/streams/{session}/events").json()["events"][1]
        why = http.get(f"/sessions/{session}/why",
                       params={"item": f"message:{message['event_id']}"})
        assert why.status_code == 200 and why.json()["session"] == session
        copy = fresh("fork")
        forked = http.post(f"/sessions/{session}/fork", json={"new_session": copy, "at": head})
        assert forked.status_code == 200 and forked.json()["forked_from"] == session
        assert http.get(f"/sessions/{copy}/state").json()["messages"]["user"] == 1
        again = http.post(f"/sessions/{session}/fork", json={"new_session": copy, "at": head})
        assert again.status_code == 400
        scope = http.get(f"/sessions/{session}/state").json()["scope"]
        usage = http.get(f"/scopes/{scope}/usage", params={"days": 2}).json()
        assert usage["scope"] == scope and len(usage["days"]) == 2


def test_healthz_needs_no_key_and_verify_needs_admin(served: Served) -> None:
    with client(served.base) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
    _, token = _session(served)
    with client(served.base, token) as http:
        assert http.get("/verify").status_code == 403
    with client(served.base, make_key(served.url, admin=True)) as http:
        report = http.get("/verify").json()
    assert report["ok"] is True and report["events"] >= 2
