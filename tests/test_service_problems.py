"""Every error of the HTTP service is one problem+json line, never a traceback: bad JSON,
an unknown event type, a body over the limit, unknown routes, a bug (500), a slow
request (503). Against a real server on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers.service import client, make_key, running_server
from helpers.service_fixtures import Served, fresh, served

from ctxledger import Ledger

__all__ = ["served"]  # the fixture, used by name


def _problem(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["type"] == "about:blank" and body["title"]
    detail = body["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in detail
    return detail


@pytest.fixture(scope="module")
def token(served: Served) -> str:
    return make_key(served.url, ["p"])


def _count(served: Served, token: str, session: str) -> int:
    with client(served.base, token) as http:
        found = http.get(f"/streams/{session}/events")
    return 0 if found.status_code == 404 else len(found.json()["events"])


def test_bad_input_is_a_4xx_problem_and_writes_nothing(served: Served, token: str) -> None:
    session = fresh("s")
    started = {"type": "session.started", "data": {"scope": "p"}}
    with client(served.base, token) as http:
        url = f"/streams/{session}/events"
        raw = {"content-type": "application/json"}
        assert "not valid JSON" in _problem(http.post(url, content=b"{bad", headers=raw), 422)
        assert "events" in _problem(http.post(url, json={"nope": 1}), 422)
        assert "events" in _problem(http.post(url, json={"events": []}), 422)
        detail = _problem(http.post(url, json={"events": [started,
                                                          {"type": "nope", "data": {}}]}),
                          400)
        assert "unknown event type 'nope'" in detail
        _problem(http.post(url, json={"events": [started], "expected_version": -1}), 422)
        _problem(http.get("/no/such/route"), 404)
        _problem(http.delete(url), 405)
        _problem(http.get(f"/sessions/{session}/state", params={"agent": ["a", "b"]}), 404)
    assert _count(served, token, session) == 0


def test_a_body_over_the_limit_is_413(served: Served, token: str) -> None:
    session = fresh("s")
    big = {"events": [{"type": "message.appended",
                       "data": {"role": "user", "content": "x" * (2 << 20)}}]}
    with client(served.base, token) as http:
        assert "larger than" in _problem(
            http.post(f"/streams/{session}/events", json=big), 413)

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts bytes
            yield b'{"events": [{"type": "message.appended", "data": {"content": "'
            for _ in range(40):
                yield b"x" * 65536
            yield b'"}}]}'

        _problem(http.post(f"/streams/{session}/events", content=chunks(),
                           headers={"content-type": "application/json"}), 413)
    assert _count(served, token, session) == 0


def test_a_bug_is_a_generic_500_and_a_slow_request_a_503(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'bugs.db'}"
    token = make_key(url, ["p"])
    release = threading.Event()

    def broken(self: Ledger, session: str, **kwargs: Any) -> dict[str, Any]:
        if session == "slow":
            release.wait(60)
            return {}
        raise RuntimeError("secret internals")

    monkeypatch.setattr(Ledger, "state", broken)
    with Ledger.open(url, load_vocabulary=False) as ledger:
        for session in ("buggy", "slow"):
            ledger.append(session, {"type": "session.started", "data": {"scope": "p"}})
    # Generous: the buggy request must answer before it, even on a loaded machine.
    with running_server(url, request_timeout=3.0) as base:
        with client(base, token) as http:
            detail = _problem(http.get("/sessions/buggy/state"), 500)
        assert "secret" not in detail and "RuntimeError" not in detail
        with client(base, token) as http:
            try:
                assert "longer than" in _problem(http.get("/sessions/slow/state"), 503)
            finally:
                release.set()
            assert http.get("/healthz").status_code == 200
