"""API keys at the HTTP boundary, against a real server on SQLite and PostgreSQL: 401
without a usable key, 404 across scopes (exactly like an unknown session), 403 for a
read-only key's writes, admin-only routes, and a revocation taking effect at once."""

from __future__ import annotations

from typing import Any

import httpx
from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served

from ctxledger import Ledger
from ctxledger._service.keys import revoke_key

__all__ = ["served"]  # the fixture, used by name


def _started(scope: str) -> dict[str, Any]:
    return {"type": "session.started", "data": {"scope": scope}}


def _message(text: str) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": "user", "content": text}}


def _unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["content-type"] == "application/problem+json"
    assert set(response.json()) >= {"type", "title", "status", "detail"}


def test_no_bad_or_revoked_key_is_401(served: Served) -> None:
    scope = fresh("a")
    token = make_key(served.url, [scope])
    key_id = token.split("_")[1]
    with client(served.base) as anonymous:
        _unauthorized(anonymous.get("/scopes/x/usage"))
        _unauthorized(anonymous.get("/scopes/x/usage", headers={"Authorization": token}))
    for bad in ("nonsense", "ctxl_", f"ctxl_{key_id}_wrong", token + "x",
                "ctxl_000000000000_" + token.split("_", 2)[2]):
        with client(served.base, bad) as http:
            _unauthorized(http.get(f"/streams/scope:{scope}/events"))
    with client(served.base, token) as http:
        assert http.get(f"/streams/scope:{scope}/events").status_code == 200
        with Ledger.open(served.url, load_vocabulary=False) as ledger:
            revoke_key(ledger.engine, key_id)
        _unauthorized(http.get(f"/streams/scope:{scope}/events"))  # no cache: at once


def test_a_bad_key_is_401_before_a_bad_request_is_422(served: Served) -> None:
    # The hot routes check the key in their worker thread, after FastAPI has validated
    # the query and body: a bad key must still be the answer.
    scope = fresh("order")
    token = make_key(served.url, [scope])
    session = fresh("s")
    bad_requests = (
        ("POST", f"/streams/{session}/events", {"events": "not a list"}, {}),
        ("POST", f"/sessions/{session}/turn", {"messages": 3}, {}),
        ("GET", f"/sessions/{session}/assemble", None, {"format": "nonsense"}),
        ("POST", f"/sessions/{session}/assemble", {"policy": 3}, {}))
    with client(served.base, token) as http:
        for method, path, body, params in bad_requests:
            answer = http.request(method, path, json=body, params=params)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
        with Ledger.open(served.url, load_vocabulary=False) as ledger:
            revoke_key(ledger.engine, token.split("_")[1])
        for method, path, body, params in bad_requests:
            _unauthorized(http.request(method, path, json=body, params=params))
    with client(served.base, token + "x") as http:
        for method, path, body, params in bad_requests:
            _unauthorized(http.request(method, path, json=body, params=params))
    with client(served.base) as anonymous:
        for method, path, body, params in bad_requests:
            _unauthorized(anonymous.request(method, path, json=body, params=params))


def test_another_scope_is_indistinguishable_from_nothing(served: Served) -> None:
    mine, theirs = fresh("mine"), fresh("theirs")
    alice = make_key(served.url, [mine])
    bob = make_key(served.url, [theirs])
    secret = fresh("s")
    with client(served.base, bob) as http:
        done = http.post(f"/streams/{secret}/events",
                         json={"events": [_started(theirs), _message("private")]})
        assert done.status_code == 200
        assert http.get(f"/sessions/{secret}/state").status_code == 200
    missing = fresh("s")
    with client(served.base, alice) as http:
        for path in ("state", "assemble", "replay", "audit", "why?item=x"):
            hidden = http.get(f"/sessions/{secret}/{path}")
            absent = http.get(f"/sessions/{missing}/{path}")
            assert hidden.status_code == absent.status_code == 404, path
            assert hidden.json()["detail"] == absent.json()["detail"].replace(missing, secret)
        assert http.get(f"/streams/{secret}/events").status_code == 404
        write = http.post(f"/streams/{secret}/events", json={"events": [_message("x")]})
        assert write.status_code == 404
        turn = http.post(f"/sessions/{secret}/turn",
                         json={"messages": [{"role": "user", "content": "x"}]})
        assert turn.status_code == 404
        fork = http.post(f"/sessions/{secret}/fork", json={"new_session": fresh("f"), "at": 1})
        assert fork.status_code == 404
        # Creating a session in a scope the key lacks is refused the same way.
        create = http.post(f"/streams/{fresh('s')}/events",
                           json={"events": [_started(theirs)]})
        assert create.status_code == 404
        assert http.get(f"/scopes/{theirs}/usage").status_code == 404
        assert http.get(f"/streams/scope:{theirs}/events").status_code == 404
        assert http.get("/events").status_code == 403
        assert http.post("/streams/system/events",
                         json={"events": [_message("x")]}).status_code == 403
    with client(served.base, bob) as http:
        events = http.get(f"/streams/{secret}/events").json()["events"]
    assert len(events) == 2  # nothing alice sent was written
    with client(served.base, make_key(served.url, admin=True)) as http:
        assert http.get(f"/sessions/{secret}/state").status_code == 200
        assert http.get(f"/scopes/{theirs}/usage").status_code == 200


def test_a_read_only_key_reads_but_gets_403_on_writes(served: Served) -> None:
    scope = fresh("ro")
    writer = make_key(served.url, [scope])
    reader = make_key(served.url, [scope], read_only=True)
    session = fresh("s")
    with client(served.base, writer) as http:
        http.post(f"/streams/{session}/events", json={"events": [_started(scope)]})
    with client(served.base, reader) as http:
        assert http.get(f"/sessions/{session}/state").status_code == 200
        assert http.get(f"/sessions/{session}/assemble").status_code == 200
        for path, body in (
                (f"/streams/{session}/events", {"events": [_message("x")]}),
                (f"/sessions/{session}/turn", {"messages": [{"role": "user",
                                                             "content": "x"}]}),
                (f"/sessions/{session}/fork", {"new_session": fresh("f"), "at": 1})):
            refused = http.post(path, json=body)
            assert refused.status_code == 403, path
            assert refused.json()["detail"] == "this API key is read-only"
        assert len(http.get(f"/streams/{session}/events").json()["events"]) == 1


def test_scope_streams_need_their_scope(served: Served) -> None:
    scope = fresh("sc")
    token = make_key(served.url, [scope])
    setting = {"type": "setting.changed", "data": {"key": "max_tokens", "value": 100}}
    with client(served.base, token) as http:
        done = http.post(f"/streams/scope:{scope}/events", json={"events": [setting]})
        assert done.status_code == 200, done.text
        events = http.get(f"/streams/scope:{scope}/events").json()["events"]
        assert [e["type"] for e in events] == ["setting.changed"]
    with client(served.base, make_key(served.url, [fresh("other")])) as http:
        refused = http.post(f"/streams/scope:{scope}/events", json={"events": [setting]})
        assert refused.status_code == 404


def _first_sse_line(http: httpx.Client, path: str) -> tuple[int, str, str]:
    """The status, content type and first non-empty line of a feed response."""
    with http.stream("GET", path) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, response.headers["content-type"], response.text
        for line in response.iter_lines():
            if line.strip():
                return 200, response.headers["content-type"], line
    raise AssertionError("the feed ended before sending anything")


def test_the_change_feed_keeps_to_the_key_s_scopes(served: Served) -> None:
    mine, theirs = fresh("feed-a"), fresh("feed-b")
    own, other = fresh("s"), fresh("s")
    admin = make_key(served.url, admin=True)
    with client(served.base, admin) as http:
        http.post(f"/streams/{own}/events", json={"events": [_started(mine)]})
        http.post(f"/streams/{other}/events", json={"events": [_started(theirs)]})
    token = make_key(served.url, [mine])
    with client(served.base, token) as http:
        status, kind, first = _first_sse_line(http, f"/streams/{own}/events/stream")
        assert (status, kind.split(";")[0]) == (200, "text/event-stream")
        assert first.startswith("id: ")
        # Another scope's session is exactly an unknown one: a feed that waits for a first
        # event (so its first line is the opening heartbeat, not an event).
        hidden = _first_sse_line(http, f"/streams/{other}/events/stream")
        missing = _first_sse_line(http, f"/streams/{fresh('none')}/events/stream")
        assert hidden == missing
        assert hidden[0] == 200 and hidden[2] == ": heartbeat"
        # The whole log is for admin keys, as GET /events is.
        assert _first_sse_line(http, "/events/stream")[0] == 403
    with client(served.base) as anonymous:
        assert _first_sse_line(anonymous, f"/streams/{own}/events/stream")[0] == 401
